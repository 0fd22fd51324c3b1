package store_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/store"
)

// The store's promise under damaged files: it opens holding a prefix of its
// commits (every commit up to its height, none after: CometBFT replays the
// rest into it) or it refuses to open with an error naming the damaged
// file. It never opens with a hole, and never serves a value it did not
// write.

const corruptCommits = 500

// commitMany writes corruptCommits synced commits, commit h putting record
// key h with a value derived from h, and closes the store.
func commitMany(t *testing.T, dir string, flush bool) {
	t.Helper()
	s, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for h := int64(1); h <= corruptCommits; h++ {
		c := core.ChangeSet{Changes: []core.Change{{CF: core.CFRecords, Key: heightKey(h), Value: valueOf(h)}}}
		if err := s.Commit(store.Committed{Height: h, AppHash: valueOf(h)[:8]}, c); err != nil {
			t.Fatal(err)
		}
	}
	if flush {
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func heightKey(h int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(h)) }

func valueOf(h int64) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("value of commit %08d;", h)), 8)
}

// largest is the largest file in dir whose name ends in suffix.
func largest(t *testing.T, dir, suffix string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found string
	var size int64
	for _, e := range es {
		if fi, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), suffix) && fi.Size() > size {
			found, size = filepath.Join(dir, e.Name()), fi.Size()
		}
	}
	if found == "" {
		t.Fatalf("no file *%s in %s", suffix, dir)
	}
	return found
}

func flipBit(t *testing.T, path string, at float64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[int(float64(len(b))*at)] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func cutTail(t *testing.T, path string, n int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-n); err != nil {
		t.Fatal(err)
	}
}

// prefixOrRefusal opens dir and checks the store's promise. It returns the
// committed height it opened at, or -1 if it refused to open or to read a
// commit (with an error naming the damaged file).
func prefixOrRefusal(t *testing.T, dir, damaged string) int64 {
	t.Helper()
	// A deleted table is looked for under its old extension too: the
	// error names 000020.ldb for 000020.sst.
	damaged = strings.TrimSuffix(damaged, filepath.Ext(damaged))
	s, err := store.Open(dir)
	if err != nil {
		if !strings.Contains(err.Error(), filepath.Base(damaged)) {
			t.Errorf("Open refused with %q, which does not name the damaged file %s", err, filepath.Base(damaged))
		}
		return -1
	}
	defer s.Close()
	last, err := s.Last()
	if err != nil {
		if !strings.Contains(err.Error(), filepath.Base(damaged)) {
			t.Errorf("Last() = %q, which does not name the damaged file %s", err, filepath.Base(damaged))
		}
		return -1
	}
	refused := false
	for h := int64(1); h <= corruptCommits; h++ {
		v, err := s.Get(core.CFRecords, heightKey(h))
		if err != nil {
			if !refused && !strings.Contains(err.Error(), filepath.Base(damaged)) {
				t.Errorf("Get(commit %d) = %q, which does not name the damaged file %s", h, err, filepath.Base(damaged))
			}
			refused = true
			continue
		}
		switch {
		case h <= last.Height && !bytes.Equal(v, valueOf(h)):
			t.Fatalf("opened at height %d, but commit %d reads %.40q, want %.40q (a hole or a forged value)", last.Height, h, v, valueOf(h))
		case h > last.Height && v != nil:
			t.Fatalf("opened at height %d, but commit %d after it is there", last.Height, h)
		}
	}
	if refused {
		return -1
	}
	return last.Height
}

