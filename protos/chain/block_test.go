package chain

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/wire"
)

// source serves one block, its results and its bundles, as a node would
// (or a liar). Without a node it holds no bundle.
type source struct {
	blk     *cmttypes.Block
	results []*abci.ExecTxResult
	err     error
	node    *bundleNode
}

func (s source) ABCIQuery(ctx context.Context, path string, data cmtbytes.HexBytes) (*ctypes.ResultABCIQuery, error) {
	if s.node == nil {
		return (&bundleNode{}).ABCIQuery(ctx, path, data)
	}
	return s.node.ABCIQuery(ctx, path, data)
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
	txs := make(cmttypes.Txs, n)
	results := make([]*abci.ExecTxResult, n)
	for i := range n {
		txs[i] = fmt.Appendf(nil, "tx %d", i)
		results[i] = &abci.ExecTxResult{Code: uint32(i % 2), Data: fmt.Appendf(nil, "data %d", i), Log: "not hashed", GasUsed: int64(i)}
	}
	blk := cmttypes.MakeBlock(7, txs, &cmttypes.Commit{}, nil)
	blk.ChainID, blk.ProposerAddress = "test-chain", make([]byte, 20)
	blk.ValidatorsHash = cmttypes.Txs{[]byte("validators")}.Hash() // a header without one has no hash
	lb := &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &blk.Header}}
	next := &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &cmttypes.Header{Height: 8, LastResultsHash: cmttypes.NewResults(results).Hash()}}}
	return blk, results, lb, next
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

// withRefs makes block 7 of n txs whose odd ones are bundle references,
// as committed, the txs a reader uses (the bundles in their place), the
// bundles, and its results and verified headers.
func withRefs(n int) (blk *cmttypes.Block, resolved cmttypes.Txs, bs [][]byte, results []*abci.ExecTxResult, lb, next *cmttypes.LightBlock) {
	bs, _ = bundles(n, 5<<10)
	txs := make(cmttypes.Txs, n)
	resolved = make(cmttypes.Txs, n)
	results = make([]*abci.ExecTxResult, n)
	for i := range n {
		txs[i] = fmt.Appendf(nil, "tx %d", i)
		if i%2 == 1 {
			txs[i] = wire.NewBundleRef(sha256.Sum256(bs[i]))
			resolved[i] = bs[i]
		} else {
			resolved[i] = txs[i]
		}
		results[i] = &abci.ExecTxResult{Data: fmt.Appendf(nil, "data %d", i)}
	}
	blk = cmttypes.MakeBlock(7, txs, &cmttypes.Commit{}, nil)
	blk.ChainID, blk.ProposerAddress = "test-chain", make([]byte, 20)
	blk.ValidatorsHash = cmttypes.Txs{[]byte("validators")}.Hash()
	blk.DataHash = blk.Data.Hash()
	lb = &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &blk.Header}}
	next = &cmttypes.LightBlock{SignedHeader: &cmttypes.SignedHeader{Header: &cmttypes.Header{Height: 8, LastResultsHash: cmttypes.NewResults(results).Hash()}}}
	return blk, resolved, bs, results, lb, next
}

// TestReadBlockResolvesBundles: a block's bundle references are read as
// the bundles they name, while what names and proves the block (its
// digest, its proofs, its header) stays over the references committed.
func TestReadBlockResolvesBundles(t *testing.T) {
	blk, resolved, bs, results, lb, next := withRefs(6)
	committedTxs := append(cmttypes.Txs(nil), blk.Txs...)
	node := holding(bs, all)
	b, kind, err := ReadBlock(context.Background(), source{blk: blk, results: results, node: node}, 7)
	if err != nil {
		t.Fatalf("ReadBlock = %q, %v", kind, err)
	}
	if node.queries != 1 {
		t.Errorf("ReadBlock asked for bundles %d times, want 1", node.queries)
	}
	for i := range resolved {
		if !bytes.Equal(b.Block.Txs[i], resolved[i]) || !bytes.Equal(b.Block.Data.Txs[i], resolved[i]) {
			t.Errorf("ReadBlock tx %d = %.20q, want %.20q", i, b.Block.Txs[i], resolved[i])
		}
		if !bytes.Equal(b.Committed()[i], committedTxs[i]) || !bytes.Equal(blk.Txs[i], committedTxs[i]) {
			t.Errorf("committed tx %d = %x (the source's %x), want %x", i, b.Committed()[i], blk.Txs[i], committedTxs[i])
		}
		if ref, ok := wire.BundleRef(committedTxs[i]); ok && ref != sha256.Sum256(b.Block.Txs[i]) {
			t.Errorf("tx %d hashes to %X, its reference names %X", i, sha256.Sum256(b.Block.Txs[i]), ref)
		}
	}
	if !bytes.Equal(blk.Data.Hash(), blk.DataHash) {
		t.Errorf("the source's block changed: its txs hash to %X, its header says %X", blk.Data.Hash(), blk.DataHash)
	}
	asCommitted := NewBlock(blk, results)
	if b.Digest() != asCommitted.Digest() {
		t.Errorf("Digest = %s, want the committed block's %s", b.Digest(), asCommitted.Digest())
	}
	for i := range resolved {
		got, want := b.Prove(i, 0, true), asCommitted.Prove(i, 0, true)
		if !proto.Equal(got, want) {
			t.Errorf("Prove(%d) = %v, want %v", i, got, want)
		}
		if err := receipt.CheckTx(lb.Header, uint32(i), committedTxs[i], got); err != nil {
			t.Errorf("CheckTx(%d) of the committed tx: %v", i, err)
		}
	}
	if kind, err := b.Check(lb, next); err != nil {
		t.Errorf("Check = %q, %v", kind, err)
	}
	plain, plainResults, _, _ := committed(3)
	if _, _, err := ReadBlock(context.Background(), source{blk: plain, results: plainResults, node: node}, 7); err != nil || node.queries != 1 {
		t.Errorf("ReadBlock of a block without references = %v, after %d bundle queries; want none", err, node.queries-1)
	}
}

