package app_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/abciapp/internal/workload"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// refsGenesis is a chain at rules version 3, where blocks reference large
// bundles, with topic "t".
var refsGenesis = []byte(`{"rules_version": 3, "topics": [{"name": "t", "partitions": 1}]}`)

// appPeer is another app's /bundles query, as byzlog-app's --peer-rpc asks
// it through that node's RPC (the transport is all that is skipped).
type appPeer struct{ a *app.App }

func (p appPeer) String() string { return "app" }

func (p appPeer) Bundles(ctx context.Context, hashes [][sha256.Size]byte) ([][]byte, error) {
	return queryBundles(ctx, p.a, hashes)
}

func queryBundles(ctx context.Context, a *app.App, hashes [][sha256.Size]byte) ([][]byte, error) {
	req := &byzlogv1.BundlesRequest{}
	for _, h := range hashes {
		req.Hashes = append(req.Hashes, h[:])
	}
	data, _ := proto.Marshal(req)
	res, err := a.Query(ctx, &abci.RequestQuery{Path: wire.PathBundles, Data: data})
	if err != nil {
		return nil, err
	}
	var out byzlogv1.Bundles
	if err := proto.Unmarshal(res.Value, &out); err != nil {
		return nil, err
	}
	for i, b := range out.Bundles {
		if len(b) == 0 {
			out.Bundles[i] = nil
		}
	}
	return out.Bundles, nil
}

// liar serves every bundle asked for, corrupted.
type liar struct{ a *app.App }

func (l liar) String() string { return "liar" }

func (l liar) Bundles(ctx context.Context, hashes [][sha256.Size]byte) ([][]byte, error) {
	out, err := queryBundles(ctx, l.a, hashes)
	for i, b := range out {
		if b != nil {
			out[i] = append([]byte{b[0] ^ 1}, b[1:]...)
		}
	}
	return out, err
}

func refsApp(t *testing.T, peers ...app.BundlePeer) *app.App {
	t.Helper()
	return refsAppIn(t, t.TempDir(), peers...)
}

// refsAppIn opens the app in dir, running InitChain on a new store.
func refsAppIn(t *testing.T, dir string, peers ...app.BundlePeer) *app.App {
	t.Helper()
	a := openAppWith(t, dir, func(c *app.Config) {
		c.Peers = peers
		c.GossipWait, c.RefuseAfter = 20*time.Millisecond, 300*time.Millisecond
	})
	t.Cleanup(func() { _ = a.Close() })
	if info(t, a).LastBlockHeight > 0 {
		return a
	}
	if _, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: refsGenesis}); err != nil {
		t.Fatal(err)
	}
	return a
}

func processProposal(t *testing.T, a *app.App, h int64, txs [][]byte) abci.ResponseProcessProposal_ProposalStatus {
	t.Helper()
	res, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: h, Txs: txs})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// TestBlocksReferenceBundles: at rules version 3 a proposer references its
