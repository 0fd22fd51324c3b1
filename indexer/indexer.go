package indexer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/byzlog/byzlog/indexer/publish"
	"github.com/byzlog/byzlog/indexer/reconcile"
	"github.com/byzlog/byzlog/indexer/verify"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Indexer follows committed blocks, verifies them and publishes their
// records to JetStream, exactly once per record.
type Indexer struct {
	cfg   Config
	log   zerolog.Logger
	m     *Metrics
	nc    *nats.Conn
	v     *verify.Verifier
	acked atomic.Int64 // last height fully acknowledged by JetStream
	// followed is the last height whose records JetStream acknowledged
	// but those held back behind open transactions (publish.HoldFrom):
	// acked, or past it while a transaction holds a partition back.
	followed atomic.Int64
	tip      atomic.Int64
	// ends is each partition's end as far as JetStream acknowledged (at
	// acked): what the streams must hold (package reconcile). Only the running
	// follow's acknowledge goroutine, or Run between follows, touches it.
	ends map[string]reconcile.End
}

// New checks cfg and prepares an indexer publishing through nc.
func New(cfg Config, nc *nats.Conn, log zerolog.Logger) (*Indexer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if nc.Opts.ReconnectBufSize >= 0 {
		return nil, errNATSBuffers
	}
	nodes, err := verify.Connect(cfg.Config, log)
	if err != nil {
		return nil, err
	}
	m := newMetrics()
	return &Indexer{cfg: cfg, log: log, m: m, nc: nc, v: verify.New(cfg.Config, nodes, m.verify(), log)}, nil
}

// errNATSBuffers refuses a connection that keeps publishes made while it
// reconnects and sends them once it has: records published after the ones
// a server lost with its power would reach the stream before them when
// they are published again, and a consumer would skip them. Found by the
// power-nats nemesis: 2,873 of 11,992 acknowledged records never delivered.
var errNATSBuffers = errors.New("the indexer's NATS connection buffers publishes while it reconnects (nats.go's default): connect with nats.ReconnectBufSize(-1), so a publish fails at once instead and the indexer publishes again in order")

// Metrics returns the indexer's collectors.
func (i *Indexer) Metrics() *Metrics { return i.m }

// Progress is the last published height and the chain's height: the
// last height whose records are all acknowledged by JetStream, but those
// held back behind open Kafka transactions, which wait on their clients,
// not on the indexer.
func (i *Indexer) Progress() (published, chain int64) {
	return max(i.acked.Load(), i.followed.Load()), i.tip.Load()
}

// Run indexes until ctx ends. Failures (a node, NATS, verification) are
// logged and retried from the last acknowledged height; it returns only
// when ctx is done, or at once when the cursor cannot be read at start.
func (i *Indexer) Run(ctx context.Context) error {
	pub, err := publish.New(ctx, i.nc, i.cfg.publishing(), i.log)
	if err != nil {
		return err
	}
	acc, err := publish.NewAccess(ctx, pub.KV(), i.cfg.publishing(), i.log)
	if err != nil {
		return err
	}
	c, err := pub.Cursor(ctx)
	if err != nil {
		return err
	}
	h := c.Height
	if h == 0 {
		h = i.cfg.StartHeight - 1
	}
	i.acked.Store(h)
	i.followed.Store(max(h, c.Followed))
	i.ends = c.Ends
	if i.ends == nil {
		i.ends = map[string]reconcile.End{}
	}
	i.log.Info().Int64("cursor", h).Int("partitions", len(i.ends)).Str("id", i.cfg.ID).Msg("indexer starting after its cursor")
	if i.cfg.ProgressKey != nil {
		rctx, stopReports := context.WithCancel(ctx)
		reports := make(chan struct{})
		go func() {
			defer close(reports)
			i.reportProgress(rctx, pub.KV())
		}()
		defer func() { stopReports(); <-reports }()
	}
	backoff := i.cfg.RetryBackoff
	for {
		before := i.acked.Load()
		err := i.follow(ctx, pub, acc)
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		wait, backoff = i.afterFollow(err, i.acked.Load() > before, backoff, pub)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
	}
}

