package lightclient

import (
	dbm "github.com/cometbft/cometbft-db"
)

// lightDB is the in-memory database behind the light client's trusted
// store. cometbft-db's MemDB iterators hold the database's read lock until
// they are closed, and the light store's Prune writes a batch while its
// iterator is still open: on a MemDB that deadlocks the first time the
// store prunes (after PruningSize headers, ~1,000 blocks; `byzlog-lab chaos`
// found an indexer stuck at height 999). lightDB's iterators take what
// they cover at once and release the lock, so writes never wait on them.
type lightDB struct{ *dbm.MemDB }

func newLightDB() lightDB { return lightDB{dbm.NewMemDB()} }

// Iterator implements dbm.DB.
func (d lightDB) Iterator(start, end []byte) (dbm.Iterator, error) {
	it, err := d.MemDB.Iterator(start, end)
	if err != nil {
		return nil, err
	}
	return drain(it)
}

// ReverseIterator implements dbm.DB.
func (d lightDB) ReverseIterator(start, end []byte) (dbm.Iterator, error) {
	it, err := d.MemDB.ReverseIterator(start, end)
	if err != nil {
		return nil, err
	}
	return drain(it)
}

// drain reads it to the end and closes it. The values are MemDB's own
// slices: a write replaces a value, never changes one in place.
func drain(it dbm.Iterator) (*sliceIterator, error) {
	defer it.Close()
	s := &sliceIterator{}
	s.start, s.end = it.Domain()
	for ; it.Valid(); it.Next() {
		s.keys, s.values = append(s.keys, it.Key()), append(s.values, it.Value())
	}
	return s, it.Error()
}

// sliceIterator iterates over what drain read.
type sliceIterator struct {
	start, end   []byte
	keys, values [][]byte
	i            int
}

func (s *sliceIterator) Domain() ([]byte, []byte) { return s.start, s.end }
func (s *sliceIterator) Valid() bool              { return s.i < len(s.keys) }
func (s *sliceIterator) Key() []byte              { s.mustBeValid(); return s.keys[s.i] }
func (s *sliceIterator) Value() []byte            { s.mustBeValid(); return s.values[s.i] }
func (s *sliceIterator) Error() error             { return nil }
func (s *sliceIterator) Close() error             { return nil }

func (s *sliceIterator) Next() {
	s.mustBeValid()
	s.i++
}

func (s *sliceIterator) mustBeValid() {
	if !s.Valid() {
		panic("lightDB iterator used past its end") // as MemDB's does
	}
}
