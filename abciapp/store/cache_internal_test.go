package store

import (
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
)

// TestReadCacheKeepsNoReadFromBeforeAWrite plays the race a reader can
// lose: it misses, a commit writes the key, and only then does the
// reader keep what it read before the commit. That value must not be
// cached.
func TestReadCacheKeepsNoReadFromBeforeAWrite(t *testing.T) {
	c := newReadCache()
	k := cacheKey(core.CFMeta, []byte("p/x"))
	if _, found, _ := c.get(k); found {
		t.Fatal("a new cache holds a key")
	}
	_, _, gen := c.get(k) // the reader misses, then reads RocksDB: "old"
	c.wrote(core.ChangeSet{Changes: []core.Change{{CF: core.CFMeta, Key: []byte("p/x"), Value: []byte("new")}}})
	c.keep(k, []byte("old"), gen)
	if v, found, _ := c.get(k); !found || string(v) != "new" {
		t.Fatalf("after a commit wrote %q, a read from before it kept: cache holds %q (found %v)", "new", v, found)
	}

	c.clear()
	_, _, gen = c.get(k)
	c.keep(k, []byte("now"), gen) // no write between: kept
	if v, found, _ := c.get(k); !found || string(v) != "now" {
		t.Fatalf("a read with no write since was not kept: %q, %v", v, found)
	}
	v, _, _ := c.get(k)
	v[0] = 'X' // a caller's copy: the cache's own stays
	if v, _, _ := c.get(k); string(v) != "now" {
		t.Fatalf("a caller changing what Get returned changed the cache: %q", v)
	}
	c.wrote(core.ChangeSet{Changes: []core.Change{{CF: core.CFMeta, Key: []byte("p/x"), Value: []byte{}}}})
	if v, found, _ := c.get(k); !found || v != nil {
		t.Fatalf("an empty value written reads %#v (found %v); RocksDB's reads give nil", v, found)
	}
	c.wrote(core.ChangeSet{Changes: []core.Change{{CF: core.CFRecords, Key: []byte("r/x"), Value: []byte("rec")}}})
	if _, found, _ := c.get(cacheKey(core.CFRecords, []byte("r/x"))); found {
		t.Fatal("a record was cached; records are read by scans and deleted by range")
	}
}
