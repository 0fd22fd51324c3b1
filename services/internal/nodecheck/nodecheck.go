// Package nodecheck reads a stopped validator's files as CometBFT and
// byzlog-app read them, without changing a byte, and says of each one
// whether it is whole, and what is wrong with it if not: the signing state
// and key, CometBFT's consensus WAL (record checksums), its goleveldb
// databases (every key read with checksums verified, journals strictly)
// and byzlog-app's RocksDB store (store.Verify), and whether the block
// store still holds every block the state has moved past. CometBFT halts on some of
// these damages without naming the file, and opens around others (its
// goleveldb does not read journals strictly); this names it, so that an
// operator knows to rebuild the validator (docs/operating.md).
package nodecheck

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	"github.com/cometbft/cometbft/privval"
	cmtstate "github.com/cometbft/cometbft/proto/tendermint/state"
	cmtstore "github.com/cometbft/cometbft/proto/tendermint/store"
	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"

	"github.com/byzlog/byzlog/abciapp/store"
)

// Result is what the check found of one file or database.
type Result struct {
	// File is the path, relative to the node's home where it lies there.
	File string
	// Err is what is wrong with it; nil when it is whole.
	Err error
	// Detail says what was read of a whole one ("1,204 keys").
	Detail string
}

// Check reads the validator whose CometBFT home is home and whose
// byzlog-app data directory is appData ("" to skip the app). A database
// or file that does not exist is reported as missing, except the ones
// CometBFT makes only when used (evidence, tx index).
func Check(home, appData string) []Result {
	var out []Result
	add := func(file string, detail string, err error) {
		if rel, rerr := filepath.Rel(home, file); rerr == nil && filepath.IsLocal(rel) {
			file = rel
		}
		out = append(out, Result{File: file, Err: err, Detail: detail})
	}
	data := filepath.Join(home, "data")
	config := filepath.Join(home, "config")

	state := filepath.Join(data, "priv_validator_state.json")
	add(state, "", signState(state))
	key := filepath.Join(config, "priv_validator_key.json")
	add(key, "", signKey(key))

	wals, _ := filepath.Glob(filepath.Join(data, "cs.wal", "wal*"))
	sort.Strings(wals)
	if len(wals) == 0 {
		add(filepath.Join(data, "cs.wal", "wal"), "", errors.New("missing"))
	}
	for _, w := range wals {
		n, err := consensusWAL(w)
		add(w, fmt.Sprintf("%d records", n), err)
	}

	whole := 0
	for _, db := range []struct {
		name     string
		optional bool
	}{{"blockstore.db", false}, {"state.db", false}, {"evidence.db", true}, {"tx_index.db", true}} {
		path := filepath.Join(data, db.name)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			if !db.optional {
				add(path, "", errors.New("missing"))
			}
			continue
		}
		n, err := levelDB(path)
		add(path, fmt.Sprintf("%d keys", n), err)
		if err == nil && !db.optional {
			whole++
		}
	}
	if whole == 2 {
		detail, err := chainHeights(data)
		add(filepath.Join(data, "blockstore.db"), detail, err)
	}

	if appData != "" {
		n, err := store.Verify(appData)
		add(appData, fmt.Sprintf("%d keys", n), err)
	}
	return out
}

// Damaged reports whether any result is an error.
func Damaged(rs []Result) bool {
	for _, r := range rs {
		if r.Err != nil {
			return true
		}
	}
	return false
}

func signState(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var st privval.FilePVLastSignState
	if err := cmtjson.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("not a signing state (%v): CometBFT exits reading it", err)
	}
	if st.Height < 0 || st.Round < 0 || st.Step < 0 || st.Step > 3 {
		return fmt.Errorf("height %d, round %d, step %d: out of range", st.Height, st.Round, st.Step)
	}
	return nil
}

func signKey(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var k privval.FilePVKey
	if err := cmtjson.Unmarshal(b, &k); err != nil {
		return fmt.Errorf("not a validator key (%v)", err)
	}
	if k.PrivKey == nil || k.PubKey == nil || !k.PrivKey.PubKey().Equals(k.PubKey) {
		return errors.New("the private key does not match the public key")
	}
	return nil
}

