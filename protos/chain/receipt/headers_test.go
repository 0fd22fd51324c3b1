package receipt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	dbm "github.com/cometbft/cometbft-db"
	cmtlog "github.com/cometbft/cometbft/libs/log"
	"github.com/cometbft/cometbft/light"
	"github.com/cometbft/cometbft/light/provider"
	dbs "github.com/cometbft/cometbft/light/store/db"
	cmttypes "github.com/cometbft/cometbft/types"
)

// testVerifier is a headerVerifier from the header at root of src's
// chain, on a clock stopped at now.
func testVerifier(t *testing.T, root *cmttypes.LightBlock, now time.Time, srcs ...provider.Provider) *headerVerifier {
	t.Helper()
	v, err := newHeaderVerifier(Root{ChainID: testChainID, Height: root.Height, Hash: root.Hash()}, srcs)
	if err != nil {
		t.Fatal(err)
	}
	v.period, v.now = testPeriod, func() time.Time { return now }
	return v
}

// cometVerify verifies height as CometBFT's light client does by default
// (skipping, from the header at root, src its own witness), on the same
// clock and trusting period as testVerifier.
func cometVerify(root *cmttypes.LightBlock, height int64, now time.Time, src provider.Provider) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lc, err := light.NewClient(ctx, testChainID, light.TrustOptions{Period: testPeriod, Height: root.Height, Hash: root.Hash()},
		src, []provider.Provider{src}, dbs.New(dbm.NewMemDB(), testChainID),
		light.MaxClockDrift(MaxClockDrift), light.MaxRetryAttempts(1), light.Logger(cmtlog.NewNopLogger()))
	if err != nil {
		return err
	}
	_, err = lc.VerifyLightBlockAtHeight(ctx, height, now)
	return err
}

// TestHeaderVerifierAsCometBFT verifies headers served by a source with
// headerVerifier and with CometBFT's light client from the same root, on
// the same clock: both accept or both refuse; headerVerifier says why,
// and asks for the headers bisection needs and no others.
func TestHeaderVerifierAsCometBFT(t *testing.T) {
	c := makeTestChains(t)
	a, b, cc := validators(0, 1, 2, 3), validators(2, 3, 4, 5), validators(4, 5, 6, 7)
	// Half of the validators replaced at 5, the other half at 9: 12 cannot
	// be verified from 1 straight, nor 7 from 12's validators.
	staged := makeChain(t, testChainID, append(append(repeat(a, 4), repeat(b, 4)...), repeat(cc, 4)...), nil)
	late := c.steady[11].Time.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		chain   []*cmttypes.LightBlock
		serve   map[int64]*cmttypes.LightBlock // in place of the chain's
		root    int64
		height  int64
		now     time.Time
		wantErr string // "": verified
		asked   string // the heights asked for after the root
	}{
		{"the next header", c.steady, nil, 1, 2, late, "", "[2]"},
		{"skipping to the last", c.steady, nil, 1, 12, late, "", "[12]"},
		{"skipping over a quarter replaced", c.slow, nil, 1, 12, late, "", "[12]"},
		{"bisection over two half changes", staged, nil, 1, 12, late, "", "[12 7]"},
		{"bisection down to the change", c.jump, nil, 1, 12, late, "", "[12 7 4 5]"},
		{"a forged header", c.steady, map[int64]*cmttypes.LightBlock{12: forged(c.steady[11])}, 1, 12, late, "wrong signature", "[12]"},
		{"a forged header on the way", staged, map[int64]*cmttypes.LightBlock{7: forged(staged[6])}, 1, 12, late, "header 7 is not signed", "[12 7]"},
		{"another chain's header", c.steady, map[int64]*cmttypes.LightBlock{12: c.other[11]}, 1, 12, late, `another chain "another-chain"`, "[12]"},
		{"a header of validators the root did not name", c.steady, map[int64]*cmttypes.LightBlock{2: c.early[1]}, 1, 2, late, "header 1 named", "[2]"},
		{"the root expired", c.steady, nil, 1, 12, c.steady[0].Time.Add(testPeriod), "past the trusting period", "[12]"},
		{"a header from the future", c.steady, nil, 1, 12, c.steady[11].Time.Add(-MaxClockDrift), "from the future", "[12]"},
		{"below the root", c.steady, nil, 8, 5, late, "", "[5 7 6]"},
		{"below the root, another header on the way", c.steady, map[int64]*cmttypes.LightBlock{6: c.slow[5]}, 8, 5, late, "the trusted header 7 names", "[5 7 6]"},
		{"below the root, another header asked for", c.steady, map[int64]*cmttypes.LightBlock{5: c.slow[4]}, 8, 5, late, "the trusted header 6 names", "[5 7 6]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &chainSource{name: "gateway", blocks: tc.chain, serve: tc.serve}
			root := tc.chain[tc.root-1]
			v := testVerifier(t, root, tc.now, src)
			if err := v.start(context.Background()); err != nil {
				t.Fatal(err)
			}
			src.heights()
			lb, err := v.Verify(context.Background(), tc.height)
			asked := src.heights()
			theirs := cometVerify(root, tc.height, tc.now, src)
			if (err == nil) != (theirs == nil) {
				t.Fatalf("Verify(%d) = %v, CometBFT's light client: %v: they disagree", tc.height, err, theirs)
			}
			switch {
			case tc.wantErr == "" && (err != nil || lb.Hash().String() != tc.chain[tc.height-1].Hash().String()):
				t.Fatalf("Verify(%d) = %v, %v; want header %X", tc.height, lb, err, tc.chain[tc.height-1].Hash())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Verify(%d) = %v, want an error with %q", tc.height, err, tc.wantErr)
			}
			if asked != tc.asked {
				t.Errorf("Verify(%d) asked for %s, want %s", tc.height, asked, tc.asked)
			}
		})
	}
}

