package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sessionFetch is a Fetch v12 of session id at epoch, naming partitions
// 0..n-1 of topic t.
func sessionFetch(id, epoch int32, t string, n int) *kmsg.FetchRequest {
	r := kmsg.NewPtrFetchRequest()
	r.Version, r.SessionID, r.SessionEpoch = 12, id, epoch
	if n > 0 {
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = t
		for p := range n {
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.Partition = int32(p)
			ft.Partitions = append(ft.Partitions, fp)
		}
		r.Topics = append(r.Topics, ft)
	}
	return r
}

func TestFetchSessionCache(t *testing.T) {
	s := &Server{}
	alice := func() *conn { return &conn{s: s, principal: &Principal{Name: "alice"}} }
	open := func(c *conn, n int) int32 {
		t.Helper()
		_, sess, code := c.fetchSessionFor(sessionFetch(0, 0, "t", n))
		if code != nil || sess == nil {
			t.Fatalf("opening a session of %d partitions: %v, session %v", n, code, sess)
		}
		return sess.id
	}

	a := alice()
	id := open(a, 3)
	// Another principal cannot use it, even knowing its id and epoch.
	mallory := &conn{s: s, principal: &Principal{Name: "mallory"}}
	if _, _, code := mallory.fetchSessionFor(sessionFetch(id, 1, "", 0)); code != kerr.FetchSessionIDNotFound {
		t.Fatalf("another principal's fetch of the session: %v, want FETCH_SESSION_ID_NOT_FOUND", code)
	}
	// Nor close it.
	mallory.fetchSessionFor(sessionFetch(id, -1, "t", 1))
	if s.sessions.byID[id] == nil {
		t.Fatal("another principal's epoch -1 closed the session")
	}
	// Its owner goes on with it on a new connection.
	a2 := alice()
	if topics, sess, code := a2.fetchSessionFor(sessionFetch(id, 1, "", 0)); code != nil || sess == nil || len(topics[0].Partitions) != 3 {
		t.Fatalf("the session on a new connection: %v, session %v, topics %v", code, sess, topics)
	}
	// One session a connection: opening another closes the one it held.
	id2 := open(a2, 2)
	if s.sessions.byID[id] != nil || s.sessions.byID[id2] == nil || len(s.sessions.byID) != 1 || s.sessions.parts != 2 {
		t.Fatalf("after a connection's second session: sessions %v, %d partitions; want only %d with 2", s.sessions.byID, s.sessions.parts, id2)
	}

	// Partitions are bounded a session: past it, the fetch is answered
	// whole without one.
	if _, sess, code := alice().fetchSessionFor(sessionFetch(0, 0, "t", maxSessionPartitions+1)); code != nil || sess != nil {
		t.Fatalf("a session of %d partitions: %v, session %v; want a full fetch without one", maxSessionPartitions+1, code, sess)
	}
	// An incremental fetch that would pass the bound ends its session.
	c := alice()
	id3 := open(c, maxSessionPartitions)
	if _, _, code := c.fetchSessionFor(sessionFetch(id3, 1, "u", 1)); code != kerr.FetchSessionIDNotFound || s.sessions.byID[id3] != nil {
		t.Fatalf("growing a full session: %v, want FETCH_SESSION_ID_NOT_FOUND and the session gone", code)
	}
	if s.sessions.parts != 2 {
		t.Fatalf("partitions cached: %d, want 2", s.sessions.parts)
	}

	// Sessions are bounded a gateway: when all are in use, a new fetch gets
	// none; one idle past sessionIdleEvict gives its place.
	for len(s.sessions.byID) < maxFetchSessions {
		open(alice(), 1)
	}
	if _, sess, code := alice().fetchSessionFor(sessionFetch(0, 0, "t", 1)); code != nil || sess != nil {
		t.Fatalf("a session past %d in use: %v, session %v; want a full fetch without one", maxFetchSessions, code, sess)
	}
	s.sessions.byID[id2].lastUsed = time.Now().Add(-sessionIdleEvict - time.Second)
	if id := open(alice(), 1); s.sessions.byID[id2] != nil || len(s.sessions.byID) != maxFetchSessions || id == id2 {
		t.Fatalf("a new session with one idle: the idle one kept (%v) or %d sessions", s.sessions.byID[id2] != nil, len(s.sessions.byID))
	}
}
