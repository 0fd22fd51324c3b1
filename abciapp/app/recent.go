package app

import (
	"crypto/sha256"
	"sync"
)

// maxRecentTxs is how many committed transactions recentTxs remembers:
// at ~10 bundles a block, the last ~10,000 blocks, in ~10 MiB.
const maxRecentTxs = 100_000

// recentTxs remembers where the transactions this node committed since it
// started went (wire.PathTx): the lookup a gateway makes when a node
// answers a transaction it is sent with "already seen" and it may have
// committed before the gateway was watching. CometBFT's transaction index
// did this, at the cost of a second copy of every transaction on disk and
// a quarter of each node's CPU in compactions (docs/benchmarks.md); nodes
// now run without it. It is node-local, not replicated state: a node that
// restarts or joins by state sync forgets what came before, as CometBFT's
// seen-transaction cache does, and any answer is only a claim the gateway
// checks against a confirmed block.
type recentTxs struct {
	mu   sync.Mutex
	at   map[[sha256.Size]byte]txAt
	ring []recentTx // the oldest at next, once full
	next int
}

// txAt is where a transaction committed.
type txAt struct {
	height int64
	index  uint32
}

type recentTx struct {
	hash [sha256.Size]byte
	at   txAt
}

// committed records the transactions of the block committed at height,
// in block order, forgetting the oldest past maxRecentTxs.
func (r *recentTxs) committed(height int64, hashes [][sha256.Size]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[[sha256.Size]byte]txAt{}
	}
	for i, h := range hashes {
		e := recentTx{hash: h, at: txAt{height: height, index: uint32(i)}}
		if len(r.ring) < maxRecentTxs {
			r.ring = append(r.ring, e)
		} else {
			old := r.ring[r.next]
			// The same bytes may commit twice; only the last place is kept.
			if r.at[old.hash] == old.at {
				delete(r.at, old.hash)
			}
			r.ring[r.next] = e
			r.next = (r.next + 1) % maxRecentTxs
		}
		r.at[h] = e.at
	}
}

// find returns where the transaction with hash last committed.
func (r *recentTxs) find(hash [sha256.Size]byte) (txAt, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[hash]
	return at, ok
}
