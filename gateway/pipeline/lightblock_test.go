package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cometbft/cometbft/light/provider"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	cmtversion "github.com/cometbft/cometbft/proto/tendermint/version"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/cometbft/cometbft/version"
)

const lightChainID = "light-test"

// signedLightBlock is height's light block of a chain of validators
// (vals, privs), with appHash in its header, signed by every one.
func signedLightBlock(t *testing.T, vals *cmttypes.ValidatorSet, privs []cmttypes.PrivValidator, height int64, appHash byte) *cmttypes.LightBlock {
	t.Helper()
	h := &cmttypes.Header{Version: cmtversion.Consensus{Block: version.BlockProtocol}, ChainID: lightChainID, Height: height,
		Time: time.Unix(1_700_000_000, 0).UTC(), ValidatorsHash: vals.Hash(), NextValidatorsHash: vals.Hash(),
		AppHash: bytes.Repeat([]byte{appHash}, 32), ProposerAddress: vals.Validators[0].Address}
	id := cmttypes.BlockID{Hash: h.Hash(), PartSetHeader: cmttypes.PartSetHeader{Total: 1, Hash: bytes.Repeat([]byte{1}, 32)}}
	vs := cmttypes.NewVoteSet(lightChainID, height, 0, cmtproto.PrecommitType, vals)
	ec, err := cmttypes.MakeExtCommit(id, height, 0, vs, privs, time.Unix(1_700_000_001, 0).UTC(), false)
	if err != nil {
		t.Fatal(err)
	}
	return &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: h, Commit: ec.ToCommit()}, ValidatorSet: vals}
}

// source answers lb, or err, and counts the calls.
func source(name string, lb *cmttypes.LightBlock, err error, calls *atomic.Int64) lightSource {
	return lightSource{name: name, fetch: func(context.Context, int64) (*cmttypes.LightBlock, error) {
		calls.Add(1)
		return lb, err
	}}
}

