// Package gateway is byzlog's produce path: it takes producers' signed
// batches, checks what it can without trusting anyone, bundles batches from
// all clients into one CometBFT transaction per linger period, submits it to
// a healthy node (failing over to others), follows committed blocks and
// answers each batch with a receipt taken from the block's results, once
// f+1 of its nodes agree on the block's hash and results (confirm.go). A
// gateway holds no state a restart would lose: producers sign their batches
// and retry with the same sequence, so the gateway can drop, repeat or
// reorder nothing the validators would accept. Its client subpackage is the
// producer SDK; services/byzlog-gateway serves it over gRPC.
package gateway

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/gateway/nodes"
	"github.com/byzlog/byzlog/indexer/chain"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Gateway bundles, submits and tracks producers' batches.
type Gateway struct {
	cfg  Config
	log  zerolog.Logger
	pool *nodes.Pool

	queue    chan *request
	queued   atomic.Int64 // bytes of batches accepted and not yet settled
	inflight chan struct{}
	topics   topicCache
	stopped  atomic.Bool
	metrics  *Metrics

	mu      sync.Mutex
	pending map[string]*pendingTx // by tx hash
	height  int64                 // last block whose results were matched

	prodMu sync.Mutex
	usage  map[string]*usage    // by producer key: what it holds queued
	seqs   map[seqKey]*seqState // what the gateway knows of producers' sequences
	dups   dupBlocks            // confirmed blocks that duplicate answers named
}

// request is one batch waiting for its answer.
type request struct {
	batch *byzlogv1.SignedBatch
	body  *byzlogv1.BatchBody
	key   string // producer key
	size  int
	ack   byzlogv1.Ack
	done  chan answer
	once  sync.Once // the answer
	g     *Gateway

	settleOnce sync.Once
	charged    bool // counted in queued and its producer's usage
	reserved   bool // holds its sequence in the producer's pending ones
	following  bool // the same batch is pending: answered with it, never bundled
	followers  []*request
}

type answer struct {
	receipt *byzlogv1.Receipt
	err     error
}

// answer gives the client its answer; a request acked at the mempool is
// answered before it is settled.
func (r *request) answer(rc *byzlogv1.Receipt, err error) {
	r.once.Do(func() { r.done <- answer{rc, err} })
}

// finish is a request's final outcome: it answers (if not yet) and gives
// back what the request held.
//
// It settles before it answers: a client that sends the same batch again
// the moment it has the answer must find the sequence free, not join the
// settled request as a follower and get its old answer.
func (r *request) finish(rc *byzlogv1.Receipt, err error) {
	r.settleOnce.Do(func() { r.g.settle(r, rc, err) })
	r.answer(rc, err)
}

func (r *request) receipt(ack byzlogv1.Ack) *byzlogv1.Receipt {
	return &byzlogv1.Receipt{Ack: ack, Topic: r.body.Topic, Partition: r.body.Partition}
}

