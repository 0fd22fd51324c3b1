package store

import (
	"github.com/linxGnu/grocksdb"

	"github.com/byzlog/byzlog/abciapp/core"
)

// Flush writes the memtables to SST files, so tests can damage a table.
func (s *Store) Flush() error {
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	for _, cf := range s.cfs {
		if err := s.db.FlushCF(cf, fo); err != nil {
			return err
		}
	}
	return nil
}

// Uncached reads key from RocksDB, past the read cache.
func (s *Store) Uncached(cf core.CF, key []byte) ([]byte, error) { return s.get(s.byCF[cf], key) }

// SetCacheBytes makes the read cache turn its generation over at n bytes.
func (s *Store) SetCacheBytes(n int) { s.cache.max = n }

// CacheBytes is what the read cache's newer generation holds.
func (s *Store) CacheBytes() int {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	return s.cache.size
}
