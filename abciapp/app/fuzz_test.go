package app_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/byzlog/byzlog/abciapp/internal/workload"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// crashInput is issue 13's crash: a batch whose topic name makes the
// rejection message's cut land inside a multi-byte rune. On the code before
// the fix every app that received it by broadcast_tx_sync panicked.
func crashInput(t testing.TB) []byte {
	t.Helper()
	name := strings.Repeat("\x01", 59) + strings.Repeat("a", 6)
	b, err := wire.NewSigner(workload.Key("attacker"), chainID).Batch(name, 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := wire.BundleTx(b)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestCrashInputIsRefused: the crash input gets a clear refusal from every
// entry point an RPC user or a peer reaches, and the chain goes on.
func TestCrashInputIsRefused(t *testing.T) {
	a := open(t, t.TempDir())
	defer a.Close()
	tx := crashInput(t)
	res, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: tx})
	if err != nil || res.Code == 0 || res.Code == uint32(wire.CodeInternal) || !utf8.ValidString(res.Log) {
		t.Fatalf("CheckTx(crash input) = %+v, %v; want a refusal in valid UTF-8 that is not an internal failure", res, err)
	}
	ins, err := a.InsertTx(ctx, &abci.RequestInsertTx{Tx: tx})
	if err != nil || ins.Code == 0 || ins.Code == uint32(wire.CodeInternal) {
		t.Fatalf("InsertTx(crash input) = %+v, %v", ins, err)
	}
	finalize(t, a, 1, tx)
	commit(t, a)
}

// FuzzAppPath drives the whole app on raw transaction bytes, as an RPC
// user, a peer or a Byzantine proposer can: CheckTx, InsertTx,
// PrepareProposal, ProcessProposal of the proposal and of the raw input,
// FinalizeBlock with it, Commit, a query with it as data, and every
// response marshalled as the node's ABCI client would. No input may make a
// method fail or panic (a recovered panic answers CodeInternal, which fails
// here too), a correct proposal must be accepted, and every message must be
// valid UTF-8.
func FuzzAppPath(f *testing.F) {
	a := open(f, f.TempDir())
	f.Cleanup(func() { a.Close() })
	f.Add(validTx(f, 0))
	f.Add(crashInput(f))
	f.Add([]byte("junk"))
	f.Add([]byte{})
	f.Add(validTx(f, 5))
	height := info(f, a).LastBlockHeight
	f.Fuzz(func(t *testing.T, tx []byte) {
		height++
		now := time.Unix(1_700_000_000+height, 0)
		check, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: tx})
		mustMarshal(t, "CheckTx", check, err)
		if check.Code == uint32(wire.CodeInternal) || !utf8.ValidString(check.Log) {
			t.Fatalf("CheckTx = code %d log %q: an internal failure or invalid UTF-8", check.Code, check.Log)
		}
		ins, err := a.InsertTx(ctx, &abci.RequestInsertTx{Tx: tx})
		mustMarshal(t, "InsertTx", ins, err)
		if ins.Code == uint32(wire.CodeInternal) {
			t.Fatal("InsertTx answered an internal failure")
		}
		prep, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: height, Time: now, MaxTxBytes: 4 << 20})
		mustMarshal(t, "PrepareProposal", prep, err)
		proc, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: height, Time: now, Txs: prep.Txs})
		mustMarshal(t, "ProcessProposal", proc, err)
		if proc.Status != abci.ResponseProcessProposal_ACCEPT {
			t.Fatalf("ProcessProposal(the app's own proposal of %d txs) = %s, want ACCEPT", len(prep.Txs), proc.Status)
		}
		byz, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: height, Time: now, Txs: append(prep.Txs, tx)})
		mustMarshal(t, "ProcessProposal", byz, err)
		fin, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: height, Time: now, Txs: append(prep.Txs, tx)})
		mustMarshal(t, "FinalizeBlock", fin, err)
		for i, r := range fin.TxResults {
			if !utf8.ValidString(r.Log) || r.Code == uint32(wire.CodeInternal) {
				t.Fatalf("FinalizeBlock result %d = code %d log %q", i, r.Code, r.Log)
			}
		}
		c, err := a.Commit(ctx, &abci.RequestCommit{})
		mustMarshal(t, "Commit", c, err)
		for _, path := range wire.QueryPaths {
			q, err := a.Query(ctx, &abci.RequestQuery{Path: path, Data: tx})
			mustMarshal(t, "Query "+path, q, err)
			if q.Code == uint32(wire.CodeInternal) || !utf8.ValidString(q.Log) {
				t.Fatalf("Query(%s) = code %d log %q", path, q.Code, q.Log)
			}
		}
	})
}

// marshaler is what every ABCI response is to the node's client.
type marshaler interface{ Marshal() ([]byte, error) }

func mustMarshal(t *testing.T, method string, resp marshaler, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s = %v, want a response", method, err)
	}
	if _, err := resp.Marshal(); err != nil {
		t.Fatalf("%s response does not marshal: %v", method, err)
	}
}
