package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// countingQuerier answers /topics with one topic and /state with limits,
// counting the queries by path; each answer waits for gate, so callers
// pile up on a read in progress.
type countingQuerier struct {
	mu    sync.Mutex
	asked map[string]int
	gate  chan struct{}
}

func (q *countingQuerier) Query(ctx context.Context, path string, _, resp proto.Message) error {
	q.mu.Lock()
	q.asked[path]++
	q.mu.Unlock()
	select {
	case <-q.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	switch path {
	case wire.PathTopics:
		proto.Merge(resp, &byzlogv1.TopicList{Topics: []*byzlogv1.TopicInfo{{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 2}}}})
	case wire.PathState:
		proto.Merge(resp, &byzlogv1.AppState{Params: &byzlogv1.ChainParams{Limits: &byzlogv1.Limits{}}})
	}
	return nil
}

func (q *countingQuerier) count(path string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.asked[path]
}

// TestTopicCacheRefreshesOnce: the checks that find the cache stale at
// once share one read of the topics and the limits, and a check that
// gives up does not fail the others.
func TestTopicCacheRefreshesOnce(t *testing.T) {
	q := &countingQuerier{asked: map[string]int{}, gate: make(chan struct{})}
	c := &topicCache{q: q, ttl: time.Hour, missRefresh: time.Hour, missWait: time.Millisecond}
	const checks = 32
	errs := make(chan error, checks)
	quitter, quit := context.WithCancel(context.Background())
	go func() {
		_, _, err := c.check(quitter, "t", 1)
		errs <- err
	}()
	for range checks - 1 {
		go func() {
			_, _, err := c.check(context.Background(), "t", 1)
			errs <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for q.count(wire.PathTopics) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the rest pile up behind the first read
	quit()
	if err := <-errs; err == nil {
		t.Error("the check whose context was cancelled succeeded before any answer")
	}
	close(q.gate)
	for range checks - 1 {
		if err := <-errs; err != nil {
			t.Errorf("check: %v", err)
		}
	}
	if got := q.count(wire.PathTopics); got != 1 {
		t.Errorf("%d checks of a stale cache read /topics %d times, want 1", checks, got)
	}
	if got := q.count(wire.PathState); got != 1 {
		t.Errorf("%d checks of a stale cache read /state %d times, want 1", checks, got)
	}
	c.expire()
	if _, _, err := c.check(context.Background(), "t", 1); err != nil || q.count(wire.PathTopics) != 2 {
		t.Errorf("check after expire = %v after %d reads of /topics, want a second read", err, q.count(wire.PathTopics))
	}
}
