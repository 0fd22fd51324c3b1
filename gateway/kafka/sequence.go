package kafka

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
)

// sequencer hands out byzlog batch sequences to the batches the face signs
// for one key in one partition. It starts from the chain's next sequence
// (as f+1 nodes agree on it) and counts on; after a batch fails it asks the
// chain again, so the next batch fills the hole the failed one left and the
// batches signed after it, which the chain holds back, commit.
type sequencer struct {
	b Backend

	mu      sync.Mutex
	streams map[string]*seqStream
}

type seqStream struct {
	mu    sync.Mutex
	known bool
	next  uint64
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
		s = &seqStream{}
		q.streams[id] = s
	}
	return s
}

// take returns the next sequence and holds the stream: sign with it, then
// call the returned release (true: the sequence was used).
func (q *sequencer) take(ctx context.Context, key ed25519.PublicKey, topic string, partition uint32) (uint64, func(used bool), error) {
	s := q.stream(key, topic, partition)
	s.mu.Lock()
	if !s.known {
		next, err := q.b.NextSequence(ctx, key, topic, partition)
		if err != nil {
			s.mu.Unlock()
			return 0, nil, err
		}
		s.next, s.known = next, true
	}
	seq := s.next
	return seq, func(used bool) {
		if used {
			s.next++
		}
		s.mu.Unlock()
	}, nil
}

// failed makes the stream ask the chain again before its next batch.
func (q *sequencer) failed(key ed25519.PublicKey, topic string, partition uint32) {
	s := q.stream(key, topic, partition)
	s.mu.Lock()
	s.known = false
	s.mu.Unlock()
}
