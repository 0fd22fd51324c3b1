package kafka

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch sessions (KIP-227, Fetch v7 on). A consumer of many partitions
// opens a session with a full fetch (session id 0, epoch 0); the face keeps
// the partitions and their fetch offsets, and each later fetch of the
// session names only the partitions whose fetch offset changed (and those
// to forget), and is answered only with the partitions that have records or
// whose high watermark, log start or error changed. A connection holds at
// most one session, which ends with it, so the sessions a gateway keeps are
// bounded by its connections, and a session by maxSessionPartitions: a
// session that would pass it ends, and the client goes on with full
// fetches, as Kafka's clients do when a broker keeps no session for them.

// maxSessionPartitions bounds the partitions of one fetch session.
const maxSessionPartitions = 10_000

// tp names one topic-partition.
type tp struct {
	topic     string
	partition int32
}

// sessionPart is what a session keeps of one partition: what the client
// last asked, and what the face last answered.
type sessionPart struct {
	req          kmsg.FetchRequestTopicPartition
	topicID      [16]byte
	hw, logStart int64
	errorCode    int16
	answered     bool
}

// fetchSession is a connection's fetch session.
type fetchSession struct {
	id    int32
	epoch int32 // the epoch the client's next fetch must carry
	parts map[tp]*sessionPart
	order []tp // the order partitions joined: full answers keep it
}

// fetchSessionFor applies r's session fields to the connection's session
// and returns the partitions to read (the session's, or r's when r has no
// session), the session (nil: none), and a top-level error for a session
// the face does not know or an epoch out of turn.
func (c *conn) fetchSessionFor(r *kmsg.FetchRequest) ([]kmsg.FetchRequestTopic, *fetchSession, *kerr.Error) {
	if r.Version < 7 {
		return r.Topics, nil, nil
	}
	c.sessionMu.Lock()
	defer c.sessionMu.Unlock()
	switch {
	case r.SessionID == 0 && r.SessionEpoch == -1: // a full fetch, no session
		return r.Topics, nil, nil
	case r.SessionID == 0 && r.SessionEpoch == 0: // open a new session
		c.fetchSess = newFetchSession()
	case c.fetchSess == nil || r.SessionID != c.fetchSess.id:
		return nil, nil, kerr.FetchSessionIDNotFound
	case r.SessionEpoch == -1: // close it: a full fetch without one
		c.fetchSess = nil
		return r.Topics, nil, nil
	case r.SessionEpoch == 0: // close it and open another
		c.fetchSess = newFetchSession()
	case r.SessionEpoch != c.fetchSess.epoch:
		return nil, nil, kerr.InvalidFetchSessionEpoch
	}
	s := c.fetchSess
	for _, ft := range r.ForgottenTopics {
		for _, p := range ft.Partitions {
			s.forget(tp{ft.Topic, p})
		}
	}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			k := tp{rt.Topic, rp.Partition}
			sp := s.parts[k]
			if sp == nil {
				if len(s.parts) >= maxSessionPartitions {
					// Too many to keep: no session; this fetch is answered
					// whole and the client fetches in full from here on.
					c.fetchSess = nil
					return r.Topics, nil, nil
				}
				sp = &sessionPart{}
				s.parts[k] = sp
				s.order = append(s.order, k)
			}
			sp.req, sp.topicID = rp, rt.TopicID
		}
	}
	s.epoch = nextEpoch(r.SessionEpoch) // 1 after the opening fetch's 0
	return s.topics(), s, nil
}

func newFetchSession() *fetchSession {
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := int32(binary.BigEndian.Uint32(b[:]) & 0x7fffffff)
	if id == 0 {
		id = 1
	}
	return &fetchSession{id: id, parts: map[tp]*sessionPart{}}
}

// nextEpoch follows epoch, wrapping past the largest to 1, as Kafka does.
func nextEpoch(epoch int32) int32 {
	if epoch == 1<<31-1 {
		return 1
	}
	return epoch + 1
}

func (s *fetchSession) forget(k tp) {
	if s.parts[k] == nil {
		return
	}
	delete(s.parts, k)
	for i, o := range s.order {
		if o == k {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// topics is every partition of the session as a fetch's topics, in the
// order they joined.
func (s *fetchSession) topics() []kmsg.FetchRequestTopic {
	var out []kmsg.FetchRequestTopic
	for _, k := range s.order {
		sp := s.parts[k]
		if n := len(out); n > 0 && out[n-1].Topic == k.topic {
			out[n-1].Partitions = append(out[n-1].Partitions, sp.req)
			continue
		}
		t := kmsg.NewFetchRequestTopic()
		t.Topic, t.TopicID, t.Partitions = k.topic, sp.topicID, []kmsg.FetchRequestTopicPartition{sp.req}
		out = append(out, t)
	}
	return out
}

// trim keeps in resp, an answer of the session's fetch with incremental
// set, only the partitions with records or whose high watermark, log start
// or error changed since the session last answered them, and records what
// it answers. A partition the fetch's byte bounds left unread (high
// watermark -1) is left out of an incremental answer.
func (c *conn) trim(s *fetchSession, resp *kmsg.FetchResponse, incremental bool) {
	c.sessionMu.Lock()
	defer c.sessionMu.Unlock()
	topics := resp.Topics[:0]
	for _, t := range resp.Topics {
		parts := t.Partitions[:0]
		for _, p := range t.Partitions {
			sp := s.parts[tp{t.Topic, p.Partition}]
			unread := p.HighWatermark == -1 && p.ErrorCode == 0 && len(p.RecordBatches) == 0
			if sp == nil || (unread && incremental) {
				continue
			}
			changed := !sp.answered || len(p.RecordBatches) > 0 || p.ErrorCode != sp.errorCode ||
				p.HighWatermark != sp.hw || p.LogStartOffset != sp.logStart
			if !changed && incremental {
				continue
			}
			sp.answered, sp.hw, sp.logStart, sp.errorCode = true, p.HighWatermark, p.LogStartOffset, p.ErrorCode
			parts = append(parts, p)
		}
		if len(parts) > 0 || !incremental {
			t.Partitions = parts
			topics = append(topics, t)
		}
	}
	resp.Topics = topics
	resp.SessionID = s.id
}
