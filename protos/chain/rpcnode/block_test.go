package rpcnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	rpctypes "github.com/cometbft/cometbft/rpc/jsonrpc/types"
	cmttypes "github.com/cometbft/cometbft/types"
)

// blockAnswer is CometBFT's JSON-RPC answer to /block for a block of
// height h with txs, a last commit with a signature and the given chain
// ID, as its RPC server writes it.
func blockAnswer(t testing.TB, h int64, txs []cmttypes.Tx) ([]byte, *cmttypes.Block) {
	t.Helper()
	commit := &cmttypes.Commit{Height: h - 1, Round: 0, BlockID: cmttypes.BlockID{Hash: bytes.Repeat([]byte{7}, 32), PartSetHeader: cmttypes.PartSetHeader{Total: 1, Hash: bytes.Repeat([]byte{8}, 32)}},
		Signatures: []cmttypes.CommitSig{{BlockIDFlag: cmttypes.BlockIDFlagCommit, ValidatorAddress: bytes.Repeat([]byte{1}, 20), Timestamp: time.Unix(1700000000, 5).UTC(), Signature: bytes.Repeat([]byte{9}, 64)}}}
	b := cmttypes.MakeBlock(h, txs, commit, nil)
	b.ChainID = "byzlog-test"
	b.Time = time.Unix(1700000001, 42).UTC()
	b.AppHash = bytes.Repeat([]byte{3}, 32)
	// A header hashes to nothing without its validators hash.
	b.ValidatorsHash, b.NextValidatorsHash = bytes.Repeat([]byte{4}, 32), bytes.Repeat([]byte{5}, 32)
	b.ConsensusHash, b.ProposerAddress = bytes.Repeat([]byte{6}, 32), bytes.Repeat([]byte{1}, 20)
	if len(b.Hash()) == 0 {
		t.Fatal("the test block hashes to nothing")
	}
	parts, err := b.MakePartSet(cmttypes.BlockPartSizeBytes)
	if err != nil {
		t.Fatal(err)
	}
	res := &ctypes.ResultBlock{BlockID: cmttypes.BlockID{Hash: b.Hash(), PartSetHeader: parts.Header()}, Block: b}
	out, err := json.Marshal(rpctypes.NewRPCSuccessResponse(rpctypes.JSONRPCIntID(0), res))
	if err != nil {
		t.Fatal(err)
	}
	return out, b
}

func txsOf(n, size int) []cmttypes.Tx {
	txs := make([]cmttypes.Tx, n)
	for i := range txs {
		txs[i] = bytes.Repeat([]byte{byte(i)}, size+i)
	}
	return txs
}

// cometDecode decodes an answer as CometBFT's client does.
func cometDecode(answer []byte) (*ctypes.ResultBlock, error) {
	var resp rpctypes.RPCResponse
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	var rb ctypes.ResultBlock
	if err := cmtjson.Unmarshal(resp.Result, &rb); err != nil {
		return nil, err
	}
	return &rb, nil
}

// sameBlock reports how got differs from want in what DecodeBlock keeps.
func sameBlock(got, want *ctypes.ResultBlock) error {
	if got.Block == nil || want.Block == nil {
		return fmt.Errorf("a nil block: %v, %v", got.Block, want.Block)
	}
	if !bytes.Equal(got.Block.Header.Hash(), want.Block.Header.Hash()) {
		return fmt.Errorf("header hash %X, want %X", got.Block.Header.Hash(), want.Block.Header.Hash())
	}
	if !bytes.Equal(got.Block.Data.Hash(), want.Block.Data.Hash()) || len(got.Block.Txs) != len(want.Block.Txs) {
		return fmt.Errorf("%d txs hashing to %X, want %d to %X", len(got.Block.Txs), got.Block.Data.Hash(), len(want.Block.Txs), want.Block.Data.Hash())
	}
	if !got.BlockID.Equals(want.BlockID) {
		return fmt.Errorf("block ID %v, want %v", got.BlockID, want.BlockID)
	}
	return nil
}

