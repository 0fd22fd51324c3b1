package app_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/store"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// readLog is every stored record of t/0, as the records query pages them.
func readLog(t *testing.T, a *app.App) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		req, _ := proto.Marshal(&byzlogv1.RecordsRequest{Topic: "t", Offset: uint64(len(out))})
		q, err := a.Query(ctx, &abci.RequestQuery{Path: wire.PathRecords, Data: req})
		if err != nil || q.Code != 0 {
			t.Fatalf("records from %d: %v %s", len(out), err, q.GetLog())
		}
		var resp byzlogv1.RecordsResponse
		if err := proto.Unmarshal(q.Value, &resp); err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.Records...)
		if len(resp.Records) == 0 || uint64(len(out)) >= resp.NextOffset {
			return out
		}
	}
}

// openRootsApp opens an app on dir with snapshots in dir/snapshots, on a
// chain that hashes its state every 16 blocks.
func openRootsApp(t *testing.T, dir string) *app.App {
	t.Helper()
	return openRootsAppWith(t, dir, `{"snapshot_interval": 16}`)
}

// openRootsAppWith is openRootsApp on a chain with genesis limits
// limitsJSON.
func openRootsAppWith(t *testing.T, dir, limitsJSON string) *app.App {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := app.DefaultConfig()
	cfg.SnapshotDir = filepath.Join(dir, "snapshots")
	cfg.BundleDir = filepath.Join(dir, "bundles")
	a, err := app.New(st, zerolog.Nop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if info(t, a).LastBlockHeight == 0 {
		// The newest rules: the state root hashes the store's layout,
		// records in runs from rules version 4.
		genesis := fmt.Sprintf(`{"topics": [{"name": "t", "partitions": 1}], "limits": %s, "rules_version": %d}`, limitsJSON, core.MaxRulesVersion)
		if _, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: []byte(genesis)}); err != nil {
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
	cfg := app.DefaultConfig()
	cfg.BundleDir = filepath.Join(t.TempDir(), "bundles")
	c, err := app.New(st, zerolog.Nop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: []byte(`{"topics": [{"name": "t", "partitions": 1}], "limits": {"snapshot_interval": 16}}`)})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("--snapshot-dir")) {
		t.Fatalf("InitChain of a chain that hashes its state, without a snapshot directory = %v, want an error naming --snapshot-dir", err)
	}
}

