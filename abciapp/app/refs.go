package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/bundles"
	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Bundles out of consensus (rules version 3; docs/design.md). A proposer
// puts a 34-byte reference (wire.NewBundleRef) in the block for each
// transaction of at least refMinBytes: the mempool has already carried
// the bundle to every validator, so the block need not carry it again.
// ProcessProposal votes for a block only once it holds every referenced
// bundle durably (bundles.Store.Propose, synced), fetching what gossip did
// not bring from its peers; so at least f+1 correct validators hold the
// bundles of every decided block, and FinalizeBlock on any node fetches
// what it lacks until one of them answers. Core never sees a reference: it
// executes the resolved transactions, the same bytes a block of version 2
// would have carried.

// refMinBytes is the smallest transaction a proposer references rather
// than carries: below it the 34-byte reference saves little, and every
// reference is a lookup for each validator (and, for one that has not
// received the bundle yet, a wait).
const refMinBytes = 1024

// errMissing means a referenced bundle could not be found in time.
var errMissing = errors.New("a referenced bundle is missing")

// refsOn reports whether the block at height may reference bundles: its
// rules version, from committed state, is RefsRulesVersion or later.
func (a *App) refsOn(height int64) (bool, error) {
	var v uint64
	err := a.read(func() (err error) {
		v, err = core.RulesAt(a.store, height)
		return err
	})
	return v >= core.RefsRulesVersion, err
}

// toRefs replaces every transaction of at least refMinBytes with its
// reference, and remembers what it referenced for the proposer's own
// ProcessProposal and its peers' fetches.
func (a *App) toRefs(height int64, txs [][]byte) [][]byte {
	out := make([][]byte, len(txs))
	for i, tx := range txs {
		if len(tx) < refMinBytes {
			out[i] = tx
			continue
		}
		sum := sha256.Sum256(tx)
		a.proposed.add(height, sum, tx)
		out[i] = wire.NewBundleRef(sum)
	}
	return out
}

// proposals are the bundles this node referenced in its own proposals of
// one height (a Byzantine-proposer failpoint may reference ones its
// mempool never held), kept until the height is finalized.
type proposals struct {
	mu     sync.Mutex
	height int64
	byHash map[bundles.Hash][]byte
}

func (p *proposals) add(height int64, h bundles.Hash, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.height != height || p.byHash == nil {
		p.height, p.byHash = height, map[bundles.Hash][]byte{}
	}
	p.byHash[h] = b
}

func (p *proposals) get(h bundles.Hash) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byHash[h]
}

// local returns the bundle whose hash is h if this node holds it: in
// ProcessProposal's cache, the mempool, its own proposals or the bundle
// store.
func (a *App) local(h bundles.Hash) ([]byte, error) {
	a.checked.mu.Lock()
	c, ok := a.checked.byHash[h]
	a.checked.mu.Unlock()
	if ok {
		return c.Tx, nil
	}
	a.mu.RLock()
	pool := a.pool
	a.mu.RUnlock()
	if pool != nil {
		if c := pool.Checked(h); c != nil {
			return c.Tx, nil
		}
	}
	if b := a.proposed.get(h); b != nil {
		return b, nil
	}
	return a.bundles.Get(h)
}

// resolved is a block's transactions with its references resolved.
type resolved struct {
	txs     [][]byte
	refs    []bundles.Hash          // the block's references, in order
	fetched map[bundles.Hash][]byte // what came from peers
	bytes   int64
}

