package chain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
)

// source serves one block and its results, as a node would (or a liar).
type source struct {
	blk     *cmttypes.Block
	results []*abci.ExecTxResult
	err     error
}

func (s source) Block(_ context.Context, h *int64) (*ctypes.ResultBlock, error) {
	if s.err != nil {
		return nil, s.err
	}
	return &ctypes.ResultBlock{Block: s.blk}, nil
}

func (s source) BlockResults(_ context.Context, h *int64) (*ctypes.ResultBlockResults, error) {
	return &ctypes.ResultBlockResults{Height: *h, TxsResults: s.results}, nil
}

// committed makes block 7 with n txs, its results, and the verified
// headers of 7 and 8 that commit to them.
func committed(n int) (*cmttypes.Block, []*abci.ExecTxResult, *cmttypes.LightBlock, *cmttypes.LightBlock) {
	txs, r, _, _ := block(n)
	blk := cmttypes.MakeBlock(7, txs, &cmttypes.Commit{}, nil)
	blk.ChainID, blk.ProposerAddress = "test-chain", make([]byte, 20)
	blk.ValidatorsHash = cmttypes.Txs{[]byte("validators")}.Hash() // a header without one has no hash
	lb := &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &blk.Header}}
	next := &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &cmttypes.Header{Height: 8, LastResultsHash: r.Hash()}}}
	return blk, r.results, lb, next
}

func TestReadBlockChecks(t *testing.T) {
	blk, results, lb, next := committed(5)
	forged := cmttypes.MakeBlock(7, append(cmttypes.Txs{[]byte("forged")}, blk.Txs[1:]...), &cmttypes.Commit{}, nil)
	forged.Header = blk.Header // the committed header over other txs
	other, _, otherLB, _ := committed(4)
	altered := append([]*abci.ExecTxResult{{Code: 0, Data: []byte("other offsets")}}, results[1:]...)
	for _, tc := range []struct {
		name    string
		src     source
		lb      *cmttypes.LightBlock
		read    string // kind ReadBlock fails with ("-": it does not)
		check   string // kind Check fails with
		header  bool   // CheckHeader fails too (it leaves results to Check)
		wantErr string
	}{
		{"the committed block", source{blk: blk, results: results}, lb, "-", "", false, ""},
		{"a tx swapped under the header", source{blk: forged, results: results}, lb, KindBlock, "", false, "DataHash"},
		{"a result missing", source{blk: blk, results: results[1:]}, lb, KindResults, "", false, "5 txs but 4 results"},
		{"another block", source{blk: other, results: results[:4]}, lb, "-", KindBlock, true, "hashes to"},
		{"altered results", source{blk: blk, results: altered}, lb, "-", KindResults, false, "results of block 7"},
		{"headers of another block", source{blk: blk, results: results}, otherLB, "-", KindBlock, true, "hashes to"},
		{"a node that does not answer", source{err: errors.New("connection refused")}, lb, "", "", false, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, kind, err := ReadBlock(context.Background(), tc.src, 7)
			if tc.read != "-" {
				if err == nil || kind != tc.read || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadBlock: kind %q, err %v; want kind %q and an error with %q", kind, err, tc.read, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadBlock: %v", err)
			}
			if kind, err := b.CheckHeader(tc.lb); (err != nil) != tc.header || (err != nil && kind != KindBlock) {
				t.Fatalf("CheckHeader: kind %q, err %v; want it to fail: %v", kind, err, tc.header)
			}
			kind, err = b.Check(tc.lb, next)
			if kind != tc.check || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Check: kind %q, err %v; want kind %q and error %q", kind, err, tc.check, tc.wantErr)
			}
		})
	}
}

// The gateway compares digests: a header and results give the same one
// as the block they belong to, and any change to either gives another.
func TestDigestNamesBlockAndResults(t *testing.T) {
	blk, results, _, _ := committed(3)
	b := NewBlock(blk, results)
	if got := Digest(blk.Hash(), results); got != b.Digest() {
		t.Fatalf("digest from the header %s, from the block %s", got, b.Digest())
	}
	changed := append([]*abci.ExecTxResult{{Code: 9}}, results[1:]...)
	other, _, _, _ := committed(2)
	for name, d := range map[string]string{
		"results": Digest(blk.Hash(), changed),
		"block":   Digest(other.Hash(), results),
	} {
		if d == b.Digest() {
			t.Errorf("another %s gives the same digest %s", name, d)
		}
	}
	if s := fmt.Sprint(b.Height()); s != "7" {
		t.Fatalf("height %s", s)
	}
}

// TestBlockWithoutLastCommit: a block as rpcnode.DecodeBlock reads it (no
// last commit, no evidence) is named by its header's hash, and checks
// against the verified headers (Block.Hash is nil without a last commit).
func TestBlockWithoutLastCommit(t *testing.T) {
	blk, results, lb, next := committed(3)
	bare := &cmttypes.Block{Header: blk.Header, Data: blk.Data}
	b, kind, err := ReadBlock(context.Background(), source{blk: bare, results: results}, 7)
	if err != nil {
		t.Fatalf("ReadBlock of a block without its last commit = %q, %v", kind, err)
	}
	if kind, err := b.Check(lb, next); err != nil {
		t.Errorf("Check = %q, %v; want the verified headers to name it", kind, err)
	}
	if b.Digest() != NewBlock(blk, results).Digest() {
		t.Errorf("digest %s, want the whole block's %s", b.Digest(), NewBlock(blk, results).Digest())
	}
}
