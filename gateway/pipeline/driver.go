package pipeline

import (
	"context"
	"encoding/hex"
	"sync"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	cmttypes "github.com/cometbft/cometbft/types"

	"github.com/byzlog/byzlog/gateway/nodes"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/wire"
)

// The driver: the I/O around the pure stages. runBundler feeds the queue
// to the bundler and submits what it closes; submit, send and lookup talk
// to the nodes; follow reads confirmed blocks for the tracker and carries
// out its settlements (carryOut). Every goroutine here runs under Run's
// context.

// runBundler collects queued batches into bundles (bundler) and submits
// each closed one once it has an in-flight slot. While it waits for a
// slot it reads no request, so the queue fills and pushes back.
func (g *Gateway) runBundler(ctx context.Context) {
	b := newBundler(g.cfg.MaxBundleBytes, g.cfg.MaxBundleBatches, g.cfg.Linger)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if reqs := b.ready(); reqs != nil {
			select {
			case g.inflight <- struct{}{}:
			case <-ctx.Done():
				g.requeue(b.drain())
				return
			}
			var once sync.Once
			release := func() { once.Do(func() { <-g.inflight }) }
			go g.submit(ctx, reqs, release, time.Time{})
			b.advance(time.Now())
			continue
		}
		var lingered <-chan time.Time
		if due, ok := b.deadline(); ok {
			timer.Reset(time.Until(due))
			lingered = timer.C
		}
		select {
		case <-ctx.Done():
			g.requeue(b.drain())
			return
		case r := <-g.queue:
			b.add(r, time.Now())
		case <-lingered:
			b.tick(time.Now())
		}
		timer.Stop()
	}
}

// requeue puts requests back for Run's shutdown to fail them.
func (g *Gateway) requeue(reqs []*request) {
	for _, r := range reqs {
		if r != nil {
			select {
			case g.queue <- r:
			default:
				r.finish(nil, errorf(ErrUnavailable, "gateway shutting down"))
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
			r.finish(nil, errorf(ErrInternal, "encode bundle: %v", err))
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
	return g.submitTx(ctx, tx, nil)
}

// submitTx is SubmitTx, calling accepted (when not nil) once a node's
// mempool holds tx.
func (g *Gateway) submitTx(ctx context.Context, tx []byte, accepted func()) (Committed, error) {
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
		failed:   func(err error) { ch <- done{err: err} },
		release:  func() {},
		accepted: accepted,
	}
	g.broadcast(ctx, p)
	select {
	case d := <-ch:
		return d.c, d.err
	case <-ctx.Done():
		// Left tracked: the same bytes sent again wait on it as twins, and
		// the pending timeout bounds it.
		return Committed{}, ctx.Err()
	}
}

// track registers p with the tracker, as sent now, and reports whether
// to send it (not when the same bytes are pending).
func (g *Gateway) track(p *pendingTx) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.txs.track(p, time.Now())
}

// untrack stops tracking p; true for the one caller that then settles it.
func (g *Gateway) untrack(p *pendingTx) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.txs.untrack(p)
}

// settleTx carries out decide's settlement of untracked p for each of p's
// twins, then for p.
func (g *Gateway) settleTx(ctx context.Context, p *pendingTx, decide func(*pendingTx) settlement) {
	g.mu.Lock()
	all := g.txs.withTwins(p)
	g.mu.Unlock()
	for _, q := range all {
		g.carryOut(ctx, decide(q))
	}
}

// carryOut does what the tracker decided for one transaction: it answers
// its batches in order (a node's duplicate claim only once the block it
// names confirms it), calls its callback, and submits the batches to send
// again in a new bundle that keeps the slot and the deadline, or gives
// the slot back. Once ctx is done nothing is sent again: those batches
// are answered UNAVAILABLE, never left waiting.
func (g *Gateway) carryOut(ctx context.Context, s settlement) {
	for _, st := range s.steps {
		if st.claim != nil {
			g.confirmDuplicate(ctx, st.r, st.claim)
			continue
		}
		st.r.finish(st.receipt, st.err)
	}
	switch {
	case s.committed != nil:
		s.p.committed(*s.committed, s.result)
	case s.failed != nil && s.p.failed != nil:
		s.p.failed(s.failed)
	}
	if len(s.again) == 0 || ctx.Err() != nil {
		// Stopping: what would go out again was not written, so the client
		// may retry it with the same sequence, at this or another gateway.
		for _, r := range s.again {
			r.finish(nil, errorf(ErrUnavailable, "the gateway is stopping; retry with the same sequence"))
		}
		s.p.release()
		return
	}
	g.submit(ctx, s.again, s.p.release, s.p.deadline)
}

