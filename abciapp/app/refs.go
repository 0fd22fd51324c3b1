package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/bundles"
	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/mempool"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Bundles out of consensus (rules version 3; docs/design.md). A proposer
// puts a 34-byte reference (wire.NewBundleRef) in the block for each
// produce bundle of at least wire.MinBundleRefBytes: the mempool has already carried
// the bundle to every validator, so the block need not carry it again.
// ProcessProposal votes for a block only once it holds every referenced
// bundle durably (bundles.Store.Propose, synced), fetching what gossip did
// not bring from its peers; so at least f+1 correct validators hold the
// bundles of every decided block, and FinalizeBlock on any node fetches
// what it lacks until one of them answers. Core never sees a reference: it
// executes the resolved transactions, the same bytes a block of version 2
// would have carried.

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

// toRefs replaces every produce bundle of at least
// wire.MinBundleRefBytes that pool admitted with its reference, and
// remembers what it referenced for the proposer's own ProcessProposal and
// its peers' fetches. Everything else is carried: an admin request or an
// offset commit is proven to its client by its inclusion in the block's
// data hash, over its own bytes.
func (a *App) toRefs(height int64, txs [][]byte, pool *mempool.Pool) [][]byte {
	out := make([][]byte, len(txs))
	for i, tx := range txs {
		out[i] = tx
		if len(tx) < wire.MinBundleRefBytes || pool == nil {
			continue
		}
		sum := sha256.Sum256(tx)
		if c := pool.Checked(sum); c == nil || !c.IsBundle() {
			continue
		}
		a.proposed.add(height, sum, tx)
		out[i] = wire.NewBundleRef(sum)
	}
	return out
}

// carriedWithin is txs cut from the end to fit maxBytes as the block
// carries them. PrepareRefs counted each bundle as its reference; one the
// pool let go of meanwhile is carried whole, and a proposal past
// block.max_bytes would fail. Cutting the end leaves every transaction
// kept valid: none depends on a later one.
func carriedWithin(txs [][]byte, maxBytes int64) [][]byte {
	var size int64
	for i, tx := range txs {
		if size += core.TxWireSize(tx); size > maxBytes {
			return txs[:i]
		}
	}
	return txs
}

// refsName checks what a block's references resolved to: each a produce
// bundle of at least wire.MinBundleRefBytes (a chain rule from rules
// version 3), checked[i] being the precheck of resolved transaction i.
func refsName(txs [][]byte, checked []*core.Checked) error {
	for i, tx := range txs {
		if _, ok := wire.BundleRef(tx); !ok {
			continue
		}
		if c := checked[i]; !c.IsBundle() || len(c.Tx) < wire.MinBundleRefBytes {
			return fmt.Errorf("tx %d references a transaction of %d bytes that is not a produce bundle of at least %d bytes (bundle: %v)", i, len(c.Tx), wire.MinBundleRefBytes, c.IsBundle())
		}
	}
	return nil
}

