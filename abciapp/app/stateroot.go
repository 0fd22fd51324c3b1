package app

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/abciapp/store"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// stateRoots hashes the state after each snapshot height in the background:
// Commit of height h takes a RocksDB checkpoint into dir/h/state, a
// goroutine cuts it into chunks (core.StateChunks) and hashes them, and
// FinalizeBlock of h+StateRootLag waits for the root. The chunk hashes are
// kept in dir/h/root, so a restart does not hash again. The last keep
// checkpoints stay, for state sync to serve.
type stateRoots struct {
	dir  string
	keep int
	log  zerolog.Logger

	mu   sync.Mutex
	jobs map[int64]*rootJob
	wg   sync.WaitGroup // the hashing goroutines, which Close waits for

	// servedMu guards served: the checkpoints LoadSnapshotChunk reads, each
	// opened once, read-only, and shared by every peer's requests (CometBFT
	// asks from each peer's goroutine). prune removes one only when no
	// request is reading it.
	servedMu     sync.Mutex
	served       map[int64]*servedCheckpoint
	servedClosed bool // the app closed: serve nothing more
}

type servedCheckpoint struct {
	st      *store.Store
	readers int
}

type rootJob struct {
	done chan struct{}
	meta *byzlogv1.SnapshotMeta // State and ChunkHashes
	err  error
}

func newStateRoots(dir string, keep int, log zerolog.Logger) *stateRoots {
	return &stateRoots{dir: dir, keep: keep, log: log, jobs: map[int64]*rootJob{}, served: map[int64]*servedCheckpoint{}}
}

func (r *stateRoots) heightDir(h int64) string { return filepath.Join(r.dir, strconv.FormatInt(h, 10)) }

// checkpoint is called by Commit of snapshot height h (and at start when h
// is the committed height): it copies the state and starts hashing it.
func (r *stateRoots) checkpoint(st *store.Store, h int64) error {
	if r.dir == "" {
		return errors.New("the chain hashes its state (genesis snapshot_interval) and byzlog-app has no --snapshot-dir")
	}
	cp := filepath.Join(r.heightDir(h), "state")
	// A checkpoint left by a crash before this commit finished is
	// incomplete or of another state: take it again.
	if err := os.RemoveAll(r.heightDir(h)); err != nil {
		return err
	}
	if err := os.MkdirAll(r.heightDir(h), 0o755); err != nil {
		return err
	}
	if err := st.Checkpoint(cp); err != nil {
		return err
	}
	r.hash(h)
	return nil
}

// hash starts hashing the checkpoint of h, unless it is being hashed.
func (r *stateRoots) hash(h int64) *rootJob {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[h]; ok {
		return j
	}
	j := &rootJob{done: make(chan struct{})}
	r.jobs[h] = j
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(j.done)
		j.meta, j.err = r.compute(h)
		if j.err != nil {
			r.log.Error().Err(j.err).Int64("height", h).Msg("could not hash the state")
			return
		}
		r.log.Info().Int64("height", h).Uint32("chunks", j.meta.State.Chunks).Hex("state_root", j.meta.State.Root).Msg("state hashed")
		r.prune()
	}()
	return j
}

