package store_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/store"
)

// cacheKeys is the key space the cache tests write: few enough that
// every commit overwrites, deletes and range-deletes keys Get has cached.
func cacheKeys() [][]byte {
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k/%02d", i)
	}
	return keys
}

// randomChanges is a block's worth of puts (small and over the cache's
// value bound), deletes and, now and then, a range delete.
func randomChanges(r *rand.Rand, keys [][]byte) core.ChangeSet {
	var cs core.ChangeSet
	if r.IntN(4) == 0 {
		a, b := r.IntN(len(keys)), r.IntN(len(keys))
		cs.RangeDeletes = append(cs.RangeDeletes, core.RangeDelete{CF: core.CFMeta, Start: keys[min(a, b)], End: keys[max(a, b)]})
	}
	seen := map[int]bool{}
	for range r.IntN(12) {
		i := r.IntN(len(keys))
		if seen[i] {
			continue
		}
		seen[i] = true
		c := core.Change{CF: core.CFMeta, Key: keys[i]}
		switch r.IntN(4) {
		case 0:
			c.Delete = true
		case 1:
			c.Value = bytes.Repeat([]byte{byte(r.IntN(256))}, 2000) // too big to cache
		default:
			c.Value = fmt.Appendf(nil, "v%d", r.Uint64())
		}
		cs.Changes = append(cs.Changes, c)
	}
	return sortedChanges(cs)
}

func sortedChanges(cs core.ChangeSet) core.ChangeSet {
	for i := 1; i < len(cs.Changes); i++ {
		for j := i; j > 0 && bytes.Compare(cs.Changes[j-1].Key, cs.Changes[j].Key) > 0; j-- {
			cs.Changes[j-1], cs.Changes[j] = cs.Changes[j], cs.Changes[j-1]
		}
	}
	return cs
}

// checkAgainstRocksDB fails if Get and a read past the cache differ on
// any key.
func checkAgainstRocksDB(t *testing.T, s *store.Store, keys [][]byte, when string) {
	t.Helper()
	for _, k := range keys {
		got, err := s.Get(core.CFMeta, k)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.Uncached(core.CFMeta, k)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: Get(%s) = %.20q, RocksDB holds %.20q", when, k, got, want)
		}
	}
}

// TestReadCacheFollowsCommits writes random blocks of puts, deletes and
// range deletes over keys Get keeps reading (so cached), with the cache's
// generations turning over every few entries, and checks after each that
// every key reads as RocksDB holds it.
func TestReadCacheFollowsCommits(t *testing.T) {
	for _, bound := range []int{1 << 20, 600} {
		t.Run(fmt.Sprintf("turn-over-at-%d", bound), func(t *testing.T) {
			s, err := store.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.SetCacheBytes(bound)
			keys := cacheKeys()
			r := rand.New(rand.NewPCG(1, uint64(bound)))
			if err := s.Apply(core.ChangeSet{Changes: []core.Change{{CF: core.CFMeta, Key: keys[0], Value: []byte("genesis")}}}); err != nil {
				t.Fatal(err)
			}
			checkAgainstRocksDB(t, s, keys, "after genesis")
			for h := int64(1); h <= 300; h++ {
				if err := s.Commit(store.Committed{Height: h}, randomChanges(r, keys)); err != nil {
					t.Fatal(err)
				}
				checkAgainstRocksDB(t, s, keys, fmt.Sprintf("after height %d", h))
				if s.CacheBytes() > bound {
					t.Fatalf("the cache's newer generation holds %d bytes, bound %d", s.CacheBytes(), bound)
				}
			}
			if err := s.Wipe(); err != nil {
				t.Fatal(err)
			}
			checkAgainstRocksDB(t, s, keys, "after a wipe")
		})
	}
}

// TestReadCacheReadersDuringCommits reads every key from several
// goroutines while blocks commit: a reader that read a key before a commit
// and cached it after would leave a stale value, which the check after
// each commit finds (with -race, also any unguarded access).
func TestReadCacheReadersDuringCommits(t *testing.T) {
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys := cacheKeys()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait() // before the store closes, also when the test fails
	defer close(stop)
	for g := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Get(core.CFMeta, keys[(i*7+g)%len(keys)]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	r := rand.New(rand.NewPCG(2, 3))
	for h := int64(1); h <= 200; h++ {
		if err := s.Commit(store.Committed{Height: h}, randomChanges(r, keys)); err != nil {
			t.Fatal(err)
		}
		checkAgainstRocksDB(t, s, keys, fmt.Sprintf("after height %d", h))
	}
}
