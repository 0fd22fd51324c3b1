package store_test

import (
	"bytes"
	"testing"

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
		if err := s.Commit(store.Committed{Height: h, AppHash: []byte{byte(h), 0xAB}}); err != nil {
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
	if err := s.Commit(store.Committed{Height: 0}); err == nil {
		t.Error("Commit(height 0) = nil, want an error")
	}
}