// pendingTx is a submitted transaction waiting to be seen in a block.
type pendingTx struct {
	tx        []byte
	hash      string
	reqs      []*request                                // a produce bundle's batches, in order
	committed func(c Committed, res *abci.ExecTxResult) // any other transaction
	failed    func(err error)
	release   func()
	submitted time.Time // last sent
	deadline  time.Time // given up after (Config.PendingTimeout)
	// twins are transactions with the same bytes, submitted while this one
	// was pending: they share its outcome and are never sent themselves.
	twins []*pendingTx
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
		pending:  map[string]*pendingTx{},
		topics:   topicCache{ttl: cfg.TopicCacheTTL},
		usage:    map[string]*usage{},
		seqs:     map[seqKey]*seqState{},
	}
	g.metrics = newMetrics(g)
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
			return fmt.Errorf("%w (waited %s: --start-timeout)", err, g.cfg.StartTimeout)
		}
		g.log.Info().Err(err).Msg("waiting for a healthy CometBFT node")
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	_, top := g.pool.Health()
	g.mu.Lock()
	g.height = top
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
	go func() { defer wg.Done(); g.bundle(ctx) }()
	wg.Wait()
	g.stopped.Store(true)
	shutdown := status.Error(codes.Unavailable, "gateway shutting down; retry with another gateway (same sequence)")
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
	pending := g.pending
	g.pending = map[string]*pendingTx{}
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
	defer func(start time.Time) { g.metrics.answered(ack, start, rc, err) }(time.Now())
	if ack == byzlogv1.Ack_ACK_UNSPECIFIED {
		ack = byzlogv1.Ack_ACK_COMMIT
	}
	shutdown := status.Error(codes.Unavailable, "gateway shutting down; retry with another gateway (same sequence)")
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
			err := exhausted(100*time.Millisecond, "gateway queue full (%d batches waiting); retry shortly", len(g.queue))
			r.finish(nil, err)
			return nil, err
		}
	}
	if ack == byzlogv1.Ack_ACK_NONE {
		return r.receipt(ack), nil
	}
	select {
	case a := <-r.done:
		return a.receipt, a.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// decode runs the stateless pre-checks that reject a bad batch alone:
// signature, decoding, chain and size.
func (g *Gateway) decode(b *byzlogv1.SignedBatch) (*request, error) {
	if b == nil {
		return nil, status.Error(codes.InvalidArgument, "request carries no batch")
	}
	tx, err := wire.BundleTx(b)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "encode batch: %v", err)
	}
	if len(tx) > g.cfg.MaxBundleBytes {
		return nil, status.Errorf(codes.InvalidArgument, "batch is %d bytes, the gateway's max_bundle_bytes is %d: send smaller batches", len(tx), g.cfg.MaxBundleBytes)
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
	cfg, limits, err := g.topics.check(ctx, g, r.body.Topic, r.body.Partition)
	if err != nil {
		return err
	}
	if err := checkRecords(r, cfg, limits); err != nil {
		if status.Code(err) != codes.PermissionDenied || !g.topics.refreshable() {
			return err
		}
		// A key granted a moment ago may not be in the cache yet.
		g.topics.expire()
		if cfg, limits, err = g.topics.check(ctx, g, r.body.Topic, r.body.Partition); err != nil {
			return err
		}
		if err := checkRecords(r, cfg, limits); err != nil {
			return err
		}
	}
	return g.admitSequence(ctx, r)
}

// bundle collects queued batches into bundles: it closes a bundle after
// Linger from its first batch, or when it is full, and submits it.
func (g *Gateway) bundle(ctx context.Context) {
	var carry *request
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case <-ctx.Done():
				return
			case first = <-g.queue:
			}
		}
		reqs, size := []*request{first}, first.size
		timer := time.NewTimer(g.cfg.Linger)
	collect:
		for len(reqs) < g.cfg.MaxBundleBatches {
			select {
			case r := <-g.queue:
				if size+r.size > g.cfg.MaxBundleBytes {
					carry = r
					break collect
				}
				reqs, size = append(reqs, r), size+r.size
			case <-timer.C:
				break collect
			case <-ctx.Done():
				timer.Stop()
				g.requeue(append(reqs, carry))
				return
			}
		}
		timer.Stop()
		select {
		case g.inflight <- struct{}{}:
		case <-ctx.Done():
			g.requeue(append(reqs, carry))
			return
		}
		var once sync.Once
		release := func() { once.Do(func() { <-g.inflight }) }
		go g.submit(ctx, reqs, release, time.Time{})
	}
}

// requeue puts requests back for Run's shutdown to fail them.
func (g *Gateway) requeue(reqs []*request) {
	for _, r := range reqs {
		if r != nil {
			select {
			case g.queue <- r:
			default:
				r.finish(nil, status.Error(codes.Unavailable, "gateway shutting down"))
			}
		}
	}
}