func TestVerifyPassesAnUndamagedStore(t *testing.T) {
	dir := t.TempDir()
	commitMany(t, dir, true)
	before := listing(t, dir)
	keys, err := store.Verify(dir)
	if err != nil || keys < corruptCommits {
		t.Fatalf("Verify = %d keys, %v; want at least %d keys, no error", keys, err, corruptCommits)
	}
	if after := listing(t, dir); after != before {
		t.Errorf("Verify changed the store's directory:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := store.Verify(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no RocksDB database there") {
		t.Errorf("Verify of an empty directory = %v, want 'no RocksDB database there'", err)
	}
}

// listing is dir's file names, sizes and modification times.
func listing(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%d:%d ", e.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

func TestWALBitFlipIsRefused(t *testing.T) {
	dir := t.TempDir()
	commitMany(t, dir, false)
	wal := largest(t, dir, ".log")
	flipBit(t, wal, 0.5)
	if h := prefixOrRefusal(t, dir, wal); h != -1 {
		t.Errorf("a bit flipped in the middle of the WAL opened at height %d of %d: synced commits dropped silently; want a refusal naming %s", h, corruptCommits, filepath.Base(wal))
	}
}

func TestWALTornTailKeepsAPrefix(t *testing.T) {
	dir := t.TempDir()
	commitMany(t, dir, false)
	wal := largest(t, dir, ".log")
	// Power lost in the middle of the last write: its record is torn. The
	// store keeps every commit before it and CometBFT replays the rest.
	cutTail(t, wal, 100)
	if h := prefixOrRefusal(t, dir, wal); h != corruptCommits-1 {
		t.Errorf("a WAL torn 100 bytes into its last record opened at height %d, want %d", h, corruptCommits-1)
	}
}

func TestWALCutDeepKeepsAPrefix(t *testing.T) {
	dir := t.TempDir()
	commitMany(t, dir, false)
	wal := largest(t, dir, ".log")
	cutTail(t, wal, 1000)
	h := prefixOrRefusal(t, dir, wal)
	if h >= corruptCommits {
		t.Errorf("a WAL cut by 1000 bytes opened at height %d: want fewer than %d commits or a refusal", h, corruptCommits)
	}
	t.Logf("a WAL cut by 1000 bytes opened at height %d of %d (a prefix; CometBFT replays the rest)", h, corruptCommits)
}

func TestSSTBitFlipIsNeverServed(t *testing.T) {
	dir := t.TempDir()
	commitMany(t, dir, true)
	sst := largest(t, dir, ".sst")
	// A data block of the records' table: its checksum must catch it.
	flipBit(t, sst, 0.3)
	if h := prefixOrRefusal(t, dir, sst); h != -1 {
		t.Errorf("a bit flipped in an SST opened at height %d and served every commit; want it caught", h)
	}
}

// TestEveryDamageKeepsThePromise damages each kind of the store's files in
// each way corrupt-one does, and checks the promise alone: a prefix of the
// commits, or a refusal naming the file.
func TestEveryDamageKeepsThePromise(t *testing.T) {
	damages := map[string]func(t *testing.T, path string){
		"bit-flip": func(t *testing.T, path string) { flipBit(t, path, 0.5) },
		"tail-cut": func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			cutTail(t, path, min(1000, fi.Size()/2+1))
		},
		"zeroed": func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			clear(b[len(b)/2 : min(len(b), len(b)/2+4096)])
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"deleted": func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for _, file := range []struct {
		suffix string
		flush  bool
	}{{".log", false}, {".sst", true}, {"CURRENT", true}, {"MANIFEST-", true}} {
		for _, name := range []string{"bit-flip", "tail-cut", "zeroed", "deleted"} {
			t.Run(strings.Trim(file.suffix, ".-")+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				commitMany(t, dir, file.flush)
				var path string
				if file.suffix == "MANIFEST-" {
					path = newestManifest(t, dir)
				} else {
					path = largest(t, dir, file.suffix)
				}
				damages[name](t, path)
				stem := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
				_, verr := store.Verify(dir)
				if verr != nil && !strings.Contains(verr.Error(), stem) {
					t.Errorf("Verify = %q, which does not name the damaged file %s", verr, stem)
				}
				h := prefixOrRefusal(t, dir, path)
				if h == -1 && verr == nil {
					t.Errorf("Verify passed a store that Open or a read then refused")
				}
				t.Logf("%s %s: opened at height %d (-1: refused); Verify: %v", filepath.Base(path), name, h, verr)
			})
		}
	}
}

func newestManifest(t *testing.T, dir string) string {
	t.Helper()
	cur, err := os.ReadFile(filepath.Join(dir, "CURRENT"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, strings.TrimSpace(string(cur)))
}