// large bundles; a validator that holds them votes for the block, one that
// lacks one fetches it from a peer (a liar's answer is refused), one that
// can get it from nowhere refuses the block; and every node that executes
// the block, fetching what it lacks, gets the app hash of the same block
// carrying its bundles.
func TestBlocksReferenceBundles(t *testing.T) {
	big := producerTx(t, "big", 0, byzlogv1.Codec_CODEC_NONE, &byzlogv1.Record{Value: bytes.Repeat([]byte("v"), 6000)})
	small := producerTx(t, "small", 0, byzlogv1.Codec_CODEC_NONE, &byzlogv1.Record{Value: []byte("v")})
	proposer := refsApp(t)
	gossiped := refsApp(t)
	fetcherDir := t.TempDir()
	fetcher := refsAppIn(t, fetcherDir, liar{proposer}, appPeer{proposer})
	isolated := refsApp(t)
	inline := refsApp(t) // executes the block as it would carry its bundles

	for _, a := range []*app.App{proposer, gossiped} {
		for _, tx := range [][]byte{big, small} {
			if res, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: tx}); err != nil || res.Code != 0 {
				t.Fatalf("CheckTx = %v, %v", res, err)
			}
		}
	}
	prep, err := proposer.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: 1, MaxTxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(big)
	if len(prep.Txs) != 2 || !bytes.Equal(prep.Txs[0], wire.NewBundleRef(sum)) || !bytes.Equal(prep.Txs[1], small) {
		t.Fatalf("proposal = %d txs (%d, ... bytes), want a reference to the large bundle, then the small one inline", len(prep.Txs), len(prep.Txs[0]))
	}
	block := prep.Txs

	for _, c := range []struct {
		name string
		a    *app.App
		want abci.ResponseProcessProposal_ProposalStatus
	}{
		{"the proposer", proposer, abci.ResponseProcessProposal_ACCEPT},
		{"a validator the bundle was gossiped to", gossiped, abci.ResponseProcessProposal_ACCEPT},
		{"a validator fetching from a liar, then the proposer", fetcher, abci.ResponseProcessProposal_ACCEPT},
		{"a validator with no bundle and no peers", isolated, abci.ResponseProcessProposal_REJECT},
	} {
		if got := processProposal(t, c.a, 1, block); got != c.want {
			t.Errorf("%s: ProcessProposal = %s, want %s", c.name, got, c.want)
		}
	}
	// The fetched bundle is held durably: served from the store after a
	// restart, with no peer to fetch it from again.
	if err := fetcher.Close(); err != nil {
		t.Fatal(err)
	}
	fetcher = openAppWith(t, fetcherDir, nil)
	defer fetcher.Close()
	if got, err := queryBundles(ctx, fetcher, [][sha256.Size]byte{sum}); err != nil || !bytes.Equal(got[0], big) {
		t.Fatalf("the fetcher's /bundles = %v, want the bundle it voted for", err)
	}

	want := finalize(t, inline, 1, big, small)
	for name, a := range map[string]*app.App{"proposer": proposer, "gossiped": gossiped, "fetcher": fetcher} {
		if got := finalize(t, a, 1, block...); !bytes.Equal(got, want) {
			t.Errorf("%s: app hash %X, the block with its bundles inline gives %X", name, got, want)
		}
		commit(t, a)
	}
	// The isolated validator learns the block is decided; given a peer
	// (here: after a restart with --peer-rpc), execution fetches.
	late := refsApp(t, appPeer{gossiped})
	if got := finalize(t, late, 1, block...); !bytes.Equal(got, want) {
		t.Errorf("a validator fetching in FinalizeBlock: app hash %X, want %X", got, want)
	}
	commit(t, late)
	if got, err := queryBundles(ctx, late, [][sha256.Size]byte{sum, sha256.Sum256([]byte("unknown"))}); err != nil || !bytes.Equal(got[0], big) || got[1] != nil {
		t.Fatalf("/bundles after commit = %d entries, %v; want the bundle, then nothing for an unknown hash", len(got), err)
	}
}

// A chain before rules version 3 takes no reference: the proposal is
// refused, and a proposer there carries its bundles.
func TestReferencesNeedRulesVersion3(t *testing.T) {
	a := open(t, t.TempDir())
	defer a.Close()
	big := producerTx(t, "big", 0, byzlogv1.Codec_CODEC_NONE, &byzlogv1.Record{Value: bytes.Repeat([]byte("v"), 6000)})
	if res, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: big}); err != nil || res.Code != 0 {
		t.Fatalf("CheckTx = %v, %v", res, err)
	}
	prep, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: 1, MaxTxBytes: 1 << 20})
	if err != nil || len(prep.Txs) != 1 || !bytes.Equal(prep.Txs[0], big) {
		t.Fatalf("PrepareProposal at rules 1 = %d txs, %v; want the bundle carried", len(prep.Txs), err)
	}
	if got := processProposal(t, a, 1, [][]byte{wire.NewBundleRef(sha256.Sum256(big))}); got != abci.ResponseProcessProposal_REJECT {
		t.Fatalf("a reference at rules 1: ProcessProposal = %s, want REJECT", got)
	}
	res, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: wire.NewBundleRef(sha256.Sum256(big))})
	if err != nil || wire.Code(res.Code) != wire.CodeMalformedTx || !strings.Contains(res.Log, "never submitted") {
		t.Fatalf("CheckTx(a reference) = %v, %v; want malformed_tx", res, err)
	}
}

