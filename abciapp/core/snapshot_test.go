package core_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// snapshotChain runs a chain with snapshot_interval 16 to height 24: the
// state after 16 is hashed and block 24 commits its root. It returns the
// chain, the state chunks of height 16 (cut small), blocks 17..24 and the
// metadata a snapshot of height 24 would carry.
func snapshotChain(t *testing.T) (*testChain, [][]byte, []core.Block, *byzlogv1.SnapshotMeta) {
	t.Helper()
	admin := wire.NewSigner(key("admin"), chainID)
	c := newChain(t, fmt.Sprintf(`{"admins": [%q], "limits": {"snapshot_interval": 16}}`, hex.EncodeToString(admin.PublicKey())))
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	p := wire.NewSigner(key("p"), chainID)
	seq := uint64(0)
	var chunks [][]byte
	var blocks []core.Block
	var meta *byzlogv1.SnapshotMeta
	for c.state.Height < 24 {
		h := c.state.Height + 1
		c.time += 1_000_000_000
		b := core.Block{Height: h, TimeUnixNano: c.time, Txs: [][]byte{bundle(t, batch(t, p, "t", uint32(h%2), seq/2, records(fmt.Sprint(h), "x")))}}
		seq++
		if _, due := core.StateRootDue(&byzlogv1.Limits{SnapshotInterval: 16}, h); due {
			var hashes [][]byte
			for _, ch := range chunks {
				hashes = append(hashes, core.ChunkHash(ch))
			}
			b.StateRoot = core.StateRootOf(16, hashes)
		}
		out, err := core.Execute(c.store, c.state, b)
		if err != nil {
			t.Fatal(err)
		}
		if !out.Results[0].OK() {
			t.Fatalf("block %d: %s %q", h, out.Results[0].Code, out.Results[0].Log)
		}
		c.store.apply(out.Changes)
		c.state = out.State
		if h > 16 {
			blocks = append(blocks, core.Block{Height: b.Height, TimeUnixNano: b.TimeUnixNano, Txs: b.Txs})
		}
		if h == 16 {
			if err := core.StateChunks(c.store, 300, func(ch []byte, _ core.ChunkStart) error { chunks = append(chunks, bytes.Clone(ch)); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if b.StateRoot != nil {
			if out.StateRootProof == nil {
				t.Fatal("no proof of the state root")
			}
			hashes := make([][]byte, len(chunks))
			for i, ch := range chunks {
				hashes[i] = core.ChunkHash(ch)
			}
			meta = &byzlogv1.SnapshotMeta{State: b.StateRoot, ChunkHashes: hashes, PrevAppHash: out.Digest.PrevAppHash,
				RecordsRoot: out.Digest.RecordsRoot, MetaRoot: out.Digest.MetaRoot, MetaProof: out.StateRootProof}
		}
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunks: want several", len(chunks))
	}
	return c, chunks, blocks, meta
}

func TestSnapshotRestores(t *testing.T) {
	c, chunks, blocks, meta := snapshotChain(t)
	if err := core.VerifySnapshotMeta(meta, 24, c.state.AppHash); err != nil {
		t.Fatal(err)
	}
	// A new node: the chunks, each checked against the verified hashes,
	// then blocks 17..24 executed on them, must reach the same app hash.
	fresh := newMemStore()
	for i, ch := range chunks {
		if !bytes.Equal(core.ChunkHash(ch), meta.ChunkHashes[i]) {
			t.Fatalf("chunk %d hash", i)
		}
		cs, err := core.ChunkChanges(ch)
		if err != nil {
			t.Fatal(err)
		}
		fresh.apply(cs)
	}
	hash16, err := core.AppHashAt(fresh, 16)
	if err != nil || hash16 == nil {
		t.Fatalf("app hash of 16 in the restored state: %x, %v", hash16, err)
	}
	st := core.State{Height: 16, AppHash: hash16}
	for _, b := range blocks {
		if _, due := core.StateRootDue(&byzlogv1.Limits{SnapshotInterval: 16}, b.Height); due {
			b.StateRoot = meta.State
		}
		out, err := core.Execute(fresh, st, b)
		if err != nil {
			t.Fatal(err)
		}
		fresh.apply(out.Changes)
		st = out.State
	}
	if !bytes.Equal(st.AppHash, c.state.AppHash) {
		t.Fatalf("restored app hash %X, the chain's %X", st.AppHash, c.state.AppHash)
	}
	if got, want := len(fresh.kv), len(c.store.kv); got != want {
		t.Fatalf("restored state holds %d keys, the chain's %d", got, want)
	}
}

// TestStateChunksFrom cuts each chunk again from where it starts, as a
// node serving a snapshot does.
func TestStateChunksFrom(t *testing.T) {
	_, chunks, _, _ := snapshotChain(t)
	var starts []core.ChunkStart
	st := newMemStore()
	// The chunks of height 16 are of the state then: restore it to cut again.
	for _, ch := range chunks {
		cs, err := core.ChunkChanges(ch)
		if err != nil {
			t.Fatal(err)
		}
		st.apply(cs)
	}
	if err := core.StateChunks(st, 300, func(_ []byte, s core.ChunkStart) error { starts = append(starts, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(starts) != len(chunks) {
		t.Fatalf("%d starts for %d chunks", len(starts), len(chunks))
	}
	// A chunk ends before the entry that would take it past the bound:
	// only a single larger entry makes a larger chunk.
	for i, ch := range chunks {
		cs, err := core.ChunkChanges(ch)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch) > 300 && len(cs.Changes) > 1 {
			t.Errorf("chunk %d is %d bytes of %d entries, want at most 300 unless it is one entry", i, len(ch), len(cs.Changes))
		}
	}
	for i, s := range starts {
		var again []byte
		if err := core.StateChunksFrom(st, 300, s, func(ch []byte, _ core.ChunkStart) error {
			again = bytes.Clone(ch)
			return core.ErrStopChunks
		}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, chunks[i]) {
			t.Fatalf("chunk %d cut again from %v differs", i, s)
		}
	}
}

func TestSnapshotMetaLies(t *testing.T) {
	c, _, _, meta := snapshotChain(t)
	for _, tc := range []struct {
		name string
		lie  func(m *byzlogv1.SnapshotMeta)
		want string
	}{
		{"another root", func(m *byzlogv1.SnapshotMeta) { m.State.Root = bytes.Repeat([]byte{1}, 32) }, "not in the block's meta root"},
		{"a chunk hash changed", func(m *byzlogv1.SnapshotMeta) { m.ChunkHashes[1] = bytes.Repeat([]byte{2}, 32) }, "do not make the state root"},
		{"a chunk dropped", func(m *byzlogv1.SnapshotMeta) { m.ChunkHashes = m.ChunkHashes[1:] }, "chunks"},
		{"another meta root", func(m *byzlogv1.SnapshotMeta) { m.MetaRoot = bytes.Repeat([]byte{3}, 32) }, "does not hash to the verified app hash"},
		{"no proof", func(m *byzlogv1.SnapshotMeta) { m.MetaProof = nil }, "no proof"},
		{"another height", func(m *byzlogv1.SnapshotMeta) { m.State.Height = 8 }, "want 16"},
	} {
		m := cloneMeta(meta)
		tc.lie(m)
		if err := core.VerifySnapshotMeta(m, 24, c.state.AppHash); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if err := core.VerifySnapshotMeta(meta, 24, bytes.Repeat([]byte{4}, 32)); err == nil {
		t.Error("metadata checked against another app hash: no error")
	}
}

func cloneMeta(m *byzlogv1.SnapshotMeta) *byzlogv1.SnapshotMeta {
	return proto.Clone(m).(*byzlogv1.SnapshotMeta)
}

func TestBlockMustCarryItsStateRoot(t *testing.T) {
	admin := wire.NewSigner(key("admin"), chainID)
	c := newChain(t, fmt.Sprintf(`{"admins": [%q], "limits": {"snapshot_interval": 16}}`, hex.EncodeToString(admin.PublicKey())))
	for c.state.Height < 23 {
		c.block()
	}
	if _, err := core.Execute(c.store, c.state, core.Block{Height: 24, TimeUnixNano: c.time + 1}); err == nil || !strings.Contains(err.Error(), "must carry the state root of height 16") {
		t.Fatalf("block 24 without a state root: %v", err)
	}
	if _, err := core.Execute(c.store, c.state, core.Block{Height: 24, StateRoot: &byzlogv1.StateRoot{Height: 8}}); err == nil {
		t.Fatal("block 24 with the root of another height: no error")
	}
	if _, _, err := core.ParseGenesis(chainID, []byte(`{"limits": {"snapshot_interval": 5}}`)); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("snapshot_interval 5: %v", err)
	}
}

func FuzzChunkChanges(f *testing.F) {
	f.Add([]byte{1, 1, 'k', 1, 'v'})
	f.Add([]byte{1, 1, 'k', 1, 'v', 1, 1, 'a', 0})
	f.Add([]byte{9, 0, 0})
	f.Add([]byte{2, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, chunk []byte) {
		cs, err := core.ChunkChanges(chunk)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes (StateChunks' format).
		s := newMemStore()
		s.apply(cs)
		var again []byte
		if err := core.StateChunks(s, 1<<30, func(ch []byte, _ core.ChunkStart) error { again = append(again, ch...); return nil }); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, chunk) {
			t.Fatalf("chunk %x decodes to changes that encode as %x", chunk, again)
		}
	})
}