// TestStateSync restores a fresh app from another's snapshot through the
// four ABCI snapshot calls, as CometBFT's state sync makes them: it reaches
// the same height and app hash and goes on in step. A chunk that differs
// is fetched again; metadata for another app hash is refused; a block chunk
// that lies makes the snapshot rejected and the store wiped.
func TestStateSync(t *testing.T) {
	a := openRootsApp(t, t.TempDir())
	defer a.Close()
	var hash40 []byte
	for h := int64(1); h <= 40; h++ {
		tx := validTx(t, uint64(h-1))
		if h%4 == 0 { // batches that the store keeps in several runs
			recs := make([]*byzlogv1.Record, 60)
			for i := range recs {
				recs[i] = &byzlogv1.Record{Value: bytes.Repeat([]byte{byte(h), byte(i)}, 1000)}
			}
			tx = producerTx(t, "producer", uint64(h-1), byzlogv1.Codec_CODEC_NONE, recs...)
		}
		hash40 = finalize(t, a, h, tx)
		commit(t, a)
	}
	list, err := a.ListSnapshots(ctx, &abci.RequestListSnapshots{})
	if err != nil {
		t.Fatal(err)
	}
	var snap *abci.Snapshot
	for _, s := range list.Snapshots {
		if s.Height == 40 {
			snap = s
		}
	}
	if snap == nil {
		t.Fatalf("snapshots = %v, want one of height 40", list.Snapshots)
	}
	chunks := make([][]byte, snap.Chunks)
	for i := range chunks {
		c, err := a.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: snap.Height, Format: snap.Format, Chunk: uint32(i)})
		if err != nil || len(c.Chunk) == 0 {
			t.Fatalf("chunk %d: %v (%d bytes)", i, err, len(c.Chunk))
		}
		chunks[i] = c.Chunk
	}

	offer := func(b *app.App, appHash []byte) abci.ResponseOfferSnapshot_Result {
		r, err := b.OfferSnapshot(ctx, &abci.RequestOfferSnapshot{Snapshot: snap, AppHash: appHash})
		if err != nil {
			t.Fatal(err)
		}
		return r.Result
	}
	apply := func(b *app.App, i int, chunk []byte) abci.ResponseApplySnapshotChunk_Result {
		r, err := b.ApplySnapshotChunk(ctx, &abci.RequestApplySnapshotChunk{Index: uint32(i), Chunk: chunk, Sender: "peer"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Result
	}

	b := freshApp(t)
	if got := offer(b, bytes.Repeat([]byte{1}, 32)); got != abci.ResponseOfferSnapshot_REJECT {
		t.Fatalf("offer for another app hash = %v, want REJECT", got)
	}
	if got := offer(b, hash40); got != abci.ResponseOfferSnapshot_ACCEPT {
		t.Fatalf("offer = %v, want ACCEPT", got)
	}
	for i, c := range chunks {
		if i == 0 {
			bad := bytes.Clone(c)
			bad[len(bad)-1] ^= 1
			if got := apply(b, i, bad); got != abci.ResponseApplySnapshotChunk_RETRY {
				t.Fatalf("a changed chunk = %v, want RETRY", got)
			}
		}
		if got := apply(b, i, c); got != abci.ResponseApplySnapshotChunk_ACCEPT {
			t.Fatalf("chunk %d = %v, want ACCEPT", i, got)
		}
	}
	if got := info(t, b); got.LastBlockHeight != 40 || !bytes.Equal(got.LastBlockAppHash, hash40) {
		t.Fatalf("restored app at height %d hash %X, want 40 %X", got.LastBlockHeight, got.LastBlockAppHash, hash40)
	}
	if ra, rb := readLog(t, a), readLog(t, b); len(ra) != 30+10*60 || !slices.EqualFunc(ra, rb, bytes.Equal) {
		t.Fatalf("the restored app reads back %d records, the source %d (want 630, the same)", len(rb), len(ra))
	}
	for h := int64(41); h <= 50; h++ {
		tx := validTx(t, uint64(h-1))
		if ha, hb := finalize(t, a, h, tx), finalize(t, b, h, tx); !bytes.Equal(ha, hb) {
			t.Fatalf("height %d after the restore: app hashes %X and %X differ", h, ha, hb)
		}
		commit(t, a)
		commit(t, b)
	}

	// A block chunk that lies (another block's transactions) from one
	// peer is not the part whose hash the metadata lists: refused at once,
	// the chunk asked of another peer.
	last := len(chunks) - 1
	var sb byzlogv1.SnapshotBlock
	if err := proto.Unmarshal(chunks[last], &sb); err != nil {
		t.Fatal(err)
	}
	sb.Txs = [][]byte{validTx(t, 100)}
	lie, err := proto.Marshal(&sb)
	if err != nil {
		t.Fatal(err)
	}
	d := freshApp(t)
	if got := offer(d, hash40); got != abci.ResponseOfferSnapshot_ACCEPT {
		t.Fatalf("offer = %v, want ACCEPT", got)
	}
	for i, ch := range chunks[:last] {
		if got := apply(d, i, ch); got != abci.ResponseApplySnapshotChunk_ACCEPT {
			t.Fatalf("chunk %d = %v", i, got)
		}
	}
	if got := apply(d, last, lie); got != abci.ResponseApplySnapshotChunk_RETRY {
		t.Fatalf("a lying block chunk = %v, want RETRY (another peer's)", got)
	}
	if got := apply(d, last, chunks[last]); got != abci.ResponseApplySnapshotChunk_ACCEPT {
		t.Fatalf("the true block chunk after a lie = %v, want ACCEPT", got)
	}
	if got := info(t, d); got.LastBlockHeight != 40 || !bytes.Equal(got.LastBlockAppHash, hash40) {
		t.Fatalf("restored past a lying chunk at height %d hash %X, want 40 %X", got.LastBlockHeight, got.LastBlockAppHash, hash40)
	}

	// Metadata that lists the lie's hash (a snapshot every liar serves
	// alike) is caught by the app hash its blocks lead to; the
	// half-restored state goes.
	var m byzlogv1.SnapshotMeta
	if err := proto.Unmarshal(snap.Metadata, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lie)
	m.BlockPartHashes[len(m.BlockPartHashes)-1] = sum[:]
	lyingMeta, err := proto.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	honest := snap
	lyingSnap := *snap
	lyingSnap.Metadata = lyingMeta
	snap = &lyingSnap
	c := freshApp(t)
	if got := offer(c, hash40); got != abci.ResponseOfferSnapshot_ACCEPT {
		t.Fatalf("offer = %v, want ACCEPT", got)
	}
	snap = honest
	for i, ch := range chunks[:last] {
		if got := apply(c, i, ch); got != abci.ResponseApplySnapshotChunk_ACCEPT {
			t.Fatalf("chunk %d = %v", i, got)
		}
	}
	if got := apply(c, last, lie); got != abci.ResponseApplySnapshotChunk_REJECT_SNAPSHOT {
		t.Fatalf("a lying block chunk its metadata lists = %v, want REJECT_SNAPSHOT", got)
	}
	if got := info(t, c); got.LastBlockHeight != 0 {
		t.Fatalf("after a rejected snapshot the app is at height %d, want 0", got.LastBlockHeight)
	}
	var topics byzlogv1.TopicList
	q, err := c.Query(ctx, &abci.RequestQuery{Path: "/topics"})
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(q.Value, &topics); err == nil && len(topics.Topics) != 0 {
		t.Fatalf("after a rejected snapshot the store still holds topics %v", topics.Topics)
	}
}
