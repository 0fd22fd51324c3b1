package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	abci "github.com/cometbft/cometbft/abci/types"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/store"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// State sync. A snapshot of height H = h + StateRootLag is the checkpoint
// of the state after h, cut into its chunks, then blocks h+1..H, each in
// parts of at most snapshotPartBytes (SnapshotMeta.block_parts); its metadata (SnapshotMeta) ties the state root, which block H
// committed, to the app hash of H. The receiver checks the metadata against
// the app hash CometBFT's light client verified, every state chunk against
// its hash before writing it, and executes the blocks on the state: the
// app hash it reaches must be H's, or the snapshot is rejected and the
// store wiped.

// snapshotFormat is the only snapshot format: chunks as core cuts them.
const snapshotFormat = 1

// snapshotBlocks saves, at each commit, what snapshots in the making need:
// blocks h+1..H, and at H the metadata that completes the snapshot.
func (a *App) snapshotBlocks(out *core.Outcome, b core.Block) error {
	if a.roots.dir == "" || a.params.Limits.GetSnapshotInterval() == 0 {
		return nil
	}
	for h := b.Height - wire.StateRootLag; h < b.Height; h++ {
		if h <= 0 || !core.SnapshotHeight(a.params.Limits, h) {
			continue
		}
		dir := a.roots.heightDir(h)
		if _, err := os.Stat(filepath.Join(dir, "state")); err != nil {
			return nil // not kept here (a restored node's first snapshot height, say)
		}
		raw, err := proto.Marshal(&byzlogv1.SnapshotBlock{Height: b.Height, TimeUnixNano: b.TimeUnixNano, Txs: b.Txs})
		if err != nil {
			return err
		}
		if err := writeFile(blockFile(dir, b.Height), raw); err != nil {
			return err
		}
		if b.Height != h+wire.StateRootLag {
			continue
		}
		root, err := a.roots.root(h)
		if err != nil {
			return err
		}
		hashes, err := a.roots.chunkHashes(h)
		if err != nil {
			return err
		}
		parts, partHashes, err := blockParts(dir, h)
		if err != nil {
			return err
		}
		meta := &byzlogv1.SnapshotMeta{State: root, ChunkHashes: hashes, PrevAppHash: out.Digest.PrevAppHash,
			RecordsRoot: out.Digest.RecordsRoot, MetaRoot: out.Digest.MetaRoot, MetaProof: out.StateRootProof,
			BlockParts: parts, BlockPartHashes: partHashes}
		raw, err = proto.Marshal(meta)
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, "snapshot"), raw); err != nil {
			return err
		}
		a.log.Info().Int64("height", b.Height).Int64("state_height", h).Uint32("chunks", root.Chunks+wire.StateRootLag).Msg("snapshot ready")
	}
	return nil
}

// snapshotPartBytes is the most bytes of a block one chunk carries: under
// the 4 MiB a CometBFT node's ABCI client takes in one message, whatever
// a block references (up to wire.MaxBlockBundleBytes).
const snapshotPartBytes = 3 << 20

// maxBlockParts bounds the parts a snapshot's metadata may give one
// block: enough for the largest block any chain makes (CometBFT's 100 MiB
// block.max_bytes carried, plus the bundles it may reference), so a liar's
// counts cost a restorer nothing before it refuses them.
const maxBlockParts = (100<<20+wire.MaxBlockBundleBytes)/snapshotPartBytes + 2

// blockParts is how many parts each block file after h in dir is served
// in, and each part's SHA-256, in order.
func blockParts(dir string, h int64) ([]uint32, [][]byte, error) {
	parts := make([]uint32, wire.StateRootLag)
	var hashes [][]byte
	for i := range parts {
		b, err := os.ReadFile(blockFile(dir, h+1+int64(i)))
		if err != nil {
			return nil, nil, err
		}
		parts[i] = uint32(max(1, (len(b)+snapshotPartBytes-1)/snapshotPartBytes))
		for p := range int(parts[i]) {
			sum := sha256.Sum256(b[p*snapshotPartBytes : min(len(b), (p+1)*snapshotPartBytes)])
			hashes = append(hashes, sum[:])
		}
	}
	return parts, hashes, nil
}

// blockChunks is the number of chunks m's blocks take (one a block in
// metadata written before blocks were cut into parts).
func blockChunks(m *byzlogv1.SnapshotMeta) uint32 {
	if len(m.BlockParts) == 0 {
		return wire.StateRootLag
	}
	var n uint32
	for _, p := range m.BlockParts {
		n += p
	}
	return n
}

// blockPart says which block (0 for the first after the state) and which
// part of it block chunk j is.
func blockPart(m *byzlogv1.SnapshotMeta, j int) (block, part int, ok bool) {
	if len(m.BlockParts) == 0 {
		return j, 0, j < wire.StateRootLag
	}
	for b, p := range m.BlockParts {
		if j < int(p) {
			return b, j, true
		}
		j -= int(p)
	}
	return 0, 0, false
}