// afterFollow logs and counts why following stopped with err, and returns
// how long to wait before following again and the backoff after that.
// Failures back off, doubling while nothing is acknowledged. A conflict
// with another indexer is not a failure: what it stored is skipped from
// here on, so following resumes at once. But a conflict is only what
// JetStream's answer to an acknowledged message says, and a message
// refused for its own reason without an acknowledgement reads the same
// (send). So after a conflict that acknowledged nothing, the next block
// asks an acknowledgement of every message: a refusal of its own then
// surfaces as the failure it is, backed off and logged with its cause.
func (i *Indexer) afterFollow(err error, progressed bool, backoff time.Duration, pub *publish.Publisher) (wait, next time.Duration) {
	if progressed {
		backoff = i.cfg.RetryBackoff
	}
	resume := i.acked.Load()
	if errors.Is(err, publish.ErrReplay) {
		i.m.replays.Inc()
		i.log.Info().Err(err).Int64("resume_after", resume).Msg("a transaction that held back records past the memory bound ended")
		return 0, backoff
	}
	if errors.Is(err, publish.ErrOtherWriter) {
		i.m.conflicts.Inc()
		if !progressed {
			pub.AckAllThrough = resume + 1
		}
		i.log.Info().Err(err).Int64("resume_after", resume).Bool("ack_every_message", pub.AckAllThrough > resume).Msg("a stream holds what another indexer published; reading the streams again")
		return i.cfg.RetryBackoff, backoff
	}
	i.log.Warn().Err(err).Int64("resume_after", resume).Dur("backoff", backoff).Msg("indexing interrupted; resuming from the last acknowledged height")
	return backoff, min(2*backoff, i.cfg.MaxRetryBackoff)
}

// observe records how long after its commit a block reached each stage,
// once JetStream acknowledged it.
func (i *Indexer) observe(t stageTimes) {
	for _, s := range []struct {
		stage string
		at    time.Time
	}{{stageVerified, t.verified}, {stageFetched, t.fetched}, {stagePublished, t.sent}, {stageAcknowledged, time.Now()}} {
		i.m.latency.WithLabelValues(s.stage).Observe(max(0, s.at.Sub(t.committed).Seconds()))
	}
}

// reconcile moves the acknowledged height back to where the streams hold
// all that JetStream acknowledged, if one holds less (its server lost what
// it had not synced): those blocks are published again, and what the
// streams hold is skipped as ever.
func (i *Indexer) reconcile(ctx context.Context, pub *publish.Publisher) error {
	acked := i.acked.Load()
	from, why, err := reconcile.Rewind(ctx, pub.JetStream(), i.ends, acked, i.followed.Load())
	if err != nil {
		return err
	}
	if from <= acked {
		i.log.Warn().Int64("acknowledged", acked).Int64("from", from).Str("why", why).Msg("a stream lost records JetStream acknowledged; publishing them again")
		i.m.rewinds.Inc()
		i.acked.Store(from - 1)
		i.followed.Store(from - 1)
	}
	return nil
}

// inflight is a published block whose acknowledgements are outstanding.
type inflight struct {
	height  int64
	times   stageTimes
	futs    []jetstream.PubAckFuture
	ends    map[string]reconcile.End // partitions' ends after the block
	deleted []string                 // topics it deleted
	// holdFrom is the height of the first record held back behind an open
	// transaction after the block (0: none): no height from it on is
	// acknowledged (Publisher.HoldFrom).
	holdFrom int64
}