// submit sends one bundle and registers it to be matched in a block. A
// bundle split from a rejected one keeps its deadline; zero means a new
// one.
func (g *Gateway) submit(ctx context.Context, reqs []*request, release func(), deadline time.Time) {
	batches := make([]*byzlogv1.SignedBatch, len(reqs))
	for i, r := range reqs {
		batches[i] = r.batch
	}
	tx, err := wire.BundleTx(batches...)
	if err != nil {
		for _, r := range reqs {
			r.finish(nil, status.Errorf(codes.Internal, "encode bundle: %v", err))
		}
		release()
		return
	}
	p := &pendingTx{tx: tx, hash: hex.EncodeToString(cmttypes.Tx(tx).Hash()), reqs: reqs, release: release, deadline: deadline}
	g.metrics.bundleBatches.Observe(float64(len(reqs)))
	g.metrics.bundleBytes.Observe(float64(len(tx)))
	g.broadcast(ctx, p)
}

// Committed is where a transaction landed, with the proof a client checks
// that against its own verified headers.
type Committed struct {
	Height  int64
	TxIndex uint32
	Proof   *byzlogv1.ResultProof
}

// SubmitTx sends any other transaction (an admin request) and waits until
// it is committed; the error is the state machine's rejection, mapped.
func (g *Gateway) SubmitTx(ctx context.Context, tx []byte) (Committed, error) {
	type done struct {
		c   Committed
		err error
	}
	ch := make(chan done, 1)
	p := &pendingTx{
		tx: tx, hash: hex.EncodeToString(cmttypes.Tx(tx).Hash()),
		committed: func(c Committed, res *abci.ExecTxResult) {
			if res.Code != 0 {
				ch <- done{c, rejected(wire.Code(res.Code), res.Log)}
				return
			}
			ch <- done{c, nil}
		},
		failed:  func(err error) { ch <- done{err: err} },
		release: func() {},
	}
	g.broadcast(ctx, p)
	select {
	case d := <-ch:
		return d.c, d.err
	case <-ctx.Done():
		// Left tracked: the same bytes sent again wait on it as twins, and
		// the pending timeout bounds it.
		return Committed{}, status.FromContextError(ctx.Err()).Err()
	}
}

// track registers p to be matched in blocks and reports whether to send
// it. A transaction with the same bytes as a pending one is not: it waits
// on that one as its twin, so neither entry, nor the slot it holds, is
// lost.
func (g *Gateway) track(p *pendingTx) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.pending[p.hash]; q != nil && q != p {
		q.twins = append(q.twins, p)
		return false
	}
	now := time.Now()
	p.submitted = now
	if p.deadline.IsZero() {
		p.deadline = now.Add(g.cfg.PendingTimeout)
	}
	g.pending[p.hash] = p
	return true
}

// takeTwins returns the transactions waiting on p's outcome; p is
// untracked, so no more are added.
func (g *Gateway) takeTwins(p *pendingTx) []*pendingTx {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := p.twins
	p.twins = nil
	return t
}

func (g *Gateway) untrack(p *pendingTx) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending[p.hash] != p {
		return false
	}
	delete(g.pending, p.hash)
	return true
}

// broadcast tracks p and submits it, unless the same bytes are pending.
// p is tracked before it is sent: its block may come before the answer.
func (g *Gateway) broadcast(ctx context.Context, p *pendingTx) {
	if g.track(p) {
		g.send(ctx, p)
	}
}