func TestDecodeBlockMatchesCometBFT(t *testing.T) {
	for _, tc := range []struct {
		name string
		txs  []cmttypes.Tx
	}{
		{"no txs", nil},
		{"one tx", txsOf(1, 100)},
		{"many txs", txsOf(300, 1000)},
		{"an empty tx", []cmttypes.Tx{{}, {1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer, b := blockAnswer(t, 7, tc.txs)
			got, err := DecodeBlock(answer)
			if err != nil {
				t.Fatal(err)
			}
			want, err := cometDecode(answer)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameBlock(got, want); err != nil {
				t.Error(err)
			}
			if !bytes.Equal(got.Block.Header.Hash(), b.Hash()) || got.Block.Height != 7 || got.Block.LastCommit != nil {
				t.Errorf("decoded block %d hash %X (last commit %v), want 7, %X and no last commit", got.Block.Height, got.Block.Header.Hash(), got.Block.LastCommit, b.Hash())
			}
		})
	}
}

func TestDecodeBlockRefuses(t *testing.T) {
	answer, _ := blockAnswer(t, 7, txsOf(3, 10))
	rpcErr, _ := json.Marshal(rpctypes.NewRPCErrorResponse(rpctypes.JSONRPCIntID(0), -32603, "Internal error", "height 9 must be less than or equal to the current blockchain height 8"))
	for _, tc := range []struct {
		name, answer, want string
	}{
		{"not JSON", "<html>", "not JSON-RPC"},
		{"an RPC error", string(rpcErr), "current blockchain height 8"},
		{"null result", `{"jsonrpc":"2.0","id":0,"result":null}`, "no block"},
		{"no block", `{"jsonrpc":"2.0","id":0,"result":{"block_id":{}}}`, "no block"},
		{"a header that is not one", strings.Replace(string(answer), `"height":"7"`, `"height":"seven"`, 1), "header"},
		{"a tx that is not base64", strings.Replace(string(answer), `"txs":["`, `"txs":["!!`, 1), "not JSON-RPC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeBlock([]byte(tc.answer)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeBlock = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestClientBlock: Client.Block asks a node for the height given and
// decodes its answer; an answer over the response limit fails.
func TestClientBlock(t *testing.T) {
	answer, b := blockAnswer(t, 7, txsOf(20, 100))
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		asked = string(body)
		w.Write(answer)
	}))
	defer srv.Close()
	c, err := New(srv.URL, Options{MaxResponseBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h := int64(7)
	rb, err := c.Block(context.Background(), &h)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rb.Block.Header.Hash(), b.Hash()) || len(rb.Block.Txs) != 20 {
		t.Errorf("block %X with %d txs, want %X with 20", rb.Block.Header.Hash(), len(rb.Block.Txs), b.Hash())
	}
	if !strings.Contains(asked, `"method":"block"`) || !strings.Contains(asked, `"height":"7"`) {
		t.Errorf("asked %s, want method block at height \"7\"", asked)
	}
	small, err := New(srv.URL, Options{MaxResponseBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Block(context.Background(), &h); err == nil || !strings.Contains(err.Error(), "max_response_bytes") {
		t.Errorf("Block over the response limit = %v, want an error naming max_response_bytes", err)
	}
}

// FuzzDecodeBlock: a node's answer is untrusted bytes. DecodeBlock never
// panics, and whenever both it and CometBFT's own decoder read an answer,
// they read the same header, block ID and transactions.
func FuzzDecodeBlock(f *testing.F) {
	for _, txs := range [][]cmttypes.Tx{nil, txsOf(1, 10), txsOf(5, 3)} {
		a, _ := blockAnswer(f, 3, txs)
		f.Add(a)
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":0,"result":{"block":{"header":{},"data":{"txs":null}}}}`))
	f.Add([]byte(`{"result":{"block":{"header":null,"data":{"txs":["AA=="]}}}}`))
	f.Fuzz(func(t *testing.T, answer []byte) {
		got, err := DecodeBlock(answer)
		if err != nil {
			return
		}
		want, werr := cometDecode(answer)
		if werr != nil || want.Block == nil {
			return // CometBFT's stricter (or looser) elsewhere: nothing to compare
		}
		if err := sameBlock(got, want); err != nil {
			t.Errorf("DecodeBlock and CometBFT read %q differently: %v", answer, err)
		}
	})
}