// follow publishes blocks from the last acknowledged height on, until an
// error: heights are followed by number, so nothing is skipped.
func (i *Indexer) follow(ctx context.Context, pub *publish.Publisher, acc *publish.Access) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pub.Reset()
	reconnects := i.nc.Stats().Reconnects
	if err := pub.EnsureCursorBucket(ctx); err != nil {
		return err
	}
	if err := i.reconcile(ctx, pub); err != nil {
		return err
	}
	pipe := make(chan inflight, 64)
	acks := make(chan struct{})
	go func() {
		defer close(acks)
		i.acknowledge(ctx, cancel, pipe, pub)
	}()
	defer func() { close(pipe); <-acks }()
	// Its own context: the blocks published so far are still acknowledged
	// (the deferred close of pipe) after the prefetch stops.
	pctx, stopPrefetch := context.WithCancel(ctx)
	blocks := make(chan *fetching, prefetchBlocks-1)
	go i.prefetch(pctx, i.acked.Load()+1, blocks)
	defer func() {
		stopPrefetch()
		for range blocks { // prefetch closes it after its fetches end
		}
	}()
	check := time.NewTicker(i.cfg.PollInterval)
	defer check.Stop()
	for {
		var f *fetching
		for f == nil {
			if n := i.nc.Stats().Reconnects; n != reconnects {
				// A server that restarted may have lost what it had not
				// synced: look again at what the streams hold.
				return fmt.Errorf("NATS reconnected (%d reconnects): reconciling with the streams", n)
			}
			select {
			case f = <-blocks:
				if f == nil {
					return context.Cause(ctx)
				}
			case <-check.C:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if f.err != nil {
			return f.err
		}
		b := f.b
		if err := acc.Apply(ctx, b.Appended.Topics); err != nil {
			return err
		}
		futs, err := pub.Publish(ctx, b, i.m.publish())
		if err != nil {
			return err
		}
		ends, deleted := pub.Ends(b)
		records, bytes, _ := pub.Held()
		i.m.held.Set(float64(records))
		i.m.heldBytes.Set(float64(bytes))
		f.times.sent = time.Now()
		select {
		case pipe <- inflight{f.height, f.times, futs, ends, deleted, pub.HoldFrom()}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		i.m.blocks.Inc()
		if from := pub.Replay(); from > 0 {
			return fmt.Errorf("%w: from height %d", publish.ErrReplay, from)
		}
	}
}

// acknowledge waits for each block's acknowledgements in height order,
// advances the acknowledged height and saves the cursor now and then. A
// publish JetStream refuses cancels following, which resumes from there.
func (i *Indexer) acknowledge(ctx context.Context, cancel context.CancelCauseFunc, pipe <-chan inflight, pub *publish.Publisher) {
	saved := i.acked.Load()
	last := time.Now()
	save := func(ctx context.Context) {
		h := i.acked.Load()
		if h == saved {
			return
		}
		if err := pub.SaveCursor(ctx, reconcile.Cursor{Height: h, Ends: i.ends, Followed: max(h, i.followed.Load())}); err != nil {
			i.log.Warn().Err(err).Int64("height", h).Msg("could not save the cursor; will try again")
			return
		}
		saved, last = h, time.Now()
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), i.cfg.StopSaveTimeout)
		defer scancel()
		save(sctx)
	}()
	for f := range pipe {
		for _, fut := range f.futs {
			select {
			case <-fut.Ok():
			case err := <-fut.Err():
				if publish.WrongLastSequence(err) {
					cancel(fmt.Errorf("%w: JetStream refused a message of height %d: %w", publish.ErrOtherWriter, f.height, err))
				} else {
					i.m.publishErrors.Inc()
					cancel(fmt.Errorf("JetStream did not store a message of height %d: %w", f.height, err))
				}
				for range pipe { // drain: follow stops sending once cancelled
				}
				return
			case <-ctx.Done():
				for range pipe {
				}
				return
			}
		}
		reconcile.Advance(i.ends, f.ends, f.deleted)
		acked := f.height
		if f.holdFrom > 0 {
			acked = max(i.acked.Load(), min(acked, f.holdFrom-1))
		}
		i.acked.Store(acked)
		i.followed.Store(f.height)
		i.observe(f.times)
		i.m.height.Set(float64(acked))
		if time.Since(last) >= i.cfg.CursorInterval {
			save(ctx)
		}
	}
}