// send submits tracked p to healthy nodes in turn until one's CheckTx
// answers.
func (g *Gateway) send(ctx context.Context, p *pendingTx) {
	var lastErr error
	retriedStale := false
	// A CheckTx refusal is one node's word: a liar could refuse every
	// batch. A refusal stands once f+1 nodes give the same code; a node
	// that takes the transaction settles it the other way.
	refusals := map[uint32]int{}
	first := g.pool.Pick()
	order := append([]*nodes.Node{first}, g.pool.Others(first)...)
	for i := 0; i < len(order); i++ {
		n := order[i]
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := n.BroadcastTxSync(cctx, p.tx)
		cancel()
		if err != nil {
			msg := err.Error()
			switch {
			case nodes.AlreadyHeld(err):
				// The same bytes were seen before: still in a mempool (a
				// block will tell), or already committed, perhaps before
				// this gateway was watching. Look it up.
				g.lookup(ctx, n, p)
				return
			case strings.Contains(msg, "mempool is full"):
				if g.untrack(p) {
					g.fail(p, exhausted(time.Second, "CometBFT mempool of %s is full; retry shortly", n.Addr))
				}
				return
			}
			if ctx.Err() != nil {
				return // Run fails what is pending
			}
			g.pool.MarkDown(n, err)
			lastErr = err
			continue
		}
		if res.Code == 0 {
			for _, r := range p.reqs {
				if r.ack == byzlogv1.Ack_ACK_MEMPOOL {
					r.answer(r.receipt(byzlogv1.Ack_ACK_MEMPOOL), nil)
				}
			}
			return
		}
		code := wire.Code(res.Code)
		if staleSensitive(code) && !retriedStale {
			// The node may not have the block that created the topic (or
			// granted the key) yet, though the pre-check's node had: give
			// it one more block than this gateway has seen, then ask again.
			retriedStale = true
			g.mu.Lock()
			seen := g.height
			g.mu.Unlock()
			if g.caughtUp(ctx, n, seen+1) {
				i--
				continue
			}
		}
		refusals[res.Code]++
		// A duplicate is settled by the block it names (confirmDuplicate),
		// whoever says it.
		if code == wire.CodeDuplicate || refusals[res.Code] >= g.quorum() {
			if g.untrack(p) {
				g.rejected(ctx, p, code, res.Log, res.Data, nil)
			}
			return
		}
		lastErr = fmt.Errorf("node %s refused it (%s: %s), which fewer than %d nodes confirm", n.Addr, code, res.Log, g.quorum())
	}
	if g.untrack(p) {
		g.fail(p, status.Errorf(codes.Unavailable, "no CometBFT node took the transaction (last error: %v); retry", lastErr))
	}
}

// staleSensitive reports whether a CheckTx rejection may only mean the node
// is a block or two behind the state the gateway's pre-check saw.
func staleSensitive(c wire.Code) bool {
	switch c {
	case wire.CodeUnknownTopic, wire.CodeUnknownPartition, wire.CodeNotAllowed:
		return true
	}
	return false
}

// lookup resolves p from the node's transaction index if it was committed.
func (g *Gateway) lookup(ctx context.Context, n *nodes.Node, p *pendingTx) {
	hash, err := hex.DecodeString(p.hash)
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// /tx needs the node's tx_index (CometBFT's default "kv"): with
	// tx_index = "null" a bundle committed before this gateway tracked it
	// would wait for the commit timeout instead.
	res := g.confirmedTx(cctx, n, hash)
	if res == nil {
		return // not indexed (or not by f+1 nodes): still pending
	}
	// The receipt's proof needs the block's results: read the block, as
	// f+1 nodes report it, and find the transaction in it.
	d, err := g.dups.get(cctx, g, res.Height)
	if err != nil || int(res.Index) >= len(d.Block.Txs) || !bytes.Equal(d.Block.Txs[res.Index].Hash(), hash) {
		g.log.Debug().Err(err).Int64("height", res.Height).Msg("the tx index names a block that does not confirm it; waiting for the block")
		return
	}
	if g.untrack(p) {
		g.committed(ctx, p, txAt{d, res.Index})
	}
}

// txAt is a transaction in a confirmed block: block d, index i.
type txAt struct {
	d *chain.Block
	i uint32
}

func (at txAt) height() int64 { return at.d.Block.Height }

