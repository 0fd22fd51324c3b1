package app_test

import (
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/abciapp/internal/workload"
	"github.com/byzlog/byzlog/abciapp/store"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// TestRetainHeight runs an app that prunes (--retain-blocks 100) on a
// chain that hashes its state every 16 blocks, with one indexer
// registered at genesis: Commit gives CometBFT no retain height until a
// snapshot exists and the indexer has reported, then never one past the
// oldest snapshot or the indexer's published height, and /pruning says
// what holds it back.
func TestRetainHeight(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := app.DefaultConfig()
	cfg.SnapshotDir = filepath.Join(dir, "snapshots")
	cfg.RetainBlocks = 100
	cfg.BundleDir = filepath.Join(dir, "bundles")
	a, err := app.New(st, zerolog.Nop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ix := wire.NewSigner(workload.Key("indexer"), chainID)
	genesis := fmt.Sprintf(`{"topics": [{"name": "t", "partitions": 1}], "limits": {"snapshot_interval": 16},
		"indexers": [{"name": "main", "pub_key": %q}]}`, hex.EncodeToString(ix.PublicKey()))
	if _, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: []byte(genesis)}); err != nil {
		t.Fatal(err)
	}
	report := map[int64]int64{150: 120, 230: 229} // block height: published height it carries
	for h := int64(1); h <= 240; h++ {
		txs := [][]byte{validTx(t, uint64(h-1))}
		if p, ok := report[h]; ok {
			tx, err := ix.ProgressTx(p)
			if err != nil {
				t.Fatal(err)
			}
			txs = append(txs, tx)
		}
		res, err := a.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Txs: txs})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res.TxResults {
			if r.Code != 0 {
				t.Fatalf("block %d tx %d: %d %s", h, i, r.Code, r.Log)
			}
		}
		c, err := a.Commit(ctx, &abci.RequestCommit{})
		if err != nil {
			t.Fatal(err)
		}
		p := pruning(t, a)
		if p.RetainHeight != c.RetainHeight || p.Height != h {
			t.Fatalf("height %d: /pruning says %v, Commit gave retain height %d", h, p, c.RetainHeight)
		}
		want, by := h-99, "retain_blocks"
		if p.OldestSnapshot < want {
			want, by = p.OldestSnapshot, "snapshot"
		}
		published := p.Indexers[0].PublishedHeight
		if published < want {
			want, by = published, "indexer main"
		}
		if want <= 1 {
			want = 0
		}
		if c.RetainHeight != want || p.HeldBy != by {
			t.Fatalf("height %d: retain %d held by %q, want %d by %q (%v)", h, c.RetainHeight, p.HeldBy, want, by, p)
		}
		switch h {
		case 149:
			if c.RetainHeight != 0 || p.HeldBy != "indexer main" || p.OldestSnapshot == 0 {
				t.Fatalf("height 149, before the indexer's first report: %v", p)
			}
		case 150:
			if c.RetainHeight != 51 || p.HeldBy != "retain_blocks" {
				t.Fatalf("height 150, the indexer at 120: %v, want 51 by retain_blocks", p)
			}
		case 229:
			if c.RetainHeight != 120 || p.HeldBy != "indexer main" {
				t.Fatalf("height 229, the indexer at 120: %v, want 120 by the indexer", p)
			}
		case 240:
			// The two snapshots kept are of 208 and 224 (served at 216 and
			// 232): the oldest bounds pruning.
			if p.OldestSnapshot != 216 || c.RetainHeight != 141 || p.HeldBy != "retain_blocks" {
				t.Fatalf("height 240: %v, want 141 by retain_blocks, oldest snapshot 216", p)
			}
		}
	}
}

func pruning(t *testing.T, a *app.App) *byzlogv1.Pruning {
	t.Helper()
	res, err := a.Query(ctx, &abci.RequestQuery{Path: wire.PathPruning})
	if err != nil || res.Code != 0 {
		t.Fatalf("query %s = %v %v", wire.PathPruning, err, res)
	}
	var p byzlogv1.Pruning
	if err := proto.Unmarshal(res.Value, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestRetainBlocksConfig(t *testing.T) {
	for _, n := range []int64{-1, 1, app.MinRetainBlocks - 1} {
		cfg := app.DefaultConfig()
		cfg.RetainBlocks = n
		if err := cfg.Validate(); err == nil {
			t.Errorf("retain blocks %d accepted", n)
		}
	}
}
