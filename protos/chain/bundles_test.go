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
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// bundleNode answers /bundles as a node does: one entry per hash, in
// order, empty for a bundle it does not hold and for every one once its
// answer holds bound bytes (wire.MaxBundlesBytes when 0); a request it
// must refuse gets a code. lie, when set, changes the entries it
// answers; answer, when set, is its answer to everything.
type bundleNode struct {
	held    map[[sha256.Size]byte][]byte
	bound   int
	lie     func([][]byte) [][]byte
	answer  *abci.ResponseQuery
	err     error
	queries int
	asked   int // hashes, over every query
}

func (n *bundleNode) ABCIQuery(_ context.Context, path string, data cmtbytes.HexBytes) (*ctypes.ResultABCIQuery, error) {
	n.queries++
	if n.err != nil {
		return nil, n.err
	}
	if n.answer != nil {
		return &ctypes.ResultABCIQuery{Response: *n.answer}, nil
	}
	refuse := func(format string, args ...any) (*ctypes.ResultABCIQuery, error) {
		return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Code: 1, Log: fmt.Sprintf(format, args...)}}, nil
	}
	var req byzlogv1.BundlesRequest
	if path != wire.PathBundles {
		return refuse("unknown path %s", path)
	}
	if err := proto.Unmarshal(data, &req); err != nil {
		return refuse("bad request: %v", err)
	}
	n.asked += len(req.Hashes)
	if len(req.Hashes) > wire.MaxBundlesPerQuery {
		return refuse("%d hashes, more than %d", len(req.Hashes), wire.MaxBundlesPerQuery)
	}
	bound := n.bound
	if bound == 0 {
		bound = wire.MaxBundlesBytes
	}
	out := &byzlogv1.Bundles{Bundles: make([][]byte, len(req.Hashes))}
	size, full := 0, false
	for i, h := range req.Hashes {
		if len(h) != sha256.Size {
			return refuse("hash %d has %d bytes", i, len(h))
		}
		b := n.held[[sha256.Size]byte(h)]
		if full || b == nil {
			continue
		}
		if size+len(b) > bound {
			full = true
			continue
		}
		out.Bundles[i], size = b, size+len(b)
	}
	if n.lie != nil {
		out.Bundles = n.lie(out.Bundles)
	}
	value, err := proto.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Value: value}}, nil
}

// bundles makes n bundles of size bytes each (distinct), and their hashes.
func bundles(n, size int) ([][]byte, [][sha256.Size]byte) {
	bs := make([][]byte, n)
	hs := make([][sha256.Size]byte, n)
	for i := range bs {
		bs[i] = bytes.Repeat(fmt.Appendf(nil, "bundle %d;", i), size/8+1)[:size]
		hs[i] = sha256.Sum256(bs[i])
	}
	return bs, hs
}

// holding is a node that holds bs[i] for each i where keep(i).
func holding(bs [][]byte, keep func(i int) bool) *bundleNode {
	n := &bundleNode{held: map[[sha256.Size]byte][]byte{}}
	for i, b := range bs {
		if keep(i) {
			n.held[sha256.Sum256(b)] = b
		}
	}
	return n
}

func all(int) bool    { return true }
func even(i int) bool { return i%2 == 0 }

