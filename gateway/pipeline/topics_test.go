package pipeline

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

// orderedQuerier answers its first /topics read only once first is
// closed, with topic "old"; every later one at once, with "old" and
// "new".
type orderedQuerier struct {
	mu    sync.Mutex
	reads int
	first chan struct{}
}

func (q *orderedQuerier) Query(ctx context.Context, path string, _, resp proto.Message) error {
	switch path {
	case wire.PathTopics:
		q.mu.Lock()
		q.reads++
		n := q.reads
		q.mu.Unlock()
		list := &byzlogv1.TopicList{Topics: []*byzlogv1.TopicInfo{{Name: "old", Config: &byzlogv1.TopicConfig{Partitions: 1}}}}
		if n == 1 {
			<-q.first
		} else {
			list.Topics = append(list.Topics, &byzlogv1.TopicInfo{Name: "new", Config: &byzlogv1.TopicConfig{Partitions: 1}})
		}
		proto.Merge(resp, list)
	case wire.PathState:
		proto.Merge(resp, &byzlogv1.AppState{Params: &byzlogv1.ChainParams{Limits: &byzlogv1.Limits{}}})
	}
	return nil
}

// TestTopicCacheKeepsTheNewerRead: a read begun before expire that
// finishes after the read begun after it does not put the older topics
// back.
func TestTopicCacheKeepsTheNewerRead(t *testing.T) {
	q := &orderedQuerier{first: make(chan struct{})}
	c := &topicCache{q: q, ttl: time.Hour, missRefresh: time.Hour, missWait: time.Millisecond}
	older := make(chan error, 1)
	go func() {
		_, _, err := c.check(context.Background(), "old", 0)
		older <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		n := q.reads
		q.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first read never started")
		}
	}
	c.expire()
	if _, _, err := c.check(context.Background(), "new", 0); err != nil {
		t.Fatalf("check of the topic the newer read holds: %v", err)
	}
	close(q.first)
	if err := <-older; err != nil {
		t.Fatalf("the check waiting on the older read: %v", err)
	}
	c.mu.Lock()
	_, kept := c.topics["new"]
	c.mu.Unlock()
	if !kept {
		t.Error("the read begun before expire, finishing last, put the older topics back")
	}
}
