package app_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/abciapp/internal/workload"
	"github.com/byzlog/byzlog/abciapp/store"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

var ctx = context.Background()

const chainID = "app-test"

// openApp opens the app on a store in dir.
func openApp(t testing.TB, dir string) *app.App { return openAppWith(t, dir, nil) }

// openAppWith opens the app on a store in dir, with set changing its
// configuration.
func openAppWith(t testing.TB, dir string, set func(*app.Config)) *app.App {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := app.DefaultConfig()
	cfg.BundleDir = filepath.Clean(dir) + ".bundles" // beside the store, as byzlog-app puts it
	t.Cleanup(func() { _ = os.RemoveAll(cfg.BundleDir) })
	if set != nil {
		set(&cfg)
	}
	a, err := app.New(st, zerolog.Nop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// newChainApp opens an app on a fresh store and runs InitChain with appState.
func newChainApp(t testing.TB, appState []byte) *app.App {
	t.Helper()
	a := openApp(t, t.TempDir())
	if _, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: appState}); err != nil {
		t.Fatal(err)
	}
	return a
}

// open opens the app on dir, running InitChain on a new store (topic "t").
func open(t testing.TB, dir string) *app.App {
	t.Helper()
	a := openApp(t, dir)
	if info(t, a).LastBlockHeight == 0 {
		if _, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: []byte(`{"topics": [{"name": "t", "partitions": 1}]}`)}); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// validTx is batch seq of one producer to t/0, valid once seq-1 is committed.
func validTx(t testing.TB, seq uint64) []byte {
	t.Helper()
	return producerTx(t, "producer", seq, byzlogv1.Codec_CODEC_NONE, &byzlogv1.Record{Value: []byte(fmt.Sprint("record ", seq))})
}

// producerTx is batch seq of the producer named key to t/0.
func producerTx(t testing.TB, key string, seq uint64, codec byzlogv1.Codec, records ...*byzlogv1.Record) []byte {
	t.Helper()
	b, err := wire.NewSigner(workload.Key(key), chainID).Batch("t", 0, seq, codec, records)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := wire.BundleTx(b)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func finalize(t testing.TB, a *app.App, height int64, txs ...[]byte) []byte {
	t.Helper()
	res, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: height, Txs: txs})
	if err != nil {
		t.Fatalf("FinalizeBlock(%d) = %v", height, err)
	}
	if len(res.TxResults) != len(txs) {
		t.Fatalf("FinalizeBlock(%d): %d results for %d txs", height, len(res.TxResults), len(txs))
	}
	return res.AppHash
}

func commit(t testing.TB, a *app.App) {
	t.Helper()
	if _, err := a.Commit(ctx, &abci.RequestCommit{}); err != nil {
		t.Fatalf("Commit() = %v", err)
	}
}

func info(t testing.TB, a *app.App) *abci.ResponseInfo {
	t.Helper()
	res, err := a.Info(ctx, &abci.RequestInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRestartAndReplay is the crash story: what Commit persisted survives a
// restart, a block finalized but not committed is forgotten, and CometBFT's
// replay of that block gives the same app hash.
func TestRestartAndReplay(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir)
	h1 := finalize(t, a, 1, validTx(t, 0))
	commit(t, a)
	h2 := finalize(t, a, 2, validTx(t, 1), validTx(t, 2))
	// Crash after FinalizeBlock, before Commit.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	a = open(t, dir)
	defer a.Close()
	if got := info(t, a); got.LastBlockHeight != 1 || !bytes.Equal(got.LastBlockAppHash, h1) {
		t.Fatalf("Info() after restart = height %d hash %X, want height 1 hash %X", got.LastBlockHeight, got.LastBlockAppHash, h1)
	}
	if replayed := finalize(t, a, 2, validTx(t, 1), validTx(t, 2)); !bytes.Equal(replayed, h2) {
		t.Fatalf("replayed block 2 app hash = %X, want %X as before the crash", replayed, h2)
	}
	commit(t, a)
	if got := info(t, a); got.LastBlockHeight != 2 || !bytes.Equal(got.LastBlockAppHash, h2) {
		t.Errorf("Info() = height %d hash %X, want height 2 hash %X", got.LastBlockHeight, got.LastBlockAppHash, h2)
	}
}

// TestFreshReplayMatches replays the same seeded workload into two fresh
// RocksDB stores: two validators executing one chain must agree on every app
// hash, and the store must read back exactly what it wrote.
func TestFreshReplayMatches(t *testing.T) {
	run := func() [][]byte {
		g := workload.New(7, chainID)
		a := newChainApp(t, g.Genesis())
		defer a.Close()
		var hashes [][]byte
		for h := int64(1); h <= 25; h++ {
			hashes = append(hashes, finalize(t, a, h, g.Block(10)...))
			commit(t, a)
		}
		return hashes
	}
	x, y := run(), run()
	for i := range x {
		if !bytes.Equal(x[i], y[i]) {
			t.Fatalf("height %d: app hash %X on one store, %X on another", i+1, x[i], y[i])
		}
	}
}

func TestCommitWithoutFinalizeFails(t *testing.T) {
	a := open(t, t.TempDir())
	defer a.Close()
	if _, err := a.Commit(ctx, &abci.RequestCommit{}); err == nil {
		t.Fatal("Commit() before any FinalizeBlock = nil error, want an error")
	}
	finalize(t, a, 1)
	commit(t, a)
	if _, err := a.Commit(ctx, &abci.RequestCommit{}); err == nil {
		t.Fatal("a second Commit() of the same block = nil error, want an error")
	}
	if _, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: 3}); err == nil {
		t.Fatal("FinalizeBlock(3) after committing 1 = nil error, want an error")
	}
}

