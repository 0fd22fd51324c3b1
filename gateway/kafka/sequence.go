package kafka

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
)

// counter is a stream of numbers the face hands out for one key: a plain
// Kafka producer's batch sequences in one partition (sequencer), or a key's
// admin and offset-commit nonces (nonces). It starts from the chain's next
// number (as f+1 nodes agree on it) and counts on. A number is held from
// take until the gateway has placed what carries it (release), so numbers
// reach the chain in the order they were taken. After a failure it reads
// the chain again, but only once every number still in flight has its
// answer: the chain's next number does not count those pending, so a read
// before they settle hands out a number one of them holds, and what takes
// it lands before what was sent earlier, or fails on it (the nonces did:
// one refused commit made the 24 after it time out, e2e). The model:
// scripts/model/kafkaface.pml (MUT_REREAD).
type counter struct {
	mu    sync.Mutex
	known bool
	next  uint64
	// inflight counts numbers released in use and not yet answered; idle
	// is closed (and replaced) when it drops to 0.
	inflight int
	idle     chan struct{}
}

func newCounter() *counter { return &counter{idle: make(chan struct{})} }

// take returns the next number and holds the counter until release:
// release(true, _) counts the number in flight, and answered must then be
// called once with its outcome; release(false, stale) gives it back (stale:
// a failure, read the chain again).
func (s *counter) take(ctx context.Context, read func(context.Context) (uint64, error)) (n uint64, release func(used, stale bool), answered func(ok bool), err error) {
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
		next, err := read(ctx)
		if err != nil {
			s.mu.Unlock()
			return 0, nil, nil, err
		}
		s.next, s.known = next, true
	}
	n = s.next
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
	return n, release, answered, nil
}

// reread reads the chain's next number again for a holder of the counter
// (between take and release) whose number a node refused as taken by
// someone else signing for the key (another gateway): when none of this
// counter's numbers is in flight it makes the read number the next, and
// returns it; otherwise it reports false, and the holder gives up (the
// read would not count what is in flight).
func (s *counter) reread(ctx context.Context, read func(context.Context) (uint64, error)) (uint64, bool, error) {
	if s.inflight > 0 {
		return 0, false, nil
	}
	next, err := read(ctx)
	if err != nil {
		return 0, false, err
	}
	s.next = next
	return next, true, nil
}

// sequencer hands out byzlog batch sequences to the batches the face signs
// for one key in one partition (a plain Kafka producer's batches carry no
// sequence of their own), a counter a stream.
type sequencer struct {
	b Log

	mu      sync.Mutex
	streams map[string]*counter
}

func newSequencer(b Log) *sequencer {
	return &sequencer{b: b, streams: map[string]*counter{}}
}

// take returns the next sequence of key's stream in the partition, as
// counter.take.
func (q *sequencer) take(ctx context.Context, key ed25519.PublicKey, topic string, partition uint32) (uint64, func(used, stale bool), func(ok bool), error) {
	id := fmt.Sprintf("%x/%s/%d", []byte(key), topic, partition)
	q.mu.Lock()
	s := q.streams[id]
	if s == nil {
		s = newCounter()
		q.streams[id] = s
	}
	q.mu.Unlock()
	return s.take(ctx, func(ctx context.Context) (uint64, error) { return q.b.NextSequence(ctx, key, topic, partition) })
}
