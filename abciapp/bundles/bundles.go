// Package bundles keeps the transactions a validator's blocks reference
// instead of carrying (rules version 3, byzlogv1.Tx.bundle_ref): block data
// the app holds in place of CometBFT's block store, in a RocksDB of its own
// beside the state. It is not state: nothing in it is hashed into the app
// hash or a snapshot, and losing it loses nothing a correct peer cannot
// serve again. What it owns is durability where availability rests on it:
// ProcessProposal writes a proposal's bundles with a synced write before the
// validator votes for the block (Propose), so at least f+1 correct
// validators hold every decided block's bundles even across a crash.
//
// Keys (one column family):
//
//	"h" hash         → the bundle's bytes
//	"p" height hash  → "" : proposed at height, not yet known decided
//	"b" height       → the hashes a decided block references, in order
//	"x" hash         → height: the last decided block referencing it
//
// Bundles of proposals never decided are dropped when their height commits
// (Commit); decided ones when pruning passes their height (Prune).
package bundles

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/linxGnu/grocksdb"
)

// Hash is a bundle's SHA-256, the reference a block carries.
type Hash = [sha256.Size]byte

// Store is an open bundle store. Safe for concurrent use, Close
// included: a call after Close fails with ErrClosed.
type Store struct {
	mu     sync.RWMutex // held for reading by every call, for writing by Close
	db     *grocksdb.DB
	opts   *grocksdb.Options
	ro     *grocksdb.ReadOptions
	synced *grocksdb.WriteOptions
	async  *grocksdb.WriteOptions
}

// Open opens (creating if needed) the bundle store in dir.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create bundle store directory %s: %w", dir, err)
	}
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	opts.SetInfoLogLevel(grocksdb.WarnInfoLogLevel)
	// As the state store: a damaged WAL is refused, never opened around.
	opts.SetWALRecoveryMode(grocksdb.TolerateCorruptedTailRecordsRecovery)
	opts.SetParanoidChecks(true)
	// Bundles are mostly zstd frames already: compressing again buys
	// little and costs a core.
	opts.SetCompression(grocksdb.NoCompression)
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		opts.Destroy()
		return nil, fmt.Errorf("open bundle store %s: %w (it holds only block data: if it is damaged, move it away and the node fetches what it needs from its peers)", dir, err)
	}
	synced := grocksdb.NewDefaultWriteOptions()
	synced.SetSync(true)
	return &Store{db: db, opts: opts, ro: grocksdb.NewDefaultReadOptions(), synced: synced, async: grocksdb.NewDefaultWriteOptions()}, nil
}

// ErrClosed is what a call after Close returns.
var ErrClosed = errors.New("the bundle store is closed")

// Close waits for the calls in progress and releases the database.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return ErrClosed
	}
	s.db.Close()
	s.ro.Destroy()
	s.synced.Destroy()
	s.async.Destroy()
	s.opts.Destroy()
	s.db = nil
	return nil
}

func key(kind byte, height int64, h *Hash) []byte {
	k := []byte{kind}
	if height >= 0 {
		k = binary.BigEndian.AppendUint64(k, uint64(height))
	}
	if h != nil {
		k = append(k, h[:]...)
	}
	return k
}

// Get returns the bundle whose hash is h, or nil.
func (s *Store) Get(h Hash) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return nil, ErrClosed
	}
	v, err := s.db.Get(s.ro, key('h', -1, &h))
	if err != nil {
		return nil, fmt.Errorf("read bundle %x: %w", h[:], err)
	}
	defer v.Free()
	if !v.Exists() {
		return nil, nil
	}
	return append([]byte(nil), v.Data()...), nil
}

// Has reports whether the store holds the bundle whose hash is h.
func (s *Store) Has(h Hash) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return false, ErrClosed
	}
	v, err := s.db.Get(s.ro, key('h', -1, &h))
	if err != nil {
		return false, fmt.Errorf("read bundle %x: %w", h[:], err)
	}
	defer v.Free()
	return v.Exists(), nil
}

