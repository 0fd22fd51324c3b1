package bundles_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/byzlog/byzlog/abciapp/bundles"
)

func bundle(s string) ([]byte, bundles.Hash) { b := []byte(s); return b, sha256.Sum256(b) }

func open(t *testing.T, dir string) *bundles.Store {
	t.Helper()
	s, err := bundles.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func held(t *testing.T, s *bundles.Store, want map[string]bool) {
	t.Helper()
	for name, ok := range want {
		b, h := bundle(name)
		got, err := s.Get(h)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (got != nil) || (ok && !bytes.Equal(got, b)) {
			t.Errorf("bundle %q: held = %v (%q), want held = %v", name, got != nil, got, ok)
		}
	}
}

// The life of bundles: proposed (durable across a reopen), decided or
// dropped when their height commits, pruned with their block unless a
// later block references them again.
func TestProposeCommitPrune(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	a, ha := bundle("a")
	b, hb := bundle("b")
	c, hc := bundle("c")
	if err := s.Propose(5, []bundles.Hash{ha, hb}, [][]byte{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := s.Propose(5, []bundles.Hash{hc}, [][]byte{c}); err != nil { // a second round
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	t.Cleanup(func() { _ = s.Close() })
	held(t, s, map[string]bool{"a": true, "b": true, "c": true})

	// Block 5 decides c then a; b, proposed in a round not decided, goes.
	d, hd := bundle("d") // fetched: this node never saw it proposed
	if err := s.Commit(5, []bundles.Hash{hc, ha, hd}, map[bundles.Hash][]byte{hd: d}); err != nil {
		t.Fatal(err)
	}
	held(t, s, map[string]bool{"a": true, "b": false, "c": true, "d": true})
	refs, err := s.Block(5)
	if err != nil || fmt.Sprint(refs) != fmt.Sprint([]bundles.Hash{hc, ha, hd}) {
		t.Fatalf("Block(5) = %x, %v", refs, err)
	}

	// Block 7 references a again (a Byzantine proposer may re-propose a
	// committed bundle; it executes as a duplicate).
	if err := s.Propose(7, []bundles.Hash{ha}, [][]byte{a}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(6, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(7, []bundles.Hash{ha}, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(7); err != nil || n != 1 {
		t.Fatalf("Prune(7) = %d, %v; want block 5's bundles dropped", n, err)
	}
	held(t, s, map[string]bool{"a": true, "c": false, "d": false})
	if n, err := s.Prune(8); err != nil || n != 1 {
		t.Fatalf("Prune(8) = %d, %v", n, err)
	}
	held(t, s, map[string]bool{"a": false})
	if refs, err := s.Block(5); err != nil || len(refs) != 0 {
		t.Fatalf("Block(5) after pruning = %x, %v", refs, err)
	}
}

// An undecided proposal's bundle that a block decided earlier stays.
func TestCommitKeepsWhatAnEarlierBlockDecided(t *testing.T) {
	s := open(t, t.TempDir())
	t.Cleanup(func() { _ = s.Close() })
	a, ha := bundle("a")
	if err := s.Propose(3, []bundles.Hash{ha}, [][]byte{a}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(3, []bundles.Hash{ha}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Propose(4, []bundles.Hash{ha}, [][]byte{a}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(4, nil, nil); err != nil {
		t.Fatal(err)
	}
	held(t, s, map[string]bool{"a": true})
}
