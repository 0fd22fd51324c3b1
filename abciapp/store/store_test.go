package store_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/store"
)

func TestCommitSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Last(); err != nil || got.Height != 0 || got.AppHash != nil {
		t.Fatalf("Last() on a new store = %+v, %v; want height 0, no hash", got, err)
	}
	for h := int64(1); h <= 3; h++ {
		if err := s.Commit(store.Committed{Height: h, AppHash: []byte{byte(h), 0xAB}}, core.ChangeSet{}); err != nil {
			t.Fatalf("Commit(%d) = %v", h, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err == nil {
		t.Error("second Close() = nil, want an error")
	}

	s, err = store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Last()
	if err != nil {
		t.Fatal(err)
	}
	if got.Height != 3 || !bytes.Equal(got.AppHash, []byte{3, 0xAB}) {
		t.Errorf("Last() after reopen = %+v, want height 3, hash 03AB", got)
	}
}

func TestCommitRejectsNonPositiveHeight(t *testing.T) {
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Commit(store.Committed{Height: 0}, core.ChangeSet{}); err == nil {
		t.Error("Commit(height 0) = nil, want an error")
	}
}

func TestChangesReadBackAndRangeDeletes(t *testing.T) {
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(k string) core.Change {
		return core.Change{CF: core.CFRecords, Key: []byte(k), Value: []byte("v" + k)}
	}
	if err := s.Commit(store.Committed{Height: 1, AppHash: []byte{1}}, core.ChangeSet{
		Changes: []core.Change{put("a1"), put("a2"), put("a3"), put("b1"), {CF: core.CFMeta, Key: []byte("m"), Value: []byte("meta")}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(store.Committed{Height: 2, AppHash: []byte{2}}, core.ChangeSet{
		RangeDeletes: []core.RangeDelete{{CF: core.CFRecords, Start: []byte("a"), End: []byte("a3")}},
		Changes:      []core.Change{put("a0"), {CF: core.CFMeta, Key: []byte("m"), Delete: true}},
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := s.Scan(core.CFRecords, []byte("a"), []byte("b"), func(k, v []byte) bool {
		got = append(got, string(k)+"="+string(v))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	// The range delete runs before the puts of the same commit: a0 survives.
	if want := "a0=va0,a3=va3"; strings.Join(got, ",") != want {
		t.Errorf("Scan(records, a..b) = %v, want %s", got, want)
	}
	if v, err := s.Get(core.CFMeta, []byte("m")); err != nil || v != nil {
		t.Errorf("Get(deleted key) = %q, %v; want nil", v, err)
	}
	if v, err := s.Get(core.CFRecords, []byte("b1")); err != nil || string(v) != "vb1" {
		t.Errorf("Get(b1) = %q, %v; want vb1", v, err)
	}
	n := 0
	if err := s.Scan(core.CFRecords, nil, nil, func(k, v []byte) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Errorf("Scan stopped after %d keys (%v), want 2 when fn says stop", n, err)
	}
}

// TestOpenReadOnly: a store opened read-only reads what was committed,
// shares the directory with other readers, refuses writes, and is never
// created where there is none.
func TestOpenReadOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := store.OpenReadOnly(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenReadOnly of an empty directory = %v, want an error wrapping os.ErrNotExist", err)
	}
	s, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(store.Committed{Height: 7, AppHash: []byte{7}}, core.ChangeSet{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var readers []*store.Store
	for i := 0; i < 2; i++ {
		r, err := store.OpenReadOnly(dir)
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
		readers = append(readers, r)
	}
	for i, r := range readers {
		if got, err := r.Last(); err != nil || got.Height != 7 {
			t.Errorf("reader %d: Last() = %+v, %v; want height 7", i, got, err)
		}
		if err := r.Commit(store.Committed{Height: 8, AppHash: []byte{8}}, core.ChangeSet{}); err == nil || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("reader %d: Commit = %v, want a read-only error", i, err)
		}
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}
}
