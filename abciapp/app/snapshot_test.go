package app_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/abciapp/store"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// grpcABCICap is what a CometBFT node's gRPC ABCI client takes in one
// message: gRPC's default receive limit, which the node does not raise.
const grpcABCICap = 4 << 20

// snapshotApp opens an app with snapshots on a fresh chain with genesis
// limits limitsJSON.
func snapshotApp(t *testing.T, limitsJSON string) *app.App {
	t.Helper()
	a := openRootsAppWith(t, t.TempDir(), limitsJSON)
	t.Cleanup(func() { a.Close() })
	return a
}

// snapshotAt is the app's snapshot of height h.
func snapshotAt(t *testing.T, a *app.App, h uint64) *abci.Snapshot {
	t.Helper()
	list, err := a.ListSnapshots(ctx, &abci.RequestListSnapshots{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Snapshots {
		if s.Height == h {
			return s
		}
	}
	t.Fatalf("snapshots = %v, want one of height %d", list.Snapshots, h)
	return nil
}

// TestSnapshotChunksFitGRPC: every LoadSnapshotChunk answer must cross a
// node's gRPC ABCI client, which takes 4 MiB at most, also when the state
// is many times that and holds records of the largest size a chain with
// snapshots allows. (Chunks cut at 4 MiB were never delivered: state sync
// of a chain whose state had passed 4 MiB timed out on every snapshot.)
func TestSnapshotChunksFitGRPC(t *testing.T) {
	a := snapshotApp(t, fmt.Sprintf(`{"snapshot_interval": 16, "max_record_bytes": %d}`, wire.MaxSnapshotRecordBytes))
	var seq uint64
	for h := int64(1); h <= 24; h++ {
		var txs [][]byte
		if h <= 16 {
			// A record of the largest size (compressible, so its batch
			// fits a transaction), then records that nearly fill one.
			big := &byzlogv1.Record{Value: bytes.Repeat([]byte{byte(h)}, wire.MaxSnapshotRecordBytes-64)}
			txs = append(txs, producerTx(t, "producer", seq, byzlogv1.Codec_CODEC_ZSTD, big))
			seq++
			var recs []*byzlogv1.Record
			for i := 0; i < 3; i++ {
				v := make([]byte, 600<<10)
				for j := range v {
					v[j] = byte(j*7 + i + int(h)) // not compressible by much
				}
				recs = append(recs, &byzlogv1.Record{Value: v})
			}
			txs = append(txs, producerTx(t, "producer", seq, byzlogv1.Codec_CODEC_NONE, recs...))
			seq++
		}
		finalize(t, a, h, txs...)
		commit(t, a)
	}
	snap := snapshotAt(t, a, 24)
	if snap.Chunks < 10 {
		t.Fatalf("the snapshot of ~80 MiB of state has %d chunks, want many", snap.Chunks)
	}
	for i := uint32(0); i < snap.Chunks; i++ {
		res, err := a.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: snap.Height, Format: snap.Format, Chunk: i})
		if err != nil || len(res.Chunk) == 0 {
			t.Fatalf("chunk %d: %v (%d bytes)", i, err, len(res.Chunk))
		}
		if n := res.Size(); n > grpcABCICap-64<<10 {
			t.Errorf("LoadSnapshotChunk(%d) answers %d bytes, want under %d (a node's gRPC ABCI client takes %d)", i, n, grpcABCICap-64<<10, grpcABCICap)
		}
	}
	list, err := a.ListSnapshots(ctx, &abci.RequestListSnapshots{})
	if err != nil {
		t.Fatal(err)
	}
	if n := list.Size(); n > grpcABCICap {
		t.Errorf("ListSnapshots answers %d bytes, want under %d", n, grpcABCICap)
	}
}

