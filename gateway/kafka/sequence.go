package kafka

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
)

// sequencer hands out byzlog batch sequences to the batches the face signs
// for one key in one partition (a plain Kafka producer's batches carry no
// sequence of their own). It starts from the chain's next sequence (as f+1
// nodes agree on it) and counts on. After a batch fails it asks the chain
// again, but only once every batch of the stream still in flight has its
// answer: a batch signed before that could take the failed batch's
// sequence and land before batches the client sent earlier.
type sequencer struct {
	b Backend

	mu      sync.Mutex
	streams map[string]*seqStream
}

type seqStream struct {
	mu    sync.Mutex
	known bool
	next  uint64
	// inflight counts the batches submitted and not yet answered; idle is
	// closed (and replaced) when it drops to 0.
	inflight int
	idle     chan struct{}
}

func newSequencer(b Backend) *sequencer {
	return &sequencer{b: b, streams: map[string]*seqStream{}}
}

func (q *sequencer) stream(key ed25519.PublicKey, topic string, partition uint32) *seqStream {
	id := fmt.Sprintf("%x/%s/%d", []byte(key), topic, partition)
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.streams[id]
	if s == nil {
		s = &seqStream{idle: make(chan struct{})}
		q.streams[id] = s
	}
	return s
}

// take returns the next sequence and holds the stream until release:
// sign with it and submit, then release. Holding the stream until the
// gateway has admitted the batch keeps a key's batches of one partition in
// the order they were taken. release(true) counts the batch in flight, and
// its answered must then be called once with the outcome; release(false)
// gives the sequence back (stale: a failure, read the chain again).
func (q *sequencer) take(ctx context.Context, key ed25519.PublicKey, topic string, partition uint32) (seq uint64, release func(used, stale bool), answered func(ok bool), err error) {
	s := q.stream(key, topic, partition)
	s.mu.Lock()
	for !s.known {
		if s.inflight > 0 {
			idle := s.idle
			s.mu.Unlock()
			select {
			case <-idle:
			case <-ctx.Done():
				return 0, nil, nil, ctx.Err()
			}
			s.mu.Lock()
			continue
		}
		next, err := q.b.NextSequence(ctx, key, topic, partition)
		if err != nil {
			s.mu.Unlock()
			return 0, nil, nil, err
		}
		s.next, s.known = next, true
	}
	seq = s.next
	release = func(used, stale bool) {
		if used {
			s.next++
			s.inflight++
		}
		if stale {
			s.known = false
		}
		s.mu.Unlock()
	}
	var once sync.Once
	answered = func(ok bool) {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !ok {
				s.known = false
			}
			if s.inflight--; s.inflight == 0 {
				close(s.idle)
				s.idle = make(chan struct{})
			}
		})
	}
	return seq, release, answered, nil
}
