package pipeline

import (
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/wire"
)

// The tracking stage: the tracker knows which transactions are submitted
// and not yet seen in a block, and decides, from verified block data, what
// becomes of each (a settlement): which batches are answered and how,
// which go out again in a new bundle (the rest of a bundle split after a
// rejection or a conflict), which are resubmitted as they are (stale) and
// which are given up (past their deadline). It does no I/O, starts no
// goroutine and reads no clock: the driver (driver.go) passes the time in,
// holds Gateway.mu around every call, and carries the decisions out. The
// data it decides from is already confirmed by f+1 nodes (confirm.go).

// pendingTx is a submitted transaction waiting to be seen in a block.
type pendingTx struct {
	tx        []byte
	hash      string
	reqs      []*request                                // a produce bundle's batches, in order
	committed func(c Committed, res *abci.ExecTxResult) // any other transaction
	failed    func(err error)
	release   func()
	// accepted, when not nil, is called each time a node's mempool takes
	// the transaction (or already holds it).
	accepted  func()
	submitted time.Time // last sent
	deadline  time.Time // given up after (Config.PendingTimeout)
	// twins are transactions with the same bytes, submitted while this one
	// was pending: they share its outcome and are never sent themselves.
	twins []*pendingTx
}

// txAt is a transaction in a confirmed block: block d, index i.
type txAt struct {
	d *chain.Block
	i uint32
}

func (at txAt) height() int64 { return at.d.Block.Height }

// tracker holds the pending transactions by hash and the last block
// whose results were matched against them. It is not safe for concurrent
// use: the gateway holds Gateway.mu around every call.
type tracker struct {
	commitTimeout  time.Duration
	pendingTimeout time.Duration
	pending        map[string]*pendingTx // by tx hash
	height         int64                 // last block whose results were matched
}

func newTracker(commitTimeout, pendingTimeout time.Duration) *tracker {
	return &tracker{commitTimeout: commitTimeout, pendingTimeout: pendingTimeout, pending: map[string]*pendingTx{}}
}

// track registers p, sent at now, to be matched in blocks and reports
// whether to send it. A transaction with the same bytes as a pending one
// is not: it waits on that one as its twin, so neither entry, nor the slot
// it holds, is lost. A transaction without a deadline gets one
// pendingTimeout from now.
func (t *tracker) track(p *pendingTx, now time.Time) bool {
	if q := t.pending[p.hash]; q != nil && q != p {
		q.twins = append(q.twins, p)
		return false
	}
	p.submitted = now
	if p.deadline.IsZero() {
		p.deadline = now.Add(t.pendingTimeout)
	}
	t.pending[p.hash] = p
	return true
}

// untrack stops tracking p and reports whether it was tracked: only the
// caller that untracks p settles it.
func (t *tracker) untrack(p *pendingTx) bool {
	if t.pending[p.hash] != p {
		return false
	}
	delete(t.pending, p.hash)
	return true
}

// take untracks and returns the pending transaction with this hash, or nil.
func (t *tracker) take(hash string) *pendingTx {
	p := t.pending[hash]
	if p == nil || !t.untrack(p) {
		return nil
	}
	return p
}

// withTwins returns untracked p's twins (each after its own), then p: the
// transactions that share p's outcome, in the order they are settled. No
// more twins join p once it is untracked.
func (t *tracker) withTwins(p *pendingTx) []*pendingTx {
	twins := p.twins
	p.twins = nil
	var out []*pendingTx
	for _, tw := range twins {
		out = append(out, t.withTwins(tw)...)
	}
	return append(out, p)
}

// sweep returns at now the transactions that have waited commitTimeout
// since they were last sent (stale: to be sent again, to the next node;
// the bytes are the same, so they commit once), marked sent now, and
// untracks and returns those past their deadline (expired: to be given
// up). A transaction that never shows up in a block (a node keeps it in
// its mempool, but no proposer picks it) must not hold its slot and bytes
// for good; it may still commit later, and the client's retry with the
// same sequence then gets the original offsets.
func (t *tracker) sweep(now time.Time) (stale, expired []*pendingTx) {
	for _, p := range t.pending {
		switch {
		case now.After(p.deadline):
			delete(t.pending, p.hash)
			expired = append(expired, p)
		case now.Sub(p.submitted) > t.commitTimeout:
			p.submitted = now
			stale = append(stale, p)
		}
	}
	return stale, expired
}

// next is the height to match next, given top, the height of the node
// asked, and agreed, the height f+1 nodes have reached; ok is false when
// there is none: nothing is pending, or every block up to top is matched.
// With nothing pending it moves to top, as far as f+1 nodes have reached
// (nothing submitted before can be in those blocks, and a liar's height
// would make read-your-writes wait forever).
func (t *tracker) next(top, agreed int64) (h int64, ok bool) {
	h, idle := t.height+1, len(t.pending) == 0
	if idle || h > top {
		if top = min(top, agreed); idle && top > t.height {
			t.height = top
		}
		return 0, false
	}
	return h, true
}

// matched records that block h's transactions were matched.
func (t *tracker) matched(h int64) { t.height = h }

