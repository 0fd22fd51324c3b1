package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/byzlog/byzlog/gateway/nodes"
	"github.com/byzlog/byzlog/protos/wire"
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
	// PendingTimeout bounds how long a submitted transaction may stay
	// uncommitted in all: past it the gateway stops waiting, frees its
	// in-flight slot and queued bytes, and answers DEADLINE_EXCEEDED (the
	// client retries with the same sequence). It must exceed CommitTimeout,
	// so a transaction a node dropped is resubmitted at least once.
	PendingTimeout time.Duration
	// MaxProducerQueuedBytes and MaxProducerQueuedBatches bound what one
	// producer key may hold in the gateway (accepted and not yet answered
	// by a commit or a rejection); past them its batches get
	// RESOURCE_EXHAUSTED while other producers' are still taken.
	MaxProducerQueuedBytes   int64
	MaxProducerQueuedBatches int
	// Waits bound the gateway's calls to its nodes and its own waits.
	Waits Waits
	// HTTP bounds the HTTP/JSON face.
	HTTP HTTPConfig
	// GRPC bounds the gRPC face.
	GRPC GRPCConfig
}

// Waits are the gateway's timeouts and retry intervals besides the
// commit and pending timeouts.
type Waits struct {
	// StartRetry is how often Start looks for a healthy node.
	StartRetry time.Duration
	// BroadcastTimeout bounds one submission to one node.
	BroadcastTimeout time.Duration
	// FollowTimeout bounds one round of following blocks: the node's
	// status and the blocks read up to it.
	FollowTimeout time.Duration
	// LookupTimeout bounds looking up a transaction a node already holds
	// (where the apps say it committed, and that block).
	LookupTimeout time.Duration
	// QueryRounds is how often a query asks the nodes for an answer f+1
	// agree on, QueryRetry the wait between rounds.
	QueryRounds int
	QueryRetry  time.Duration
	// CatchUpTimeout is how long the gateway waits for a node's app to
	// commit a height it needs (a read, or CheckTx after a block the node
	// may not have), asking every CatchUpPoll with CatchUpCallTimeout per
	// call.
	CatchUpTimeout, CatchUpCallTimeout, CatchUpPoll time.Duration
	// TopicMissRefresh is the least time between topic metadata refreshes
	// caused by unknown topics (or keys a topic does not allow), so a
	// client naming nonexistent topics costs no query per request;
	// TopicMissWait is how long a batch for an unknown topic waits before
	// the topic is looked up once more (a topic created a moment ago).
	TopicMissRefresh, TopicMissWait time.Duration
	// GapWait is how long a batch whose sequence is ahead (within
	// CheckTx's lookahead) waits for the batches before it.
	GapWait time.Duration
	// LightWait is how long a request for a light block a height or two
	// above the one f+1 nodes have reported waits for them to report it: a
	// receipt's proof needs the header after its block, which every
	// producer asks for as soon as it has the receipt.
	LightWait time.Duration
}

// HTTPConfig bounds the HTTP/JSON face (httpface.Handler, httpface.NewServer).
type HTTPConfig struct {
	// MaxBodyBytes is the largest request body; larger ones get 413.
	MaxBodyBytes int64
	// MaxConcurrent bounds requests served at once; past it, 503 with
	// Retry-After.
	MaxConcurrent int
	// ReadHeaderTimeout and ReadTimeout bound reading a request's headers
	// and the whole request; WriteTimeout bounds a request from the end of
	// its headers to the end of its answer, so it must exceed
	// PendingTimeout (a produce with ack commit waits for the block);
	// IdleTimeout closes idle keep-alive connections.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block.
	MaxHeaderBytes int
}

// GRPCConfig bounds the gRPC face (grpcface.NewServer).
type GRPCConfig struct {
	// MaxRecvMsgBytes is the largest request message.
	MaxRecvMsgBytes int
	// MaxConcurrentStreams bounds the calls one connection has open.
	MaxConcurrentStreams uint32
	// KeepaliveMinTime is the shortest keepalive ping interval a client may
	// use; a client pinging faster is disconnected.
	KeepaliveMinTime time.Duration
	// MaxConnectionIdle closes a connection with no call open for this long.
	MaxConnectionIdle time.Duration
	// ConnectionTimeout bounds a new connection's handshake.
	ConnectionTimeout time.Duration
	// KeepaliveTime is how long a connection may be quiet before the
	// server pings it; KeepaliveTimeout how long it waits for the answer.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// HealthInterval is how often grpcface.WatchHealth updates the health service.
	HealthInterval time.Duration
}