// proposals are the bundles this node referenced in its own proposals of
// one height (its mempool may drop one before the block commits), kept
// until it proposes at another height.
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
// ProcessProposal's cache, the mempool, and with all its own proposals and
// the bundle store too.
func (a *App) local(h bundles.Hash, all bool) ([]byte, error) {
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
	if !all {
		return nil, nil
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
	budget  int64
}

// refBudget is the most bytes of bundles a block of rules version 3 may
// reference: wire.MaxBlockBundleBytes, or the chain's
// max_block_uncompressed_bytes if that is lower.
func refBudget(params *byzlogv1.ChainParams) int64 {
	b := int64(wire.MaxBlockBundleBytes)
	if l := int64(params.GetLimits().GetMaxBlockUncompressedBytes()); l > 0 && l < b {
		b = l
	}
	return b
}

// blockRefs returns the references among txs, in order, refusing a block
// that references one bundle twice or more bundles than could fit its
// budget (each names at least wire.MinBundleRefBytes): what checking a
// proposal's references may cost is bounded before any is looked up.
func blockRefs(txs [][]byte, budget int64) ([]bundles.Hash, error) {
	var refs []bundles.Hash
	seen := map[bundles.Hash]bool{}
	for i, tx := range txs {
		h, ok := wire.BundleRef(tx)
		if !ok {
			continue
		}
		if seen[h] {
			return nil, fmt.Errorf("tx %d references bundle %X a second time", i, h[:8])
		}
		seen[h] = true
		refs = append(refs, h)
		if int64(len(refs))*wire.MinBundleRefBytes > budget {
			return nil, fmt.Errorf("more than %d references: bundles of at least %d bytes each cannot fit the %d bytes a block may reference", len(refs)-1, wire.MinBundleRefBytes, budget)
		}
	}
	return refs, nil
}

// add puts bundle b in place of reference i, within the budget.
func (r *resolved) add(i int, b []byte) error {
	r.txs[i] = b
	if r.bytes += int64(len(b)); r.bytes > r.budget {
		return fmt.Errorf("the block references more than the %d bytes of bundles a block may", r.budget)
	}
	return nil
}

// resolve replaces every reference in txs with its bundle: from what this
// node holds, then, after waiting up to gossipWait for the mempool, from
// its peers. With a deadline (ProcessProposal) it gives up then with
// errMissing; without one (FinalizeBlock: the block is decided, so f+1
// correct validators hold every bundle) it asks until one answers or the
// app closes. The references are checked first (blockRefs), and the
// bundles' bytes are held to refBudget as they arrive: a proposer cannot
// make a validator look up, fetch or hold more than a block may reference.
func (a *App) resolve(ctx context.Context, height int64, txs [][]byte, deadline time.Time) (*resolved, error) {
	params, _, err := a.chain()
	if err != nil {
		return nil, err
	}
	r := &resolved{txs: make([][]byte, len(txs)), budget: refBudget(params)}
	if r.refs, err = blockRefs(txs, r.budget); err != nil {
		return nil, err
	}
	var missing []int
	for i, tx := range txs {
		h, ok := wire.BundleRef(tx)
		if !ok {
			r.txs[i] = tx
			continue
		}
		b, err := a.local(h, true)
		if err != nil {
			return nil, err
		}
		if b == nil {
			missing = append(missing, i)
			continue
		}
		if err := r.add(i, b); err != nil {
			return nil, err
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
	for attempt := 0; ; attempt++ {
		if missing, err = a.fill(r, txs, missing); err != nil || len(missing) == 0 {
			return r, err
		}
		now := time.Now()
		if !deadline.IsZero() && now.After(deadline) {
			return nil, fmt.Errorf("%w: %d of block %d's references after %s", errMissing, len(missing), height, a.refuseAfter)
		}
		if now.After(gossipUntil) {
			// Failed fetches are logged once a proposal, and once in a
			// hundred tries for a decided block.
			loud := !deadline.IsZero() || attempt%100 == 0
			if missing, err = a.fetch(ctx, r, txs, missing, deadline, height, loud); err != nil || len(missing) == 0 {
				return r, err
			}
			if deadline.IsZero() && attempt%100 == 0 {
				a.log.Warn().Int64("height", height).Int("missing", len(missing)).Int("peers", len(a.peers)).
					Msg("a decided block references bundles no peer has served yet; asking again (with no --peer-rpc, only gossip can bring them)")
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("block %d: %w", height, ctx.Err())
		case <-a.done:
			return nil, errClosed
		case <-time.After(resolvePoll(now, gossipUntil)):
		}
	}
}

// resolvePoll is how long to wait before looking again: briefly while
// gossip may still bring a bundle, longer between rounds of fetches.
func resolvePoll(now, gossipUntil time.Time) time.Duration {
	if now.Before(gossipUntil) {
		return 5 * time.Millisecond
	}
	return 200 * time.Millisecond
}

// fill looks again for the missing references where gossip brings them
// (the mempool), and returns those still missing.
func (a *App) fill(r *resolved, txs [][]byte, missing []int) ([]int, error) {
	var still []int
	for _, i := range missing {
		h, _ := wire.BundleRef(txs[i])
		b, err := a.local(h, false)
		if err != nil {
			return nil, err
		}
		if b == nil {
			still = append(still, i)
			continue
		}
		if err := r.add(i, b); err != nil {
			return nil, err
		}
	}
	return still, nil
}

// fetchGroup is how many bundles one call to a peer asks for: the budget
// is checked between calls, so a peer's answers overshoot it by at most
// fetchGroup bundles of wire.MaxTxBytes.
const fetchGroup = 16

// fetch asks the peers, each in turn from a random one, for the missing
// bundles, keeping only answers whose SHA-256 is their reference, and
// returns the references still missing. With a deadline each peer gets an
// equal share of the time left (at least minPeerShare), so one slow peer
// cannot use it all.
func (a *App) fetch(ctx context.Context, r *resolved, txs [][]byte, missing []int, deadline time.Time, height int64, loud bool) ([]int, error) {
	n := len(a.peers)
	first := 0
	if n > 1 {
		first = rand.IntN(n)
	}
	for k := 0; k < n && len(missing) > 0; k++ {
		p := a.peers[(first+k)%n]
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if !deadline.IsZero() {
			share := max(time.Until(deadline)/time.Duration(n-k), minPeerShare)
			until := time.Now().Add(share)
			if deadline.Before(until) {
				until = deadline
			}
			cctx, cancel = context.WithDeadline(ctx, until)
		}
		var err error
		missing, err = a.fetchFrom(cctx, p, r, txs, missing, height, loud)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return missing, nil
}

// minPeerShare is the least time one peer is given to answer.
const minPeerShare = 300 * time.Millisecond

// fetchFrom asks one peer for the missing bundles, fetchGroup at a time,
// and returns those it did not serve.
func (a *App) fetchFrom(ctx context.Context, p BundlePeer, r *resolved, txs [][]byte, missing []int, height int64, loud bool) ([]int, error) {
	var still []int
	var served, wrong int
	for start := 0; start < len(missing); start += fetchGroup {
		group := missing[start:min(start+fetchGroup, len(missing))]
		want := make([]bundles.Hash, len(group))
		for j, i := range group {
			want[j], _ = wire.BundleRef(txs[i])
		}
		got, err := p.Bundles(ctx, want)
		if err != nil {
			if loud {
				a.log.Warn().Err(err).Str("peer", p.String()).Int64("height", height).Int("wanted", len(want)).Msg("a peer did not serve the bundles asked for (or served wrong ones); asking the next")
			}
			return append(still, missing[start:]...), nil
		}
		for j, i := range group {
			var b []byte
			if j < len(got) {
				b = got[j]
			}
			switch {
			case b == nil:
				still = append(still, i)
				continue
			case sha256.Sum256(b) != want[j]:
				wrong++
				still = append(still, i)
				continue
			}
			served++
			if r.fetched == nil {
				r.fetched = map[bundles.Hash][]byte{}
			}
			r.fetched[want[j]] = b
			if err := r.add(i, b); err != nil {
				return nil, err
			}
		}
	}
	if wrong > 0 {
		a.log.Warn().Str("peer", p.String()).Int64("height", height).Int("wrong", wrong).Msg("a peer served bundles that do not hash to their references; refused")
	}
	if served > 0 {
		a.log.Info().Str("peer", p.String()).Int64("height", height).Int("bundles", served).Msg("fetched bundles this node lacked")
	}
	return still, nil
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
		b, err := a.local(bundles.Hash(h), true)
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
