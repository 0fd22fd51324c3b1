package indexer

import (
	"context"
	"sync"
	"time"

	"github.com/byzlog/byzlog/indexer/verify"
	cmttypes "github.com/cometbft/cometbft/types"
)

// prefetchBlocks is how many blocks' data the indexer fetches at once,
// ahead of the block it publishes. Reading a block is several round trips
// to busy nodes (block, results, digest), and one at a time the indexer
// waited on them more than it worked: at closed-loop load on 2 cores it
// used a fifth of a core and fell behind. Headers are still verified one
// after another (the light client is sequential); only the data of blocks
// whose headers are verified is fetched in parallel, and published in
// height order.
const prefetchBlocks = 4

// fetching is one block's data on its way: done closes when b or err is
// set.
type fetching struct {
	height int64
	done   chan struct{}
	b      *verify.Block
	err    error
	times  stageTimes
}

// stageTimes are when a block reached each stage in the indexer.
type stageTimes struct {
	// committed is the next header's time (CometBFT's BFT time, the
	// median of the times in the votes that committed the block).
	committed, verified, fetched, sent time.Time
}

// failed is a fetching that ends the stream of blocks with err.
func failed(h int64, err error) *fetching {
	f := &fetching{height: h, done: make(chan struct{}), err: err}
	close(f.done)
	return f
}

// prefetch verifies headers from height h on, in order, waiting for the
// chain when it reaches its tip, and fetches each block's data: at the tip
// as soon as every node has the block (readEarly: its own header was
// verified with the block before), behind it once the block's header and
// the next one are verified; only data that checks against them is used.
// out receives them in height order, at most about prefetchBlocks ahead of
// the reader. It ends when ctx does, or after sending the first error, and
// waits for the fetches it started before it closes out.
func (i *Indexer) prefetch(ctx context.Context, h int64, out chan<- *fetching) {
	var fetches sync.WaitGroup
	defer func() {
		fetches.Wait()
		close(out)
	}()
	send := func(f *fetching) bool {
		select {
		case out <- f:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var tip int64
	var known *cmttypes.LightBlock // the last header verified: block h's, once h-1 is done
	for ; ; h++ {
		var early *verify.Reading
		for h >= tip { // block h needs header h+1
			t, err := i.v.Tip(ctx)
			if err != nil {
				send(failed(h, err))
				return
			}
			tip = t
			i.tip.Store(i.v.LastTip())
			i.m.tip.Set(float64(i.v.LastTip()))
			i.m.lag.Set(float64(i.v.LastTip() - max(i.acked.Load(), i.followed.Load())))
			if h < tip {
				break
			}
			if h == tip && early == nil && known != nil && known.Height == h {
				early = i.v.ReadEarly(ctx, known, &fetches)
			}
			select {
			case <-time.After(i.cfg.PollInterval):
			case <-ctx.Done():
				return
			}
		}
		lb, next, err := i.v.HeaderPair(ctx, h)
		if err != nil {
			send(failed(h, err))
			return
		}
		known = next
		f := &fetching{height: h, done: make(chan struct{}), times: stageTimes{committed: next.Time, verified: time.Now()}}
		fetches.Add(1)
		go func() {
			defer fetches.Done()
			defer close(f.done)
			f.b, f.err = i.v.Data(ctx, lb, next, early)
			f.times.fetched = time.Now()
		}()
		if !send(f) {
			return
		}
	}
}
