package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/gateway/nodes"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Gateway bundles, submits and tracks producers' batches. Its stages are
// pure: the bundler (bundler.go) and the tracker (tracker.go) decide, and
// the driver (driver.go) does the I/O around them: the queue, the node
// calls, the timers and the goroutines.
type Gateway struct {
	cfg  Config
	log  zerolog.Logger
	pool *nodes.Pool

	queue    chan *request
	queued   atomic.Int64 // bytes of batches accepted and not yet settled
	inflight chan struct{}
	topics   *topicCache
	queries  *queryRouter
	stopped  atomic.Bool
	metrics  *Metrics

	mu  sync.Mutex
	txs *tracker // submitted transactions, under mu

	prodMu sync.Mutex
	usage  map[string]*usage    // by producer key: what it holds queued
	seqs   map[seqKey]*seqState // what the gateway knows of producers' sequences
	dups   dupBlocks            // confirmed blocks that duplicate answers named

	lights lightCache  // light blocks f+1 nodes agreed on (lightblock.go)
	tip    heightWatch // the height f+1 nodes reported (followOnce)

	askMu  sync.Mutex
	asking map[*nodes.Node]bool // nodes asked their height and not yet answered (askHeights)
	asks   sync.WaitGroup       // those asks; follow waits for them before it returns
}

// New returns a gateway over the nodes in cfg. Run starts it.
func New(cfg Config, log zerolog.Logger) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, err := nodes.New(cfg.Nodes, log)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg: cfg, log: log, pool: pool,
		queue:    make(chan *request, 1<<16),
		inflight: make(chan struct{}, cfg.MaxInFlight),
		txs:      newTracker(cfg.CommitTimeout, cfg.PendingTimeout),
		usage:    map[string]*usage{},
		seqs:     map[seqKey]*seqState{},
		tip:      heightWatch{nodes: pool.Len()},
		asking:   map[*nodes.Node]bool{},
	}
	g.metrics = newMetrics(g)
	g.queries = &queryRouter{pool: pool, waits: cfg.Waits, disagreements: g.metrics.disagreements}
	g.topics = &topicCache{q: g, ttl: cfg.TopicCacheTTL, missRefresh: cfg.Waits.TopicMissRefresh, missWait: cfg.Waits.TopicMissWait}
	return g, nil
}

// Config is the gateway's configuration (with defaults filled).
func (g *Gateway) Config() Config { return g.cfg }

// Metrics returns the gateway's Prometheus metrics, for the caller to register.
func (g *Gateway) Metrics() *Metrics { return g.metrics }

// Start checks the nodes once, so the gateway knows its chain; it fails
// when no node is healthy.
func (g *Gateway) Start(ctx context.Context) error {
	deadline := time.Now().Add(g.cfg.StartTimeout)
	for {
		err := g.pool.Check(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%w (waited %s: start_timeout)", err, g.cfg.StartTimeout)
		}
		g.log.Info().Err(err).Msg("waiting for a healthy CometBFT node")
		select {
		case <-time.After(g.cfg.Waits.StartRetry):
		case <-ctx.Done():
		}
	}
	_, top := g.pool.Health()
	g.mu.Lock()
	g.txs.matched(top) // nothing this gateway submits is in a block up to top
	g.mu.Unlock()
	return nil
}

// Run bundles, submits and tracks until ctx is done, then fails everything
// still waiting with UNAVAILABLE (clients retry elsewhere with the same
// sequences).
func (g *Gateway) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); g.pool.Run(ctx) }()
	go func() { defer wg.Done(); g.follow(ctx) }()
	go func() { defer wg.Done(); g.runBundler(ctx) }()
	wg.Wait()
	g.stopped.Store(true)
	shutdown := errorf(ErrUnavailable, "gateway shutting down; retry with another gateway (same sequence)")
	for {
		select {
		case r := <-g.queue:
			r.finish(nil, shutdown)
			continue
		default:
		}
		break
	}
	g.mu.Lock()
	pending := g.txs.drain()
	g.mu.Unlock()
	for _, p := range pending {
		g.fail(p, shutdown)
	}
}

// ChainID is the chain the gateway writes to.
func (g *Gateway) ChainID() string { return g.pool.ChainID() }

// Health is the nodes' state and the highest healthy height.
func (g *Gateway) Health() ([]nodes.Health, int64) { return g.pool.Health() }

// Produce submits one signed batch and waits for the requested ack.
func (g *Gateway) Produce(ctx context.Context, batch *byzlogv1.SignedBatch, ack byzlogv1.Ack) (rc *byzlogv1.Receipt, err error) {
	s, err := g.Submit(ctx, batch, ack)
	if err != nil {
		return nil, err
	}
	return s.Wait(ctx)
}