// rejected answers each batch of a refused bundle: duplicates get their
// original offsets, bad batches their error, and the rest go out again in
// a new bundle. at is where the refusal was committed, in block results
// f+1 nodes agree on; nil for a CheckTx refusal, which is one node's word,
// so its duplicates are acknowledged only from the block they name
// (confirmDuplicate).
func (g *Gateway) rejected(ctx context.Context, p *pendingTx, code wire.Code, log string, data []byte, at *txAt) {
	for _, t := range g.takeTwins(p) {
		g.rejected(ctx, t, code, log, data, at)
	}
	if p.reqs == nil {
		p.failed(rejected(code, log))
		p.release()
		return
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(data, &out); err != nil || len(out.Batches) != len(p.reqs) {
		g.fail(p, rejected(code, log))
		return
	}
	var again []*request
	for i, br := range out.Batches {
		r := p.reqs[i]
		switch {
		case br.Duplicate && at == nil:
			g.confirmDuplicate(ctx, r, br)
		case br.Duplicate:
			// The block at.height() says the batch is a duplicate, with the
			// original's offsets: that result is the proof.
			r.finish(&byzlogv1.Receipt{Ack: byzlogv1.Ack_ACK_COMMIT, Height: at.height(), TxIndex: at.i, Topic: br.Topic, Partition: br.Partition,
				BaseOffset: br.BaseOffset, RecordCount: br.RecordCount, Duplicate: true, Proof: at.d.Prove(int(at.i), uint32(i), false)}, nil)
		case br.Code != 0:
			r.finish(nil, rejected(wire.Code(br.Code), br.Log))
		default:
			again = append(again, r)
		}
	}
	if len(again) == 0 || ctx.Err() != nil {
		p.release()
		return
	}
	g.submit(ctx, again, p.release, p.deadline)
}

func (g *Gateway) fail(p *pendingTx, err error) {
	for _, t := range g.takeTwins(p) {
		g.fail(t, err)
	}
	for _, r := range p.reqs {
		r.finish(nil, err)
	}
	if p.failed != nil {
		p.failed(err)
	}
	p.release()
}

// follow matches committed blocks against pending transactions, height by
// height (never by event alone, so nothing is skipped), resubmits what
// has waited longer than CommitTimeout and gives up what has waited longer
// than PendingTimeout.
func (g *Gateway) follow(ctx context.Context) {
	t := time.NewTicker(g.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.followOnce(ctx); err != nil && ctx.Err() == nil {
			g.log.Debug().Err(err).Msg("follow blocks")
		}
		g.sweep(ctx)
	}
}

func (g *Gateway) followOnce(ctx context.Context) error {
	n := g.pool.Pick()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := n.Client.Status(cctx)
	if err != nil {
		g.pool.MarkDown(n, err)
		return err
	}
	top := st.SyncInfo.LatestBlockHeight
	for {
		g.mu.Lock()
		h, idle := g.height+1, len(g.pending) == 0
		if idle || h > top {
			// Nothing submitted before top can be in those blocks; but top
			// is one node's word, so no further than f+1 nodes have reached
			// (a liar's height would make read-your-writes wait forever).
			if top = min(top, g.pool.Height()); idle && top > g.height {
				g.height = top
			}
			g.mu.Unlock()
			return nil
		}
		g.mu.Unlock()
		d, err := g.confirmedBlock(cctx, n, h)
		if err != nil {
			return err
		}
		for i, tx := range d.Block.Txs {
			g.mu.Lock()
			p := g.pending[hex.EncodeToString(tx.Hash())]
			g.mu.Unlock()
			if p != nil && g.untrack(p) {
				g.committed(ctx, p, txAt{d, uint32(i)})
			}
		}
		g.settleConflicts(ctx, d)
		g.mu.Lock()
		g.height = h
		g.mu.Unlock()
	}
}

// committed answers a transaction found in a confirmed block.
func (g *Gateway) committed(ctx context.Context, p *pendingTx, at txAt) {
	for _, t := range g.takeTwins(p) {
		g.committed(ctx, t, at)
	}
	h, i, res := at.height(), at.i, at.d.Results[at.i]
	if p.committed != nil {
		p.committed(Committed{Height: h, TxIndex: i, Proof: at.d.Prove(int(i), 0, true)}, res)
		p.release()
		return
	}
	if res.Code != 0 {
		g.rejected(ctx, p, wire.Code(res.Code), res.Log, res.Data, &at)
		return
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(res.Data, &out); err != nil || len(out.Batches) != len(p.reqs) {
		g.fail(p, status.Errorf(codes.Internal, "block %d tx %d: result data is not the bundle's outcome (%v)", h, i, err))
		return
	}
	for j, br := range out.Batches {
		p.reqs[j].finish(&byzlogv1.Receipt{
			Ack: byzlogv1.Ack_ACK_COMMIT, Height: h, TxIndex: i, Topic: br.Topic, Partition: br.Partition,
			BaseOffset: br.BaseOffset, RecordCount: br.RecordCount, Proof: at.d.Prove(int(i), uint32(j), false),
		}, nil)
	}
	p.release()
}

// sweep sends again, to the next node, what has waited CommitTimeout: a
// node may have dropped it (the bytes are the same, so it commits once).
// What has passed its deadline is given up: a transaction that never shows
// up in a block (a node keeps it in its mempool, but no proposer picks it)
// must not hold its slot and bytes for good. It may still commit later; the
// client's retry with the same sequence then gets the original offsets.
func (g *Gateway) sweep(ctx context.Context) {
	var stale, expired []*pendingTx
	now := time.Now()
	g.mu.Lock()
	for _, p := range g.pending {
		switch {
		case now.After(p.deadline):
			delete(g.pending, p.hash)
			expired = append(expired, p)
		case now.Sub(p.submitted) > g.cfg.CommitTimeout:
			p.submitted = now
			stale = append(stale, p)
		}
	}
	g.mu.Unlock()
	for _, p := range expired {
		g.log.Warn().Str("tx", p.hash).Int("batches", len(p.reqs)).Dur("pending_timeout", g.cfg.PendingTimeout).Msg("transaction not committed in time; giving up")
		g.metrics.expired.Inc()
		g.fail(p, status.Errorf(codes.DeadlineExceeded, "not committed within %s (the gateway's pending_timeout); it may still commit: retry with the same sequence (or nonce)", g.cfg.PendingTimeout))
	}
	for _, p := range stale {
		g.log.Warn().Str("tx", p.hash).Int("batches", len(p.reqs)).Msg("transaction not committed in time; submitting it again")
		g.metrics.resubmits.Inc()
		go g.send(ctx, p)
	}
}

// Query runs an ABCI query on a healthy node, failing over once per node.
// The node must have committed every block this gateway has acknowledged
// from (read your writes).
func (g *Gateway) Query(ctx context.Context, path string, req, resp proto.Message) error {
	_, err := g.queryAt(ctx, path, req, resp, g.seenHeight())
	return err
}

// seenHeight is the last block whose results the gateway matched: every
// receipt it gave is at or below it.
func (g *Gateway) seenHeight() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.height
}

// queryAt is Query answered as f+1 nodes whose apps have committed
// minHeight answer it, byte for byte (a rejection too): one node's word
// could make a consumer group resume at offsets of its choosing, or a
// topic look missing. Nodes a block apart may differ on a value that just
// changed, so the nodes are asked again, up to queryRounds times, until
// f+1 agree. It returns the lowest height among the agreeing answers.
func (g *Gateway) queryAt(ctx context.Context, path string, req, resp proto.Message, minHeight int64) (int64, error) {
	var data []byte
	if req != nil {
		var err error
		if data, err = proto.Marshal(req); err != nil {
			return 0, status.Errorf(codes.InvalidArgument, "encode query: %v", err)
		}
	}
	type answer struct {
		code   uint32
		log    string
		value  []byte
		height int64
	}
	need := g.quorum()
	var lastErr error
	for round := 0; round < queryRounds; round++ {
		if round > 0 {
			select {
			case <-time.After(queryRetry):
			case <-ctx.Done():
				return 0, status.FromContextError(ctx.Err()).Err()
			}
		}
		all := g.pool.All()
		answers := make([]*answer, len(all))
		errs := make([]error, len(all))
		var wg sync.WaitGroup
		for i, n := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := n.Client.ABCIQuery(ctx, path, data)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						g.pool.MarkDown(n, err)
					}
					errs[i] = err
				case res.Response.Height < minHeight:
					errs[i] = fmt.Errorf("node %s has not committed height %d", n.Addr, minHeight)
				default:
					answers[i] = &answer{code: res.Response.Code, log: res.Response.Log, value: res.Response.Value, height: res.Response.Height}
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return 0, status.FromContextError(ctx.Err()).Err()
		}
		votes := map[string][]*answer{}
		for i, a := range answers {
			if a == nil {
				lastErr = errs[i]
				continue
			}
			k := fmt.Sprintf("%d/%x", a.code, a.value)
			votes[k] = append(votes[k], a)
			if len(votes[k]) < need {
				continue
			}
			if len(votes) > 1 {
				g.metrics.disagreements.Inc()
			}
			low := a.height
			for _, b := range votes[k] {
				low = min(low, b.height)
			}
			if a.code != 0 {
				return 0, rejected(wire.Code(a.code), a.log)
			}
			if err := proto.Unmarshal(a.value, resp); err != nil {
				return 0, status.Errorf(codes.Internal, "%d nodes answered %s with bytes that do not decode: %v", need, path, err)
			}
			return low, nil
		}
		if len(votes) > 0 {
			lastErr = fmt.Errorf("%d different answers, fewer than %d nodes agree on one", len(votes), need)
		}
	}
	return 0, status.Errorf(codes.Unavailable, "%s: fewer than %d CometBFT nodes that committed height %d gave the same answer (last: %v); retry", path, need, minHeight, lastErr)
}