// compute reads the root saved for h, or hashes the checkpoint and saves it.
func (r *stateRoots) compute(h int64) (*byzlogv1.SnapshotMeta, error) {
	saved := filepath.Join(r.heightDir(h), "root")
	if b, err := os.ReadFile(saved); err == nil {
		var m byzlogv1.SnapshotMeta
		if err := proto.Unmarshal(b, &m); err == nil && m.State.GetHeight() == h {
			return &m, nil
		}
	}
	cp := filepath.Join(r.heightDir(h), "state")
	if _, err := os.Stat(filepath.Join(cp, "CURRENT")); err != nil {
		return nil, fmt.Errorf("the checkpoint of height %d is missing (%s): this node cannot commit the block that carries its root; restore it from a snapshot or another validator's data", h, cp)
	}
	st, err := store.OpenReadOnly(cp) // a checkpoint never changes
	if err != nil {
		return nil, fmt.Errorf("open the checkpoint of height %d: %w", h, err)
	}
	defer st.Close()
	var hashes [][]byte
	var starts []byte
	if err := core.StateChunks(st, wire.StateChunkBytes, func(chunk []byte, start core.ChunkStart) error {
		hashes = append(hashes, core.ChunkHash(chunk))
		starts = append(starts, byte(start.CF))
		starts = binary.AppendUvarint(starts, uint64(len(start.Key)))
		starts = append(starts, start.Key...)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("hash the state of height %d: %w", h, err)
	}
	// Where each chunk starts, so that a chunk is cut again without the
	// ones before it (LoadSnapshotChunk).
	if err := os.WriteFile(filepath.Join(r.heightDir(h), "starts"), starts, 0o644); err != nil {
		return nil, err
	}
	m := &byzlogv1.SnapshotMeta{State: core.StateRootOf(h, hashes), ChunkHashes: hashes}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(saved+".tmp", b, 0o644); err != nil {
		return nil, err
	}
	return m, os.Rename(saved+".tmp", saved)
}

// root waits for the state root of h.
func (r *stateRoots) root(h int64) (*byzlogv1.StateRoot, error) {
	if r.dir == "" {
		return nil, errors.New("the chain hashes its state (genesis snapshot_interval) and byzlog-app has no --snapshot-dir")
	}
	if _, err := os.Stat(filepath.Join(r.heightDir(h), "state")); err != nil {
		if _, serr := os.Stat(filepath.Join(r.heightDir(h), "root")); serr != nil {
			return nil, fmt.Errorf("the state of height %d was not kept (%s): this node cannot commit the block that carries its root; restore it from a snapshot or another validator's data", h, r.heightDir(h))
		}
	}
	j := r.hash(h)
	<-j.done
	if j.err != nil {
		return nil, j.err
	}
	return j.meta.State, nil
}

// oldestSnapshot is the height of the oldest complete snapshot kept (the
// height ListSnapshots offers it at), 0 if none.
func (r *stateRoots) oldestSnapshot() int64 {
	if r.dir == "" {
		return 0
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return 0
	}
	var oldest int64
	for _, e := range entries {
		h, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || (oldest != 0 && h >= oldest) {
			continue
		}
		if _, err := os.Stat(filepath.Join(r.heightDir(h), "snapshot")); err == nil {
			oldest = h
		}
	}
	if oldest == 0 {
		return 0
	}
	return oldest + wire.StateRootLag
}

// prune removes all but the newest keep hashed checkpoints.
func (r *stateRoots) prune() {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return
	}
	var heights []int64
	for _, e := range entries {
		if h, err := strconv.ParseInt(e.Name(), 10, 64); err == nil {
			if _, err := os.Stat(filepath.Join(r.heightDir(h), "root")); err == nil {
				heights = append(heights, h)
			}
		}
	}
	slices.Sort(heights)
	for len(heights) > max(r.keep, 1) {
		h := heights[0]
		heights = heights[1:]
		r.mu.Lock()
		if j, ok := r.jobs[h]; ok {
			select {
			case <-j.done:
				delete(r.jobs, h)
			default:
				r.mu.Unlock()
				continue
			}
		}
		r.mu.Unlock()
		r.remove(h)
	}
}

// remove deletes the checkpoint of h, unless a chunk request is reading it
// (the next prune will).
func (r *stateRoots) remove(h int64) {
	r.servedMu.Lock()
	defer r.servedMu.Unlock()
	if c, ok := r.served[h]; ok {
		if c.readers > 0 {
			return
		}
		c.st.Close()
		delete(r.served, h)
	}
	if err := os.RemoveAll(r.heightDir(h)); err != nil {
		r.log.Warn().Err(err).Int64("height", h).Msg("could not remove an old checkpoint")
	}
}

// serve opens the checkpoint of h for reading, or shares the one open; the
// caller calls done once it has read. A pruned checkpoint is an error
// wrapping os.ErrNotExist.
func (r *stateRoots) serve(h int64) (st *store.Store, done func(), err error) {
	r.servedMu.Lock()
	defer r.servedMu.Unlock()
	if r.servedClosed {
		return nil, nil, errors.New("the app is closing")
	}
	c, ok := r.served[h]
	if !ok {
		st, err := store.OpenReadOnly(filepath.Join(r.heightDir(h), "state"))
		if err != nil {
			return nil, nil, err
		}
		c = &servedCheckpoint{st: st}
		r.served[h] = c
	}
	c.readers++
	return c.st, func() {
		r.servedMu.Lock()
		defer r.servedMu.Unlock()
		if c.readers--; c.readers == 0 && r.servedClosed {
			c.st.Close()
		}
	}, nil
}

// closeServed closes the served checkpoints when the app closes: now those
// no request reads, the others when their last reader is done.
func (r *stateRoots) closeServed() {
	r.servedMu.Lock()
	defer r.servedMu.Unlock()
	r.servedClosed = true
	for h, c := range r.served {
		if c.readers == 0 {
			c.st.Close()
		}
		delete(r.served, h)
	}
}

// pending is, at start with committed height c, the snapshot heights whose
// root a coming block still needs.
func pending(l *byzlogv1.Limits, c int64) []int64 {
	var hs []int64
	for h := max(c-wire.StateRootLag+1, 1); h <= c; h++ {
		if core.SnapshotHeight(l, h) {
			hs = append(hs, h)
		}
	}
	return hs
}