// Submitted is a batch the gateway has admitted: its sequence is reserved
// after the producer's committed and pending ones (or it follows the same
// batch already pending) and it is queued for a bundle. Batches of one
// producer stream submitted one after another reach the chain in that
// order; Wait gives the answer.
type Submitted struct {
	g     *Gateway
	r     *request
	ack   byzlogv1.Ack
	start time.Time
}

// Submit admits one signed batch and returns once its place is fixed,
// without waiting for the ack: a caller that must keep several batches of
// one stream in order submits them one at a time and waits for them
// together.
func (g *Gateway) Submit(ctx context.Context, batch *byzlogv1.SignedBatch, ack byzlogv1.Ack) (s *Submitted, err error) {
	start := time.Now()
	if ack == byzlogv1.Ack_ACK_UNSPECIFIED {
		ack = byzlogv1.Ack_ACK_COMMIT
	}
	defer func() {
		if err != nil {
			g.metrics.answered(ack, start, nil, err)
		}
	}()
	shutdown := errorf(ErrUnavailable, "gateway shutting down; retry with another gateway (same sequence)")
	if g.stopped.Load() {
		return nil, shutdown
	}
	r, err := g.decode(batch)
	if err != nil {
		return nil, err
	}
	r.ack = ack
	// Charged before anything waits on its behalf (topic metadata, its
	// producer's sequence), so a client cannot hold more than its share.
	if err := g.charge(r); err != nil {
		return nil, err
	}
	if err := g.admit(ctx, r); err != nil {
		r.finish(nil, err)
		return nil, err
	}
	if g.stopped.Load() {
		r.finish(nil, shutdown)
		return nil, shutdown
	}
	if !r.following {
		select {
		case g.queue <- r:
		default:
			err := exhausted(retrySoon, "gateway queue full (%d batches waiting); retry shortly", len(g.queue))
			r.finish(nil, err)
			return nil, err
		}
	}
	return &Submitted{g: g, r: r, ack: ack, start: start}, nil
}

// Wait returns the batch's answer at the ack it was submitted with (at
// once for ACK_NONE). A context that ends first returns its error; the
// batch stays submitted.
func (s *Submitted) Wait(ctx context.Context) (rc *byzlogv1.Receipt, err error) {
	defer func() { s.g.metrics.answered(s.ack, s.start, rc, err) }()
	if s.ack == byzlogv1.Ack_ACK_NONE {
		return s.r.receipt(s.ack), nil
	}
	select {
	case a := <-s.r.done:
		return a.receipt, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// decode runs the stateless pre-checks that reject a bad batch alone:
// signature, decoding, chain and size.
func (g *Gateway) decode(b *byzlogv1.SignedBatch) (*request, error) {
	if b == nil {
		return nil, errorf(ErrInvalid, "request carries no batch")
	}
	tx, err := wire.BundleTx(b)
	if err != nil {
		return nil, errorf(ErrInvalid, "encode batch: %v", err)
	}
	if len(tx) > g.cfg.MaxBundleBytes {
		return nil, rejected(wire.CodeBatchTooLarge, fmt.Sprintf("batch is %d bytes, the gateway's max_bundle_bytes is %d: send smaller batches", len(tx), g.cfg.MaxBundleBytes))
	}
	if res := core.ValidateTx(tx); !res.OK() {
		return nil, rejected(res.Code, res.Log)
	}
	var body byzlogv1.BatchBody
	if err := proto.Unmarshal(b.Body, &body); err != nil {
		return nil, rejected(wire.CodeMalformedTx, "body is not a byzlog.v1.BatchBody: "+err.Error())
	}
	if chain := g.pool.ChainID(); body.ChainId != chain {
		return nil, rejected(wire.CodeWrongChain, fmt.Sprintf("batch is signed for chain %q, this gateway writes to %q", body.ChainId, chain))
	}
	return &request{batch: b, body: &body, key: string(b.ProducerKey), size: len(tx), done: make(chan answer, 1), g: g}, nil
}

// admit runs the stateful pre-checks, against committed state as the
// gateway last read it and its own pending batches: topic and partition,
// the topic's allowed producers, record limits, and the sequence.
func (g *Gateway) admit(ctx context.Context, r *request) error {
	cfg, limits, err := g.topics.check(ctx, r.body.Topic, r.body.Partition)
	if err != nil {
		return err
	}
	if err := checkRecords(r, cfg, limits); err != nil {
		var re *RejectedError
		if !errors.As(err, &re) || re.Code != wire.CodeNotAllowed || !g.topics.refreshable() {
			return err
		}
		// A key granted a moment ago may not be in the cache yet.
		g.topics.expire()
		if cfg, limits, err = g.topics.check(ctx, r.body.Topic, r.body.Partition); err != nil {
			return err
		}
		if err := checkRecords(r, cfg, limits); err != nil {
			return err
		}
	}
	return g.admitSequence(ctx, r)
}