// TestReferenceBeforeRulesVersion3IsItsOwnTransaction: before rules
// version 3 a reference that reaches a decided block (only more than f
// faulty validators could get one there) is a malformed transaction under
// its own hash, not the bundle it names: the bundle stays in the mempool
// and /tx places the reference, not the bundle.
func TestReferenceBeforeRulesVersion3IsItsOwnTransaction(t *testing.T) {
	a := open(t, t.TempDir())
	defer a.Close()
	big := producerTx(t, "big", 0, byzlogv1.Codec_CODEC_NONE, &byzlogv1.Record{Value: bytes.Repeat([]byte("v"), 6000)})
	ref := wire.NewBundleRef(sha256.Sum256(big))
	if res, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: big}); err != nil || res.Code != 0 {
		t.Fatalf("CheckTx = %v, %v", res, err)
	}
	res, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: 1, Txs: [][]byte{ref}})
	if err != nil || len(res.TxResults) != 1 || wire.Code(res.TxResults[0].Code) != wire.CodeMalformedTx {
		t.Fatalf("FinalizeBlock(a reference at rules 1) = %v, %v; want one malformed_tx result", res, err)
	}
	commit(t, a)
	tx := func(b []byte) *abci.ResponseQuery {
		sum := sha256.Sum256(b)
		q, err := a.Query(ctx, &abci.RequestQuery{Path: wire.PathTx, Data: sum[:]})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	if q := tx(ref); q.Code != 0 || q.Height != 1 || q.Index != 0 {
		t.Errorf("/tx of the reference = code %d, height %d, index %d; want height 1, index 0", q.Code, q.Height, q.Index)
	}
	if q := tx(big); wire.Code(q.Code) != wire.CodeNotFound {
		t.Errorf("/tx of the bundle = code %d, height %d: the bundle never committed", q.Code, q.Height)
	}
	prep, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: 2, MaxTxBytes: 1 << 20})
	if err != nil || len(prep.Txs) != 1 || !bytes.Equal(prep.Txs[0], big) {
		t.Fatalf("PrepareProposal after the reference = %d txs, %v; want the bundle still pending", len(prep.Txs), err)
	}
}

// /bundles refuses what it cannot answer, and a proposal referencing more
// bytes than a block may hold is refused before they are fetched.
func TestBundlesQueryBounds(t *testing.T) {
	a := refsApp(t)
	for name, req := range map[string]*byzlogv1.BundlesRequest{
		"too many": {Hashes: make([][]byte, wire.MaxBundlesPerQuery+1)},
		"short":    {Hashes: [][]byte{make([]byte, 31)}},
	} {
		data, _ := proto.Marshal(req)
		res, err := a.Query(ctx, &abci.RequestQuery{Path: wire.PathBundles, Data: data})
		if err != nil || wire.Code(res.Code) != wire.CodeBadQuery || res.Log == "" {
			t.Errorf("%s: /bundles = %v, %v; want bad_query with a reason", name, res, err)
		}
	}
	res, err := a.Query(ctx, &abci.RequestQuery{Path: wire.PathBundles, Data: []byte{0xff}})
	if err != nil || wire.Code(res.Code) != wire.CodeBadQuery {
		t.Errorf("/bundles of garbage = %v, %v; want bad_query", res, err)
	}
}

