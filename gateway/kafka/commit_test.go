package kafka

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"
)

// nonceBackend answers Nonce from next and counts the reads.
type nonceBackend struct {
	noBackend
	next  uint64
	reads int
}

func (b *nonceBackend) Nonce(context.Context, ed25519.PublicKey) (uint64, error) {
	b.reads++
	return b.next, nil
}

// TestNoncesPipeline: a request holds its key's nonces only until its
// transaction is in a mempool, so the next one signs the next nonce while
// the first still waits for its block; a failure after that makes the
// stream read the chain again.
func TestNoncesPipeline(t *testing.T) {
	b := &nonceBackend{next: 7}
	q := &nonces{b: b, keys: map[string]*counter{}}
	key := ed25519.PublicKey(make([]byte, ed25519.PublicKeySize))
	ctx := context.Background()

	commit := make(chan error)
	first := make(chan error, 1)
	inMempool := make(chan struct{})
	go func() {
		first <- q.use(ctx, key, func(nonce uint64, accepted func()) error {
			if nonce != 7 {
				t.Errorf("first nonce = %d, want 7", nonce)
			}
			accepted()
			close(inMempool)
			return <-commit // the block
		})
	}()
	<-inMempool
	second := make(chan uint64, 1)
	go func() {
		_ = q.use(ctx, key, func(nonce uint64, accepted func()) error {
			second <- nonce
			return nil
		})
	}()
	select {
	case n := <-second:
		if n != 8 {
			t.Fatalf("second nonce = %d, want 8", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second request waited for the first one's commit")
	}
	commit <- errors.New("refused in the block")
	if err := <-first; err == nil {
		t.Fatal("first use = nil, want its error")
	}
	b.next = 7
	var third uint64
	if err := q.use(ctx, key, func(nonce uint64, _ func()) error { third = nonce; return nil }); err != nil || third != 7 || b.reads != 2 {
		t.Fatalf("after a failure: nonce %d (err %v) with %d chain reads, want 7 read again (2 reads)", third, err, b.reads)
	}
}

// TestNoncesRereadAfterInFlight: after a failure the stream reads the
// chain's next nonce only once the key's transactions still in a mempool
// are answered. Read earlier, the chain's nonce is one a pending
// transaction holds: every request after it failed as pending, and the
// in-flight ones timed out (24 of 50 asynchronous commits, e2e).
func TestNoncesRereadAfterInFlight(t *testing.T) {
	b := &nonceBackend{next: 7}
	q := &nonces{b: b, keys: map[string]*counter{}}
	key := ed25519.PublicKey(make([]byte, ed25519.PublicKeySize))
	ctx := context.Background()
	type flight struct {
		block chan error
		done  chan error
	}
	send := func(want uint64) flight {
		f := flight{block: make(chan error), done: make(chan error, 1)}
		inMempool := make(chan struct{})
		go func() {
			f.done <- q.use(ctx, key, func(nonce uint64, accepted func()) error {
				if nonce != want {
					t.Errorf("nonce = %d, want %d", nonce, want)
				}
				accepted()
				close(inMempool)
				return <-f.block
			})
		}()
		<-inMempool
		return f
	}
	a, c := send(7), send(8)
	a.block <- errors.New("bad_nonce: another signer used 7")
	<-a.done
	third := make(chan uint64, 1)
	go func() {
		_ = q.use(ctx, key, func(nonce uint64, _ func()) error { third <- nonce; return nil })
	}()
	select {
	case n := <-third:
		t.Fatalf("a request took nonce %d while nonce 8 was still in flight", n)
	case <-time.After(200 * time.Millisecond):
	}
	b.next = 9 // 8 commits
	c.block <- nil
	<-c.done
	select {
	case n := <-third:
		if n != 9 || b.reads != 2 {
			t.Fatalf("after the in-flight commit: nonce %d with %d chain reads, want 9 read again (2 reads)", n, b.reads)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request still waits after every in-flight commit was answered")
	}
}
