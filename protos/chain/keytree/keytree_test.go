package keytree

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// memStore is a Store in a map.
type memStore map[string][]byte

func (m memStore) Get(k []byte) ([]byte, error) { return m[string(k)], nil }
func (m memStore) Put(k, v []byte)              { m[string(k)] = bytes.Clone(v) }
func (m memStore) Delete(k []byte)              { delete(m, string(k)) }

// naiveRoot computes the canonical root of the pairs from scratch.
func naiveRoot(pairs map[string][]byte) []byte {
	type leaf struct{ path, vh []byte }
	var leaves []leaf
	for k, vh := range pairs {
		leaves = append(leaves, leaf{Path([]byte(k)), vh})
	}
	var build func(ls []leaf, d int) []byte
	build = func(ls []leaf, d int) []byte {
		switch len(ls) {
		case 0:
			return Empty()
		case 1:
			return leafHash(ls[0].path, ls[0].vh)
		}
		var l, r []leaf
		for _, x := range ls {
			if bit(x.path, d) == 0 {
				l = append(l, x)
			} else {
				r = append(r, x)
			}
		}
		return innerHash(build(l, d+1), build(r, d+1))
	}
	return build(leaves, 0)
}

// TestTreeAgainstNaive applies random sets and deletes and checks, after
// each, the root against one computed from scratch, a proof of every key
// and of absent ones, and that the stored nodes are exactly those of a
// tree built fresh from the same pairs in another order (no node left
// behind by a delete or a split).
func TestTreeAgainstNaive(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		store := memStore{}
		tr := New(store, []byte("x/"))
		pairs := map[string][]byte{}
		for step := range 300 {
			k := fmt.Sprintf("k%d", rng.IntN(40))
			if rng.IntN(3) == 0 {
				if err := tr.Delete([]byte(k)); err != nil {
					t.Fatal(err)
				}
				delete(pairs, k)
			} else {
				vh := ValueHash(fmt.Appendf(nil, "v%d", step))
				if err := tr.Set([]byte(k), vh); err != nil {
					t.Fatal(err)
				}
				pairs[k] = vh
			}
			root, err := tr.Root()
			if err != nil {
				t.Fatal(err)
			}
			if want := naiveRoot(pairs); !bytes.Equal(root, want) {
				t.Fatalf("seed %d step %d: root = %X, want %X (%d keys)", seed, step, root, want, len(pairs))
			}
			if step%30 != 29 {
				continue
			}
			for i := range 45 {
				k := fmt.Sprintf("k%d", i)
				p, err := tr.Prove([]byte(k))
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Verify(root, []byte(k), pairs[k]); err != nil {
					t.Fatalf("seed %d step %d: proof of %s (present %v): %v", seed, step, k, pairs[k] != nil, err)
				}
				if pairs[k] != nil {
					if err := p.Verify(root, []byte(k), nil); err == nil {
						t.Fatalf("a proof of present %s verified as absent", k)
					}
					if err := p.Verify(root, []byte(k), ValueHash([]byte("other"))); err == nil {
						t.Fatalf("a proof of %s verified another value", k)
					}
				} else if err := p.Verify(root, []byte(k), ValueHash([]byte("v"))); err == nil {
					t.Fatalf("a proof of absent %s verified a value", k)
				}
			}
			fresh := memStore{}
			ft := New(fresh, []byte("x/"))
			keys := slices.Collect(maps.Keys(pairs))
			slices.Sort(keys)
			slices.Reverse(keys)
			for _, k := range keys {
				if err := ft.Set([]byte(k), pairs[k]); err != nil {
					t.Fatal(err)
				}
			}
			if !maps.EqualFunc(store, fresh, bytes.Equal) {
				t.Fatalf("seed %d step %d: %d nodes stored, a fresh tree of the same %d keys has %d", seed, step, len(store), len(pairs), len(fresh))
			}
		}
	}
}

