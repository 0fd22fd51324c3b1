// Package mempool is byzlog-app's own mempool, for CometBFT's
// `mempool.type = "app"`: it owns admission, order, per-signer limits,
// eviction of what can no longer commit and expiry by height, and hands
// PrepareProposal the transactions a block is built from.
//
// CometBFT's flood mempool admits what CheckTx passes against committed
// state, so it holds transactions that can never commit (sequences ahead,
// the losing copy of a batch bundled twice), and its proposer reaps from the
// front and stops at the first that does not fit: a few MiB of such
// transactions at the front made every block empty (issue 13). This pool
// admits a transaction as ready only if it applies, in order, on top of
// committed state and every ready transaction before it (core.Pending), so
// every ready transaction can be proposed; a transaction that waits for an
// earlier sequence sits apart, bounded in bytes, count, per signer and in
// heights, and never reaches a proposal until it is ready.
//
// The pool is node-local: nothing in it is consensus state, and it never
// decides validity itself (core does). It does no I/O beyond reading
// committed state through the core.Reader it is given.
package mempool

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Config bounds the pool. Zero fields take Default's values.
type Config struct {
	// MaxBytes bounds the bytes of all transactions held (ready and
	// waiting). Default 64 MiB.
	MaxBytes int64
	// MaxCost bounds the sum of the held transactions' core.Checked.Cost
	// (what they inflate to). Default 256 MiB.
	MaxCost int64
	// MaxTxs bounds how many transactions are held, ready and waiting:
	// after every block all of them are applied again, so their number,
	// not only their bytes, is what a block waits for. Default 4096.
	MaxTxs int
	// MaxWaitingBytes and MaxWaiting bound the transactions waiting for an
	// earlier sequence or nonce. Defaults 8 MiB and 1024.
	MaxWaitingBytes int64
	MaxWaiting      int
	// MaxWaitingPerSigner bounds the waiting transactions any one key has
	// signed into. Default 64 (wire.MaxLookahead).
	MaxWaitingPerSigner int
	// ReadyHeights is how many blocks a ready transaction may wait to be
	// proposed before it is dropped; WaitingHeights the same for a waiting
	// one. Defaults 100 and 5.
	ReadyHeights, WaitingHeights int64
}

// Default returns the default bounds.
func Default() Config {
	return Config{
		MaxBytes: 64 << 20, MaxCost: 256 << 20, MaxTxs: 4096,
		MaxWaitingBytes: 8 << 20, MaxWaiting: 1024, MaxWaitingPerSigner: wire.MaxLookahead,
		ReadyHeights: 100, WaitingHeights: 5,
	}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := Default()
	fill := func(v *int64, dv int64) {
		if *v == 0 {
			*v = dv
		}
	}
	fill(&c.MaxBytes, d.MaxBytes)
	fill(&c.MaxCost, d.MaxCost)
	fill(&c.MaxWaitingBytes, d.MaxWaitingBytes)
	fill(&c.ReadyHeights, d.ReadyHeights)
	fill(&c.WaitingHeights, d.WaitingHeights)
	if c.MaxWaiting == 0 {
		c.MaxWaiting = d.MaxWaiting
	}
	if c.MaxTxs == 0 {
		c.MaxTxs = d.MaxTxs
	}
	if c.MaxWaitingPerSigner == 0 {
		c.MaxWaitingPerSigner = d.MaxWaitingPerSigner
	}
	return c
}

// Validate checks the bounds.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxBytes < wire.MaxTxBytes:
		return fmt.Errorf("mempool max bytes (%d) must hold at least one transaction (%d)", c.MaxBytes, wire.MaxTxBytes)
	case c.MaxWaitingBytes > c.MaxBytes:
		return fmt.Errorf("mempool max waiting bytes (%d) must not exceed max bytes (%d)", c.MaxWaitingBytes, c.MaxBytes)
	case c.MaxWaiting > c.MaxTxs:
		return fmt.Errorf("mempool max waiting (%d) must not exceed max txs (%d)", c.MaxWaiting, c.MaxTxs)
	case c.MaxBytes < 0 || c.MaxCost < 0 || c.MaxTxs < 0 || c.MaxWaitingBytes < 0 || c.MaxWaiting < 0 || c.MaxWaitingPerSigner < 0 || c.ReadyHeights < 0 || c.WaitingHeights < 0:
		return fmt.Errorf("mempool bounds must be positive (or 0 for the default)")
	}
	return nil
}

// entry is one held transaction.
type entry struct {
	c       *core.Checked
	height  int64 // the committed height when it was admitted
	local   bool  // from CheckTx (RPC): this node gossips it
	reaped  bool  // handed to ReapTxs for gossip
	waiting bool
	// committed is set when a block committed the transaction; it leaves
	// at the next sync.
	committed bool
	signers   []string
}