// queryRounds bounds how often queryAt asks the nodes for an answer f+1
// agree on; queryRetry is the wait between rounds (a block is ~0.5 s).
const (
	queryRounds = 6
	queryRetry  = 150 * time.Millisecond
)

// caughtUp waits up to 2 s for node n's app to have committed height h. It
// asks the app, not CometBFT's /status: CometBFT stores a block before the
// app applies and commits it, so its latest height can be one block ahead
// of the state that queries and CheckTx see.
func (g *Gateway) caughtUp(ctx context.Context, n *nodes.Node, h int64) bool {
	deadline := time.Now().Add(2 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err := n.Client.ABCIQuery(cctx, wire.PathState, nil)
		cancel()
		if err == nil && res.Response.Height >= h {
			return true
		}
		if err != nil || time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// topicCache holds topic metadata and the chain's limits for pre-checks.
type topicCache struct {
	ttl     time.Duration
	mu      sync.Mutex
	fetched time.Time
	topics  map[string]*byzlogv1.TopicConfig
	limits  *byzlogv1.Limits
}

// missRefresh is the least time between refreshes caused by unknown
// topics (or keys a topic does not allow), so a client naming nonexistent
// topics costs no query per request.
const missRefresh = 200 * time.Millisecond

// check says whether topic/partition exists, refreshing the cache when it
// is stale or does not know the topic; it returns the topic's config and
// the chain's limits.
func (c *topicCache) check(ctx context.Context, g *Gateway, topic string, partition uint32) (*byzlogv1.TopicConfig, *byzlogv1.Limits, error) {
	return c.checkOnce(ctx, g, topic, partition, false)
}

// refreshable reports whether a miss may refresh the cache now.
func (c *topicCache) refreshable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.fetched) > missRefresh
}