// TestOnlyLargeBundlesAreReferenced: a proposer references produce
// bundles of at least wire.MinBundleRefBytes and carries everything else
// (an offset commit's client proves it by its own bytes in the block's
// data hash); a validator refuses a reference to anything else.
func TestOnlyLargeBundlesAreReferenced(t *testing.T) {
	consumer := wire.NewSigner(workload.Key("consumer"), chainID)
	co, err := consumer.CommitOffsets(0, "group", true, &byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Metadata: strings.Repeat("m", 2000)})
	if err != nil {
		t.Fatal(err)
	}
	offsets, err := wire.OffsetsTx(co)
	if err != nil {
		t.Fatal(err)
	}
	big := producerTx(t, "big", 0, byzlogv1.Codec_CODEC_NONE, &byzlogv1.Record{Value: bytes.Repeat([]byte("v"), 2000)})
	small := producerTx(t, "small", 0, byzlogv1.Codec_CODEC_NONE, &byzlogv1.Record{Value: []byte("v")})
	if len(offsets) < wire.MinBundleRefBytes || len(small) >= wire.MinBundleRefBytes {
		t.Fatalf("the offset commit is %d bytes and the small bundle %d: the test needs them on either side of %d", len(offsets), len(small), wire.MinBundleRefBytes)
	}
	proposer := refsApp(t)
	for _, tx := range [][]byte{offsets, big, small} {
		if res, err := proposer.CheckTx(ctx, &abci.RequestCheckTx{Tx: tx}); err != nil || res.Code != 0 {
			t.Fatalf("CheckTx = %v, %v", res, err)
		}
	}
	prep, err := proposer.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: 1, MaxTxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var refs, carried int
	for _, tx := range prep.Txs {
		if _, ok := wire.BundleRef(tx); ok {
			refs++
		} else if bytes.Equal(tx, offsets) || bytes.Equal(tx, small) {
			carried++
		}
	}
	if len(prep.Txs) != 3 || refs != 1 || carried != 2 {
		t.Fatalf("proposal of an offset commit, a large and a small bundle: %d txs, %d references, %d carried; want the large bundle alone referenced", len(prep.Txs), refs, carried)
	}

	// A Byzantine proposer's references to what may not be referenced.
	validator := refsApp(t, appPeer{proposer})
	for _, tx := range [][]byte{offsets, small} {
		if res, err := validator.CheckTx(ctx, &abci.RequestCheckTx{Tx: tx}); err != nil || res.Code != 0 {
			t.Fatalf("CheckTx = %v, %v", res, err)
		}
	}
	ref := func(tx []byte) []byte { return wire.NewBundleRef(sha256.Sum256(tx)) }
	for name, block := range map[string][][]byte{
		"an offset commit": {ref(offsets)},
		"a small bundle":   {ref(small)},
		"a bundle twice":   {ref(big), ref(big)},
	} {
		if got := processProposal(t, validator, 1, block); got != abci.ResponseProcessProposal_REJECT {
			t.Errorf("a reference to %s: ProcessProposal = %s, want REJECT", name, got)
		}
	}
	if got := processProposal(t, validator, 1, prep.Txs); got != abci.ResponseProcessProposal_ACCEPT {
		t.Fatalf("the correct proposal: ProcessProposal = %s, want ACCEPT", got)
	}
}

// A proposal with more references than bundles of the smallest referable
// size could fit in a block is refused before any is looked up: none is
// fetched from the peer.
func TestTooManyReferencesAreRefusedUnread(t *testing.T) {
	counter := &countingPeer{}
	a := refsApp(t, counter)
	n := wire.MaxBlockBundleBytes/wire.MinBundleRefBytes + 1
	block := make([][]byte, n)
	for i := range block {
		block[i] = wire.NewBundleRef(sha256.Sum256([]byte{byte(i), byte(i >> 8), byte(i >> 16)}))
	}
	if got := processProposal(t, a, 1, block); got != abci.ResponseProcessProposal_REJECT {
		t.Fatalf("%d references: ProcessProposal = %s, want REJECT", n, got)
	}
	if counter.asked != 0 {
		t.Fatalf("%d references: %d were asked of a peer before the proposal was refused", n, counter.asked)
	}
	if got := processProposal(t, a, 1, block[:3]); got != abci.ResponseProcessProposal_REJECT || counter.asked == 0 || counter.asked%3 != 0 {
		t.Fatalf("3 references to bundles nobody holds: ProcessProposal = %s after asking a peer for %d; want REJECT after asking for the 3, once or more", got, counter.asked)
	}
}

// countingPeer holds nothing and counts what it is asked for.
type countingPeer struct{ asked int }

func (c *countingPeer) String() string { return "counting" }

func (c *countingPeer) Bundles(_ context.Context, hashes [][sha256.Size]byte) ([][]byte, error) {
	c.asked += len(hashes)
	return make([][]byte, len(hashes)), nil
}
