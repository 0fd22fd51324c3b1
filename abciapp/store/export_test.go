package store

import "github.com/linxGnu/grocksdb"

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