func TestFetchBundles(t *testing.T) {
	small, smallHashes := bundles(600, 4<<10)
	large, largeHashes := bundles(8, 1<<20)
	for _, tc := range []struct {
		name    string
		bs      [][]byte
		hashes  [][sha256.Size]byte
		node    *bundleNode
		held    func(i int) bool // which entries come back (the others nil)
		queries int
	}{
		{"no hashes", nil, nil, holding(small, all), all, 0},
		{"all held", small[:3], smallHashes[:3], holding(small, all), all, 1},
		{"more than a query's hashes", small, smallHashes, holding(small, all), all, 3},
		{"more than an answer's bytes", large, largeHashes, holding(large, all), all, 3},
		// 600 bundles of 4 KiB, 25 to an answer of 100 KiB: 256 hashes
		// take 11 answers, twice, and the last 88 take 4.
		{"both bounds", small, smallHashes, func() *bundleNode { n := holding(small, all); n.bound = 100 << 10; return n }(), all, 26},
		{"none held", small[:5], smallHashes[:5], holding(nil, all), func(int) bool { return false }, 1},
		{"some held", small[:9], smallHashes[:9], holding(small, even), even, 2},
		{"some held, past the byte bound", large, largeHashes, holding(large, even), even, 3},
		// A node that drips one bundle an answer costs one query a hash.
		{"one bundle an answer", small[:40], smallHashes[:40], func() *bundleNode { n := holding(small, all); n.bound = 4 << 10; return n }(), all, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FetchBundles(context.Background(), tc.node, tc.hashes)
			if err != nil {
				t.Fatalf("FetchBundles = %v", err)
			}
			if len(got) != len(tc.hashes) {
				t.Fatalf("FetchBundles = %d entries, want %d", len(got), len(tc.hashes))
			}
			for i := range got {
				want := tc.bs[i]
				if !tc.held(i) {
					want = nil
				}
				if !bytes.Equal(got[i], want) || (want == nil) != (got[i] == nil) {
					t.Fatalf("FetchBundles entry %d = %d bytes, want %d", i, len(got[i]), len(want))
				}
			}
			if tc.node.queries != tc.queries {
				t.Errorf("FetchBundles asked %d times, want %d", tc.node.queries, tc.queries)
			}
		})
	}
}

// TestFetchBundlesLiars: a node that answers anything but its bundles, or
// a code, served wrong data (ErrBundleAnswer); one that does not answer
// did not.
func TestFetchBundlesLiars(t *testing.T) {
	bs, hashes := bundles(5, 4<<10)
	liar := func(lie func([][]byte) [][]byte) *bundleNode {
		n := holding(bs, all)
		n.lie = lie
		return n
	}
	for _, tc := range []struct {
		name    string
		node    *bundleNode
		wantErr string // in the error
		wrong   bool   // the error wraps ErrBundleAnswer
	}{
		{"a flipped byte", liar(func(e [][]byte) [][]byte {
			e[2] = bytes.Clone(e[2])
			e[2][7] ^= 1
			return e
		}), "entry 2 (4096 bytes) hashes to", true},
		{"another bundle", liar(func(e [][]byte) [][]byte { e[0], e[1] = e[1], e[0]; return e }), "entry 0", true},
		{"an entry missing", liar(func(e [][]byte) [][]byte { return e[1:] }), "4 entries for 5 hashes", true},
		{"an entry more", liar(func(e [][]byte) [][]byte { return append(e, nil) }), "6 entries for 5 hashes", true},
		{"garbage", &bundleNode{answer: &abci.ResponseQuery{Value: []byte{0xff, 0xff, 0xff}}}, "does not decode", true},
		{"an error code", &bundleNode{answer: &abci.ResponseQuery{Code: 7, Log: strings.Repeat("x", 1000)}}, "code 7", true},
		{"no answer", &bundleNode{err: errors.New("connection refused")}, "connection refused", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FetchBundles(context.Background(), tc.node, hashes)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.Is(err, ErrBundleAnswer) != tc.wrong {
				t.Fatalf("FetchBundles = %d entries, %v; want an error with %q, wrapping ErrBundleAnswer: %v", len(got), err, tc.wantErr, tc.wrong)
			}
			if len(err.Error()) > 600 {
				t.Errorf("FetchBundles error of %d bytes: a node's log is quoted whole", len(err.Error()))
			}
		})
	}
}

// FuzzDecodeBundles: an answer to a bundles query is untrusted bytes;
// decoding one never panics, and what it passes is one entry per hash,
// each nil or the bundle asked for.
func FuzzDecodeBundles(f *testing.F) {
	bs, hashes := bundles(3, 64)
	good, _ := proto.Marshal(&byzlogv1.Bundles{Bundles: [][]byte{bs[0], nil, bs[2]}})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00, 0x0a, 0x00, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, value []byte) {
		got, err := decodeBundles(value, hashes)
		if err != nil {
			if !errors.Is(err, ErrBundleAnswer) {
				t.Fatalf("decodeBundles error %v does not wrap ErrBundleAnswer", err)
			}
			return
		}
		if len(got) != len(hashes) {
			t.Fatalf("decodeBundles = %d entries for %d hashes", len(got), len(hashes))
		}
		for i, e := range got {
			if e != nil && !bytes.Equal(e, bs[i]) {
				t.Fatalf("decodeBundles entry %d = %x, not the bundle asked for", i, e)
			}
		}
	})
}