// Default returns the defaults: 5 ms linger, 1 MiB bundles of at most 1024
// batches, 256 MiB of queue, 16 bundles in flight, 20 s commit timeout,
// 30 s pending timeout, 16 MiB and 1024 batches queued per producer key,
// 50 ms block polling, 30 s to find a healthy node at start (Waits:
// DefaultWaits). Linger and
// bundle size were picked by measurement (make bench-gateway; README "Why
// 5 ms and 1 MiB"). HTTP: 4 MiB bodies, 256 requests at once, 5 s to read
// headers, 30 s to read a request, 60 s to answer, 2 min idle, 64 KiB of
// headers. gRPC: 4 MiB messages, 1024 calls per connection, pings no
// faster than every 10 s, 5 min idle connections, 10 s handshakes, a ping
// after 2 min quiet answered within 20 s, health updated every second.
func Default() Config {
	return Config{
		Nodes:                    nodes.DefaultConfig(),
		Linger:                   5 * time.Millisecond,
		MaxBundleBytes:           wire.DefaultBundleBytes,
		MaxBundleBatches:         1024,
		MaxQueuedBytes:           256 << 20,
		MaxInFlight:              16,
		CommitTimeout:            20 * time.Second,
		PollInterval:             50 * time.Millisecond,
		TopicCacheTTL:            2 * time.Second,
		StartTimeout:             30 * time.Second,
		PendingTimeout:           30 * time.Second,
		MaxProducerQueuedBytes:   16 << 20,
		MaxProducerQueuedBatches: 1024,
		Waits:                    DefaultWaits(),
		HTTP: HTTPConfig{
			MaxBodyBytes: 4 << 20, MaxConcurrent: 256,
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute,
			MaxHeaderBytes: 64 << 10,
		},
		GRPC: GRPCConfig{
			MaxRecvMsgBytes: 4 << 20, MaxConcurrentStreams: 1024,
			KeepaliveMinTime: 10 * time.Second, MaxConnectionIdle: 5 * time.Minute,
			ConnectionTimeout: 10 * time.Second,
			KeepaliveTime:     2 * time.Minute, KeepaliveTimeout: 20 * time.Second,
			HealthInterval: time.Second,
		},
	}
}

// DefaultWaits returns 500 ms between start checks, 10 s per submission,
// 5 s per round of following blocks and per lookup, 6 query rounds 150 ms
// apart (a block is ~0.35-0.6 s), 2 s for a node to catch up (1 s per call,
// every 50 ms), 200 ms between refreshes for unknown topics and 1 s for a
// new topic to show, 1 s for the batches before one ahead of its
// sequence, and 2 s for the light block of the next height.
func DefaultWaits() Waits {
	return Waits{
		StartRetry: 500 * time.Millisecond, BroadcastTimeout: 10 * time.Second,
		FollowTimeout: 5 * time.Second, LookupTimeout: 5 * time.Second,
		QueryRounds: 6, QueryRetry: 150 * time.Millisecond,
		CatchUpTimeout: 2 * time.Second, CatchUpCallTimeout: time.Second, CatchUpPoll: 50 * time.Millisecond,
		TopicMissRefresh: 200 * time.Millisecond, TopicMissWait: time.Second,
		GapWait: time.Second, LightWait: 2 * time.Second,
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
	case c.MaxBundleBytes < 1<<10 || c.MaxBundleBytes > wire.MaxTxBytes-4<<10:
		return fmt.Errorf("max_bundle_bytes (%d) must be between 1 KiB and the chain's max tx bytes less 4 KiB (%d)", c.MaxBundleBytes, wire.MaxTxBytes-4<<10)
	case c.MaxBundleBatches < 1 || c.MaxBundleBatches > int(wire.DefaultLimits().MaxBundleBatches):
		return fmt.Errorf("max_bundle_batches (%d) must be between 1 and %d", c.MaxBundleBatches, wire.DefaultLimits().MaxBundleBatches)
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
	case c.PendingTimeout <= c.CommitTimeout:
		return fmt.Errorf("pending_timeout (%s) must exceed commit_timeout (%s), so a dropped transaction is resubmitted before it is given up", c.PendingTimeout, c.CommitTimeout)
	case c.MaxProducerQueuedBytes < int64(c.MaxBundleBytes) || c.MaxProducerQueuedBytes > c.MaxQueuedBytes:
		return fmt.Errorf("max_producer_queued_bytes (%d) must be between max_bundle_bytes (%d) and max_queued_bytes (%d)", c.MaxProducerQueuedBytes, c.MaxBundleBytes, c.MaxQueuedBytes)
	case c.MaxProducerQueuedBatches < 1:
		return fmt.Errorf("max_producer_queued_batches (%d) must be at least 1", c.MaxProducerQueuedBatches)
	}
	if err := c.Waits.validate(); err != nil {
		return err
	}
	if err := c.HTTP.validate(c.PendingTimeout); err != nil {
		return err
	}
	return c.GRPC.validate()
}