func TestMempoolAndProposals(t *testing.T) {
	a := open(t, t.TempDir())
	defer a.Close()
	good, bad := validTx(t, 0), []byte("junk")

	for _, c := range []struct {
		tx   []byte
		want wire.Code
	}{{good, wire.CodeOK}, {bad, wire.CodeMalformedTx}} {
		res, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: c.tx})
		if err != nil {
			t.Fatal(err)
		}
		if wire.Code(res.Code) != c.want || (c.want != wire.CodeOK && (res.Log == "" || res.Codespace != wire.Codespace)) {
			t.Errorf("CheckTx(%q) = code %d log %q codespace %q, want %s with a reason", c.tx[:4], res.Code, res.Log, res.Codespace, c.want)
		}
	}

	prep, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{Txs: [][]byte{bad, good, good}, MaxTxBytes: int64(len(good)) + 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(prep.Txs) != 1 || !bytes.Equal(prep.Txs[0], good) {
		t.Errorf("PrepareProposal(junk, good, good; room for one) proposed %d txs, want just the valid one", len(prep.Txs))
	}

	for _, c := range []struct {
		txs  [][]byte
		want abci.ResponseProcessProposal_ProposalStatus
	}{
		{[][]byte{good}, abci.ResponseProcessProposal_ACCEPT},
		{nil, abci.ResponseProcessProposal_ACCEPT},
		{[][]byte{good, bad}, abci.ResponseProcessProposal_REJECT},
	} {
		res, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: 1, Txs: c.txs})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != c.want {
			t.Errorf("ProcessProposal(%d txs) = %s, want %s", len(c.txs), res.Status, c.want)
		}
	}
}

func TestQuery(t *testing.T) {
	a := open(t, t.TempDir())
	defer a.Close()
	hash := finalize(t, a, 1, validTx(t, 0))
	commit(t, a)
	res, err := a.Query(ctx, &abci.RequestQuery{Path: wire.PathState})
	if err != nil {
		t.Fatal(err)
	}
	var st byzlogv1.AppState
	if err := proto.Unmarshal(res.Value, &st); err != nil {
		t.Fatalf("Query(/state) value: %v", err)
	}
	if st.Height != 1 || !bytes.Equal(st.AppHash, hash) || st.Params.GetChainId() != chainID || res.Code != 0 || res.Height != 1 {
		t.Errorf("Query(/state) = %v code %d, want height 1, hash %X, chain %s", &st, res.Code, hash, chainID)
	}
	req, err := proto.Marshal(&byzlogv1.RecordsRequest{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = a.Query(ctx, &abci.RequestQuery{Path: wire.PathRecords, Data: req})
	if err != nil {
		t.Fatal(err)
	}
	var recs byzlogv1.RecordsResponse
	if err := proto.Unmarshal(res.Value, &recs); err != nil || len(recs.Records) != 1 || recs.NextOffset != 1 {
		t.Errorf("Query(/records) = %v (%v), want the one committed record", &recs, err)
	}
	res, err = a.Query(ctx, &abci.RequestQuery{Path: "/nope"})
	if err != nil {
		t.Fatal(err)
	}
	if wire.Code(res.Code) != wire.CodeUnknownQuery || res.Log == "" || res.Codespace != wire.Codespace {
		t.Errorf("Query(/nope) = code %d log %q, want %s with a reason", res.Code, res.Log, wire.CodeUnknownQuery)
	}
}

func TestInitChainRefusesACommittedStore(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir)
	finalize(t, a, 1, validTx(t, 0))
	commit(t, a)
	_, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: []byte(`{}`)})
	if err == nil || !strings.Contains(err.Error(), "committed height 1") {
		t.Errorf("InitChain after a commit = %v, want a refusal naming the height", err)
	}
	a.Close()
}

func TestInitChainRejectsBadGenesis(t *testing.T) {
	a := openApp(t, t.TempDir())
	defer a.Close()
	_, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: []byte(`{"admins": ["xyz"]}`)})
	if err == nil || !strings.Contains(err.Error(), "admins[0]") {
		t.Errorf("InitChain(bad admin key) = %v, want an error naming admins[0]", err)
	}
}