// TestHeaderVerifierKeepsHeaders: a header verified once is not asked for
// again, and the verified header nearest below one asked for is where its
// verification starts, bisection's headers included; the headers kept are
// bounded.
func TestHeaderVerifierKeepsHeaders(t *testing.T) {
	c := makeTestChains(t)
	src := &chainSource{name: "gateway", blocks: c.jump}
	v := testVerifier(t, c.jump[0], c.jump[11].Time, src)
	for _, step := range []struct {
		height int64
		asked  string
	}{
		{12, "[1 12 7 4 5]"}, // the root, then bisection: 4, 5, 7 and 12 kept
		{12, "[]"},
		{7, "[]"},
		{11, "[11]"}, // from 7: from the root it would take bisection again
		{6, "[6]"},   // from 5
		{3, "[3]"},   // from the root
	} {
		if _, err := v.Verify(context.Background(), step.height); err != nil {
			t.Fatalf("Verify(%d): %v", step.height, err)
		}
		if got := src.heights(); got != step.asked {
			t.Errorf("Verify(%d) asked for %s, want %s", step.height, got, step.asked)
		}
	}

	long := makeChain(t, testChainID, repeat(validators(0, 1, 2, 3), maxVerified+20), nil)
	src = &chainSource{name: "gateway", blocks: long}
	v = testVerifier(t, long[0], long[len(long)-1].Time, src)
	for h := int64(2); h <= int64(len(long)); h++ {
		if _, err := v.Verify(context.Background(), h); err != nil {
			t.Fatalf("Verify(%d): %v", h, err)
		}
	}
	if len(v.verified) != maxVerified || v.verified[0].Height != int64(len(long)-maxVerified+1) {
		t.Fatalf("after verifying %d headers, %d kept from %d; want the last %d", len(long), len(v.verified), v.verified[0].Height, maxVerified)
	}
	if _, err := v.Verify(context.Background(), 2); err != nil {
		t.Fatalf("Verify(2) once it is no longer kept: %v", err)
	}
	if len(v.verified) != maxVerified || v.verified[0].Height != 2 || v.verified[len(v.verified)-1].Height != int64(len(long)) {
		t.Errorf("after verifying 2 again, %d kept from %d to %d; want %d, 2 and the newest", len(v.verified), v.verified[0].Height, v.verified[len(v.verified)-1].Height, maxVerified)
	}
}

// TestHeaderVerifierTakesTurns: a source that fails hands over to the
// next, for the root as for any header, and an error names the source.
func TestHeaderVerifierTakesTurns(t *testing.T) {
	c := makeTestChains(t)
	ctx := context.Background()
	liar := &chainSource{name: "liar", blocks: c.early} // another header at the root
	down := &chainSource{name: "down", blocks: c.steady}
	up := &chainSource{name: "up", blocks: c.steady}
	v := testVerifier(t, c.steady[0], c.steady[11].Time, liar, down, up)
	if _, err := v.Verify(ctx, 3); err != nil {
		t.Fatalf("Verify(3) with the first source serving another root: %v", err)
	}
	if got := liar.heights() + down.heights() + up.heights(); got != "[1][1 3][]" {
		t.Errorf("Verify(3) asked liar, down and up for %s, want [1][1 3][]", got)
	}
	down.err = provider.ErrNoResponse
	if _, err := v.Verify(ctx, 5); err == nil || !strings.Contains(err.Error(), "through down") || !strings.Contains(err.Error(), provider.ErrNoResponse.Error()) {
		t.Fatalf("Verify(5) with its source down = %v, want an error naming down and what it did", err)
	}
	if _, err := v.Verify(ctx, 5); err != nil {
		t.Fatalf("Verify(5) again, from the next source: %v", err)
	}
	if got := up.heights(); got != "[5]" {
		t.Errorf("Verify(5) again asked up for %s, want [5]", got)
	}

	none := testVerifier(t, c.steady[0], c.steady[11].Time, liar)
	if _, err := none.Verify(ctx, 3); err == nil || !strings.Contains(err.Error(), "verify the root of trust at height 1: liar: header 1 hashes to") {
		t.Fatalf("Verify(3) with the only source serving another root = %v, want it refused", err)
	}
}

