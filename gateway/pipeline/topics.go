package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// querier answers an ABCI query as f+1 nodes agree on it (Gateway.Query).
type querier interface {
	Query(ctx context.Context, path string, req, resp proto.Message) error
}

// topicCache holds topic metadata and the chain's limits for pre-checks,
// read through q.
type topicCache struct {
	q   querier
	ttl time.Duration
	// missRefresh is the least time between refreshes caused by unknown
	// topics (or keys a topic does not allow), so a client naming
	// nonexistent topics costs no query per request.
	missRefresh time.Duration
	// missWait is how long a batch for an unknown topic waits before the
	// topic is looked up once more.
	missWait time.Duration

	flight     singleflight.Group // refreshes, by generation
	mu         sync.Mutex
	generation uint64 // counts expire calls
	fetched    time.Time
	topics     map[string]*byzlogv1.TopicConfig
	limits     *byzlogv1.Limits
}

// check says whether topic/partition exists, refreshing the cache when it
// is stale or does not know the topic; it returns the topic's config and
// the chain's limits.
func (c *topicCache) check(ctx context.Context, topic string, partition uint32) (*byzlogv1.TopicConfig, *byzlogv1.Limits, error) {
	return c.checkOnce(ctx, topic, partition, false)
}

// refreshable reports whether a miss may refresh the cache now.
func (c *topicCache) refreshable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.fetched) > c.missRefresh
}

// expire makes the next check refresh.
func (c *topicCache) expire() {
	c.mu.Lock()
	c.fetched = time.Time{}
	c.generation++
	c.mu.Unlock()
}

// chainLimits are the chain's limits, refreshed when stale.
func (c *topicCache) chainLimits(ctx context.Context) (*byzlogv1.Limits, error) {
	c.mu.Lock()
	l, seen := c.limits, c.fetched
	c.mu.Unlock()
	if l != nil && time.Since(seen) <= c.ttl {
		return l, nil
	}
	if err := c.refresh(ctx, seen); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limits, nil
}

// refreshTimeout bounds one refresh, which every check waiting on it
// shares.
const refreshTimeout = 10 * time.Second

// refresh reads the topics and limits again, unless a read has finished
// since the caller saw the cache fetched at seen. The checks that find the
// cache stale at once share one read (each read asks every node twice): at
// closed-loop load, every produce request in flight when the TTL ran out
// refreshed on its own, 11 reads where one would do. Its context is not
// any one caller's: one giving up does not fail the others. A check after
// expire does not join a read begun before it, and such an older read,
// finishing late, does not overwrite what the cache holds.
func (c *topicCache) refresh(ctx context.Context, seen time.Time) error {
	c.mu.Lock()
	if !c.fetched.Equal(seen) {
		c.mu.Unlock()
		return nil // read since the caller looked
	}
	gen := c.generation
	c.mu.Unlock()
	ch := c.flight.DoChan(strconv.FormatUint(gen, 10), func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
		defer cancel()
		return nil, c.read(fctx, gen)
	})
	select {
	case r := <-ch:
		if r.Err != nil && ctx.Err() == nil && (errors.Is(r.Err, context.DeadlineExceeded) || errors.Is(r.Err, context.Canceled)) {
			// The shared read's own bound, not this caller's: nothing was written.
			return errorf(ErrUnavailable, "reading topic metadata from the nodes took over %s; retry", refreshTimeout)
		}
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read is one refresh, begun at generation gen: what it reads is kept only
// if no expire came since.
func (c *topicCache) read(ctx context.Context, gen uint64) error {
	var list byzlogv1.TopicList
	if err := c.q.Query(ctx, wire.PathTopics, nil, &list); err != nil {
		return err
	}
	var st byzlogv1.AppState
	if err := c.q.Query(ctx, wire.PathState, nil, &st); err != nil {
		return err
	}
	m := make(map[string]*byzlogv1.TopicConfig, len(list.Topics))
	for _, t := range list.Topics {
		if t.GetConfig() != nil {
			m[t.Name] = t.Config
		}
	}
	c.mu.Lock()
	if gen == c.generation {
		c.topics, c.limits, c.fetched = m, st.GetParams().GetLimits(), time.Now()
	}
	c.mu.Unlock()
	return nil
}

func (c *topicCache) checkOnce(ctx context.Context, topic string, partition uint32, retried bool) (*byzlogv1.TopicConfig, *byzlogv1.Limits, error) {
	c.mu.Lock()
	cfg, ok := c.topics[topic]
	seen := c.fetched
	c.mu.Unlock()
	if age := time.Since(seen); age > c.ttl || (!ok && age > c.missRefresh) {
		if err := c.refresh(ctx, seen); err != nil {
			return nil, nil, err
		}
		c.mu.Lock()
		cfg, ok = c.topics[topic]
		c.mu.Unlock()
	}
	if !ok && !retried {
		// A topic created a moment ago may not be on the node asked yet:
		// look again once a block later, as a Kafka client waits for
		// metadata. The batch is charged to the queue while it waits.
		select {
		case <-time.After(c.missWait):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		c.expire()
		return c.checkOnce(ctx, topic, partition, true)
	}
	if !ok {
		return nil, nil, rejected(wire.CodeUnknownTopic, fmt.Sprintf("topic %q does not exist; create it first", topic))
	}
	if partition >= cfg.Partitions {
		return nil, nil, rejected(wire.CodeUnknownPartition, fmt.Sprintf("topic %q has partitions 0..%d", topic, cfg.Partitions-1))
	}
	c.mu.Lock()
	limits := c.limits
	c.mu.Unlock()
	return cfg, limits, nil
}
