package app_test

import (
	"bytes"
	"crypto/sha256"
	"reflect"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/abciapp/internal/workload"
	"github.com/byzlog/byzlog/protos/wire"
)

// TestProcessProposalPrechecksOnce executes one seeded workload (valid,
// duplicate, gapped, forged and garbage transactions) on two apps: one sees
// each block proposed first, as a validator does, and one only finalizes
// it, as a node replaying does. FinalizeBlock must take the proposal's
// prechecks instead of verifying every signature again, and both apps must
// answer every block identically. A round whose proposal was not decided
// leaves nothing FinalizeBlock uses.
func TestProcessProposalPrechecksOnce(t *testing.T) {
	g := workload.New(11, chainID)
	genesis := g.Genesis()
	seen, replayed := newChainApp(t, genesis), newChainApp(t, genesis)
	defer seen.Close()
	defer replayed.Close()

	var txs int64
	for h := int64(1); h <= 20; h++ {
		block := g.Block(8)
		if h%5 == 0 {
			// Round 0 proposed another block, which was not decided.
			if _, err := seen.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: h, Txs: g.Block(4)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := seen.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: h, Txs: block}); err != nil {
			t.Fatal(err)
		}
		before := app.PrecheckHits(seen)
		a, err := seen.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Txs: block})
		if err != nil {
			t.Fatal(err)
		}
		if got := app.PrecheckHits(seen) - before; got != int64(len(block)) {
			t.Fatalf("height %d: FinalizeBlock took %d of %d transactions from ProcessProposal's prechecks", h, got, len(block))
		}
		txs += int64(len(block))
		b, err := replayed.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Txs: block})
		if err != nil {
			t.Fatal(err)
		}
		sameBlock(t, h, "after the proposal", a, b)
		commit(t, seen)
		commit(t, replayed)
	}
	if hits := app.PrecheckHits(replayed); hits != 0 {
		t.Errorf("the app that saw no proposal took %d prechecks from a cache", hits)
	}
	if txs == 0 {
		t.Fatal("the workload made no transactions")
	}
}

// TestProposalTakesTheMempoolsPrecheck: a validator has admitted most of a
// proposed block's transactions (by RPC or gossip) before the proposal
// comes; ProcessProposal takes those from the mempool, verifying no
// signature again, and the block must execute exactly as on a node that
// admitted nothing. Transactions the mempool refused (forged, garbage) are
// prechecked in full.
func TestProposalTakesTheMempoolsPrecheck(t *testing.T) {
	g := workload.New(12, chainID)
	genesis := g.Genesis()
	validator, replayed := newChainApp(t, genesis), newChainApp(t, genesis)
	defer validator.Close()
	defer replayed.Close()

	var admitted int64
	for h := int64(1); h <= 20; h++ {
		block := g.Block(8)
		var held int64
		for i, tx := range block {
			if i%4 == 3 {
				continue // not gossiped here in time
			}
			res, err := validator.InsertTx(ctx, &abci.RequestInsertTx{Tx: tx})
			if err != nil {
				t.Fatal(err)
			}
			if res.Code == 0 {
				held++
			}
		}
		before := app.PrecheckPooled(validator)
		pp, err := validator.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: h, Txs: block})
		if err != nil {
			t.Fatal(err)
		}
		if got := app.PrecheckPooled(validator) - before; got != held {
			t.Fatalf("height %d: ProcessProposal took %d transactions from the mempool, which held %d of them", h, got, held)
		}
		admitted += held
		replayedPP, err := replayed.ProcessProposal(ctx, &abci.RequestProcessProposal{Height: h, Txs: block})
		if err != nil {
			t.Fatal(err)
		}
		if pp.Status != replayedPP.Status {
			t.Fatalf("height %d: proposal %s with the mempool, %s without", h, pp.Status, replayedPP.Status)
		}
		a, err := validator.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Txs: block})
		if err != nil {
			t.Fatal(err)
		}
		b, err := replayed.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Txs: block})
		if err != nil {
			t.Fatal(err)
		}
		sameBlock(t, h, "with the mempool's prechecks", a, b)
		commit(t, validator)
		commit(t, replayed)
	}
	if admitted == 0 {
		t.Fatal("the mempool admitted none of the workload's transactions")
	}
	if n := app.PrecheckPooled(replayed); n != 0 {
		t.Errorf("the app that admitted nothing took %d prechecks from its mempool", n)
	}
}

// sameBlock fails t unless block h executed to the same app hash and
// results on both apps: got (the one with prechecks taken from somewhere,
// as how says) and want (the one without).
func sameBlock(t *testing.T, h int64, how string, got, want *abci.ResponseFinalizeBlock) {
	t.Helper()
	if !bytes.Equal(got.AppHash, want.AppHash) {
		t.Fatalf("height %d: app hash %X %s, %X without", h, got.AppHash, how, want.AppHash)
	}
	for i := range got.TxResults {
		if !reflect.DeepEqual(got.TxResults[i], want.TxResults[i]) {
			t.Fatalf("height %d tx %d: result %v %s, %v without", h, i, got.TxResults[i], how, want.TxResults[i])
		}
	}
}

// TestQueryTx: a node answers where a transaction it committed went
// (wire.PathTx), which gateways ask instead of CometBFT's transaction
// index; what it did not commit, or a request that is not a hash, gets a
// code and a message.
func TestQueryTx(t *testing.T) {
	a := open(t, t.TempDir())
	defer a.Close()
	first, second, third := validTx(t, 0), validTx(t, 1), validTx(t, 2)
	finalize(t, a, 1, first)
	commit(t, a)
	finalize(t, a, 2, second, third)
	commit(t, a)
	query := func(data []byte) *abci.ResponseQuery {
		t.Helper()
		res, err := a.Query(ctx, &abci.RequestQuery{Path: wire.PathTx, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, c := range []struct {
		tx            []byte
		height, index int64
	}{{first, 1, 0}, {second, 2, 0}, {third, 2, 1}} {
		sum := sha256.Sum256(c.tx)
		if res := query(sum[:]); res.Code != 0 || res.Height != c.height || res.Index != c.index {
			t.Errorf("/tx %X = code %d %q at %d/%d, want %d/%d", sum[:4], res.Code, res.Log, res.Height, res.Index, c.height, c.index)
		}
	}
	other := sha256.Sum256(validTx(t, 3))
	if res := query(other[:]); wire.Code(res.Code) != wire.CodeNotFound || !strings.Contains(res.Log, "has not committed") {
		t.Errorf("/tx of a transaction never committed = %s %q, want %s", wire.Code(res.Code), res.Log, wire.CodeNotFound)
	}
	if res := query(other[:5]); wire.Code(res.Code) != wire.CodeBadQuery || !strings.Contains(res.Log, "SHA-256") {
		t.Errorf("/tx of 5 bytes = %s %q, want %s", wire.Code(res.Code), res.Log, wire.CodeBadQuery)
	}
}