// expire makes the next check refresh.
func (c *topicCache) expire() {
	c.mu.Lock()
	c.fetched = time.Time{}
	c.mu.Unlock()
}

func (c *topicCache) refresh(ctx context.Context, g *Gateway) error {
	var list byzlogv1.TopicList
	if err := g.Query(ctx, wire.PathTopics, nil, &list); err != nil {
		return err
	}
	var st byzlogv1.AppState
	if err := g.Query(ctx, wire.PathState, nil, &st); err != nil {
		return err
	}
	m := make(map[string]*byzlogv1.TopicConfig, len(list.Topics))
	for _, t := range list.Topics {
		if t.GetConfig() != nil {
			m[t.Name] = t.Config
		}
	}
	c.mu.Lock()
	c.topics, c.limits, c.fetched = m, st.GetParams().GetLimits(), time.Now()
	c.mu.Unlock()
	return nil
}

func (c *topicCache) checkOnce(ctx context.Context, g *Gateway, topic string, partition uint32, retried bool) (*byzlogv1.TopicConfig, *byzlogv1.Limits, error) {
	c.mu.Lock()
	cfg, ok := c.topics[topic]
	age := time.Since(c.fetched)
	c.mu.Unlock()
	if age > c.ttl || (!ok && age > missRefresh) {
		if err := c.refresh(ctx, g); err != nil {
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
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, nil, status.FromContextError(ctx.Err()).Err()
		}
		c.expire()
		return c.checkOnce(ctx, g, topic, partition, true)
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
