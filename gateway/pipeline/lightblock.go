package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cometbft/cometbft/light/provider"
	lighthttp "github.com/cometbft/cometbft/light/provider/http"
	cmttypes "github.com/cometbft/cometbft/types"
	"golang.org/x/sync/singleflight"

	"github.com/byzlog/byzlog/gateway/nodes"
)

// LightBlock returns the signed header and validator set at height (0: the
// height f+1 nodes have reached): one that f+1 nodes serve with the same
// header, with a commit that more than two thirds of that header's
// validators signed. Every producer's light client asks for every height
// it verifies a receipt against, so each height is read from the nodes once
// and then served from a cache of the last lightCacheHeights heights; one
// node's word is not cached, so a liar cannot make every client's
// verification fail for as long as the cache holds its answer. The client
// still checks the light block against what it trusts. A height up to
// lightWaitAhead above the one f+1 nodes have reported is waited for, up
// to Waits.LightWait, so the header a fresh receipt needs is served once
// f+1 nodes report its block (the block follower asks one node each
// poll_interval, and every node while a request waits) rather than when
// the client next asks.
func (g *Gateway) LightBlock(ctx context.Context, height int64) (*cmttypes.LightBlock, error) {
	if height < 0 {
		return nil, errorf(ErrInvalid, "height %d: want 0 (the latest) or a height", height)
	}
	if height == 0 {
		height = g.pool.Height()
	}
	if g.lights.cached(height) == nil {
		g.tip.waitFor(ctx, height, lightWaitAhead, g.cfg.Waits.LightWait)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return g.lights.get(ctx, height, g.metrics, func(ctx context.Context) (*cmttypes.LightBlock, error) {
		first := g.pool.Pick()
		var sources []lightSource
		for _, n := range append([]*nodes.Node{first}, g.pool.Others(first)...) {
			p := lighthttp.NewWithClient(g.pool.ChainID(), n.Client)
			sources = append(sources, lightSource{name: n.Addr, fetch: p.LightBlock})
		}
		return agreedLightBlock(ctx, g.pool.ChainID(), height, g.quorum(), sources)
	})
}

// lightWaitAhead is how far above the height f+1 nodes have reported a
// light block request waits (Waits.LightWait) rather than being answered
// OutOfRange at once: a receipt at the newest height needs the next one.
const lightWaitAhead = 2

// maxLightWaiters bounds the light block requests waiting at once; past
// it a request is answered at once (OutOfRange if its height is not there),
// as every request was before the wait, so clients cannot pin goroutines
// and timers without limit.
const maxLightWaiters = 4096

// heightWatch is the height f+1 nodes have reported committed (each
// node's last report, as the gateway's block follower asks them in turn),
// and wakes whoever waits for a height to arrive. One node reporting a
// height it has not reached moves nothing: at least one of f+1 is honest.
type heightWatch struct {
	mu      sync.Mutex
	nodes   int              // how many the gateway has; f+1 of them must agree
	reports map[string]int64 // by node: the last height it reported
	height  int64            // nodes.AgreedHeight of the reports, never lowered
	moved   chan struct{}    // closed when height rises; nil: nobody waits
	waiting int              // requests waiting, at most maxLightWaiters
}

// report records that node said it has committed h, raises the height to
// what f+1 nodes' last reports reach, and wakes the waiters if it rose.
func (w *heightWatch) report(node string, h int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reports == nil {
		w.reports = map[string]int64{}
	}
	w.reports[node] = h
	if len(w.reports) < quorum(w.nodes) {
		return
	}
	agreed := nodes.AgreedHeight(slices.Collect(maps.Values(w.reports)), w.nodes)
	if agreed <= w.height {
		return
	}
	w.height = agreed
	if w.moved != nil {
		close(w.moved)
		w.moved = nil
	}
}

// waiters is how many light block requests wait for a height.
func (w *heightWatch) waiters() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting
}

