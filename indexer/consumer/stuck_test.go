package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
)

// TestNextReturnsWhenItsStreamIsGone: a stream lost under a subscription
// (a NATS server that lost power before it synced the stream) makes
// nats.go's ordered consumer re-create its consumer, retrying without end
// and without looking at Next's context. Next must still return when its
// context ends, and the subscription is closed then (the chaos harness
// hung 8 minutes waiting for a consumer whose context had ended).
func TestNextReturnsWhenItsStreamIsGone(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.fill("t", 1, 0, 3)
	c := e.consumer()
	s := e.subscribe(c, "t")
	read(t, s, 3)
	if err := e.js.DeleteStream(context.Background(), layout.StreamName("t")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	go func() {
		_, err := s.Next(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Next on a deleted stream = a record, want an error")
		}
		t.Logf("Next: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Next did not return 14 s after its context ended")
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, consumer.ErrClosed) {
		t.Errorf("Next after one cut short by its context = %v, want ErrClosed", err)
	}
}