func blockFile(dir string, height int64) string {
	return filepath.Join(dir, "block-"+strconv.FormatInt(height, 10))
}

func writeFile(path string, b []byte) error {
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// chunkHashes reads the chunk hashes saved for h.
func (r *stateRoots) chunkHashes(h int64) ([][]byte, error) {
	b, err := os.ReadFile(filepath.Join(r.heightDir(h), "root"))
	if err != nil {
		return nil, err
	}
	var m byzlogv1.SnapshotMeta
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m.ChunkHashes, nil
}

// ListSnapshots lists the complete snapshots kept here.
func (a *App) ListSnapshots(context.Context, *abci.RequestListSnapshots) (*abci.ResponseListSnapshots, error) {
	resp := &abci.ResponseListSnapshots{}
	if a.roots.dir == "" {
		return resp, nil
	}
	entries, err := os.ReadDir(a.roots.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return resp, nil
		}
		return nil, err
	}
	for _, e := range entries {
		h, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(a.roots.heightDir(h), "snapshot"))
		if err != nil {
			continue
		}
		var m byzlogv1.SnapshotMeta
		if err := proto.Unmarshal(raw, &m); err != nil || m.State.GetHeight() != h {
			continue
		}
		sum := sha256.Sum256(raw)
		resp.Snapshots = append(resp.Snapshots, &abci.Snapshot{Height: uint64(h + wire.StateRootLag), Format: snapshotFormat,
			Chunks: m.State.Chunks + blockChunks(&m), Hash: sum[:], Metadata: raw})
	}
	return resp, nil
}

// LoadSnapshotChunk cuts state chunk i again from the checkpoint (from
// where it starts), or reads block chunk i. It runs concurrently, a call
// for each peer that asks: they share one read-only handle per checkpoint.
func (a *App) LoadSnapshotChunk(_ context.Context, req *abci.RequestLoadSnapshotChunk) (*abci.ResponseLoadSnapshotChunk, error) {
	if req.Format != snapshotFormat || a.roots.dir == "" {
		return &abci.ResponseLoadSnapshotChunk{}, nil
	}
	h := int64(req.Height) - wire.StateRootLag
	dir := a.roots.heightDir(h)
	hashes, err := a.roots.chunkHashes(h)
	if err != nil {
		return &abci.ResponseLoadSnapshotChunk{}, nil
	}
	if i := int(req.Chunk); i >= len(hashes) {
		raw, err := os.ReadFile(filepath.Join(dir, "snapshot"))
		if err != nil {
			return &abci.ResponseLoadSnapshotChunk{}, nil
		}
		var m byzlogv1.SnapshotMeta
		if err := proto.Unmarshal(raw, &m); err != nil {
			return &abci.ResponseLoadSnapshotChunk{}, nil
		}
		blk, part, ok := blockPart(&m, i-len(hashes))
		if !ok {
			return &abci.ResponseLoadSnapshotChunk{}, nil
		}
		b, err := os.ReadFile(blockFile(dir, h+1+int64(blk)))
		if err != nil || part*snapshotPartBytes > len(b) {
			return &abci.ResponseLoadSnapshotChunk{}, nil
		}
		if len(m.BlockParts) == 0 {
			return &abci.ResponseLoadSnapshotChunk{Chunk: b}, nil // written before parts: the block whole
		}
		return &abci.ResponseLoadSnapshotChunk{Chunk: b[part*snapshotPartBytes : min(len(b), (part+1)*snapshotPartBytes)]}, nil
	}
	starts, err := readStarts(filepath.Join(dir, "starts"))
	if err != nil || len(starts) != len(hashes) {
		return nil, fmt.Errorf("snapshot %d: chunk starts: %v (%d for %d chunks)", req.Height, err, len(starts), len(hashes))
	}
	st, done, err := a.roots.serve(h)
	if errors.Is(err, os.ErrNotExist) {
		return &abci.ResponseLoadSnapshotChunk{}, nil // pruned since it was listed
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %d: %w", req.Height, err)
	}
	defer done()
	var chunk []byte
	if err := core.StateChunksFrom(st, wire.StateChunkBytes, starts[req.Chunk], func(c []byte, _ core.ChunkStart) error {
		chunk = bytes.Clone(c)
		return core.ErrStopChunks
	}); err != nil {
		return nil, err
	}
	return &abci.ResponseLoadSnapshotChunk{Chunk: chunk}, nil
}