// TestAgreedLightBlock: a light block is served only once f+1 nodes serve
// the same header with a commit its validators signed; one node's header,
// however well signed by validators it made up, is not.
func TestAgreedLightBlock(t *testing.T) {
	vals, privs := cmttypes.RandValidatorSet(4, 10)
	good := signedLightBlock(t, vals, privs, 5, 7)
	// A liar's chain: its own validators, all signing a header of its own.
	fakeVals, fakePrivs := cmttypes.RandValidatorSet(4, 10)
	forged := signedLightBlock(t, fakeVals, fakePrivs, 5, 9)
	// The real header with a commit one validator signed: not enough.
	thinCommit := *good.Commit
	thinCommit.Signatures = append([]cmttypes.CommitSig(nil), good.Commit.Signatures...)
	for i := 1; i < len(thinCommit.Signatures); i++ {
		thinCommit.Signatures[i] = cmttypes.NewCommitSigAbsent()
	}
	pruned := &cmttypes.LightBlock{} // marks a node that no longer has the height
	thin := &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: good.Header, Commit: &thinCommit}, ValidatorSet: vals}
	for _, tc := range []struct {
		name    string
		serve   []*cmttypes.LightBlock // nil: not there yet
		want    *cmttypes.LightBlock
		wantErr string
		asked   int64
		kind    error // of the error: OutOfRange makes a client ask again
	}{
		{"two honest nodes", []*cmttypes.LightBlock{good, good, good, good}, good, "", 2, nil},
		{"a liar first", []*cmttypes.LightBlock{forged, good, good, good}, good, "", 3, nil},
		{"a liar alone with the height", []*cmttypes.LightBlock{forged, nil, nil, nil}, nil, "1 of 4 nodes serve the same signed header", 4, ErrOutOfRange},
		{"a liar and one honest node", []*cmttypes.LightBlock{forged, good, nil, nil}, nil, "1 of 4 nodes serve the same signed header", 4, ErrOutOfRange},
		{"one node has it so far", []*cmttypes.LightBlock{good, nil, nil, nil}, nil, "1 of 4 nodes serve the same signed header", 4, ErrOutOfRange},
		{"a thin commit, then a full one", []*cmttypes.LightBlock{thin, good, nil, nil}, good, "", 2, nil},
		{"only thin commits", []*cmttypes.LightBlock{thin, thin, nil, nil}, nil, "signed by more than two thirds", 4, ErrOutOfRange},
		{"nobody has it", []*cmttypes.LightBlock{nil, nil, nil, nil}, nil, "no node has a signed header at height 5 yet", 4, ErrOutOfRange},
		{"every node pruned it", []*cmttypes.LightBlock{pruned, pruned, pruned, pruned}, nil, "height 5 is pruned", 4, ErrPruned},
		{"one liar says pruned", []*cmttypes.LightBlock{pruned, nil, nil, nil}, nil, "no node has a signed header at height 5 yet", 4, ErrOutOfRange},
		{"one liar says pruned, two serve it", []*cmttypes.LightBlock{pruned, good, good, nil}, good, "", 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			var sources []lightSource
			for i, lb := range tc.serve {
				var err error
				switch lb {
				case nil:
					err = provider.ErrHeightTooHigh
				case pruned:
					lb, err = nil, provider.ErrLightBlockNotFound
				}
				sources = append(sources, source(string(rune('a'+i)), lb, err, &calls))
			}
			got, err := agreedLightBlock(context.Background(), lightChainID, 5, 2, sources)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, tc.kind) {
					t.Fatalf("agreedLightBlock = %v, %v; want a %v error with %q", got, err, tc.kind, tc.wantErr)
				}
			} else if err != nil || !bytes.Equal(got.Hash(), tc.want.Hash()) || got.Commit.Signatures[3].BlockIDFlag != cmttypes.BlockIDFlagCommit {
				t.Fatalf("agreedLightBlock = %v, %v; want the header %X with its full commit", got, err, tc.want.Hash())
			}
			if calls.Load() != tc.asked {
				t.Errorf("asked %d nodes, want %d", calls.Load(), tc.asked)
			}
		})
	}
}

// TestLightCacheReadsOnce: clients asking for a height at once, and after,
// share one read of it; a failed read is not kept.
func TestLightCacheReadsOnce(t *testing.T) {
	vals, privs := cmttypes.RandValidatorSet(4, 10)
	lb := signedLightBlock(t, vals, privs, 5, 7)
	var c lightCache
	m := newMetrics(&Gateway{})
	var reads atomic.Int64
	release := make(chan struct{})
	fetch := func(context.Context) (*cmttypes.LightBlock, error) {
		reads.Add(1)
		<-release
		return lb, nil
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.get(context.Background(), 5, m, fetch)
			if err != nil || got != lb {
				t.Errorf("get = %v, %v", got, err)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if _, err := c.get(context.Background(), 5, m, fetch); err != nil || reads.Load() != 1 {
		t.Fatalf("%d reads of height 5 for 17 callers (err %v), want 1", reads.Load(), err)
	}
	_, err := c.get(context.Background(), 6, m, func(context.Context) (*cmttypes.LightBlock, error) {
		return nil, errorf(ErrOutOfRange, "not yet")
	})
	if err == nil || c.cached(6) != nil {
		t.Fatalf("a failed read: err %v, cached %v; want the error and nothing kept", err, c.cached(6))
	}
	for h := int64(100); h < 100+lightCacheHeights+10; h++ {
		c.put(&cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &cmttypes.Header{Height: h}}})
	}
	if len(c.blocks) != lightCacheHeights || c.cached(5) != nil || c.cached(100+lightCacheHeights+9) == nil {
		t.Fatalf("cache of %d heights (5 kept: %v); want %d, the newest", len(c.blocks), c.cached(5) != nil, lightCacheHeights)
	}
}