// walMaxRecord is CometBFT's bound on one WAL record (1 MiB + 24 bytes).
const walMaxRecord = 1<<20 + 24

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// consensusWAL reads CometBFT's consensus WAL file as its decoder does:
// records of a CRC-32C, a length and the data. A file cut mid-record (a
// crash) counts as damaged at that offset too; CometBFT itself cuts such a
// tail off at start and runs on.
func consensusWAL(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var off int64
	var hdr [8]byte
	data := make([]byte, 0, 4096)
	for n := 0; ; n++ {
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			return n, nil
		} else if err != nil {
			return n, fmt.Errorf("record %d at offset %d: cut short in its header", n, off)
		}
		crc, length := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
		if length > walMaxRecord {
			return n, fmt.Errorf("record %d at offset %d: length %d past CometBFT's bound %d", n, off, length, walMaxRecord)
		}
		data = data[:0]
		if cap(data) < int(length) {
			data = make([]byte, 0, length)
		}
		data = data[:length]
		if _, err := io.ReadFull(r, data); err != nil {
			return n, fmt.Errorf("record %d at offset %d: cut short (%d bytes announced)", n, off, length)
		}
		if got := crc32.Checksum(data, crc32c); got != crc {
			return n, fmt.Errorf("record %d at offset %d: checksum mismatch (stored %08x, computed %08x)", n, off, crc, got)
		}
		off += 8 + int64(length)
	}
}

// chainHeights compares the heights CometBFT's block store and state say
// they hold. CometBFT saves each block, synced, before the state after it,
// so a state past the block store's last block means the block store lost
// writes it had synced: its newest journal cut or rolled back, which
// goleveldb cannot tell from a crash's torn tail and opens around (CometBFT
// then halts in its handshake, "app block height ... is higher than core",
// naming no file).
func chainHeights(data string) (string, error) {
	bsPath := filepath.Join(data, "blockstore.db")
	raw, err := levelGet(bsPath, []byte("blockStore"))
	if err != nil {
		return "", err
	}
	var bs cmtstore.BlockStoreState
	if err := bs.Unmarshal(raw); err != nil {
		return "", fmt.Errorf("its state (key blockStore) does not decode: %w", err)
	}
	raw, err = levelGet(filepath.Join(data, "state.db"), []byte("stateKey"))
	if err != nil {
		return "", err
	}
	var st cmtstate.State
	if err := st.Unmarshal(raw); err != nil {
		return "", fmt.Errorf("state.db's state (key stateKey) does not decode: %w", err)
	}
	if st.LastBlockHeight > bs.Height {
		journals, _ := filepath.Glob(filepath.Join(bsPath, "*.log"))
		sort.Strings(journals)
		newest := "its journal"
		if len(journals) > 0 {
			newest = "its journal " + filepath.Base(journals[len(journals)-1])
		}
		return "", fmt.Errorf("holds blocks %d..%d, but state.db is at height %d: the block store lost blocks it had synced (%s cut or rolled back)", bs.Base, bs.Height, st.LastBlockHeight, newest)
	}
	return fmt.Sprintf("blocks %d..%d, state at %d", bs.Base, bs.Height, st.LastBlockHeight), nil
}

// levelGet reads one key of a goleveldb database, read-only; a missing key
// is an empty value, as CometBFT reads it.
func levelGet(path string, key []byte) ([]byte, error) {
	db, err := leveldb.OpenFile(path, &opt.Options{ReadOnly: true, ErrorIfMissing: true, Strict: opt.StrictAll})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	v, err := db.Get(key, nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return nil, nil
	}
	return v, err
}

// levelDB opens a goleveldb database read-only with every strict check
// (journal, manifest, block checksums) and reads every key. goleveldb's
// corruption errors name the file ("[file=000005.ldb]").
func levelDB(path string) (int, error) {
	db, err := leveldb.OpenFile(path, &opt.Options{ReadOnly: true, ErrorIfMissing: true, Strict: opt.StrictAll})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	it := db.NewIterator(nil, &opt.ReadOptions{Strict: opt.StrictAll, DontFillCache: true})
	defer it.Release()
	n := 0
	for it.Next() {
		n++
	}
	return n, it.Error()
}
