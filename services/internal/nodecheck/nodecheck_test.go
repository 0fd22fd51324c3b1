package nodecheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cometbft/cometbft/consensus"
	"github.com/cometbft/cometbft/privval"
	cmtstate "github.com/cometbft/cometbft/proto/tendermint/state"
	cmtstore "github.com/cometbft/cometbft/proto/tendermint/store"
	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/store"
)

// node writes a validator's files as CometBFT and byzlog-app do: a signing
// key and state, a consensus WAL, goleveldb block store and state
// databases (writes not compacted, so the journal holds them), and an app
// store. It returns the home and the app's data directory.
func node(t *testing.T) (string, string) {
	t.Helper()
	home := t.TempDir()
	data, config := filepath.Join(home, "data"), filepath.Join(home, "config")
	for _, d := range []string{filepath.Join(data, "cs.wal"), config} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pv := privval.GenFilePV(filepath.Join(config, "priv_validator_key.json"), filepath.Join(data, "priv_validator_state.json"))
	pv.Save()

	f, err := os.Create(filepath.Join(data, "cs.wal", "wal"))
	if err != nil {
		t.Fatal(err)
	}
	enc := consensus.NewWALEncoder(f)
	for h := int64(1); h <= 200; h++ {
		if err := enc.Encode(&consensus.TimedWALMessage{Time: time.Unix(h, 0).UTC(), Msg: consensus.EndHeightMessage{Height: h}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"blockstore.db", "state.db"} {
		db, err := leveldb.OpenFile(filepath.Join(data, name), &opt.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			if err := db.Put([]byte(fmt.Sprintf("key-%05d", i)), []byte(strings.Repeat("v", 100)), &opt.WriteOptions{Sync: i%100 == 0}); err != nil {
				t.Fatal(err)
			}
		}
		// The block store's state moves up with each block, synced, as
		// CometBFT saves it; the state follows the last one.
		for h := int64(1); h <= 200; h++ {
			key, v := []byte("blockStore"), mustMarshal(t, &cmtstore.BlockStoreState{Base: 1, Height: h})
			if name == "state.db" {
				if h < 200 {
					continue
				}
				key, v = []byte("stateKey"), mustMarshal(t, &cmtstate.State{LastBlockHeight: h})
			}
			if err := db.Put(key, v, &opt.WriteOptions{Sync: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	app := filepath.Join(home, "app")
	s, err := store.Open(app)
	if err != nil {
		t.Fatal(err)
	}
	for h := int64(1); h <= 50; h++ {
		c := core.ChangeSet{Changes: []core.Change{{CF: core.CFRecords, Key: []byte(fmt.Sprint(h)), Value: []byte("value")}}}
		if err := s.Commit(store.Committed{Height: h, AppHash: []byte{byte(h)}}, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return home, app
}

func mustMarshal(t *testing.T, m interface{ Marshal() ([]byte, error) }) []byte {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func flip(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func largestIn(t *testing.T, glob string) string {
	t.Helper()
	files, _ := filepath.Glob(glob)
	var best string
	var size int64 = -1
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			best, size = f, fi.Size()
		}
	}
	if best == "" {
		t.Fatalf("no file %s", glob)
	}
	return best
}

func TestCheckNamesTheDamagedFile(t *testing.T) {
	home, app := node(t)
	if rs := Check(home, app); Damaged(rs) {
		t.Fatalf("an undamaged node is reported damaged: %+v", rs)
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, home string) string // returns the damaged file
		want   string                                 // in the result's File
	}{
		{"signing state cut", func(t *testing.T, home string) string {
			p := filepath.Join(home, "data", "priv_validator_state.json")
			if err := os.Truncate(p, 20); err != nil {
				t.Fatal(err)
			}
			return "priv_validator_state.json"
		}, "data/priv_validator_state.json"},
		{"signing state zeroed", func(t *testing.T, home string) string {
			p := filepath.Join(home, "data", "priv_validator_state.json")
			if err := os.WriteFile(p, make([]byte, 64), 0o600); err != nil {
				t.Fatal(err)
			}
			return "priv_validator_state.json"
		}, "data/priv_validator_state.json"},
		{"consensus WAL bit flip", func(t *testing.T, home string) string {
			flip(t, filepath.Join(home, "data", "cs.wal", "wal"))
			return "checksum mismatch"
		}, "data/cs.wal/wal"},
		{"consensus WAL cut", func(t *testing.T, home string) string {
			p := filepath.Join(home, "data", "cs.wal", "wal")
			fi, _ := os.Stat(p)
			if err := os.Truncate(p, fi.Size()-5); err != nil {
				t.Fatal(err)
			}
			return "cut short"
		}, "data/cs.wal/wal"},
		{"block store journal bit flip", func(t *testing.T, home string) string {
			p := largestIn(t, filepath.Join(home, "data", "blockstore.db", "*.log"))
			flip(t, p)
			return filepath.Base(p)
		}, "data/blockstore.db"},
		{"block store behind its state", func(t *testing.T, home string) string {
			// What a journal cut at a record boundary, or rolled back,
			// leaves: goleveldb opens it as a crash's torn tail (a cut
			// inside a record is caught as a bad chunk), and the block
			// store's last synced blocks are gone.
			p := filepath.Join(home, "data", "blockstore.db")
			db, err := leveldb.OpenFile(p, &opt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Put([]byte("blockStore"), mustMarshal(t, &cmtstore.BlockStoreState{Base: 1, Height: 150}), &opt.WriteOptions{Sync: true}); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			return "holds blocks 1..150, but state.db is at height 200"
		}, "data/blockstore.db"},
		{"state journal zeroed", func(t *testing.T, home string) string {
			// (A journal cut short reads as a crash's torn tail: goleveldb
			// keeps what precedes it, as CometBFT does.)
			p := largestIn(t, filepath.Join(home, "data", "state.db", "*.log"))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			clear(b[len(b)/2 : len(b)/2+4096])
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return filepath.Base(p)
		}, "data/state.db"},
		{"app WAL bit flip", func(t *testing.T, home string) string {
			p := largestIn(t, filepath.Join(home, "app", "*.log"))
			flip(t, p)
			return filepath.Base(p)
		}, "app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, app := node(t)
			named := tc.damage(t, home)
			rs := Check(home, app)
			var hit *Result
			for i, r := range rs {
				if r.Err != nil {
					if hit != nil {
						t.Errorf("also damaged: %s: %v", r.File, r.Err)
					}
					hit = &rs[i]
				}
			}
			if hit == nil {
				t.Fatalf("no damage found: %+v", rs)
			}
			t.Logf("%s: %v", hit.File, hit.Err)
			if hit.File != tc.want || !strings.Contains(hit.File+": "+hit.Err.Error(), named) {
				t.Errorf("found %s: %v; want %s, naming %s", hit.File, hit.Err, tc.want, named)
			}
		})
	}
}