// fail answers untracked p, its twins and their batches with err. Nothing
// is sent again, so no context is needed.
func (g *Gateway) fail(p *pendingTx, err error) {
	g.settleTx(context.Background(), p, func(q *pendingTx) settlement { return failedSettlement(q, err) })
}

// broadcast tracks p and submits it, unless the same bytes are pending.
// p is tracked before it is sent: its block may come before the answer.
func (g *Gateway) broadcast(ctx context.Context, p *pendingTx) {
	if g.track(p) {
		g.send(ctx, p)
	}
}

// send submits tracked p to the nodes in turn (nodes.Pool.Broadcast)
// and settles it by how that ends.
func (g *Gateway) send(ctx context.Context, p *pendingTx) {
	sub := g.pool.Broadcast(ctx, p.tx, nodes.Policy{
		Timeout: g.cfg.Waits.BroadcastTimeout,
		// A CheckTx refusal is one node's word: a liar could refuse every
		// batch. A refusal stands once f+1 nodes give the same code; a
		// node that takes the transaction settles it the other way. A
		// duplicate is settled by the block it names (confirmDuplicate),
		// whoever says it.
		Quorum: g.quorum(),
		Stands: func(code uint32) bool { return wire.Code(code) == wire.CodeDuplicate },
		// The node may not have the block that created the topic (or
		// granted the key) yet, though the pre-check's node had: give it
		// one more block than this gateway has seen, then ask again.
		Behind:   func(code uint32) bool { return staleSensitive(wire.Code(code)) },
		CatchUp:  func(ctx context.Context, n *nodes.Node) bool { return g.queries.caughtUp(ctx, n, g.seenHeight()+1) },
		CodeName: func(code uint32) string { return wire.Code(code).String() },
	})
	switch sub.Outcome {
	case nodes.Held:
		// The same bytes were seen before: still in a mempool (a block
		// will tell), or already committed, perhaps before this gateway
		// was watching. Look it up.
		if p.accepted != nil {
			p.accepted()
		}
		g.lookup(ctx, sub.Node, p)
	case nodes.Full:
		if g.untrack(p) {
			g.fail(p, exhausted(retryLater, "CometBFT mempool of %s is full; retry shortly", sub.Node.Addr))
		}
	case nodes.Accepted:
		if p.accepted != nil {
			p.accepted()
		}
		for _, r := range p.reqs {
			if r.ack == byzlogv1.Ack_ACK_MEMPOOL {
				r.answer(r.receipt(byzlogv1.Ack_ACK_MEMPOOL), nil)
			}
		}
	case nodes.Refused:
		res := sub.Result
		if g.untrack(p) {
			g.settleTx(ctx, p, func(q *pendingTx) settlement {
				return rejectedSettlement(q, wire.Code(res.Code), res.Log, res.Data, nil)
			})
		}
	case nodes.Failed:
		if g.untrack(p) {
			g.fail(p, errorf(ErrUnavailable, "no CometBFT node took the transaction (last error: %v); retry", sub.Err))
		}
	case nodes.Stopped:
		// Run fails what is pending.
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

// lookup settles p if it already committed (committedTx).
func (g *Gateway) lookup(ctx context.Context, n *nodes.Node, p *pendingTx) {
	hash, err := hex.DecodeString(p.hash)
	if err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.Waits.LookupTimeout)
	defer cancel()
	at, ok := g.committedTx(cctx, n, hash)
	if ok && g.untrack(p) {
		g.settleTx(ctx, p, func(q *pendingTx) settlement { return committedSettlement(q, at) })
	}
}

// follow matches committed blocks against pending transactions, height by
// height (never by event alone, so nothing is skipped), resubmits what
// has waited longer than CommitTimeout and gives up what has waited longer
// than PendingTimeout.
func (g *Gateway) follow(ctx context.Context) {
	t := time.NewTicker(g.cfg.PollInterval)
	defer t.Stop()
	defer g.asks.Wait()
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

// followOnce matches every block up to the height a node has, as far as
// the tracker needs (tracker.next). While a client waits for a light block
// above the height f+1 nodes have reported (a fresh receipt's next
// header), it also asks the other nodes for their heights (askHeights),
// so the wait ends one poll after f+1 nodes commit the block, not f+1
// polls.
func (g *Gateway) followOnce(ctx context.Context) error {
	n := g.pool.Pick()
	if g.tip.waiters() > 0 {
		g.askHeights(ctx, n)
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.Waits.FollowTimeout)
	defer cancel()
	st, err := n.Client.Status(cctx)
	if err != nil {
		g.pool.MarkDown(n, err)
		return err
	}
	top := st.SyncInfo.LatestBlockHeight
	g.tip.report(n.Addr, top)
	for {
		agreed := g.pool.Height()
		g.mu.Lock()
		h, ok := g.txs.next(top, agreed)
		g.mu.Unlock()
		if !ok {
			return nil
		}
		d, err := g.confirmedBlock(cctx, n, h)
		if err != nil {
			return err
		}
		g.matchBlock(ctx, h, d)
	}
}

// askHeights asks every healthy node but n for its committed height, in
// the background, and reports the answers to the tip. A node is asked
// again only once it has answered, so a node that hangs holds one
// goroutine, and never the poll.
func (g *Gateway) askHeights(ctx context.Context, n *nodes.Node) {
	for _, m := range g.pool.Others(n) {
		if !m.Healthy() {
			continue
		}
		g.askMu.Lock()
		busy := g.asking[m]
		g.asking[m] = true
		g.askMu.Unlock()
		if busy {
			continue
		}
		g.asks.Go(func() {
			defer func() {
				g.askMu.Lock()
				delete(g.asking, m)
				g.askMu.Unlock()
			}()
			actx, cancel := context.WithTimeout(ctx, g.cfg.Waits.FollowTimeout)
			defer cancel()
			st, err := m.Client.Status(actx)
			switch {
			case err != nil && ctx.Err() == nil:
				g.pool.MarkDown(m, err)
			case err == nil:
				g.tip.report(m.Addr, st.SyncInfo.LatestBlockHeight)
			}
		})
	}
}

// matchBlock settles the pending transactions that confirmed block h
// holds, in block order, then those it made impossible (settleConflicts).
func (g *Gateway) matchBlock(ctx context.Context, h int64, d *chain.Block) {
	for i, tx := range d.Block.Txs {
		g.mu.Lock()
		p := g.txs.take(hex.EncodeToString(tx.Hash()))
		g.mu.Unlock()
		if p != nil {
			at := txAt{d, uint32(i)}
			g.settleTx(ctx, p, func(q *pendingTx) settlement { return committedSettlement(q, at) })
		}
	}
	g.settleConflicts(ctx, d)
	g.mu.Lock()
	g.txs.matched(h)
	g.mu.Unlock()
}

// sweep sends again, to the next node, what has waited CommitTimeout, and
// gives up what has passed its deadline (tracker.sweep).
func (g *Gateway) sweep(ctx context.Context) {
	g.mu.Lock()
	stale, expired := g.txs.sweep(time.Now())
	g.mu.Unlock()
	for _, p := range expired {
		g.log.Warn().Str("tx", p.hash).Int("batches", len(p.reqs)).Dur("pending_timeout", g.cfg.PendingTimeout).Msg("transaction not committed in time; giving up")
		g.metrics.expired.Inc()
		g.fail(p, errorf(ErrNotCommitted, "not committed within %s (the gateway's pending_timeout); it may still commit: retry with the same sequence (or nonce)", g.cfg.PendingTimeout))
	}
	for _, p := range stale {
		g.log.Warn().Str("tx", p.hash).Int("batches", len(p.reqs)).Msg("transaction not committed in time; submitting it again")
		g.metrics.resubmits.Inc()
		go g.send(ctx, p)
	}
}