// TestHeightWatch: the height is what f+1 nodes report, whatever one
// node claims; a wait for the next height or the one after ends when f+1
// nodes report it, and only then; one further ahead, or before any height
// is agreed, is not waited for; a wait ends with its timeout or its
// context, and past maxLightWaiters nobody waits.
func TestHeightWatch(t *testing.T) {
	ctx := context.Background()
	const wait = 2 * time.Second // a hung wait fails the checks below
	w := heightWatch{nodes: 4}   // f+1 = 2
	w.report("a", 10)
	if w.waitFor(ctx, 11, lightWaitAhead, wait) {
		t.Fatal("waited for height 11 with one node's report alone")
	}
	w.report("liar", 1<<62)
	w.report("b", 7)
	if w.height != 10 {
		t.Fatalf("height %d after reports 10, 7 and a liar's 1<<62; want 10 (two nodes' word)", w.height)
	}
	w.report("b", 10)
	w.report("a", 9) // a report lower than before lowers nothing
	for _, tc := range []struct {
		h    int64
		want bool
	}{{9, true}, {10, true}, {13, false}} {
		start := time.Now()
		if got := w.waitFor(ctx, tc.h, lightWaitAhead, wait); got != tc.want {
			t.Errorf("waitFor(%d) at height 10 = %v, want %v", tc.h, got, tc.want)
		}
		if time.Since(start) > time.Second {
			t.Errorf("waitFor(%d) at height 10 waited %s, want an answer at once", tc.h, time.Since(start))
		}
	}
	if w.waitFor(ctx, 12, lightWaitAhead, 20*time.Millisecond) {
		t.Error("waitFor(12) reached with the height at 10")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if w.waitFor(cctx, 11, lightWaitAhead, wait) {
		t.Error("waitFor(11) reached with its context done")
	}

	var wg sync.WaitGroup
	var done atomic.Int64
	got := make([]bool, 3)
	for i := range got {
		wg.Go(func() {
			got[i] = w.waitFor(ctx, 12, lightWaitAhead, wait)
			done.Add(1)
		})
	}
	time.Sleep(20 * time.Millisecond)
	w.report("liar", 12)
	w.report("a", 11) // the height moves to 11 and wakes them; not yet there
	time.Sleep(20 * time.Millisecond)
	if n := done.Load(); n != 0 {
		t.Fatalf("%d waits for height 12 ended with f+1 nodes at 11", n)
	}
	w.report("b", 12)
	wg.Wait()
	for i, ok := range got {
		if !ok {
			t.Errorf("waiter %d: height 12 reported by f+1 nodes, wait ended unreached", i)
		}
	}

	w.waiting = maxLightWaiters
	start := time.Now()
	if w.waitFor(ctx, 13, lightWaitAhead, wait) || time.Since(start) > time.Second {
		t.Errorf("with %d requests waiting, another waited %s; want an answer at once", maxLightWaiters, time.Since(start))
	}
}

// TestLightBlockWaitsForTheNextHeight: a request for the height after the
// chain's newest is held until the gateway's block follower sees it, not
// answered at once and not held for the whole wait. (The test chain serves
// no commits, so the answer itself is an error; when it comes is the test.)
func TestLightBlockWaitsForTheNextHeight(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	for range 3 {
		if err := c.makeBlock(); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, c, func(cfg *Config) { cfg.Waits.LightWait = 5 * time.Second })
	deadline := time.Now().Add(5 * time.Second)
	for !g.tip.waitFor(context.Background(), 3, 0, time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the gateway's block follower reported no height 3 in 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	const stalled = 300 * time.Millisecond
	made := make(chan error, 1)
	go func() {
		time.Sleep(stalled)
		made <- c.makeBlock()
	}()
	start := time.Now()
	_, err := g.LightBlock(context.Background(), 4)
	took := time.Since(start)
	if err := <-made; err != nil {
		t.Fatal(err)
	}
	if took < stalled-50*time.Millisecond {
		t.Errorf("LightBlock(4) answered after %s (%v), with the chain at 3: want it held until block 4", took, err)
	}
	if took > 3*time.Second {
		t.Errorf("LightBlock(4) answered after %s: want it released once block 4 commits, not at the end of the wait", took)
	}
}

// TestFollowAsksEveryNodeWhileALightBlockWaits: one poll of the block
// follower asks one node for its height, but every node while a light
// block request waits, so f+1 reports of a new height take one poll.
func TestFollowAsksEveryNodeWhileALightBlockWaits(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	if err := c.makeBlock(); err != nil {
		t.Fatal(err)
	}
	addrs := []string{c.srv.URL, c.node(t, nil), c.node(t, nil), c.node(t, nil)}
	g := startGateway(t, c, func(cfg *Config) { cfg.Nodes.Addrs, cfg.PollInterval = addrs, time.Hour })
	ctx := context.Background()
	reports := func() int {
		g.tip.mu.Lock()
		defer g.tip.mu.Unlock()
		return len(g.tip.reports)
	}
	for range 2 { // two nodes' reports: the height (1) is known
		if err := g.followOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := reports(); n != 2 {
		t.Fatalf("with nobody waiting, two polls asked %d nodes, want one each", n)
	}
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		g.tip.waitFor(ctx, 2, 2, 5*time.Second) // the chain is at 1: held
	}()
	for deadline := time.Now().Add(5 * time.Second); g.tip.waiters() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the light block request did not wait")
		}
	}
	if err := g.followOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); reports() < len(addrs); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("with a light block request waiting, a poll asked %d nodes in all, want every one of %d", reports(), len(addrs))
		}
	}
	if err := c.makeBlock(); err != nil {
		t.Fatal(err)
	}
	if err := g.followOnce(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Error("one poll after block 2, the waiting request was still held")
	}
}

