package rpcnode

import (
	"bytes"
	"strings"
	"testing"

	cmttypes "github.com/cometbft/cometbft/types"
)

// TestScanBlockReadsCometBFT: every answer in the shape CometBFT writes
// takes the fast path and reads as encoding/json reads it.
func TestScanBlockReadsCometBFT(t *testing.T) {
	for _, txs := range [][]cmttypes.Tx{nil, txsOf(1, 100), txsOf(300, 1000), {{}, {1}}} {
		answer, _ := blockAnswer(t, 9, txs)
		for name, a := range map[string][]byte{"compact": answer, "spaced": spaced(answer)} {
			got, ok := scanBlock(a)
			if !ok {
				t.Fatalf("%s answer with %d txs: the fast path gave up", name, len(txs))
			}
			want, err := decodeBlockJSON(a)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameBlock(got, want); err != nil {
				t.Errorf("%s answer with %d txs: %v", name, len(txs), err)
			}
		}
	}
}

// spaced puts whitespace around every structural character outside strings.
func spaced(a []byte) []byte {
	var out []byte
	in := false
	for i, c := range a {
		if c == '"' && (i == 0 || a[i-1] != '\\') {
			in = !in
		}
		if !in && strings.IndexByte("{}[],:", c) >= 0 {
			out = append(out, ' ', '\n', c, '\t')
			continue
		}
		out = append(out, c)
	}
	return out
}

// TestScanBlockGivesUp: what the fast path cannot be sure to read as
// encoding/json does goes to encoding/json, which reads it (or refuses it)
// its own way.
func TestScanBlockGivesUp(t *testing.T) {
	answer, _ := blockAnswer(t, 9, txsOf(3, 10))
	a := string(answer)
	for _, tc := range []struct{ name, answer string }{
		{"a key in another case", strings.Replace(a, `"txs":`, `"Txs":`, 1)},
		{"a key with an escape", strings.Replace(a, `"header":`, `"he\u0061der":`, 1)},
		{"a repeated txs key", strings.Replace(a, `"txs":[`, `"txs":[],"txs":[`, 1)},
		{"an escape in a tx", strings.Replace(a, `"txs":["`, `"txs":["\u0041`, 1)},
		{"an RPC error", strings.Replace(a, `"result":`, `"error":{"code":1},"result":`, 1)},
		{"trailing bytes", a + "x"},
		{"not JSON", "<html>"},
		{"deep nesting", `{"jsonrpc":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,` + a[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := scanBlock([]byte(tc.answer)); ok {
				t.Errorf("scanBlock read %.80q..., want it to give up", tc.answer)
			}
		})
	}
	// Given up, the answer still reads as encoding/json reads it.
	other := strings.Replace(a, `"txs":`, `"Txs":`, 1)
	got, err := DecodeBlock([]byte(other))
	if err != nil || len(got.Block.Txs) != 3 {
		t.Fatalf("DecodeBlock(a \"Txs\" key) = %v, %v; want encoding/json's reading, 3 txs", got, err)
	}
}

// FuzzScanBlock: untrusted bytes. scanBlock never panics, and whenever it
// and encoding/json both read an answer, they read the same block.
func FuzzScanBlock(f *testing.F) {
	for _, txs := range [][]cmttypes.Tx{nil, txsOf(1, 10), txsOf(5, 3)} {
		a, _ := blockAnswer(f, 3, txs)
		f.Add(a)
		f.Add(spaced(a))
	}
	f.Add([]byte(`{"result":{"block":{"header":{},"data":{"txs":[null,"","AA=="]}}}}`))
	f.Fuzz(func(t *testing.T, answer []byte) {
		got, ok := scanBlock(answer)
		if !ok {
			return
		}
		want, err := decodeBlockJSON(answer)
		if err != nil {
			return // encoding/json refuses what the fast path skipped unread
		}
		if err := sameBlock(got, want); err != nil {
			t.Errorf("the fast path and encoding/json read %q differently: %v", answer, err)
		}
		for i := range got.Block.Txs {
			if (got.Block.Txs[i] == nil) != (want.Block.Txs[i] == nil) || !bytes.Equal(got.Block.Txs[i], want.Block.Txs[i]) {
				t.Errorf("tx %d: %x, want %x", i, got.Block.Txs[i], want.Block.Txs[i])
			}
		}
	})
}

// BenchmarkDecodeBlock: a block of 30 bundles of 50 KB, as a loaded
// cluster commits them, by the fast path and by encoding/json.
func BenchmarkDecodeBlock(b *testing.B) {
	answer, _ := blockAnswer(b, 9, txsOf(30, 50_000))
	for _, bc := range []struct {
		name   string
		decode func([]byte) error
	}{
		{"scan", func(a []byte) error { _, err := DecodeBlock(a); return err }},
		{"encoding-json", func(a []byte) error { _, err := decodeBlockJSON(a); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(answer)))
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.decode(answer); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