// TestSnapshotGenesisBoundsRecords: a chain with snapshots refuses
// records too large for one state-sync chunk, saying why.
func TestSnapshotGenesisBoundsRecords(t *testing.T) {
	a := freshApp(t)
	genesis := fmt.Sprintf(`{"limits": {"snapshot_interval": 16, "max_batch_bytes": %d, "max_record_bytes": %d}}`, 8<<20, wire.MaxSnapshotRecordBytes+1)
	_, err := a.InitChain(ctx, &abci.RequestInitChain{ChainId: chainID, AppStateBytes: []byte(genesis)})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("max_record_bytes")) || !bytes.Contains([]byte(err.Error()), []byte("snapshot_interval")) {
		t.Fatalf("InitChain with max_record_bytes %d and snapshots = %v, want an error naming max_record_bytes and snapshot_interval", wire.MaxSnapshotRecordBytes+1, err)
	}
}

// freshApp is an app on an empty store with snapshots on, as a node that
// joins by state sync starts it: no InitChain.
func freshApp(t *testing.T) *app.App {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := app.DefaultConfig()
	cfg.SnapshotDir = filepath.Join(t.TempDir(), "snapshots")
	cfg.BundleDir = filepath.Join(t.TempDir(), "bundles")
	b, err := app.New(st, zerolog.Nop(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestSnapshotAfterAbandonedRestore: CometBFT gives up on a snapshot whose
// chunks do not all come (it times out) and offers an older one; what the
// abandoned restore wrote must not stay under it. Here the abandoned
// snapshot's state knows a producer that first writes after the older
// snapshot's height: left in the store, it would make that producer's
// first batch a duplicate and the restored node diverge.
func TestSnapshotAfterAbandonedRestore(t *testing.T) {
	a := snapshotApp(t, `{"snapshot_interval": 16}`)
	const lateFrom = 26 // after the older snapshot (24), before the newer's state (32)
	txsAt := map[int64][][]byte{}
	hashes := map[int64][]byte{}
	run := func(from, to int64) {
		for h := from; h <= to; h++ {
			txs := [][]byte{validTx(t, uint64(h-1))}
			if h >= lateFrom {
				txs = append(txs, producerTx(t, "late", uint64(h-lateFrom), byzlogv1.Codec_CODEC_NONE, &byzlogv1.Record{Value: []byte(fmt.Sprint("late ", h))}))
			}
			txsAt[h] = txs
			hashes[h] = finalize(t, a, h, txs...)
			commit(t, a)
		}
	}
	run(1, 40)
	load := func(s *abci.Snapshot) [][]byte {
		chunks := make([][]byte, s.Chunks)
		for i := range chunks {
			res, err := a.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: s.Height, Format: s.Format, Chunk: uint32(i)})
			if err != nil || len(res.Chunk) == 0 {
				t.Fatalf("snapshot %d chunk %d: %v", s.Height, i, err)
			}
			chunks[i] = res.Chunk
		}
		return chunks
	}
	newer, older := snapshotAt(t, a, 40), snapshotAt(t, a, 24)
	newerChunks, olderChunks := load(newer), load(older)
	run(41, 48)

	b := freshApp(t)
	offer := func(s *abci.Snapshot) {
		t.Helper()
		r, err := b.OfferSnapshot(ctx, &abci.RequestOfferSnapshot{Snapshot: s, AppHash: hashes[int64(s.Height)]})
		if err != nil || r.Result != abci.ResponseOfferSnapshot_ACCEPT {
			t.Fatalf("offer of snapshot %d = %v, %v; want ACCEPT", s.Height, r, err)
		}
	}
	apply := func(i int, chunk []byte) {
		t.Helper()
		r, err := b.ApplySnapshotChunk(ctx, &abci.RequestApplySnapshotChunk{Index: uint32(i), Chunk: chunk, Sender: "peer"})
		if err != nil || r.Result != abci.ResponseApplySnapshotChunk_ACCEPT {
			t.Fatalf("chunk %d = %v, %v; want ACCEPT", i, r, err)
		}
	}
	offer(newer)
	for i, c := range newerChunks[:len(newerChunks)-wire.StateRootLag] {
		apply(i, c) // every state chunk; the blocks never come
	}
	offer(older)
	for i, c := range olderChunks {
		apply(i, c)
	}
	if got := info(t, b); got.LastBlockHeight != 24 || !bytes.Equal(got.LastBlockAppHash, hashes[24]) {
		t.Fatalf("restored at height %d hash %X, want 24 %X", got.LastBlockHeight, got.LastBlockAppHash, hashes[24])
	}
	for h := int64(25); h <= 48; h++ {
		if got := finalize(t, b, h, txsAt[h]...); !bytes.Equal(got, hashes[h]) {
			t.Fatalf("height %d on the restored app: app hash %X, the chain's is %X", h, got, hashes[h])
		}
		commit(t, b)
	}
}

// TestSnapshotChunksConcurrently: a node serves chunks to every peer that
// state-syncs from it, and CometBFT asks for them from each peer's
// goroutine, so LoadSnapshotChunk runs concurrently, also for one
// snapshot. Every answer must be the chunk, whichever order they come in,
// and a snapshot pruned while it is served must not break the ones kept.
func TestSnapshotChunksConcurrently(t *testing.T) {
	a := snapshotApp(t, `{"snapshot_interval": 16}`)
	var seq uint64
	grow := func(from, to int64) {
		for h := from; h <= to; h++ {
			var recs []*byzlogv1.Record
			for i := 0; i < 3; i++ {
				v := make([]byte, 200<<10)
				for j := range v {
					v[j] = byte(j*13 + i + int(h))
				}
				recs = append(recs, &byzlogv1.Record{Value: v})
			}
			finalize(t, a, h, producerTx(t, "producer", seq, byzlogv1.Codec_CODEC_NONE, recs...))
			seq++
			commit(t, a)
		}
	}
	grow(1, 24)
	snap := snapshotAt(t, a, 24) // of the state at 16
	want := make([][]byte, snap.Chunks)
	for i := range want {
		res, err := a.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: snap.Height, Format: snap.Format, Chunk: uint32(i)})
		if err != nil || len(res.Chunk) == 0 {
			t.Fatalf("chunk %d: %v", i, err)
		}
		want[i] = res.Chunk
	}
	if len(want) < 3 {
		t.Fatalf("the snapshot has %d chunks, want several", len(want))
	}
	const peers = 8
	errs := make(chan error, peers*len(want))
	var wg sync.WaitGroup
	for p := 0; p < peers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range want {
				i := (k + p) % len(want)
				res, err := a.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: snap.Height, Format: snap.Format, Chunk: uint32(i)})
				switch {
				case err != nil:
					errs <- fmt.Errorf("peer %d, chunk %d: %w", p, i, err)
				case !bytes.Equal(res.Chunk, want[i]):
					errs <- fmt.Errorf("peer %d, chunk %d: %d bytes that are not the chunk", p, i, len(res.Chunk))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The chain moves on until snapshot 24 is pruned (the app keeps two):
	// the newest is served, the pruned one is not.
	grow(25, 56)
	newest := snapshotAt(t, a, 56)
	if res, err := a.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: newest.Height, Format: newest.Format, Chunk: 0}); err != nil || len(res.Chunk) == 0 {
		t.Fatalf("chunk 0 of snapshot 56 after snapshot 24 was pruned: %v", err)
	}
	if res, err := a.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: snap.Height, Format: snap.Format, Chunk: 0}); err != nil || len(res.Chunk) != 0 {
		t.Fatalf("chunk 0 of pruned snapshot 24 = %d bytes, %v; want an empty answer", len(res.Chunk), err)
	}
}