// holding returns the pending transactions that hold a request of hits.
func (t *tracker) holding(hits map[*request]conflictHit) []*pendingTx {
	var out []*pendingTx
	for _, p := range t.pending {
		for _, r := range p.reqs {
			if _, ok := hits[r]; ok {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// drain untracks and returns every pending transaction.
func (t *tracker) drain() map[string]*pendingTx {
	p := t.pending
	t.pending = map[string]*pendingTx{}
	return p
}

// settlement is what becomes of one transaction the tracker no longer
// tracks; carryOut does it, in this order: steps, then p's own callback,
// then again (or p's release).
type settlement struct {
	p     *pendingTx
	steps []step // answers to p's batches, in batch order
	// committed and result are a non-produce transaction's place and
	// result, for p.committed.
	committed *Committed
	result    *abci.ExecTxResult
	failed    error      // for p.failed, when set
	again     []*request // batches to bundle and submit again, with p's slot and deadline
}

// step is the answer to one batch: a receipt or an error, or claim, a
// node's word that the batch is a duplicate, which is checked against the
// block it names before it is answered (confirmDuplicate).
type step struct {
	r       *request
	receipt *byzlogv1.Receipt
	err     error
	claim   *byzlogv1.BatchResult
}

// failedSettlement answers every batch of p, and p's callback, with err.
func failedSettlement(p *pendingTx, err error) settlement {
	s := settlement{p: p, failed: err}
	for _, r := range p.reqs {
		s.steps = append(s.steps, step{r: r, err: err})
	}
	return s
}

// committedSettlement answers p, found at at in a confirmed block, from
// that block's result: receipts with proofs, or a rejection's answers.
func committedSettlement(p *pendingTx, at txAt) settlement {
	h, i, res := at.height(), at.i, at.d.Results[at.i]
	if p.committed != nil {
		return settlement{p: p, committed: &Committed{Height: h, TxIndex: i, Proof: at.d.Prove(int(i), 0, true)}, result: res}
	}
	if res.Code != 0 {
		return rejectedSettlement(p, wire.Code(res.Code), res.Log, res.Data, &at)
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(res.Data, &out); err != nil || len(out.Batches) != len(p.reqs) {
		return failedSettlement(p, errorf(ErrInternal, "block %d tx %d: result data is not the bundle's outcome (%v)", h, i, err))
	}
	s := settlement{p: p}
	for j, br := range out.Batches {
		s.steps = append(s.steps, step{r: p.reqs[j], receipt: &byzlogv1.Receipt{
			Ack: byzlogv1.Ack_ACK_COMMIT, Height: h, TxIndex: i, Topic: br.Topic, Partition: br.Partition,
			BaseOffset: br.BaseOffset, RecordCount: br.RecordCount, Proof: at.d.Prove(int(i), uint32(j), false),
		}})
	}
	return s
}

// rejectedSettlement answers each batch of a refused bundle: duplicates
// get their original offsets, bad batches their error, and the rest go
// out again in a new bundle. at is where the refusal was committed, in
// block results f+1 nodes agree on; nil for a CheckTx refusal, which is
// one node's word, so its duplicates are claims, acknowledged only from
// the block they name (confirmDuplicate).
func rejectedSettlement(p *pendingTx, code wire.Code, log string, data []byte, at *txAt) settlement {
	if p.reqs == nil {
		return settlement{p: p, failed: rejected(code, log)}
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(data, &out); err != nil || len(out.Batches) != len(p.reqs) {
		return failedSettlement(p, rejected(code, log))
	}
	s := settlement{p: p}
	for i, br := range out.Batches {
		r := p.reqs[i]
		switch {
		case br.Duplicate && at == nil:
			s.steps = append(s.steps, step{r: r, claim: br})
		case br.Duplicate:
			// The block at.height() says the batch is a duplicate, with the
			// original's offsets: that result is the proof.
			s.steps = append(s.steps, step{r: r, receipt: &byzlogv1.Receipt{Ack: byzlogv1.Ack_ACK_COMMIT, Height: at.height(), TxIndex: at.i, Topic: br.Topic, Partition: br.Partition,
				BaseOffset: br.BaseOffset, RecordCount: br.RecordCount, Duplicate: true, Proof: at.d.Prove(int(at.i), uint32(i), false)}})
		case br.Code != 0:
			s.steps = append(s.steps, step{r: r, err: rejected(wire.Code(br.Code), br.Log)})
		default:
			s.again = append(s.again, r)
		}
	}
	return s
}

// conflictSettlement answers the requests of p that block d committed in
// another transaction (hits) and sends the rest again.
func conflictSettlement(p *pendingTx, d *chain.Block, hits map[*request]conflictHit) settlement {
	h := d.Block.Height
	s := settlement{p: p}
	for _, r := range p.reqs {
		hit, ok := hits[r]
		switch {
		case !ok:
			s.again = append(s.again, r)
		case hit.same:
			br := hit.result
			s.steps = append(s.steps, step{r: r, receipt: &byzlogv1.Receipt{Ack: byzlogv1.Ack_ACK_COMMIT, Height: h, TxIndex: hit.txIndex, Topic: br.Topic, Partition: br.Partition,
				BaseOffset: br.BaseOffset, RecordCount: br.RecordCount, Duplicate: true, Proof: d.Prove(int(hit.txIndex), hit.batch, false)}})
		default:
			s.steps = append(s.steps, step{r: r, err: errorf(ErrConflict,
				"sequence %d of %s/%d was committed at height %d by a different batch signed with this producer's key; this batch was not written: use a new sequence",
				r.body.Sequence, r.body.Topic, r.body.Partition, h)})
		}
	}
	return s
}
