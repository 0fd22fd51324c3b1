package app_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/abciapp/store"
)

// openRootsApp opens an app on dir with snapshots in dir/snapshots, on a
// chain that hashes its state every 16 blocks.
func openRootsApp(t *testing.T, dir string) *app.App {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := app.DefaultConfig()
	cfg.SnapshotDir = filepath.Join(dir, "snapshots")
	a, err := app.New(st, zerolog.Nop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if info(t, a).LastBlockHeight == 0 {
		if _, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID,
			AppStateBytes: []byte(`{"topics": [{"name": "t", "partitions": 1}], "limits": {"snapshot_interval": 16}}`)}); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// TestStateRoots runs two validators' apps to height 40 through two state
// roots (of 16, committed by 24, and of 32, by 40): they agree on every app
// hash, also when one restarts between a snapshot height and the block
// that commits its root, and when it crashed after committing a snapshot
// height before taking its checkpoint. The newest two checkpoints stay.
func TestStateRoots(t *testing.T) {
	da, db := t.TempDir(), t.TempDir()
	a, b := openRootsApp(t, da), openRootsApp(t, db)
	defer func() { a.Close(); b.Close() }()
	for h := int64(1); h <= 40; h++ {
		tx := validTx(t, uint64(h-1))
		ha, hb := finalize(t, a, h, tx), finalize(t, b, h, tx)
		if !bytes.Equal(ha, hb) {
			t.Fatalf("height %d: app hashes %X and %X differ", h, ha, hb)
		}
		commit(t, a)
		commit(t, b)
		switch h {
		case 19: // a restart while the root of 16 is pending
			a.Close()
			a = openRootsApp(t, da)
		case 32: // a crash after the commit, before the checkpoint
			a.Close()
			if err := os.RemoveAll(filepath.Join(da, "snapshots", "32")); err != nil {
				t.Fatal(err)
			}
			a = openRootsApp(t, da)
		}
	}
	for _, h := range []string{"16", "32"} {
		if _, err := os.Stat(filepath.Join(db, "snapshots", h, "root")); err != nil {
			t.Errorf("checkpoint of %s: %v", h, err)
		}
	}
	// Without a snapshot directory the app says what is missing.
	st, err := store.Open(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := app.New(st, zerolog.Nop(), app.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: []byte(`{"topics": [{"name": "t", "partitions": 1}], "limits": {"snapshot_interval": 16}}`)})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("--snapshot-dir")) {
		t.Fatalf("InitChain of a chain that hashes its state, without a snapshot directory = %v, want an error naming --snapshot-dir", err)
	}
}