// TestHeaderVerifierFromGenesis: a genesis root is the height-1 header
// its validators signed, resolved at the first call.
func TestHeaderVerifierFromGenesis(t *testing.T) {
	c := makeTestChains(t)
	genesis := func(vs valSet) Root {
		doc := &cmttypes.GenesisDoc{ChainID: testChainID, GenesisTime: chainStart}
		for _, v := range vs.set.Validators {
			doc.Validators = append(doc.Validators, cmttypes.GenesisValidator{PubKey: v.PubKey, Power: v.VotingPower})
		}
		return Root{ChainID: testChainID, Genesis: doc}
	}
	src := &chainSource{name: "gateway", blocks: c.jump}
	v, err := newHeaderVerifier(genesis(validators(0, 1, 2, 3)), []provider.Provider{src})
	if err != nil {
		t.Fatal(err)
	}
	v.period, v.now = testPeriod, func() time.Time { return c.jump[11].Time }
	if r := v.Root(); r != 0 {
		t.Errorf("Root() before the first call = %d, want 0", r)
	}
	if lb, err := v.Verify(context.Background(), 12); err != nil || lb.Height != 12 {
		t.Fatalf("Verify(12) from genesis = %v, %v", lb, err)
	}
	if r := v.Root(); r != 1 {
		t.Errorf("Root() = %d, want 1", r)
	}

	v, err = newHeaderVerifier(genesis(validators(4, 5, 6, 7)), []provider.Provider{src})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), 12); err == nil || !strings.Contains(err.Error(), "signed by the genesis validators") {
		t.Fatalf("Verify(12) from another genesis = %v, want it refused", err)
	}
}

// TestPrunedRoot: a root every source says is pruned is ErrRootPruned,
// and a Verifier gives up on it at once instead of waiting out its
// context; one source pruned and another down is an error to try again.
func TestPrunedRoot(t *testing.T) {
	c := makeTestChains(t)
	doc := &cmttypes.GenesisDoc{ChainID: testChainID, GenesisTime: chainStart}
	for _, v := range validators(0, 1, 2, 3).set.Validators {
		doc.Validators = append(doc.Validators, cmttypes.GenesisValidator{PubKey: v.PubKey, Power: v.VotingPower})
	}
	hashRoot := Root{ChainID: testChainID, Height: c.steady[0].Height, Hash: c.steady[0].Hash()}
	pruned := func(name string) *chainSource {
		return &chainSource{name: name, err: provider.ErrLightBlockNotFound}
	}
	down := &chainSource{name: "down", err: provider.ErrNoResponse}
	for _, tc := range []struct {
		name       string
		root       Root
		srcs       []provider.Provider
		wantPruned bool
	}{
		{"genesis, every source pruned", Root{ChainID: testChainID, Genesis: doc}, []provider.Provider{pruned("a"), pruned("b")}, true},
		{"hash, every source pruned", hashRoot, []provider.Provider{pruned("a"), pruned("b")}, true},
		{"genesis, one pruned one down", Root{ChainID: testChainID, Genesis: doc}, []provider.Provider{pruned("a"), down}, false},
		{"hash, one pruned one down", hashRoot, []provider.Provider{down, pruned("b")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := newHeaderVerifier(tc.root, tc.srcs)
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.Verify(context.Background(), 3)
			if err == nil || errors.Is(err, ErrRootPruned) != tc.wantPruned {
				t.Fatalf("Verify(3) = %v; want ErrRootPruned %v", err, tc.wantPruned)
			}
			if !tc.wantPruned {
				return
			}
			// No deadline: Header returns only because it gives up.
			v := &Verifier{headers: h, wait: time.Second}
			if _, err := v.Header(context.Background(), 3); !errors.Is(err, ErrUnverified) || !errors.Is(err, ErrRootPruned) || !strings.Contains(err.Error(), "pruned") {
				t.Fatalf("Header(3) = %v; want ErrUnverified and ErrRootPruned, saying pruned", err)
			}
		})
	}
}