func readStarts(path string) ([]core.ChunkStart, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []core.ChunkStart
	for len(b) > 0 {
		cf := core.CF(b[0])
		n, w := binary.Uvarint(b[1:])
		if w <= 0 || uint64(len(b)-1-w) < n {
			return nil, errors.New("damaged")
		}
		out = append(out, core.ChunkStart{CF: cf, Key: slices.Clone(b[1+w : 1+w+int(n)])})
		b = b[1+w+int(n):]
	}
	return out, nil
}

// restoring is a snapshot being applied.
type restoring struct {
	height  int64
	appHash []byte
	meta    *byzlogv1.SnapshotMeta
	blocks  []core.Block
	// part holds the parts of the block being received so far, from
	// chunk partFrom on.
	part     []byte
	partFrom uint32
}

// OfferSnapshot accepts a snapshot only if its metadata checks against the
// app hash CometBFT verified, and only into a store with no committed
// height; it clears what an unfinished restore left there.
func (a *App) OfferSnapshot(_ context.Context, req *abci.RequestOfferSnapshot) (*abci.ResponseOfferSnapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	reject := func(result abci.ResponseOfferSnapshot_Result, why string, args ...any) (*abci.ResponseOfferSnapshot, error) {
		a.log.Warn().Uint64("height", req.Snapshot.GetHeight()).Str("reason", fmt.Sprintf(why, args...)).Msg("snapshot refused")
		return &abci.ResponseOfferSnapshot{Result: result}, nil
	}
	switch {
	case a.committed.Height != 0:
		return reject(abci.ResponseOfferSnapshot_ABORT, "the store holds height %d: state sync needs an empty data directory", a.committed.Height)
	case a.roots.dir == "":
		return reject(abci.ResponseOfferSnapshot_ABORT, "no --snapshot-dir")
	case req.Snapshot == nil || req.Snapshot.Format != snapshotFormat:
		return reject(abci.ResponseOfferSnapshot_REJECT_FORMAT, "format %d, this version reads %d", req.Snapshot.GetFormat(), snapshotFormat)
	}
	var m byzlogv1.SnapshotMeta
	if err := proto.Unmarshal(req.Snapshot.Metadata, &m); err != nil {
		return reject(abci.ResponseOfferSnapshot_REJECT, "metadata: %v", err)
	}
	height := int64(req.Snapshot.Height)
	if err := core.VerifySnapshotMeta(&m, height, req.AppHash); err != nil {
		return reject(abci.ResponseOfferSnapshot_REJECT, "%v", err)
	}
	if n := len(m.BlockParts); n != 0 && n != wire.StateRootLag {
		return reject(abci.ResponseOfferSnapshot_REJECT, "parts of %d blocks, the snapshot has %d", n, wire.StateRootLag)
	}
	for i, p := range m.BlockParts {
		if p == 0 || p > maxBlockParts {
			return reject(abci.ResponseOfferSnapshot_REJECT, "block %d in %d parts: 1 to %d", i, p, maxBlockParts)
		}
	}
	if n := len(m.BlockPartHashes); n != 0 && (len(m.BlockParts) == 0 || uint32(n) != blockChunks(&m)) {
		return reject(abci.ResponseOfferSnapshot_REJECT, "%d block part hashes for %d parts", n, blockChunks(&m))
	}
	for i, h := range m.BlockPartHashes {
		if len(h) != sha256.Size {
			return reject(abci.ResponseOfferSnapshot_REJECT, "block part hash %d is %d bytes", i, len(h))
		}
	}
	if want := m.State.Chunks + blockChunks(&m); req.Snapshot.Chunks != want {
		return reject(abci.ResponseOfferSnapshot_REJECT, "%d chunks, the metadata says %d", req.Snapshot.Chunks, want)
	}
	// An earlier restore that CometBFT gave up on (a chunk timed out) or
	// that a crash cut short left its chunks in the store. Applied under
	// this snapshot they would be state of another height: a producer's
	// later sequence, say, that makes its next batch a duplicate here.
	if a.restore != nil {
		a.log.Info().Int64("height", a.restore.height).Msg("an unfinished restore is dropped")
	}
	a.restore = nil
	if err := a.store.Wipe(); err != nil {
		return nil, fmt.Errorf("clear the store before restoring snapshot %d: %w", height, err)
	}
	a.restore = &restoring{height: height, appHash: req.AppHash, meta: &m}
	a.log.Info().Int64("height", height).Uint32("chunks", req.Snapshot.Chunks).Msg("restoring a snapshot")
	return &abci.ResponseOfferSnapshot{Result: abci.ResponseOfferSnapshot_ACCEPT}, nil
}

