// Package store keeps byzlog-app's committed state in RocksDB: one column
// family per core.CF plus "app" for the last committed height and app hash.
// It owns the atomic, synced write of each commit and reads for the core; it
// knows nothing of transactions or hashing, which belong to core. A commit is
// one RocksDB WriteBatch written with sync, so after a crash the store holds
// either all of a block's effects (with its height and app hash) or none.
package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/linxGnu/grocksdb"

	"github.com/byzlog/byzlog/abciapp/core"
)

// Column families. "default" must exist in every RocksDB database; byzlog
// keeps nothing in it.
const (
	cfDefault = "default"
	// cfApp holds the app's own bookkeeping: last committed height and app hash.
	cfApp = "app"
)

var (
	keyHeight  = []byte("height")
	keyAppHash = []byte("app_hash")
)

// Committed is the identity of the last committed state.
type Committed struct {
	Height  int64
	AppHash []byte
}

// Store is an open RocksDB database. Its methods are safe for concurrent use.
type Store struct {
	db   *grocksdb.DB
	opts *grocksdb.Options
	cfs  []*grocksdb.ColumnFamilyHandle // in the order of cfNames
	app  *grocksdb.ColumnFamilyHandle
	byCF map[core.CF]*grocksdb.ColumnFamilyHandle
	ro   *grocksdb.ReadOptions
	wo   *grocksdb.WriteOptions
	// cache holds small committed values Get reads often (cache.go).
	cache *readCache
}

// cfNames are "default", "app", then core's column families in order.
var cfNames = func() []string {
	names := []string{cfDefault, cfApp}
	for _, cf := range core.CFs {
		names = append(names, cf.String())
	}
	return names
}()

var _ core.Scanner = (*Store)(nil)

// Open opens (creating if needed) the database in dir.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create store directory %s: %w", dir, err)
	}
	opts := options()
	opts.SetCreateIfMissing(true)
	opts.SetCreateIfMissingColumnFamilies(true)
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err == nil {
		// An existing store has every column family: one missing was lost
		// (a MANIFEST cut short), and creating it empty would open the store
		// at height 0 as if it were new.
		if err := hasColumnFamilies(opts, dir); err != nil {
			opts.Destroy()
			return nil, err
		}
	}
	db, cfs, err := grocksdb.OpenDbColumnFamilies(opts, dir, cfNames, everyCF(opts))
	if err != nil {
		opts.Destroy()
		return nil, openError(dir, err)
	}
	wo := grocksdb.NewDefaultWriteOptions()
	wo.SetSync(true)
	byCF := map[core.CF]*grocksdb.ColumnFamilyHandle{}
	for i, cf := range core.CFs {
		byCF[cf] = cfs[2+i]
	}
	return &Store{db: db, opts: opts, cfs: cfs, app: cfs[1], byCF: byCF, ro: grocksdb.NewDefaultReadOptions(), wo: wo, cache: newReadCache()}, nil
}

// OpenReadOnly opens the store in dir for reading only: no lock is taken,
// nothing is written, and any number of readers may share it. A missing
// store is an error (wrapping os.ErrNotExist), never created. Snapshot
// checkpoints are served this way.
func OpenReadOnly(dir string) (*Store, error) {
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
		return nil, fmt.Errorf("open store %s read-only: %w", dir, err)
	}
	opts := options()
	if err := hasColumnFamilies(opts, dir); err != nil {
		opts.Destroy()
		return nil, err
	}
	db, cfs, err := grocksdb.OpenDbForReadOnlyColumnFamilies(opts, dir, cfNames, everyCF(opts), false)
	if err != nil {
		opts.Destroy()
		return nil, openError(dir, err)
	}
	byCF := map[core.CF]*grocksdb.ColumnFamilyHandle{}
	for i, cf := range core.CFs {
		byCF[cf] = cfs[2+i]
	}
	return &Store{db: db, opts: opts, cfs: cfs, app: cfs[1], byCF: byCF, ro: grocksdb.NewDefaultReadOptions(), cache: newReadCache()}, nil
}

// Verify opens the store in dir read-only, without changing a byte, and
// reads every key of every column family, so that each table block's
// checksum is checked: a damaged store is an error naming the file, as
// Open's would be. byzlog node check runs it.
func Verify(dir string) (keys int, err error) {
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
		return 0, fmt.Errorf("verify store %s: %w (no RocksDB database there)", dir, err)
	}
	opts := options()
	defer opts.Destroy()
	if err := hasColumnFamilies(opts, dir); err != nil {
		return 0, err
	}
	db, cfs, err := grocksdb.OpenDbForReadOnlyColumnFamilies(opts, dir, cfNames, everyCF(opts), false)
	if err != nil {
		return 0, openError(dir, err)
	}
	defer func() {
		for _, cf := range cfs {
			cf.Destroy()
		}
		db.Close()
	}()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetFillCache(false)
	for i, cf := range cfs {
		it := db.NewIteratorCF(ro, cf)
		for it.SeekToFirst(); it.Valid(); it.Next() {
			keys++
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return keys, fmt.Errorf("verify store %s, column family %s: %w; the store is damaged: rebuild this validator from its peers (docs/operating.md, Rebuilding a validator)", dir, cfNames[i], err)
		}
	}
	return keys, nil
}

