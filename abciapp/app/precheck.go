package app

import (
	"bytes"
	"crypto/sha256"
	"sync"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/mempool"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// maxPrecheckedCost bounds what the prechecked cache holds: the inflated
// cost (core.Checked.Cost) of the proposals of one height. A height's
// proposals are one block per round, so an honest chain stays far below
// it; rounds beyond it are prechecked again in FinalizeBlock.
const maxPrecheckedCost = 512 << 20

// prechecked keeps the transactions ProcessProposal prechecked, records
// included, for FinalizeBlock of the same height: every signature of a
// decided block is then verified and its records decoded once, not twice.
// core.Precheck is a pure function of the chain's params (fixed after
// InitChain) and the transaction's bytes, and neither Verify nor Execute
// changes what it returns, so a cached result is the one FinalizeBlock
// would compute. A block this node never saw proposed (block sync, replay,
// a round it missed) is prechecked as before.
//
// What is not cached yet is taken from the mempool when it holds the
// transaction: admission already decoded it and verified its signatures
// under the same params, so only its records are inflated and decoded
// again (core.Checked.WithRecords). A bundle normally reaches a validator's
// mempool (by RPC or gossip) before its block does, so ProcessProposal
// seldom verifies a signature a second time; one it never admitted is
// prechecked in full.
type prechecked struct {
	mu     sync.Mutex
	height int64
	params *byzlogv1.ChainParams
	byHash map[[sha256.Size]byte]*core.Checked
	cost   int64
	hits   int64 // transactions taken from the cache, for tests
	pooled int64 // transactions taken from the mempool, for tests
}

// check prechecks the transactions of a block at height, records kept,
// taking what the cache holds for that height and params, then what pool
// admitted; with keep, what it computes is cached for a later call at the
// same height. committed, when not nil, is the block as committed and txs
// the same with its references resolved (rules version 3; nil before, when
// a reference is just a malformed transaction): a resolved bundle's
// SHA-256 is its reference, which every resolved bundle was checked
// against or kept by (App.local, fetch), so it is not hashed again.
func (p *prechecked) check(params *byzlogv1.ChainParams, pool *mempool.Pool, height int64, txs, committed [][]byte, keep bool) []*core.Checked {
	out := make([]*core.Checked, len(txs))
	sums := make([][sha256.Size]byte, len(txs))
	p.mu.Lock()
	if p.height != height || p.params != params {
		p.reset(height, params)
	}
	var missing int
	for i, tx := range txs {
		if ref, ok := refOf(committed, i); ok {
			sums[i] = ref
		} else {
			sums[i] = sha256.Sum256(tx)
		}
		if c, ok := p.byHash[sums[i]]; ok && bytes.Equal(c.Tx, tx) {
			out[i] = c
			p.hits++
			continue
		}
		missing++
	}
	p.mu.Unlock()
	if missing == 0 {
		return out
	}
	// The expensive part, outside the lock.
	var fromPool int64
	for i, tx := range txs {
		if out[i] != nil {
			continue
		}
		if c := admitted(pool, sums[i], tx); c != nil {
			out[i] = c.WithRecords(params)
			fromPool++
			continue
		}
		out[i] = core.PrecheckSum(params, tx, sums[i], true)
	}
	if fromPool > 0 {
		p.mu.Lock()
		p.pooled += fromPool
		p.mu.Unlock()
	}
	if !keep {
		return out
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.height != height || p.params != params {
		return out
	}
	for _, c := range out {
		if _, ok := p.byHash[c.Hash]; ok {
			continue
		}
		if p.cost+c.Cost > maxPrecheckedCost {
			break
		}
		p.byHash[c.Hash] = c
		p.cost += c.Cost
	}
	return out
}

// done drops what the cache holds once height is finalized.
func (p *prechecked) done(height int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.height <= height {
		p.reset(height+1, p.params)
	}
}

func (p *prechecked) reset(height int64, params *byzlogv1.ChainParams) {
	p.height, p.params, p.byHash, p.cost = height, params, map[[sha256.Size]byte]*core.Checked{}, 0
}

// admitted is the pool's precheck of tx, whose hash is sum, or nil. The
// bytes are compared as well as the hash: a few hundred KiB of memcmp
// against trusting that no two transactions share a SHA-256.
func admitted(pool *mempool.Pool, sum [sha256.Size]byte, tx []byte) *core.Checked {
	if pool == nil {
		return nil
	}
	if c := pool.Checked(sum); c != nil && bytes.Equal(c.Tx, tx) {
		return c
	}
	return nil
}

// refOf is the reference committed[i] is, if it is one.
func refOf(committed [][]byte, i int) ([sha256.Size]byte, bool) {
	if i >= len(committed) {
		return [sha256.Size]byte{}, false
	}
	return wire.BundleRef(committed[i])
}