// resolve replaces every reference in txs with its bundle: from what this
// node holds, then, after waiting up to gossipWait for the mempool, from
// its peers. With a deadline (ProcessProposal) it gives up then with
// errMissing; without one (FinalizeBlock: the block is decided, so f+1
// correct validators hold every bundle) it asks until one answers or the
// app closes. The bundles' total size is bounded by the chain's
// max_block_uncompressed_bytes: a proposer cannot make validators fetch
// more than a block may hold.
func (a *App) resolve(ctx context.Context, height int64, txs [][]byte, deadline time.Time) (*resolved, error) {
	params, _, err := a.chain()
	if err != nil {
		return nil, err
	}
	limit := int64(params.Limits.GetMaxBlockUncompressedBytes())
	r := &resolved{txs: make([][]byte, len(txs))}
	var missing []int
	for i, tx := range txs {
		h, ok := wire.BundleRef(tx)
		if !ok {
			r.txs[i] = tx
			continue
		}
		r.refs = append(r.refs, h)
		b, err := a.local(h)
		if err != nil {
			return nil, err
		}
		if b == nil {
			missing = append(missing, i)
			continue
		}
		r.txs[i] = b
		if r.bytes += int64(len(b)); limit > 0 && r.bytes > limit {
			return nil, fmt.Errorf("block %d references more than max_block_uncompressed_bytes (%d) of bundles", height, limit)
		}
	}
	if len(missing) == 0 {
		return r, nil
	}
	// Gossip first: a correct proposer references only what it admitted,
	// and its mempool reaps it to every peer.
	gossipUntil := time.Now().Add(a.gossipWait)
	if !deadline.IsZero() && deadline.Before(gossipUntil) {
		gossipUntil = deadline
	}
	for attempt := 0; len(missing) > 0; attempt++ {
		var err error
		if missing, err = a.fill(r, txs, missing, limit, height); err != nil {
			return nil, err
		}
		if len(missing) == 0 {
			break
		}
		now := time.Now()
		if !deadline.IsZero() && now.After(deadline) {
			return nil, fmt.Errorf("%w: %d of block %d's references after %s", errMissing, len(missing), height, a.refuseAfter)
		}
		if now.After(gossipUntil) {
			// Failed fetches are logged once a proposal, and once in a
			// hundred tries for a decided block.
			if err := a.fetch(ctx, r, txs, missing, deadline, limit, height, deadline.IsZero() && attempt%100 != 0); err != nil {
				return nil, err
			}
			if missing, err = a.fill(r, txs, missing, limit, height); err != nil {
				return nil, err
			}
			if len(missing) > 0 && deadline.IsZero() && attempt%100 == 0 {
				a.log.Warn().Int64("height", height).Int("missing", len(missing)).Int("peers", len(a.peers)).
					Msg("a decided block references bundles no peer has served yet; asking again (with no --peer-rpc, only gossip can bring them)")
			}
		}
		if len(missing) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("block %d: %w", height, ctx.Err())
		case <-a.done:
			return nil, errClosed
		case <-time.After(resolvePoll(now, gossipUntil)):
		}
	}
	return r, nil
}

// resolvePoll is how long to wait before looking again: briefly while
// gossip may still bring a bundle, longer between rounds of fetches.
func resolvePoll(now, gossipUntil time.Time) time.Duration {
	if now.Before(gossipUntil) {
		return 5 * time.Millisecond
	}
	return 200 * time.Millisecond
}

// fill looks again, locally, for the missing references, and returns
// those still missing.
func (a *App) fill(r *resolved, txs [][]byte, missing []int, limit int64, height int64) ([]int, error) {
	var still []int
	for _, i := range missing {
		if r.txs[i] != nil {
			continue
		}
		h, _ := wire.BundleRef(txs[i])
		b, err := a.local(h)
		if err != nil {
			return nil, err
		}
		if b == nil {
			still = append(still, i)
			continue
		}
		r.txs[i] = b
		if r.bytes += int64(len(b)); limit > 0 && r.bytes > limit {
			return nil, fmt.Errorf("block %d references more than max_block_uncompressed_bytes (%d) of bundles", height, limit)
		}
	}
	return still, nil
}

