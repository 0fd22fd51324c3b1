package kafka

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch sessions (KIP-227, Fetch v7 on). A consumer of many partitions
// opens a session with a full fetch (epoch 0); the face keeps the
// partitions and their fetch offsets, and each later fetch of the session
// names only the partitions whose fetch offset changed (and those to
// forget), and is answered only with the partitions that have records or
// whose high watermark, log start or error changed.
//
// Sessions are the gateway's, not a connection's, as a Kafka broker's are:
// a client whose connection drops (kgo closes one whenever it cancels a
// fetch, at every rebalance) goes on with its session on the next. A
// session answers only the principal that opened it. The cache is bounded
// per connection (a connection holds one session: opening another, or
// going on with another's, closes the one it held) and per gateway
// (maxFetchSessions sessions of at most maxSessionPartitions partitions,
// maxCachedPartitions in all). A session unused for sessionIdleEvict may
// give its place to a new one; when none can, the fetch is answered whole
// with session id 0, and the client goes on with full fetches, as Kafka's
// clients do when a broker keeps no session for them.

const (
	maxFetchSessions     = 1000 // Kafka's max.incremental.fetch.session.cache.slots
	maxSessionPartitions = 10_000
	maxCachedPartitions  = 200_000
	sessionIdleEvict     = 2 * time.Minute // Kafka's min.incremental.fetch.session.eviction.ms
)

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

// fetchSession is one fetch session, under its cache's lock.
type fetchSession struct {
	id       int32
	owner    string // the principal that opened it
	holder   uint64 // the connection that last used it
	epoch    int32  // the epoch the client's next fetch must carry
	lastUsed time.Time
	parts    map[tp]*sessionPart
	order    []tp // the order partitions joined: answers keep it
}

// fetchSessions is a gateway's session cache.
type fetchSessions struct {
	mu    sync.Mutex
	byID  map[int32]*fetchSession
	held  map[uint64]int32 // a connection's session
	parts int              // partitions of every session
	conns atomic.Uint64    // hands out connection keys
}

// sessionKey is the connection's key in the session cache.
func (c *conn) sessionKey() uint64 {
	if c.sessKey == 0 {
		c.sessKey = c.s.sessions.conns.Add(1)
	}
	return c.sessKey
}

func (c *conn) owner() string {
	if c.principal == nil {
		return ""
	}
	return c.principal.Name
}

// fetchSessionFor applies r's session fields to the session cache and
// returns the partitions to read (the session's, or r's when r has no
// session), the session (nil: none), and a top-level error for a session
// the face does not know or an epoch out of turn.
func (c *conn) fetchSessionFor(r *kmsg.FetchRequest) ([]kmsg.FetchRequestTopic, *fetchSession, *kerr.Error) {
	if r.Version < 7 {
		return r.Topics, nil, nil
	}
	fs := &c.s.sessions
	fs.mu.Lock()
	defer fs.mu.Unlock()
	key, owner, now := c.sessionKey(), c.owner(), time.Now()
	var s *fetchSession
	if r.SessionEpoch == 0 || r.SessionEpoch == -1 {
		// A full fetch: it closes the session it names, and epoch 0 opens
		// another (Kafka's FetchManager does the same, whatever the id).
		if old := fs.byID[r.SessionID]; old != nil && old.owner == owner {
			fs.remove(old)
		}
		if r.SessionEpoch == -1 {
			return r.Topics, nil, nil
		}
		if s = fs.open(key, owner, now); s == nil {
			return r.Topics, nil, nil
		}
	} else {
		s = fs.byID[r.SessionID]
		if s == nil || s.owner != owner {
			return nil, nil, kerr.FetchSessionIDNotFound
		}
		if r.SessionEpoch != s.epoch {
			return nil, nil, kerr.InvalidFetchSessionEpoch
		}
		fs.hold(key, s)
	}
	s.lastUsed = now
	for _, ft := range r.ForgottenTopics {
		for _, p := range ft.Partitions {
			fs.forget(s, tp{ft.Topic, p})
		}
	}
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			k := tp{rt.Topic, rp.Partition}
			sp := s.parts[k]
			if sp == nil {
				if len(s.parts) >= maxSessionPartitions || fs.parts >= maxCachedPartitions {
					// Too many to keep. A full fetch is answered whole
					// without a session (the client fetches in full from
					// here on); an incremental one is refused as a session
					// gone, so the client answers with a full fetch.
					fs.remove(s)
					if r.SessionEpoch == 0 {
						return r.Topics, nil, nil
					}
					return nil, nil, kerr.FetchSessionIDNotFound
				}
				sp = &sessionPart{}
				s.parts[k] = sp
				s.order = append(s.order, k)
				fs.parts++
			}
			sp.req, sp.topicID = rp, rt.TopicID
		}
	}
	s.epoch = nextEpoch(r.SessionEpoch) // 1 after the opening fetch's 0
	return s.topics(), s, nil
}

// open starts a session for connection key, closing the one it held;
// nil when the cache is full of sessions in use.
func (fs *fetchSessions) open(key uint64, owner string, now time.Time) *fetchSession {
	if fs.byID == nil {
		fs.byID, fs.held = map[int32]*fetchSession{}, map[uint64]int32{}
	}
	if id, ok := fs.held[key]; ok {
		if old := fs.byID[id]; old != nil {
			fs.remove(old)
		}
	}
	if len(fs.byID) >= maxFetchSessions {
		var lru *fetchSession
		for _, s := range fs.byID {
			if lru == nil || s.lastUsed.Before(lru.lastUsed) {
				lru = s
			}
		}
		if now.Sub(lru.lastUsed) < sessionIdleEvict {
			return nil
		}
		fs.remove(lru)
	}
	s := &fetchSession{id: fs.newID(), owner: owner, parts: map[tp]*sessionPart{}}
	fs.byID[s.id] = s
	fs.hold(key, s)
	return s
}

// hold makes s connection key's session, closing the one it held before.
func (fs *fetchSessions) hold(key uint64, s *fetchSession) {
	if id, ok := fs.held[key]; ok && id != s.id {
		if old := fs.byID[id]; old != nil && old.holder == key {
			fs.remove(old)
		}
	}
	if s.holder != 0 && s.holder != key && fs.held[s.holder] == s.id {
		delete(fs.held, s.holder)
	}
	s.holder, fs.held[key] = key, s.id
}

func (fs *fetchSessions) remove(s *fetchSession) {
	if fs.byID[s.id] != s {
		return
	}
	delete(fs.byID, s.id)
	if fs.held[s.holder] == s.id {
		delete(fs.held, s.holder)
	}
	fs.parts -= len(s.parts)
}

// newID is a random session id, not 0 and not in use.
func (fs *fetchSessions) newID() int32 {
	for {
		var b [4]byte
		_, _ = rand.Read(b[:])
		id := int32(binary.BigEndian.Uint32(b[:]) & 0x7fffffff)
		if id != 0 && fs.byID[id] == nil {
			return id
		}
	}
}

// nextEpoch follows epoch, wrapping past the largest to 1, as Kafka does.
func nextEpoch(epoch int32) int32 {
	if epoch == 1<<31-1 {
		return 1
	}
	return epoch + 1
}

func (fs *fetchSessions) forget(s *fetchSession, k tp) {
	if s.parts[k] == nil {
		return
	}
	delete(s.parts, k)
	if fs.byID[s.id] == s {
		fs.parts--
	}
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
	c.s.sessions.mu.Lock()
	defer c.s.sessions.mu.Unlock()
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
