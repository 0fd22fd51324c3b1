package receipt

import (
	"errors"
	"fmt"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// block makes n transactions and their results, and the two headers that
// commit to them: hdr (data hash) and next (last results hash).
func block(n int) (cmttypes.Txs, *Results, *cmttypes.Header, *cmttypes.Header) {
	txs := make(cmttypes.Txs, n)
	res := make([]*abci.ExecTxResult, n)
	for i := range n {
		txs[i] = fmt.Appendf(nil, "tx %d", i)
		res[i] = &abci.ExecTxResult{Code: uint32(i % 2), Data: fmt.Appendf(nil, "data %d", i), Log: "not hashed", GasUsed: int64(i)}
	}
	r := NewResults(txs, res)
	return txs, r, &cmttypes.Header{Height: 7, DataHash: txs.Hash()}, &cmttypes.Header{Height: 8, LastResultsHash: r.Hash()}
}

func TestProofsCheck(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 64} {
		txs, r, hdr, next := block(n)
		for i := range n {
			p := r.Prove(i, 3, true)
			res, err := CheckResult(next, uint32(i), p)
			if err != nil {
				t.Fatalf("%d txs: tx %d: %v", n, i, err)
			}
			if string(res.Data) != fmt.Sprintf("data %d", i) || res.Code != uint32(i%2) || res.Log != "" {
				t.Fatalf("%d txs: tx %d proved %+v", n, i, res)
			}
			if err := CheckTx(hdr, uint32(i), txs[i], p); err != nil {
				t.Fatalf("%d txs: tx %d inclusion: %v", n, i, err)
			}
		}
	}
}

// TestAlteredProofsAreRefused: every part of a proof a gateway could change
// makes it fail, and none of them panics.
func TestAlteredProofsAreRefused(t *testing.T) {
	txs, r, hdr, next := block(5)
	good := r.Prove(2, 0, true)
	other, _ := (&abci.ExecTxResult{Data: []byte("data 9")}).Marshal()
	for name, alter := range map[string]func(p *byzlogv1.ResultProof){
		"another result":    func(p *byzlogv1.ResultProof) { p.TxResult = other },
		"a flipped byte":    func(p *byzlogv1.ResultProof) { p.TxResult[len(p.TxResult)-1] ^= 1 },
		"another index":     func(p *byzlogv1.ResultProof) { p.Index = 3 },
		"another aunt":      func(p *byzlogv1.ResultProof) { p.Aunts[0] = make([]byte, 32) },
		"no aunts":          func(p *byzlogv1.ResultProof) { p.Aunts = nil },
		"a wrong total":     func(p *byzlogv1.ResultProof) { p.Total = 4 },
		"a negative total":  func(p *byzlogv1.ResultProof) { p.Total = -1 },
		"an index too high": func(p *byzlogv1.ResultProof) { p.Index = 9 },
		"65 aunts": func(p *byzlogv1.ResultProof) {
			for range 65 {
				p.Aunts = append(p.Aunts, make([]byte, 32))
			}
		},
	} {
		p := proto.Clone(good).(*byzlogv1.ResultProof)
		alter(p)
		if _, err := CheckResult(next, 2, p); !errors.Is(err, ErrProof) {
			t.Errorf("%s: CheckResult = %v, want ErrProof", name, err)
		}
	}
	if _, err := CheckResult(next, 2, nil); !errors.Is(err, ErrProof) {
		t.Errorf("no proof: %v, want ErrProof", err)
	}
	if _, err := CheckResult(&cmttypes.Header{Height: 8, LastResultsHash: []byte("another block")}, 2, good); !errors.Is(err, ErrProof) {
		t.Errorf("another header: %v, want ErrProof", err)
	}
	if err := CheckTx(hdr, 2, txs[3], good); !errors.Is(err, ErrProof) {
		t.Errorf("another tx's bytes: %v, want ErrProof", err)
	}
	if err := CheckTx(hdr, 3, txs[2], good); !errors.Is(err, ErrProof) {
		t.Errorf("another tx index: %v, want ErrProof", err)
	}
}

// FuzzCheckResult: a proof is untrusted bytes; checking one never panics,
// and only the real one passes.
func FuzzCheckResult(f *testing.F) {
	_, r, _, next := block(5)
	good, _ := proto.Marshal(r.Prove(1, 0, false))
	f.Add(good, uint32(1))
	f.Fuzz(func(t *testing.T, b []byte, index uint32) {
		var p byzlogv1.ResultProof
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		res, err := CheckResult(next, index, &p)
		if err == nil && (index != 1 || string(res.Data) != "data 1") {
			t.Fatalf("a proof of tx %d checked as %+v", index, res)
		}
	})
}
