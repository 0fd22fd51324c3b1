package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cometbft/cometbft/crypto/merkle"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// State roots and snapshots. The app hash chains each block's digest and so
// commits to every change, not to the state they add up to; a node that
// joins from a snapshot must check the state it is handed. So every
// snapshot_interval blocks the whole state is hashed: after block h (a
// multiple of the interval) it is cut into chunks (every column family in
// order, every key in order, StateChunks), and the Merkle root of the
// chunks' hashes is written by block h+StateRootLag under "stateroot/h".
// That block's app hash therefore commits to the state after h. Validators
// hash in the background over a checkpoint meanwhile; the block waits if
// they are not done.

var prefixStateRoot = []byte("stateroot/")

func stateRootKey(h int64) []byte { return cat(prefixStateRoot, be64(uint64(h))) }

// StateRootDue says whether block height must carry a state root, and of
// which height: the one StateRootLag blocks before, if it is a multiple of
// the chain's snapshot_interval.
func StateRootDue(l *byzlogv1.Limits, height int64) (int64, bool) {
	iv := int64(l.GetSnapshotInterval())
	h := height - wire.StateRootLag
	if iv == 0 || h <= 0 || h%iv != 0 {
		return 0, false
	}
	return h, true
}

// SnapshotHeight says whether the state after block h is hashed.
func SnapshotHeight(l *byzlogv1.Limits, h int64) bool {
	_, ok := StateRootDue(l, h+wire.StateRootLag)
	return ok
}

// StateChunks cuts the state in s into chunks of about chunkBytes and calls
// fn with each in order. A chunk is a sequence of entries, each
//
//	cf || uvarint(len(key)) || key || uvarint(len(value)) || value
//
// every column family in CF order and every key in key order; a chunk
// ends before the entry that would take it past chunkBytes (a single
// larger entry is a chunk of its own). Every validator
// cuts the same state into the same chunks. The slice is fn's only during
// the call; start is the chunk's first entry, from which StateChunksFrom
// cuts the same chunks again.
func StateChunks(s Scanner, chunkBytes int, fn func(chunk []byte, start ChunkStart) error) error {
	return StateChunksFrom(s, chunkBytes, ChunkStart{CF: CFs[0]}, fn)
}

// ChunkStart is where a state chunk starts: its first entry's column family
// and key.
type ChunkStart struct {
	CF  CF
	Key []byte
}

// StateChunksFrom is StateChunks from the entry at from on; fn may return
// ErrStopChunks to end it.
func StateChunksFrom(s Scanner, chunkBytes int, from ChunkStart, fn func(chunk []byte, start ChunkStart) error) error {
	buf := make([]byte, 0, chunkBytes+64<<10)
	var start *ChunkStart
	var ferr error
	for _, cf := range CFs {
		if cf < from.CF {
			continue
		}
		var first []byte
		if cf == from.CF {
			first = from.Key
		}
		err := s.Scan(cf, first, nil, func(k, v []byte) bool {
			// A chunk ends before the entry that would take it past
			// chunkBytes, so it stays under the bound unless one entry
			// alone is larger (genesis keeps a record under wire.MaxSnapshotRecordBytes).
			n := entryLen(len(k), len(v))
			if len(buf) > 0 && len(buf)+n > chunkBytes {
				if ferr = fn(buf, *start); ferr != nil {
					return false
				}
				buf, start = buf[:0], nil
			}
			if start == nil {
				start = &ChunkStart{CF: cf, Key: bytes.Clone(k)}
			}
			buf = append(buf, byte(cf))
			buf = binary.AppendUvarint(buf, uint64(len(k)))
			buf = append(buf, k...)
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
			return true
		})
		if err != nil {
			return err
		}
		if ferr != nil {
			if errors.Is(ferr, ErrStopChunks) {
				return nil
			}
			return ferr
		}
	}
	if len(buf) > 0 {
		if err := fn(buf, *start); err != nil && !errors.Is(err, ErrStopChunks) {
			return err
		}
	}
	return nil
}

// entryLen is the encoded length of an entry with a key of k bytes and a
// value of v.
func entryLen(k, v int) int {
	return 1 + uvarintLen(uint64(k)) + k + uvarintLen(uint64(v)) + v
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// ErrStopChunks, returned by StateChunksFrom's fn, ends the scan.
var ErrStopChunks = errors.New("stop cutting chunks")

// ChunkHash is a state chunk's hash, a leaf of the state root.
func ChunkHash(chunk []byte) []byte {
	h := sha256.Sum256(chunk)
	return h[:]
}

// StateRootOf is the state root of the chunks with these hashes.
func StateRootOf(height int64, hashes [][]byte) *byzlogv1.StateRoot {
	return &byzlogv1.StateRoot{Height: height, Root: merkle.HashFromByteSlices(hashes), Chunks: uint32(len(hashes))}
}

// ChunkChanges decodes a state chunk into the puts it holds. The chunk is
// untrusted until its hash is checked, and is decoded with every length
// bounded by what is left of it.
func ChunkChanges(chunk []byte) (ChangeSet, error) {
	var cs ChangeSet
	for len(chunk) > 0 {
		cf := CF(chunk[0])
		if cf < CFMeta || cf > CFOffsets {
			return ChangeSet{}, fmt.Errorf("state chunk: column family %d is not one of byzlog's", chunk[0])
		}
		chunk = chunk[1:]
		key, rest, err := lengthPrefixed(chunk)
		if err != nil {
			return ChangeSet{}, fmt.Errorf("state chunk key: %w", err)
		}
		value, rest, err := lengthPrefixed(rest)
		if err != nil {
			return ChangeSet{}, fmt.Errorf("state chunk value: %w", err)
		}
		chunk = rest
		c := Change{CF: cf, Key: bytes.Clone(key), Value: bytes.Clone(value)}
		if n := len(cs.Changes); n > 0 && compareChanges(&cs.Changes[n-1], &c) >= 0 {
			return ChangeSet{}, fmt.Errorf("state chunk: key %x of %s is out of order", key, cf)
		}
		cs.Changes = append(cs.Changes, c)
	}
	return cs, nil
}

func lengthPrefixed(b []byte) (field, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || w != len(binary.AppendUvarint(nil, n)) {
		return nil, nil, errors.New("bad length (not a minimal uvarint)")
	}
	b = b[w:]
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("length %d past the chunk's end (%d left)", n, len(b))
	}
	return b[:n], b[n:], nil
}

