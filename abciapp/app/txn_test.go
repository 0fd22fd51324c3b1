package app_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/internal/workload"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// TestProposerExpiresTransactions: a proposer adds the expiry of every
// transaction past its timeout by the proposed block's time, first in the
// block, and none before; the other validators accept it, and it aborts.
func TestProposerExpiresTransactions(t *testing.T) {
	a := newChainApp(t, []byte(fmt.Sprintf(`{"rules_version": %d, "topics": [{"name": "t", "partitions": 1}]}`, core.TxnRulesVersion)))
	defer a.Close()
	t0 := time.Unix(1_700_000_000, 0)
	run := func(h int64, at time.Time, txs ...[]byte) []*abci.ExecTxResult {
		t.Helper()
		res, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Time: at, Txs: txs})
		if err != nil {
			t.Fatal(err)
		}
		commit(t, a)
		return res.TxResults
	}
	p := wire.NewSigner(workload.Key("txn"), chainID)
	req, err := p.Txn(0, "tx", &byzlogv1.TxnInit{TimeoutMs: 1000, ProducerId: -1, Epoch: -1})
	if err != nil {
		t.Fatal(err)
	}
	initTx, _ := wire.TxnTx(req)
	r := run(1, t0, initTx)[0]
	var out byzlogv1.TxnOutcome
	if r.Code != 0 || proto.Unmarshal(r.Data, &out) != nil {
		t.Fatalf("init: %d %s", r.Code, r.Log)
	}
	b, err := p.TransactionalBatch("t", 0, out.ProducerId, out.Epoch, 0, byzlogv1.Codec_CODEC_NONE, 0, []*byzlogv1.Record{{Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	batchTx, _ := wire.BundleTx(b)
	if r := run(2, t0.Add(time.Second), batchTx)[0]; r.Code != 0 {
		t.Fatalf("transactional batch: %d %s", r.Code, r.Log) // opens it: due at t0+2s
	}
	prep, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: 3, Time: t0.Add(1500 * time.Millisecond), MaxTxBytes: 1 << 20})
	if err != nil || len(prep.Txs) != 0 {
		t.Fatalf("a proposal before the timeout: %d txs (%v), want none", len(prep.Txs), err)
	}
	at := t0.Add(3 * time.Second)
	prep, err = a.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: 3, Time: at, MaxTxBytes: 1 << 20})
	expire, _ := wire.TxnExpireTx("tx")
	if err != nil || len(prep.Txs) != 1 || !bytes.Equal(prep.Txs[0], expire) {
		t.Fatalf("a proposal past the timeout: %d txs (%v), want the expiry of tx", len(prep.Txs), err)
	}
	pp, err := a.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: 3, Time: at, Txs: prep.Txs})
	if err != nil || pp.Status != abci.ResponseProcessProposal_ACCEPT {
		t.Fatalf("ProcessProposal of the expiry: %v %v", pp.GetStatus(), err)
	}
	r = run(3, at, prep.Txs...)[0]
	if r.Code != 0 || proto.Unmarshal(r.Data, &out) != nil || out.Epoch != 1 || out.Markers.GetCommit() || len(out.Markers.GetPartitions()) != 1 {
		t.Fatalf("the expiry: %d %s (%v), want an abort marker and epoch 1", r.Code, r.Log, &out)
	}
	if prep, err := a.PrepareProposal(ctx, &abci.RequestPrepareProposal{Height: 4, Time: at.Add(time.Hour), MaxTxBytes: 1 << 20}); err != nil || len(prep.Txs) != 0 {
		t.Fatalf("a proposal after the expiry: %d txs (%v), want none", len(prep.Txs), err)
	}
	// An expiry sent by RPC or gossip is not taken: it is the proposer's.
	if res, err := a.CheckTx(ctx, &abci.RequestCheckTx{Tx: expire}); err != nil || wire.Code(res.Code) != wire.CodeBadTxnState || !strings.Contains(res.Log, "proposer") {
		t.Fatalf("CheckTx of an expiry: %v %v, want bad_txn_state naming the proposer", res, err)
	}
	if res, err := a.InsertTx(ctx, &abci.RequestInsertTx{Tx: expire}); err != nil || wire.Code(res.Code) != wire.CodeBadTxnState {
		t.Fatalf("InsertTx of an expiry: %v %v, want bad_txn_state", res, err)
	}
}