// ApplySnapshotChunk writes a state chunk whose hash checks, keeps block
// chunks, and after the last executes the blocks and checks the app hash.
func (a *App) ApplySnapshotChunk(_ context.Context, req *abci.RequestApplySnapshotChunk) (*abci.ResponseApplySnapshotChunk, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.restore
	if r == nil {
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ABORT}, nil
	}
	retry := func(why string) (*abci.ResponseApplySnapshotChunk, error) {
		a.log.Warn().Uint32("chunk", req.Index).Str("sender", req.Sender).Str("reason", why).Msg("snapshot chunk refused; fetching it from another peer")
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_RETRY, RefetchChunks: []uint32{req.Index}, RejectSenders: []string{req.Sender}}, nil
	}
	n := len(r.meta.ChunkHashes)
	i := int(req.Index)
	if i < n {
		if !bytes.Equal(core.ChunkHash(req.Chunk), r.meta.ChunkHashes[i]) {
			return retry("its hash is not the one the verified state root lists")
		}
		cs, err := core.ChunkChanges(req.Chunk)
		if err != nil {
			return retry(err.Error())
		}
		if err := a.store.Apply(cs); err != nil {
			return nil, err
		}
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ACCEPT}, nil
	}
	blk, part, ok := blockPart(r.meta, i-n)
	if !ok || blk != len(r.blocks) {
		return retry(fmt.Sprintf("chunk %d is not the next of block %d of the snapshot", i, len(r.blocks)))
	}
	if hs := r.meta.BlockPartHashes; len(hs) > 0 {
		if sum := sha256.Sum256(req.Chunk); !bytes.Equal(sum[:], hs[i-n]) {
			return retry("its hash is not the block part's the snapshot's metadata lists")
		}
	}
	if part == 0 {
		r.part, r.partFrom = nil, req.Index
	}
	r.part = append(r.part, req.Chunk...)
	if len(r.meta.BlockParts) > 0 && part+1 < int(r.meta.BlockParts[blk]) {
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ACCEPT}, nil
	}
	b, err := core.DecodeSnapshotBlock(r.part)
	if want := r.meta.State.Height + 1 + int64(blk); (err != nil || b.Height != want) && len(r.meta.BlockPartHashes) > 0 {
		// Every part matched its listed hash: the metadata itself, which
		// every peer of this snapshot serves, names a block that is not one.
		a.log.Warn().Int64("block", want).AnErr("decode", err).Msg("a snapshot's listed block parts do not make its block; refusing the snapshot")
		a.restore = nil
		if werr := a.store.Wipe(); werr != nil {
			return nil, werr
		}
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_REJECT_SNAPSHOT}, nil
	} else if err != nil || b.Height != want {
		// Any part may be the bad one: fetch them all again.
		var again []uint32
		for c := r.partFrom; c <= req.Index; c++ {
			again = append(again, c)
		}
		r.part = nil
		a.log.Warn().Uint32("chunk", req.Index).Str("sender", req.Sender).Int64("block", want).AnErr("decode", err).Msg("snapshot block refused; fetching its parts again")
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_RETRY, RefetchChunks: again, RejectSenders: []string{req.Sender}}, nil
	}
	r.part = nil
	r.blocks = append(r.blocks, b)
	if len(r.blocks) < wire.StateRootLag {
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ACCEPT}, nil
	}
	if err := a.finishRestore(r); err != nil {
		a.log.Error().Err(err).Int64("height", r.height).Msg("snapshot did not restore; wiping what it wrote")
		a.restore = nil
		if werr := a.store.Wipe(); werr != nil {
			return nil, fmt.Errorf("%v; and wiping the store failed: %w", err, werr)
		}
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_REJECT_SNAPSHOT}, nil
	}
	a.restore = nil
	return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ACCEPT}, nil
}

// finishRestore executes the snapshot's blocks on its state and commits
// them; the app hash reached must be the verified one.
func (a *App) finishRestore(r *restoring) error {
	h := r.meta.State.Height
	prev, err := core.AppHashAt(a.store, h)
	if err != nil || prev == nil {
		return fmt.Errorf("the restored state holds no digest of height %d (%v)", h, err)
	}
	params, err := core.LoadParams(a.store)
	if err != nil {
		return err
	}
	st := core.State{Height: h, AppHash: prev}
	for _, b := range r.blocks {
		if _, due := core.StateRootDue(params.Limits, b.Height); due {
			b.StateRoot = r.meta.State
		}
		out, err := core.Execute(a.store, st, b)
		if err != nil {
			return err
		}
		if err := a.store.Commit(store.Committed{Height: out.State.Height, AppHash: out.State.AppHash}, out.Changes); err != nil {
			return err
		}
		st = out.State
	}
	if !bytes.Equal(st.AppHash, r.appHash) {
		return fmt.Errorf("the snapshot's blocks reach app hash %X at height %d, the verified one is %X", st.AppHash, st.Height, r.appHash)
	}
	if err := a.setParams(params); err != nil {
		return err
	}
	a.committed = st
	a.log.Info().Int64("height", st.Height).Hex("app_hash", st.AppHash).Msg("snapshot restored")
	return nil
}