// stateRootItem is the StateRoot's item in its block's meta root.
func stateRootItem(root *byzlogv1.StateRoot) []byte {
	return metaItem(Change{CF: CFMeta, Key: stateRootKey(root.Height), Value: marshal(root)})
}

// stateRootProof is the Merkle path of root's item among the block's meta
// items.
func stateRootProof(changes ChangeSet, root *byzlogv1.StateRoot) (*byzlogv1.MerkleProof, error) {
	p := metaItemProof(changes, stateRootItem(root))
	if p == nil {
		return nil, fmt.Errorf("the state root of height %d is not among the block's changes", root.Height)
	}
	return p, nil
}

// metaItemProof is the Merkle path of item among the block's meta items,
// or nil when it is not one of them.
func metaItemProof(changes ChangeSet, item []byte) *byzlogv1.MerkleProof {
	items := metaItems(changes)
	for i, it := range items {
		if bytes.Equal(it, item) {
			return &byzlogv1.MerkleProof{Total: int64(len(items)), Index: int64(i), Aunts: aunts(leafHashes(items), i)}
		}
	}
	return nil
}

// VerifySnapshotMeta checks a snapshot's metadata against the app hash of
// its height, which the receiver's light client verified: the digest
// fields must hash to it, the state root must be in its meta root, and the
// chunk hashes must make the state root. Nothing in m is trusted before.
func VerifySnapshotMeta(m *byzlogv1.SnapshotMeta, height int64, appHash []byte) error {
	st := m.GetState()
	switch {
	case st == nil:
		return errors.New("snapshot metadata holds no state root")
	case st.Height+wire.StateRootLag != height:
		return fmt.Errorf("snapshot of height %d holds the state of height %d, want %d", height, st.Height, height-wire.StateRootLag)
	case int(st.Chunks) != len(m.ChunkHashes) || st.Chunks == 0:
		return fmt.Errorf("snapshot state root says %d chunks, the metadata lists %d hashes", st.Chunks, len(m.ChunkHashes))
	}
	if !bytes.Equal(chainStep(m.PrevAppHash, height, m.RecordsRoot, m.MetaRoot), appHash) {
		return fmt.Errorf("snapshot of height %d: its digest does not hash to the verified app hash %X", height, appHash)
	}
	if m.MetaProof == nil {
		return errors.New("snapshot metadata holds no proof of its state root")
	}
	if err := verifyLeaf(m.MetaProof, m.MetaRoot, stateRootItem(st)); err != nil {
		return fmt.Errorf("snapshot of height %d: the state root is not in the block's meta root: %w", height, err)
	}
	for i, h := range m.ChunkHashes {
		if len(h) != sha256.Size {
			return fmt.Errorf("snapshot chunk %d: hash of %d bytes", i, len(h))
		}
	}
	if !bytes.Equal(merkle.HashFromByteSlices(m.ChunkHashes), st.Root) {
		return fmt.Errorf("snapshot of height %d: the chunk hashes do not make the state root", height)
	}
	return nil
}

// LoadStateRoot reads the state root of height h, written by block
// h+StateRootLag (nil if none).
func LoadStateRoot(r Reader, h int64) (*byzlogv1.StateRoot, error) {
	var root byzlogv1.StateRoot
	ok, err := getProto(r, CFMeta, stateRootKey(h), &root)
	if err != nil || !ok {
		return nil, err
	}
	return &root, nil
}

// DecodeSnapshotBlock decodes a snapshot's block chunk.
func DecodeSnapshotBlock(chunk []byte) (Block, error) {
	var sb byzlogv1.SnapshotBlock
	if err := proto.Unmarshal(chunk, &sb); err != nil {
		return Block{}, fmt.Errorf("snapshot block chunk: %w", err)
	}
	return Block{Height: sb.Height, TimeUnixNano: sb.TimeUnixNano, Txs: sb.Txs}, nil
}

// AppHashAt is the app hash after block h, from the digest stored for it
// (nil if none is): what a restored state's committed app hash is.
func AppHashAt(r Reader, h int64) ([]byte, error) {
	var d byzlogv1.BlockDigest
	ok, err := getProto(r, CFMeta, digestKey(h), &d)
	if err != nil || !ok {
		return nil, err
	}
	return chainStep(d.PrevAppHash, d.Height, d.RecordsRoot, d.MetaRoot), nil
}