// TestFollowIsNotHeldByAHungNode: a node that does not answer its height
// holds neither the poll that asked it (the asks run beside it) nor more
// than one ask at a time.
func TestFollowIsNotHeldByAHungNode(t *testing.T) {
	c := newTestChain(t, testTopics()...)
	if err := c.makeBlock(); err != nil {
		t.Fatal(err)
	}
	var hang atomic.Bool
	release := make(chan struct{})
	asked := make(chan struct{}, 16)
	hung := func(method string, _ json.RawMessage, res any) any {
		if method == "status" && hang.Load() {
			asked <- struct{}{}
			<-release
		}
		return res
	}
	addrs := []string{c.srv.URL, c.node(t, nil), c.node(t, nil), c.node(t, hung)}
	g := startGateway(t, c, func(cfg *Config) {
		cfg.Nodes.Addrs, cfg.PollInterval, cfg.Waits.FollowTimeout = addrs, time.Hour, 2*time.Second
		cfg.Nodes.HealthInterval = time.Hour // only the polls ask the hung node
	})
	t.Cleanup(func() { close(release) }) // before the gateway stops: it waits for its asks
	ctx := context.Background()
	for range 4 {
		if err := g.followOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	go g.tip.waitFor(ctx, 2, 2, 10*time.Second)
	for deadline := time.Now().Add(5 * time.Second); g.tip.waiters() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the light block request did not wait")
		}
	}
	hang.Store(true)
	slow := 0
	for range 3 {
		start := time.Now()
		_ = g.followOnce(ctx) // fails when the poll picked the hung node itself
		if time.Since(start) > time.Second {
			slow++
		}
	}
	if slow > 1 {
		t.Errorf("%d of 3 polls waited for the hung node, want at most the one that picked it (round-robin)", slow)
	}
	if n := len(asked); n > 2 {
		t.Errorf("the hung node was asked %d times at once, want at most one ask (and the poll's own)", n)
	}
}