// everyCF gives each column family opts.
func everyCF(opts *grocksdb.Options) []*grocksdb.Options {
	cfOpts := make([]*grocksdb.Options, len(cfNames))
	for i := range cfOpts {
		cfOpts[i] = opts
	}
	return cfOpts
}

// options are the database's options, for Open and Verify.
func options() *grocksdb.Options {
	opts := grocksdb.NewDefaultOptions()
	// Debian's RocksDB logs every flush and compaction at info level.
	opts.SetInfoLogLevel(grocksdb.WarnInfoLogLevel)
	// Damaged files are refused, never opened around. RocksDB's default WAL
	// recovery stops replaying at the first bad record and opens without an
	// error: a bit flipped in the middle of the WAL silently dropped 250 of
	// 500 synced commits. This mode replays every record and fails on a
	// checksum mismatch, tolerating only a torn last record (a write that
	// power cut short, so never acknowledged). A store that opens short of
	// CometBFT's height is then replayed the missing blocks by CometBFT.
	opts.SetWALRecoveryMode(grocksdb.TolerateCorruptedTailRecordsRecovery)
	opts.SetParanoidChecks(true)
	return opts
}

const rebuildHint = "the store is damaged: rebuild this validator from its peers (docs/operating.md, Rebuilding a validator)"

func openError(dir string, err error) error {
	if strings.Contains(err.Error(), "Corruption") {
		return fmt.Errorf("open store %s: %w%s; %s", dir, err, damagedFiles(dir), rebuildHint)
	}
	return fmt.Errorf("open store %s: %w", dir, err)
}

