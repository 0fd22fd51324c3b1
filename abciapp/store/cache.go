package store

import (
	"bytes"
	"sync"

	"github.com/byzlog/byzlog/abciapp/core"
)

// The read cache keeps small committed values, and keys found absent, that
// Get read or a commit wrote, so that the state entries every block reads
// again (key tree nodes, compacted keys' index entries, partition and
// producer states) cost a map lookup instead of a cgo call into RocksDB:
// on a compacted topic's write load those calls were a sixth of the app's
// CPU time (docs/benchmarks.md).
//
// It is coherent with the database because every write goes through this
// package: a commit updates it with the values it wrote, after RocksDB
// took them. A Get that missed reads RocksDB outside the lock and keeps
// what it read only if no write landed meanwhile (gen), so a value read
// before a commit never outlives it. Records are not cached: they are read
// by scans, and retention deletes them by range every block.
//
// It holds at most about cacheBytes in two generations: when the newer
// fills, the older is dropped and the newer takes its place, so what was
// read in the last generation stays and a burst of one-off reads cannot
// grow it. Nothing here decides anything the state machine computes: a
// hit returns what RocksDB would.
type readCache struct {
	mu   sync.Mutex
	gen  uint64 // counts writes; a miss's read is kept only in its generation
	cur  map[string][]byte
	old  map[string][]byte
	size int // bytes held by cur
	max  int // bytes cur may hold before it becomes old
}

const (
	// cacheBytes bounds the cache's memory (both generations, keys,
	// values and an estimate of a map entry's overhead).
	cacheBytes = 64 << 20
	// cacheMaxValue is the largest value cached: tree nodes are 65 bytes,
	// index entries 41, states a few hundred.
	cacheMaxValue = 1024
	// cacheEntryOverhead estimates a map entry's own bytes.
	cacheEntryOverhead = 64
)

func newReadCache() *readCache {
	return &readCache{cur: map[string][]byte{}, old: map[string][]byte{}, max: cacheBytes / 2}
}

// cacheKey is a column family's byte and the key.
func cacheKey(cf core.CF, key []byte) string {
	b := make([]byte, 0, 1+len(key))
	return string(append(append(b, byte(cf)), key...))
}

// cacheable reports whether cf's values are cached.
func cacheable(cf core.CF) bool { return cf != core.CFRecords }

// get returns a copy of the cached value (nil, found: the key is absent
// or empty, which Get does not tell apart), and the generation a read of the database on a miss belongs to.
func (c *readCache) get(k string) (value []byte, found bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.cur[k]
	if !ok {
		if v, ok = c.old[k]; ok {
			c.insert(k, v) // read again: keep it past the next turn
		}
	}
	if !ok {
		return nil, false, c.gen
	}
	if v == nil {
		return nil, true, c.gen
	}
	return bytes.Clone(v), true, c.gen
}

// keep caches what a miss read in generation gen (nil: absent), unless a
// write landed since.
func (c *readCache) keep(k string, v []byte, gen uint64) {
	if len(v) > cacheMaxValue {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.insert(k, v)
	}
}

// insert puts k in the newer generation; v is the cache's own. The caller
// holds mu.
func (c *readCache) insert(k string, v []byte) {
	if prev, ok := c.cur[k]; ok {
		c.size -= len(k) + len(prev) + cacheEntryOverhead
	}
	c.cur[k] = v
	c.size += len(k) + len(v) + cacheEntryOverhead
	if c.size > c.max {
		c.old, c.cur, c.size = c.cur, map[string][]byte{}, 0
	}
}

// wrote brings the cache up to changes, which the database now holds:
// called after every successful write, and after a failed one with
// nothing (clear), when what RocksDB holds is not known.
func (c *readCache) wrote(changes core.ChangeSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, r := range changes.RangeDeletes {
		if cacheable(r.CF) {
			// Rare (a topic or a group deleted), and a block may hold
			// thousands: dropping everything costs less than walking the
			// cache for each.
			c.cur, c.old, c.size = map[string][]byte{}, map[string][]byte{}, 0
			break
		}
	}
	for _, ch := range changes.Changes {
		if !cacheable(ch.CF) {
			continue
		}
		k := cacheKey(ch.CF, ch.Key)
		delete(c.old, k)
		switch {
		case ch.Delete || len(ch.Value) == 0:
			c.insert(k, nil) // Get reads an absent key, and an empty value, as nil
		case len(ch.Value) <= cacheMaxValue:
			c.insert(k, bytes.Clone(ch.Value))
		default:
			if prev, ok := c.cur[k]; ok {
				c.size -= len(k) + len(prev) + cacheEntryOverhead
				delete(c.cur, k)
			}
		}
	}
}

// clear drops everything: after a write that failed or wiped the store.
func (c *readCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.cur, c.old, c.size = map[string][]byte{}, map[string][]byte{}, 0
}