// Propose durably records bundles (hashes[i] is bundles[i]'s SHA-256) as
// proposed at height, in one synced write: when it returns, a crash does
// not lose them. The caller has checked the hashes.
func (s *Store) Propose(height int64, hashes []Hash, bundles [][]byte) error {
	if len(hashes) != len(bundles) {
		return fmt.Errorf("propose at %d: %d hashes for %d bundles", height, len(hashes), len(bundles))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for i := range hashes {
		wb.Put(key('h', -1, &hashes[i]), bundles[i])
		wb.Put(key('p', height, &hashes[i]), nil)
	}
	if err := s.db.Write(s.synced, wb); err != nil {
		return fmt.Errorf("write the bundles proposed at %d: %w", height, err)
	}
	return nil
}

// Commit records that the block at height, now committed, references
// refs (in order), adds the bundles fetched for it, and drops the bundles
// proposed at height or before that no decided block references, in one
// synced write. Synced because a power cut must not leave a proposal's
// bundle looking undecided (its "p" key without its "x" key) while the
// state says its block committed: the next Commit would delete a voter's
// durable copy.
func (s *Store) Commit(height int64, refs []Hash, fetched map[Hash][]byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	decided := make(map[Hash]bool, len(refs))
	list := make([]byte, 0, len(refs)*sha256.Size)
	for i := range refs {
		decided[refs[i]] = true
		list = append(list, refs[i][:]...)
		wb.Put(key('x', -1, &refs[i]), binary.BigEndian.AppendUint64(nil, uint64(height)))
	}
	for h, b := range fetched {
		wb.Put(key('h', -1, &h), b)
	}
	if len(refs) > 0 {
		wb.Put(key('b', height, nil), list)
	}
	// Proposals of this height and before that were not decided.
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetIterateUpperBound(key('p', height+1, nil))
	it := s.db.NewIterator(ro)
	defer it.Close()
	for it.Seek([]byte{'p'}); it.Valid(); it.Next() {
		k := it.Key()
		if len(k.Data()) == 1+8+sha256.Size {
			var h Hash
			copy(h[:], k.Data()[9:])
			if !decided[h] {
				if at, err := s.decidedAt(h); err != nil {
					k.Free()
					return err
				} else if at == 0 {
					wb.Delete(key('h', -1, &h))
				}
			}
		}
		wb.Delete(append([]byte(nil), k.Data()...))
		k.Free()
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("commit bundles of %d: %w", height, err)
	}
	if err := s.db.Write(s.synced, wb); err != nil {
		return fmt.Errorf("commit bundles of %d: %w", height, err)
	}
	return nil
}

// decidedAt is the height of the last decided block referencing h, or 0.
func (s *Store) decidedAt(h Hash) (int64, error) {
	v, err := s.db.Get(s.ro, key('x', -1, &h))
	if err != nil {
		return 0, fmt.Errorf("read bundle %x: %w", h[:], err)
	}
	defer v.Free()
	if !v.Exists() || len(v.Data()) != 8 {
		return 0, nil
	}
	return int64(binary.BigEndian.Uint64(v.Data())), nil
}

// Block returns the hashes the decided block at height references, in
// order (nil when it referenced none or is not known here).
func (s *Store) Block(height int64) ([]Hash, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return nil, ErrClosed
	}
	v, err := s.db.Get(s.ro, key('b', height, nil))
	if err != nil {
		return nil, fmt.Errorf("read the references of block %d: %w", height, err)
	}
	defer v.Free()
	d := v.Data()
	if len(d)%sha256.Size != 0 {
		return nil, fmt.Errorf("the references of block %d are %d bytes, not a multiple of %d (damaged bundle store?)", height, len(d), sha256.Size)
	}
	out := make([]Hash, len(d)/sha256.Size)
	for i := range out {
		copy(out[i][:], d[i*sha256.Size:])
	}
	return out, nil
}

// maxPrunePerCall bounds the blocks one Prune drops, so that the first
// Commit after pruning is turned on, on a long chain, is not one huge
// batch: each later Commit drops as many more.
const maxPrunePerCall = 64

// Prune drops the bundles of decided blocks below height, at most
// maxPrunePerCall blocks' worth, except those a later decided block
// references too. It returns how many blocks' bundles it dropped.
func (s *Store) Prune(below int64) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return 0, ErrClosed
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetIterateUpperBound(key('b', below, nil))
	it := s.db.NewIterator(ro)
	defer it.Close()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	n := 0
	for it.Seek([]byte{'b'}); it.Valid() && n < maxPrunePerCall; it.Next() {
		k, v := it.Key(), it.Value()
		kd, vd := k.Data(), v.Data()
		if len(kd) == 9 {
			height := int64(binary.BigEndian.Uint64(kd[1:]))
			for off := 0; off+sha256.Size <= len(vd); off += sha256.Size {
				var h Hash
				copy(h[:], vd[off:])
				at, err := s.decidedAt(h)
				if err != nil {
					k.Free()
					v.Free()
					return n, err
				}
				if at <= height {
					wb.Delete(key('h', -1, &h))
					wb.Delete(key('x', -1, &h))
				}
			}
			n++
		}
		wb.Delete(append([]byte(nil), kd...))
		k.Free()
		v.Free()
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("prune bundles below %d: %w", below, err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := s.db.Write(s.async, wb); err != nil {
		return n, fmt.Errorf("prune bundles below %d: %w", below, err)
	}
	return n, nil
}