// hasColumnFamilies checks that the store in dir lists every column family.
func hasColumnFamilies(opts *grocksdb.Options, dir string) error {
	names, err := grocksdb.ListColumnFamilies(opts, dir)
	if err != nil {
		return openError(dir, err)
	}
	var missing []string
	for _, n := range cfNames {
		if !slices.Contains(names, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		manifest := "MANIFEST"
		if b, err := os.ReadFile(filepath.Join(dir, "CURRENT")); err == nil {
			manifest = strings.TrimSpace(string(b))
		}
		return fmt.Errorf("open store %s: its %s lists no column family %s (it has %s): %s", dir, manifest, strings.Join(missing, ", "), strings.Join(names, ", "), rebuildHint)
	}
	return nil
}

// damagedFiles is what RocksDB's info log says of the files it found
// damaged ("; 000004.log: dropping 30790 bytes; Corruption: checksum
// mismatch"), which its error leaves out: RocksDB starts a new LOG at every
// open, so the lines are this open's.
func damagedFiles(dir string) string {
	f, err := os.Open(filepath.Join(dir, "LOG"))
	if err != nil {
		return walFiles(dir)
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for n := 0; sc.Scan() && n < 4; {
		_, what, ok := strings.Cut(sc.Text(), "] "+dir+"/")
		if !ok || !strings.Contains(what, "Corruption") {
			continue
		}
		b.WriteString("; " + what)
		n++
	}
	if b.Len() == 0 {
		// A read-only open writes no LOG: name the WAL, the file whose
		// replay reports a corruption without naming it.
		return walFiles(dir)
	}
	return b.String()
}

// walFiles lists the store's write-ahead logs ("; in the WAL 000004.log").
func walFiles(dir string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		return ""
	}
	for i := range logs {
		logs[i] = filepath.Base(logs[i])
	}
	return "; in the WAL " + strings.Join(logs, ", ")
}

// Last returns the last committed height and app hash; a new store returns
// height 0 and no hash.
func (s *Store) Last() (Committed, error) {
	h, err := s.get(s.app, keyHeight)
	if err != nil {
		return Committed{}, err
	}
	if h == nil {
		return Committed{}, nil
	}
	if len(h) != 8 {
		return Committed{}, fmt.Errorf("read committed height: stored value is %d bytes, want 8 (corrupt store?)", len(h))
	}
	hash, err := s.get(s.app, keyAppHash)
	if err != nil {
		return Committed{}, err
	}
	return Committed{Height: int64(binary.BigEndian.Uint64(h)), AppHash: hash}, nil
}

// Get reads one key of committed state; a missing key is nil.
func (s *Store) Get(cf core.CF, key []byte) ([]byte, error) {
	h, ok := s.byCF[cf]
	if !ok {
		return nil, fmt.Errorf("read: unknown column family %s", cf)
	}
	if !cacheable(cf) {
		return s.get(h, key)
	}
	k := cacheKey(cf, key)
	v, found, gen := s.cache.get(k)
	if found {
		return v, nil
	}
	v, err := s.get(h, key)
	if err != nil {
		return nil, err
	}
	s.cache.keep(k, bytes.Clone(v), gen)
	return v, nil
}

// Scan walks [start, end) of a column family in key order.
func (s *Store) Scan(cf core.CF, start, end []byte, fn func(key, value []byte) bool) error {
	h, ok := s.byCF[cf]
	if !ok {
		return fmt.Errorf("scan: unknown column family %s", cf)
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	if end != nil {
		ro.SetIterateUpperBound(end)
	}
	it := s.db.NewIteratorCF(ro, h)
	defer it.Close()
	for it.Seek(start); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		more := fn(k.Data(), v.Data())
		k.Free()
		v.Free()
		if !more {
			break
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("scan %s: %w", cf, err)
	}
	return nil
}

// Apply writes changes without moving the committed height: genesis state
// from InitChain, which CometBFT runs again if the app crashes before its
// first commit.
func (s *Store) Apply(changes core.ChangeSet) error {
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	if err := s.stage(wb, changes); err != nil {
		return err
	}
	if err := s.write(wb); err != nil {
		s.cache.clear()
		return fmt.Errorf("write genesis state: %w", err)
	}
	s.cache.wrote(changes)
	return nil
}

func (s *Store) stage(wb *grocksdb.WriteBatch, changes core.ChangeSet) error {
	for _, r := range changes.RangeDeletes {
		h, ok := s.byCF[r.CF]
		if !ok {
			return fmt.Errorf("range delete: unknown column family %s", r.CF)
		}
		wb.DeleteRangeCF(h, r.Start, r.End)
	}
	for _, c := range changes.Changes {
		h, ok := s.byCF[c.CF]
		if !ok {
			return fmt.Errorf("write: unknown column family %s", c.CF)
		}
		if c.Delete {
			wb.DeleteCF(h, c.Key)
		} else {
			wb.PutCF(h, c.Key, c.Value)
		}
	}
	return nil
}

// Commit durably records a block's changes and c as the last committed
// state, in one synced write.
func (s *Store) Commit(c Committed, changes core.ChangeSet) error {
	if c.Height <= 0 {
		return fmt.Errorf("commit height %d: heights start at 1", c.Height)
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	if err := s.stage(wb, changes); err != nil {
		return fmt.Errorf("commit height %d: %w", c.Height, err)
	}
	var be [8]byte
	binary.BigEndian.PutUint64(be[:], uint64(c.Height))
	wb.PutCF(s.app, keyHeight, be[:])
	wb.PutCF(s.app, keyAppHash, c.AppHash)
	if err := s.write(wb); err != nil {
		s.cache.clear()
		return fmt.Errorf("commit height %d: %w", c.Height, err)
	}
	s.cache.wrote(changes)
	return nil
}

// Close releases the database. RocksDB as Debian builds it aborts the process
// if a column family handle is still open when the database closes, so every
// handle, "default" included, is destroyed first.
func (s *Store) Close() error {
	if s.db == nil {
		return errors.New("close store: already closed")
	}
	for _, cf := range s.cfs {
		cf.Destroy()
	}
	s.db.Close()
	s.ro.Destroy()
	if s.wo != nil { // nil when opened read-only
		s.wo.Destroy()
	}
	s.opts.Destroy()
	s.db = nil
	return nil
}

// write applies wb, synced; a store opened read-only refuses.
func (s *Store) write(wb *grocksdb.WriteBatch) error {
	if s.wo == nil {
		return errors.New("the store is open read-only")
	}
	return s.db.Write(s.wo, wb)
}

func (s *Store) get(cf *grocksdb.ColumnFamilyHandle, key []byte) ([]byte, error) {
	v, err := s.db.GetCF(s.ro, cf, key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	defer v.Free()
	if !v.Exists() {
		return nil, nil
	}
	return append([]byte(nil), v.Data()...), nil
}

// Checkpoint writes a consistent copy of the committed state into dir (a
// directory that must not exist), hard-linking the table files: cheap in
// time and, until compaction rewrites them, in disk. Open reads it as a
// store of its own.
func (s *Store) Checkpoint(dir string) error {
	cp, err := s.db.NewCheckpoint()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer cp.Destroy()
	if err := cp.CreateCheckpoint(dir, 0); err != nil {
		return fmt.Errorf("checkpoint into %s: %w", dir, err)
	}
	return nil
}

// Wipe deletes every key of core's column families and the committed
// height: what a state restore that failed half-way leaves must go.
func (s *Store) Wipe() error {
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for _, cf := range core.CFs {
		if err := s.Scan(cf, nil, nil, func(k, _ []byte) bool {
			wb.DeleteCF(s.byCF[cf], bytes.Clone(k))
			return true
		}); err != nil {
			return err
		}
	}
	wb.DeleteCF(s.app, keyHeight)
	wb.DeleteCF(s.app, keyAppHash)
	defer s.cache.clear()
	if err := s.write(wb); err != nil {
		return fmt.Errorf("wipe: %w", err)
	}
	return nil
}