// fetch asks each peer in turn for the missing bundles, keeping only
// answers whose SHA-256 is their reference.
func (a *App) fetch(ctx context.Context, r *resolved, txs [][]byte, missing []int, deadline time.Time, limit int64, height int64, quiet bool) error {
	for _, p := range a.peers {
		var want []bundles.Hash
		var at []int
		for _, i := range missing {
			if r.txs[i] == nil {
				h, _ := wire.BundleRef(txs[i])
				want = append(want, h)
				at = append(at, i)
			}
		}
		if len(want) == 0 {
			return nil
		}
		cctx := ctx
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			cctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		got, err := p.Bundles(cctx, want)
		if err != nil {
			if !quiet {
				a.log.Warn().Err(err).Str("peer", p.String()).Int64("height", height).Int("wanted", len(want)).Msg("a peer did not serve the bundles asked for (or served wrong ones); asking the next")
			}
			continue
		}
		var served, wrong int
		for j, b := range got {
			if j >= len(want) || b == nil {
				continue
			}
			if sha256.Sum256(b) != want[j] {
				wrong++
				continue
			}
			served++
			i := at[j]
			r.txs[i] = b
			if r.fetched == nil {
				r.fetched = map[bundles.Hash][]byte{}
			}
			r.fetched[want[j]] = b
			if r.bytes += int64(len(b)); limit > 0 && r.bytes > limit {
				return fmt.Errorf("block %d references more than max_block_uncompressed_bytes (%d) of bundles", height, limit)
			}
		}
		if wrong > 0 {
			a.log.Warn().Str("peer", p.String()).Int64("height", height).Int("wrong", wrong).Msg("a peer served bundles that do not hash to their references; refused")
		}
		if served > 0 {
			a.log.Info().Str("peer", p.String()).Int64("height", height).Int("bundles", served).Msg("fetched bundles this node lacked")
		}
	}
	return nil
}

// persist writes the block's resolved bundles the store lacks, synced,
// before ProcessProposal accepts: the vote promises the data.
func (a *App) persist(height int64, r *resolved, txs [][]byte) error {
	var hashes []bundles.Hash
	var bs [][]byte
	for i, tx := range txs {
		h, ok := wire.BundleRef(tx)
		if !ok {
			continue
		}
		has, err := a.bundles.Has(h)
		if err != nil {
			return err
		}
		if !has {
			hashes = append(hashes, h)
			bs = append(bs, r.txs[i])
		}
	}
	if len(hashes) == 0 {
		return nil
	}
	return a.bundles.Propose(height, hashes, bs)
}

// queryBundles answers wire.PathBundles: the bundles named, from what this
// node holds, each empty when not held or past the answer's byte bound.
func (a *App) queryBundles(data []byte) *abci.ResponseQuery {
	refuse := func(format string, args ...any) *abci.ResponseQuery {
		return &abci.ResponseQuery{Code: uint32(wire.CodeBadQuery), Log: fmt.Sprintf(format, args...), Codespace: wire.Codespace}
	}
	var req byzlogv1.BundlesRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return refuse("%s takes a byzlog.v1.BundlesRequest: %v", wire.PathBundles, err)
	}
	if len(req.Hashes) > wire.MaxBundlesPerQuery {
		return refuse("%s: %d hashes, at most %d per query", wire.PathBundles, len(req.Hashes), wire.MaxBundlesPerQuery)
	}
	out := &byzlogv1.Bundles{Bundles: make([][]byte, len(req.Hashes))}
	size := 0
	for i, h := range req.Hashes {
		if len(h) != sha256.Size {
			return refuse("%s: hash %d is %d bytes, a SHA-256 is %d", wire.PathBundles, i, len(h), sha256.Size)
		}
		b, err := a.local(bundles.Hash(h))
		if err != nil {
			return &abci.ResponseQuery{Code: uint32(wire.CodeInternal), Log: err.Error(), Codespace: wire.Codespace}
		}
		if b == nil {
			continue
		}
		if size += len(b); size > wire.MaxBundlesBytes {
			break
		}
		out.Bundles[i] = b
	}
	if l := lie(out); l != nil {
		out = l
	}
	value, err := proto.Marshal(out)
	if err != nil {
		return &abci.ResponseQuery{Code: uint32(wire.CodeInternal), Log: err.Error(), Codespace: wire.Codespace}
	}
	return &abci.ResponseQuery{Value: value}
}