// TestReadBlockTakesLocalBundles: the bundles a reader holds itself (a
// gateway's pending transactions) are taken from it and never asked of the
// node; the block reads the same as with every bundle fetched.
func TestReadBlockTakesLocalBundles(t *testing.T) {
	blk, resolved, bs, results, _, _ := withRefs(6) // references at 1, 3 and 5
	mine := map[[sha256.Size]byte][]byte{sha256.Sum256(bs[1]): bs[1], sha256.Sum256(bs[5]): bs[5]}
	local := func(sum [sha256.Size]byte) []byte { return mine[sum] }
	node := holding(bs, func(i int) bool { return i == 3 })
	src := source{blk: blk, results: results, node: node}
	if _, _, err := ReadBlock(context.Background(), src, 7); err == nil {
		t.Fatal("ReadBlock from a node that lacks bundles 1 and 5 succeeded")
	}
	node.queries, node.asked = 0, 0
	b, kind, err := ReadBlockLocal(context.Background(), src, 7, local)
	if err != nil {
		t.Fatalf("ReadBlockLocal = %q, %v", kind, err)
	}
	if node.queries != 1 || node.asked != 1 {
		t.Errorf("the node was asked %d hashes in %d queries, want 1 in 1 (bundle 3)", node.asked, node.queries)
	}
	for i := range resolved {
		if !bytes.Equal(b.Block.Txs[i], resolved[i]) {
			t.Errorf("tx %d = %.20q, want %.20q", i, b.Block.Txs[i], resolved[i])
		}
	}
	if want := NewBlock(blk, results).Digest(); b.Digest() != want {
		t.Errorf("Digest = %s, want the committed block's %s", b.Digest(), want)
	}
	mine[sha256.Sum256(bs[3])] = bs[3]
	node.queries = 0
	if _, _, err := ReadBlockLocal(context.Background(), src, 7, local); err != nil || node.queries != 0 {
		t.Errorf("ReadBlockLocal holding every bundle = %v after %d queries; want none", err, node.queries)
	}
}

func TestReadBlockBundleFailures(t *testing.T) {
	blk, _, bs, results, _, _ := withRefs(6)
	corrupt := holding(bs, all)
	corrupt.lie = func(e [][]byte) [][]byte {
		e[1] = append(bytes.Clone(e[1]), 0)
		return e
	}
	for _, tc := range []struct {
		name    string
		node    *bundleNode
		kind    string
		wantErr string
	}{
		{"a corrupted bundle", corrupt, KindBlock, "entry 1"},
		{"an error code", &bundleNode{answer: &abci.ResponseQuery{Code: 2, Log: "no"}}, KindBlock, "code 2"},
		{"a bundle missing", holding(bs, func(i int) bool { return i != 3 }), "", "block 7 tx 3 references bundle"},
		{"no bundles", nil, "", "tx 1 references bundle"},
		{"no answer", &bundleNode{err: errors.New("connection refused")}, "", "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, kind, err := ReadBlock(context.Background(), source{blk: blk, results: results, node: tc.node}, 7)
			if err == nil || kind != tc.kind || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ReadBlock = %v, kind %q, err %v; want kind %q and an error with %q", b, kind, err, tc.kind, tc.wantErr)
			}
		})
	}
}