// waitFor returns once the height reaches h, ctx is done or d has passed,
// and at once when h is more than ahead above the height, no height is
// known yet or maxLightWaiters already wait. It reports whether the height
// reached h.
func (w *heightWatch) waitFor(ctx context.Context, h, ahead int64, d time.Duration) bool {
	w.mu.Lock()
	if w.waiting >= maxLightWaiters {
		w.mu.Unlock()
		return false
	}
	w.waiting++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.waiting--
		w.mu.Unlock()
	}()
	var timer *time.Timer
	for {
		w.mu.Lock()
		cur := w.height
		if cur >= h {
			w.mu.Unlock()
			return true
		}
		if cur == 0 || h > cur+ahead {
			w.mu.Unlock()
			return false
		}
		if w.moved == nil {
			w.moved = make(chan struct{})
		}
		moved := w.moved
		w.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		}
		select {
		case <-moved:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// lightCacheHeights bounds the light blocks a gateway keeps: receipts are
// checked against recent heights.
const lightCacheHeights = 256

// lightFetchTimeout bounds one read of a height from the nodes, which every
// client asking for it at once waits on.
const lightFetchTimeout = 10 * time.Second

// lightCache holds agreed light blocks by height, and makes the clients
// that ask for a height at once share one read of it.
type lightCache struct {
	mu     sync.Mutex
	blocks map[int64]*cmttypes.LightBlock
	flight singleflight.Group
}

// get returns height's light block from the cache, or from fetch, which it
// calls once for every caller asking at the same time (its context is not
// any one caller's: one giving up does not fail the others).
func (c *lightCache) get(ctx context.Context, height int64, m *Metrics, fetch func(context.Context) (*cmttypes.LightBlock, error)) (*cmttypes.LightBlock, error) {
	if lb := c.cached(height); lb != nil {
		m.lightBlocks.WithLabelValues("cache").Inc()
		return lb, nil
	}
	ch := c.flight.DoChan(strconv.FormatInt(height, 10), func() (any, error) {
		if lb := c.cached(height); lb != nil {
			return lb, nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lightFetchTimeout)
		defer cancel()
		m.lightBlocks.WithLabelValues("nodes").Inc()
		lb, err := fetch(fctx)
		if err != nil {
			return nil, err
		}
		c.put(lb)
		return lb, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*cmttypes.LightBlock), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *lightCache) cached(height int64) *cmttypes.LightBlock {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocks[height]
}

// put keeps lb, dropping the lowest height when the cache is full.
func (c *lightCache) put(lb *cmttypes.LightBlock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blocks == nil {
		c.blocks = map[int64]*cmttypes.LightBlock{}
	}
	if len(c.blocks) >= lightCacheHeights {
		low := lb.Height
		for h := range c.blocks {
			low = min(low, h)
		}
		if low == lb.Height {
			return // older than everything kept
		}
		delete(c.blocks, low)
	}
	c.blocks[lb.Height] = lb
}

// lightSource is one node's light blocks.
type lightSource struct {
	name  string
	fetch func(ctx context.Context, height int64) (*cmttypes.LightBlock, error)
}

// agreedLightBlock asks the sources in turn for the light block at height
// until need of them serve the same header, and returns one of theirs
// whose commit more than two thirds of that header's validators signed
// (nodes may hold different commits for the same block). need is f+1: at
// least one of them is honest, so the header is the chain's, and so are
// its validators. It answers ErrOutOfRange while too few nodes have the
// height yet to agree.
func agreedLightBlock(ctx context.Context, chainID string, height int64, need int, sources []lightSource) (*cmttypes.LightBlock, error) {
	votes := map[string][]*cmttypes.LightBlock{}
	best, notYet, pruned := 0, 0, 0
	unsigned := false // need agreed on a header, none with a commit that verifies
	var errs []error
	for _, s := range sources {
		lb, err := s.fetch(ctx, height)
		if err == nil {
			err = checkLightBlock(lb, chainID, height)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			switch {
			case errors.Is(err, provider.ErrHeightTooHigh):
				notYet++
			case errors.Is(err, provider.ErrLightBlockNotFound):
				// Below the node's lowest height: pruned.
				pruned++
			}
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			continue
		}
		k := string(lb.Hash())
		votes[k] = append(votes[k], lb)
		best = max(best, len(votes[k]))
		if len(votes[k]) < need {
			continue
		}
		for _, c := range votes[k] {
			if c.ValidatorSet.VerifyCommitLight(chainID, c.Commit.BlockID, c.Height, c.Commit) == nil {
				return c, nil
			}
		}
		unsigned = true
	}
	switch {
	case pruned >= need:
		// At least one honest node says the height is gone.
		return nil, errorf(ErrPruned, "height %d is pruned: %d nodes no longer serve it (%v); a client whose root of trust is older needs a recent one",
			height, pruned, errors.Join(errs...))
	case unsigned:
		code := ErrUnavailable
		if notYet > 0 {
			code = ErrOutOfRange // a node that has the height later may hold a full commit
		}
		return nil, errorf(code, "height %d: %d or more nodes agree on its header, but none serves a commit signed by more than two thirds of its validators", height, need)
	case len(votes) == 0 && notYet+pruned == len(errs) && notYet > 0:
		return nil, errorf(ErrOutOfRange, "no node has a signed header at height %d yet", height)
	case best+notYet >= need && notYet > 0:
		return nil, errorf(ErrOutOfRange, "height %d: %d of %d nodes serve the same signed header, %d must; the others do not have it yet", height, best, len(sources), need)
	case len(votes) == 0:
		return nil, errorf(ErrUnavailable, "no node served the light block at height %d: %v", height, errors.Join(errs...))
	}
	return nil, errorf(ErrUnavailable, "height %d: no %d of %d nodes served the same signed header (%d different ones; %v)", height, need, len(sources), len(votes), errors.Join(errs...))
}

// checkLightBlock checks lb's form: it is for height and hangs together
// (the commit is for the header, the validators hash to its validators
// hash).
func checkLightBlock(lb *cmttypes.LightBlock, chainID string, height int64) error {
	if lb == nil || lb.SignedHeader == nil || lb.Header == nil || lb.Commit == nil || lb.ValidatorSet == nil {
		return errors.New("an incomplete light block")
	}
	if lb.Height != height {
		return fmt.Errorf("asked for height %d, got %d", height, lb.Height)
	}
	return lb.ValidateBasic(chainID)
}