// TestProofRefusesLies: a proof changed anywhere, or checked against
// another key or root, fails.
func TestProofRefusesLies(t *testing.T) {
	store := memStore{}
	tr := New(store, nil)
	for i := range 100 {
		if err := tr.Set(fmt.Appendf(nil, "key-%d", i), ValueHash(fmt.Appendf(nil, "value-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	root, _ := tr.Root()
	key, vh := []byte("key-7"), ValueHash([]byte("value-7"))
	p, _ := tr.Prove(key)
	if err := p.Verify(root, key, vh); err != nil {
		t.Fatalf("honest proof: %v", err)
	}
	lies := map[string]func(p *Proof) (root, key, vh []byte){
		"another key":     func(*Proof) ([]byte, []byte, []byte) { return root, []byte("key-8"), vh },
		"another root":    func(*Proof) ([]byte, []byte, []byte) { return ValueHash(root), key, vh },
		"a sibling flips": func(p *Proof) ([]byte, []byte, []byte) { p.Siblings[0][3] ^= 1; return root, key, vh },
		"a sibling less":  func(p *Proof) ([]byte, []byte, []byte) { p.Siblings = p.Siblings[1:]; return root, key, vh },
		"a sibling more": func(p *Proof) ([]byte, []byte, []byte) {
			p.Siblings = append(p.Siblings, Empty())
			return root, key, vh
		},
		"absent, no leaf": func(p *Proof) ([]byte, []byte, []byte) {
			p.LeafPath, p.LeafValueHash = nil, nil
			return root, key, nil
		},
		"too deep": func(p *Proof) ([]byte, []byte, []byte) {
			p.Siblings = make([][]byte, MaxDepth+1)
			return root, key, vh
		},
	}
	for name, lie := range lies {
		q, _ := tr.Prove(key)
		r, k, v := lie(q)
		if err := q.Verify(r, k, v); !errors.Is(err, ErrProof) {
			t.Errorf("%s: Verify = %v, want ErrProof", name, err)
		}
	}
}

// TestEmptyAndSingle: the roots of no key and one key, and deleting back
// to empty leaves no node.
func TestEmptyAndSingle(t *testing.T) {
	store := memStore{}
	tr := New(store, []byte("p"))
	if r, _ := tr.Root(); !bytes.Equal(r, Empty()) {
		t.Fatalf("empty root = %X", r)
	}
	p, _ := tr.Prove([]byte("a"))
	if err := p.Verify(Empty(), []byte("a"), nil); err != nil {
		t.Fatalf("absent from the empty tree: %v", err)
	}
	vh := ValueHash([]byte("1"))
	_ = tr.Set([]byte("a"), vh)
	if r, _ := tr.Root(); !bytes.Equal(r, leafHash(Path([]byte("a")), vh)) {
		t.Fatalf("one key's root = %X", r)
	}
	_ = tr.Set([]byte("b"), vh)
	_ = tr.Delete([]byte("a"))
	_ = tr.Delete([]byte("b"))
	_ = tr.Delete([]byte("c"))
	if len(store) != 0 {
		t.Fatalf("%d nodes left after every key was deleted", len(store))
	}
}

func FuzzVerify(f *testing.F) {
	f.Add([]byte("k"), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, leafPath, sib []byte) {
		p := &Proof{LeafPath: leafPath, LeafValueHash: leafPath, Siblings: [][]byte{sib}}
		_ = p.Verify(Empty(), key, nil)
		_ = p.Verify(Empty(), key, ValueHash(key))
	})
}

// TestBatchAgainstTree applies the same random sets and deletes to a tree
// directly and through batches of random sizes (asking a batch's root now
// and then before more changes): after each flush both stores must hold
// the same nodes, and the batch's root the one computed from scratch.
func TestBatchAgainstTree(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 11))
		direct, batched := memStore{}, memStore{}
		dt := New(direct, []byte("x/"))
		b := New(batched, []byte("x/")).Batch()
		pairs := map[string][]byte{}
		keys := 20 + rng.IntN(200)
		for round := range 40 {
			for step := range rng.IntN(60) + 1 {
				k := []byte(fmt.Sprintf("k%d", rng.IntN(keys)))
				if rng.IntN(3) == 0 {
					if err := dt.Delete(k); err != nil {
						t.Fatal(err)
					}
					if err := b.Delete(k); err != nil {
						t.Fatal(err)
					}
					delete(pairs, string(k))
				} else {
					vh := ValueHash(fmt.Appendf(nil, "v%d.%d", round, step))
					if err := dt.Set(k, vh); err != nil {
						t.Fatal(err)
					}
					if err := b.Set(k, vh); err != nil {
						t.Fatal(err)
					}
					pairs[string(k)] = vh
				}
				if rng.IntN(10) == 0 {
					root, err := b.Root()
					if err != nil {
						t.Fatal(err)
					}
					if want := naiveRoot(pairs); !bytes.Equal(root, want) {
						t.Fatalf("seed %d round %d: batch root before its flush = %X, want %X", seed, round, root, want)
					}
				}
			}
			root, err := b.Root()
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
			if want := naiveRoot(pairs); !bytes.Equal(root, want) {
				t.Fatalf("seed %d round %d: batch root = %X, want %X", seed, round, root, want)
			}
			if !maps.EqualFunc(direct, batched, bytes.Equal) {
				t.Fatalf("seed %d round %d: the batch stored %d nodes, the tree changed directly %d", seed, round, len(batched), len(direct))
			}
			if after, _ := New(batched, []byte("x/")).Root(); !bytes.Equal(after, root) {
				t.Fatalf("seed %d round %d: the flushed store's root %X is not the batch's %X", seed, round, after, root)
			}
		}
	}
}