func (w Waits) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"start_retry", w.StartRetry}, {"broadcast_timeout", w.BroadcastTimeout}, {"follow_timeout", w.FollowTimeout},
		{"lookup_timeout", w.LookupTimeout}, {"query_retry", w.QueryRetry}, {"catch_up_timeout", w.CatchUpTimeout},
		{"catch_up_call_timeout", w.CatchUpCallTimeout}, {"catch_up_poll", w.CatchUpPoll},
		{"topic_miss_refresh", w.TopicMissRefresh}, {"topic_miss_wait", w.TopicMissWait}, {"gap_wait", w.GapWait},
		{"light_wait", w.LightWait},
	} {
		if d.v <= 0 {
			return fmt.Errorf("waits.%s (%s) must be positive", d.name, d.v)
		}
	}
	switch {
	case w.QueryRounds < 1:
		return fmt.Errorf("waits.query_rounds (%d) must be at least 1", w.QueryRounds)
	case w.CatchUpCallTimeout > w.CatchUpTimeout:
		return fmt.Errorf("waits.catch_up_call_timeout (%s) must not exceed waits.catch_up_timeout (%s)", w.CatchUpCallTimeout, w.CatchUpTimeout)
	}
	return nil
}

func (c HTTPConfig) validate(pending time.Duration) error {
	switch {
	case c.MaxBodyBytes < 1<<10:
		return fmt.Errorf("http.max_body_bytes (%d) must be at least 1 KiB", c.MaxBodyBytes)
	case c.MaxConcurrent < 1:
		return fmt.Errorf("http.max_concurrent (%d) must be at least 1", c.MaxConcurrent)
	case c.ReadHeaderTimeout <= 0 || c.ReadTimeout <= 0 || c.IdleTimeout <= 0:
		return fmt.Errorf("http.read_header_timeout (%s), http.read_timeout (%s) and http.idle_timeout (%s) must be positive", c.ReadHeaderTimeout, c.ReadTimeout, c.IdleTimeout)
	case c.WriteTimeout <= pending:
		return fmt.Errorf("http.write_timeout (%s) must exceed pending_timeout (%s): a produce with ack commit waits that long for its answer", c.WriteTimeout, pending)
	case c.MaxHeaderBytes < 4<<10:
		return fmt.Errorf("http.max_header_bytes (%d) must be at least 4 KiB", c.MaxHeaderBytes)
	}
	return nil
}

func (c GRPCConfig) validate() error {
	switch {
	case c.MaxRecvMsgBytes < 1<<20:
		return fmt.Errorf("grpc.max_recv_msg_bytes (%d) must be at least 1 MiB", c.MaxRecvMsgBytes)
	case c.MaxConcurrentStreams < 1:
		return fmt.Errorf("grpc.max_concurrent_streams (%d) must be at least 1", c.MaxConcurrentStreams)
	case c.KeepaliveMinTime <= 0 || c.MaxConnectionIdle <= 0 || c.ConnectionTimeout <= 0:
		return fmt.Errorf("grpc.keepalive_min_time (%s), grpc.max_connection_idle (%s) and grpc.connection_timeout (%s) must be positive", c.KeepaliveMinTime, c.MaxConnectionIdle, c.ConnectionTimeout)
	case c.KeepaliveTime <= 0 || c.KeepaliveTimeout <= 0:
		return fmt.Errorf("grpc.keepalive_time (%s) and grpc.keepalive_timeout (%s) must be positive", c.KeepaliveTime, c.KeepaliveTimeout)
	case c.HealthInterval <= 0:
		return fmt.Errorf("grpc.health_interval (%s) must be positive", c.HealthInterval)
	}
	return nil
}