// Stats is the pool's size, for metrics and logs.
type Stats struct {
	Ready, Waiting           int
	ReadyBytes, WaitingBytes int64
	// Dropped counts transactions evicted since the start: committed by
	// another transaction, no longer valid, or expired.
	Evicted, Expired int64
}

// Pool is the app's mempool. It is safe for concurrent use.
type Pool struct {
	cfg    Config
	params *byzlogv1.ChainParams

	mu       sync.Mutex
	ready    []*entry
	waiting  []*entry
	byHash   map[[sha256.Size]byte]*entry
	perKey   map[string]int // waiting transactions per signer
	pending  *core.Pending  // committed state plus every ready entry, in order
	height   int64          // the committed height pending sits on
	stale    bool           // a block committed since pending was built
	bytes    int64
	cost     int64
	waitSize int64
	evicted  int64
	expired  int64
}

// New returns an empty pool for a chain with params.
func New(cfg Config, params *byzlogv1.ChainParams) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Pool{cfg: cfg.withDefaults(), params: params, byHash: map[[sha256.Size]byte]*entry{}, perKey: map[string]int{}, stale: true}, nil
}

// Add admits a prechecked transaction, on committed state r at height.
// local marks one that arrived by RPC, which this node gossips. The result
// is OK when the transaction is ready or waits for an earlier one (its log
// says which); otherwise it says why the transaction was refused. An error
// means the store failed.
func (p *Pool) Add(r core.Reader, height int64, c *core.Checked, local bool) (core.Result, error) {
	if res := c.Result(); !res.OK() {
		return res, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.sync(r, height); err != nil {
		return core.Result{}, err
	}
	if e, ok := p.byHash[c.Hash]; ok {
		e.local = e.local || local
		return core.Result{Code: wire.CodeOK, Log: "already in this node's mempool"}, nil
	}
	size := int64(len(c.Tx))
	if p.bytes+size > p.cfg.MaxBytes || p.cost+c.Cost > p.cfg.MaxCost || len(p.byHash) >= p.cfg.MaxTxs {
		return core.Result{Code: wire.CodeMempoolFull, Log: fmt.Sprintf("this node's mempool is full (%d of %d transactions, %d of %d bytes, %d of %d inflated); retry later or at another node",
			len(p.byHash), p.cfg.MaxTxs, p.bytes, p.cfg.MaxBytes, p.cost, p.cfg.MaxCost)}, nil
	}
	res, waiting, err := p.pending.Add(c)
	if err != nil {
		return core.Result{}, err
	}
	e := &entry{c: c, height: height, local: local, signers: signerKeys(c)}
	switch {
	case res.OK():
		p.insert(e)
		p.promote(e.signers)
		return res, nil
	case !waiting:
		return res, nil
	}
	if msg := p.roomToWait(e); msg != "" {
		return core.Result{Code: wire.CodeMempoolFull, Log: msg}, nil
	}
	e.waiting = true
	p.insert(e)
	return core.Result{Code: wire.CodeOK, Log: "waiting in this node's mempool for an earlier sequence or nonce: " + res.Log}, nil
}

// roomToWait says why e may not wait, or "".
func (p *Pool) roomToWait(e *entry) string {
	size := int64(len(e.c.Tx))
	switch {
	case len(p.waiting) >= p.cfg.MaxWaiting || p.waitSize+size > p.cfg.MaxWaitingBytes:
		return fmt.Sprintf("this node's mempool holds as many transactions waiting for earlier sequences as it may (%d, %d bytes); send the earlier ones first",
			len(p.waiting), p.waitSize)
	}
	for _, k := range e.signers {
		if p.perKey[k] >= p.cfg.MaxWaitingPerSigner {
			return fmt.Sprintf("key %x already has %d transactions waiting for earlier sequences in this node's mempool; send the earlier ones first", k, p.perKey[k])
		}
	}
	return ""
}

func (p *Pool) insert(e *entry) {
	p.byHash[e.c.Hash] = e
	p.bytes += int64(len(e.c.Tx))
	p.cost += e.c.Cost
	if !e.waiting {
		p.ready = append(p.ready, e)
		return
	}
	p.waiting = append(p.waiting, e)
	p.waitSize += int64(len(e.c.Tx))
	for _, k := range e.signers {
		p.perKey[k]++
	}
}

func (p *Pool) forget(e *entry) {
	delete(p.byHash, e.c.Hash)
	p.bytes -= int64(len(e.c.Tx))
	p.cost -= e.c.Cost
	if e.waiting {
		p.waitSize -= int64(len(e.c.Tx))
		for _, k := range e.signers {
			if p.perKey[k]--; p.perKey[k] == 0 {
				delete(p.perKey, k)
			}
		}
	}
}

// promote moves waiting transactions of the given signers that have become
// ready, until none does. Only those signers' transactions can have been
// unblocked, so an attacker's waiting transactions cost honest admissions
// nothing.
func (p *Pool) promote(signers []string) {
	unblocked := map[string]bool{}
	for _, k := range signers {
		unblocked[k] = true
	}
	for progress := true; progress && len(p.waiting) > 0; {
		progress = false
		for i := 0; i < len(p.waiting); i++ {
			e := p.waiting[i]
			if !sharesAny(e.signers, unblocked) {
				continue
			}
			res, _, err := p.pending.Add(e.c)
			if err != nil || !res.OK() {
				continue
			}
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			p.forget(e)
			e.waiting = false
			p.insert(e)
			for _, k := range e.signers {
				unblocked[k] = true
			}
			progress = true
			i--
		}
	}
}

// Committed tells the pool a block committed at height with the
// transactions whose SHA-256 hashes are given: they leave the pool, and the
// rest is checked again on the new state at the next call.
func (p *Pool) Committed(height int64, hashes [][sha256.Size]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gone := 0
	for _, h := range hashes {
		if e, ok := p.byHash[h]; ok {
			e.committed = true
			p.forget(e)
			gone++
		}
	}
	if gone > 0 {
		p.ready = slices.DeleteFunc(p.ready, func(e *entry) bool { return e.committed })
		p.waiting = slices.DeleteFunc(p.waiting, func(e *entry) bool { return e.committed })
	}
	p.stale = true
}

// Checked is the prechecked transaction the pool holds under hash, or nil.
// Its records are not kept (core.Checked.WithRecords adds them).
func (p *Pool) Checked(hash [sha256.Size]byte) *core.Checked {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.byHash[hash]; ok {
		return e.c
	}
	return nil
}

// sync rebuilds the pending state on committed state r at height when a
// block committed since it was built: every held transaction is applied
// again in order, and what no longer applies, was committed or has waited
// too long leaves.
func (p *Pool) sync(r core.Reader, height int64) error {
	if !p.stale && height == p.height {
		return nil
	}
	old := append(p.ready, p.waiting...)
	p.ready, p.waiting, p.bytes, p.cost, p.waitSize = nil, nil, 0, 0, 0
	p.byHash, p.perKey = map[[sha256.Size]byte]*entry{}, map[string]int{}
	p.pending = core.NewPending(r, p.params, height+1)
	p.height, p.stale = height, false
	for _, e := range old {
		switch {
		case e.committed:
			continue
		case e.waiting && height-e.height > p.cfg.WaitingHeights, !e.waiting && height-e.height > p.cfg.ReadyHeights:
			p.expired++
			continue
		}
		res, waiting, err := p.pending.Add(e.c)
		if err != nil {
			return err
		}
		switch {
		case res.OK():
			e.waiting = false
			p.insert(e)
		case waiting && p.roomToWait(e) == "":
			e.waiting = true
			p.insert(e)
		default:
			p.evicted++
		}
	}
	return nil
}

// Proposal returns the ready transactions, in the order they apply, on
// committed state r at height: what a proposer proposes (PrepareProposal
// still checks them against the block's budgets).
func (p *Pool) Proposal(r core.Reader, height int64) ([]*core.Checked, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.sync(r, height); err != nil {
		return nil, err
	}
	out := make([]*core.Checked, len(p.ready))
	for i, e := range p.ready {
		out[i] = e.c
	}
	return out, nil
}

// Reap returns, once each, the ready transactions that arrived by RPC and
// are not gossiped yet, up to maxBytes (0: no bound): what CometBFT sends
// to the node's peers. Waiting transactions are not gossiped until ready,
// so a flood of them costs the peers nothing.
func (p *Pool) Reap(maxBytes uint64) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]byte
	var size uint64
	for _, e := range p.ready {
		if !e.local || e.reaped || e.committed {
			continue
		}
		if maxBytes > 0 && size+uint64(len(e.c.Tx)) > maxBytes {
			break
		}
		e.reaped = true
		size += uint64(len(e.c.Tx))
		out = append(out, e.c.Tx)
	}
	return out
}

// Stats reports the pool's size.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Ready: len(p.ready), Waiting: len(p.waiting), ReadyBytes: p.bytes - p.waitSize, WaitingBytes: p.waitSize, Evicted: p.evicted, Expired: p.expired}
}

func signerKeys(c *core.Checked) []string {
	ks := c.Signers()
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

func sharesAny(keys []string, set map[string]bool) bool {
	for _, k := range keys {
		if set[k] {
			return true
		}
	}
	return false
}
