package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/gateway/nodes"
)

// Config is a gateway's settings. Default fills every field; Validate names
// the field that is wrong.
type Config struct {
	Nodes nodes.Config
	// Linger is how long the first batch of a bundle waits for others.
	Linger time.Duration
	// MaxBundleBytes closes a bundle early when its batches reach this size;
	// it must stay below the chain's transaction limit.
	MaxBundleBytes int
	// MaxBundleBatches closes a bundle early at this many batches.
	MaxBundleBatches int
	// MaxQueuedBytes bounds the batches waiting for a bundle; past it,
	// Produce answers RESOURCE_EXHAUSTED.
	MaxQueuedBytes int64
	// MaxInFlight bounds bundles submitted and not yet committed; the
	// bundler waits (and the queue fills) past it.
	MaxInFlight int
	// CommitTimeout is how long a submitted bundle may go uncommitted before
	// it is submitted again, to another node (idempotent: same bytes).
	CommitTimeout time.Duration
	// PollInterval is how often the gateway looks for new blocks.
	PollInterval time.Duration
	// TopicCacheTTL is how long topic metadata is reused for pre-checks.
	TopicCacheTTL time.Duration
	// StartTimeout is how long Start waits for a healthy node (nodes that
	// just restarted catch up first).
	StartTimeout time.Duration
}

// Default returns the defaults: 5 ms linger, 1 MiB bundles of at most 1024
// batches, 256 MiB of queue, 16 bundles in flight, 20 s commit timeout,
// 50 ms block polling, 30 s to find a healthy node at start. Linger and bundle size were picked by measurement
// (make bench-gateway; README "Why 5 ms and 1 MiB").
func Default() Config {
	return Config{
		Nodes:            nodes.DefaultConfig(),
		Linger:           5 * time.Millisecond,
		MaxBundleBytes:   1 << 20,
		MaxBundleBatches: 1024,
		MaxQueuedBytes:   256 << 20,
		MaxInFlight:      16,
		CommitTimeout:    20 * time.Second,
		PollInterval:     50 * time.Millisecond,
		TopicCacheTTL:    2 * time.Second,
		StartTimeout:     30 * time.Second,
	}
}

// Validate says which field is wrong and why.
func (c Config) Validate() error {
	if err := c.Nodes.Validate(); err != nil {
		return err
	}
	switch {
	case c.Linger < 0 || c.Linger > time.Second:
		return fmt.Errorf("linger (%s) must be between 0 and 1s", c.Linger)
	case c.MaxBundleBytes < 1<<10 || c.MaxBundleBytes > core.MaxTxBytes-4<<10:
		return fmt.Errorf("max_bundle_bytes (%d) must be between 1 KiB and the chain's max tx bytes less 4 KiB (%d)", c.MaxBundleBytes, core.MaxTxBytes-4<<10)
	case c.MaxBundleBatches < 1 || c.MaxBundleBatches > int(core.DefaultLimits().MaxBundleBatches):
		return fmt.Errorf("max_bundle_batches (%d) must be between 1 and %d", c.MaxBundleBatches, core.DefaultLimits().MaxBundleBatches)
	case c.MaxQueuedBytes < int64(c.MaxBundleBytes):
		return fmt.Errorf("max_queued_bytes (%d) must be at least max_bundle_bytes (%d)", c.MaxQueuedBytes, c.MaxBundleBytes)
	case c.MaxInFlight < 1:
		return errors.New("max_in_flight must be at least 1")
	case c.CommitTimeout < time.Second:
		return fmt.Errorf("commit_timeout (%s) must be at least 1s", c.CommitTimeout)
	case c.StartTimeout < 0:
		return fmt.Errorf("start_timeout (%s) must not be negative", c.StartTimeout)
	case c.PollInterval <= 0 || c.TopicCacheTTL <= 0:
		return fmt.Errorf("poll_interval (%s) and topic_cache_ttl (%s) must be positive", c.PollInterval, c.TopicCacheTTL)
	}
	return nil
}