// TestSnapshotBigBlocksInParts: a block after a snapshot's state may
// reference up to 16 MiB of bundles (a proposer fills blocks to what
// validators take, not to block.max_bytes), more than one chunk may carry
// across a node's gRPC ABCI client. Such a block is served in parts under
// the cap, and a fresh node restores from them the app hash of the chain;
// a part that is not the one the metadata lists is refused (and only it
// fetched again, from another peer), and the restore then completes.
func TestSnapshotBigBlocksInParts(t *testing.T) {
	a := snapshotApp(t, `{"snapshot_interval": 16}`)
	txsAt := map[int64][][]byte{}
	hashes := map[int64][]byte{}
	var seq uint64
	for h := int64(1); h <= 24; h++ {
		var txs [][]byte
		n := 1
		if h > 16 {
			n = 3 // ~5.4 MiB a block: two parts
		}
		for range n {
			var recs []*byzlogv1.Record
			for i := 0; i < 3; i++ {
				v := make([]byte, 600<<10)
				for j := range v {
					v[j] = byte(j*7 + i + int(h) + int(seq))
				}
				recs = append(recs, &byzlogv1.Record{Value: v})
			}
			txs = append(txs, producerTx(t, "producer", seq, byzlogv1.Codec_CODEC_NONE, recs...))
			seq++
		}
		txsAt[h] = txs
		hashes[h] = finalize(t, a, h, txs...)
		commit(t, a)
	}
	snap := snapshotAt(t, a, 24)
	chunks := make([][]byte, snap.Chunks)
	for i := range chunks {
		res, err := a.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: snap.Height, Format: snap.Format, Chunk: uint32(i)})
		if err != nil || len(res.Chunk) == 0 {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if n := res.Size(); n > grpcABCICap-64<<10 {
			t.Errorf("LoadSnapshotChunk(%d) answers %d bytes, want under %d", i, n, grpcABCICap-64<<10)
		}
		chunks[i] = res.Chunk
	}
	var m byzlogv1.SnapshotMeta
	if err := proto.Unmarshal(snap.Metadata, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.BlockParts) != wire.StateRootLag || m.BlockParts[0] < 2 {
		t.Fatalf("block parts %v, want %d blocks of 2 or more parts", m.BlockParts, wire.StateRootLag)
	}
	state := len(m.ChunkHashes)

	b := freshApp(t)
	if r, err := b.OfferSnapshot(ctx, &abci.RequestOfferSnapshot{Snapshot: snap, AppHash: hashes[24]}); err != nil || r.Result != abci.ResponseOfferSnapshot_ACCEPT {
		t.Fatalf("offer = %v, %v; want ACCEPT", r, err)
	}
	apply := func(i int, chunk []byte) *abci.ResponseApplySnapshotChunk {
		t.Helper()
		r, err := b.ApplySnapshotChunk(ctx, &abci.RequestApplySnapshotChunk{Index: uint32(i), Chunk: chunk, Sender: "peer"})
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		return r
	}
	for i := 0; i < state+1; i++ {
		if r := apply(i, chunks[i]); r.Result != abci.ResponseApplySnapshotChunk_ACCEPT {
			t.Fatalf("chunk %d = %v, want ACCEPT", i, r)
		}
	}
	// The first block's second part, cut short: it is not the part whose
	// hash the metadata lists, so it alone is asked for again, from
	// another peer.
	cut := chunks[state+1]
	r := apply(state+1, cut[:len(cut)-100])
	if r.Result != abci.ResponseApplySnapshotChunk_RETRY || len(r.RefetchChunks) != 1 || r.RefetchChunks[0] != uint32(state+1) || len(r.RejectSenders) != 1 {
		t.Fatalf("a wrong part = %v, want RETRY refetching chunk %d and refusing its sender", r, state+1)
	}
	if len(m.BlockPartHashes) != len(chunks)-state {
		t.Fatalf("%d block part hashes for %d block chunks", len(m.BlockPartHashes), len(chunks)-state)
	}
	for i := state + 1; i < len(chunks); i++ {
		if r := apply(i, chunks[i]); r.Result != abci.ResponseApplySnapshotChunk_ACCEPT {
			t.Fatalf("chunk %d = %v, want ACCEPT", i, r)
		}
	}
	if got := info(t, b); got.LastBlockHeight != 24 || !bytes.Equal(got.LastBlockAppHash, hashes[24]) {
		t.Fatalf("restored at height %d hash %X, want 24 %X", got.LastBlockHeight, got.LastBlockAppHash, hashes[24])
	}
}
