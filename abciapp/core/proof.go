package core

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/cometbft/cometbft/crypto/merkle"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// prefixDigest keys each height's BlockDigest in CFMeta. Digests are
// derived from the app hash's inputs, so they are not among them.
var prefixDigest = []byte("h/")

func digestKey(height int64) []byte { return cat(prefixDigest, be64(uint64(height))) }

func (d Digest) proto() *byzlogv1.BlockDigest {
	out := &byzlogv1.BlockDigest{Height: d.Height, PrevAppHash: d.PrevAppHash, RecordsRoot: d.RecordsRoot, MetaRoot: d.MetaRoot}
	for _, p := range d.Partitions {
		out.Partitions = append(out.Partitions, &byzlogv1.PartitionRoot{
			Topic: p.Topic, Partition: p.Partition, FirstOffset: p.FirstOffset, Count: p.Count, Root: p.Root,
		})
	}
	return out
}

func partitionItem(p *byzlogv1.PartitionRoot) []byte {
	return PartitionRoot{Topic: p.Topic, Partition: p.Partition, FirstOffset: p.FirstOffset, Count: p.Count, Root: p.Root}.Item()
}

// proveRecord builds the proof of one stored record from its block's digest.
func proveRecord(s Scanner, req *byzlogv1.ProofRequest) (*byzlogv1.RecordProof, Result, error) {
	raw, ps, r, err := recordToProve(s, req)
	if err != nil || !r.OK() {
		return nil, r, err
	}
	var rec byzlogv1.StoredRecord
	if err := proto.Unmarshal(raw, &rec); err != nil {
		return nil, Result{}, fmt.Errorf("decode record: %w", err)
	}
	var d byzlogv1.BlockDigest
	ok, err := getProto(s, CFMeta, digestKey(rec.Height), &d)
	if err != nil {
		return nil, Result{}, err
	}
	if !ok {
		return nil, Result{}, fmt.Errorf("no digest stored for height %d", rec.Height)
	}
	items, pi := coveringPartition(&d, req)
	if pi < 0 {
		return nil, Result{}, fmt.Errorf("digest of height %d does not cover %s/%d offset %d", rec.Height, req.Topic, req.Partition, req.Offset)
	}
	part := d.Partitions[pi]
	// Below the log start offset a run may still hold records retention
	// deleted: the answer goes by the start, as it would with a key a
	// record.
	gone := reject(wire.CodeOffsetOutOfRange, "offset %d of %s/%d can no longer be proven: retention deleted records of its block", req.Offset, req.Topic, req.Partition)
	if part.FirstOffset < ps.LogStartOffset {
		return nil, gone, nil
	}
	hashes, err := blockRun(s, part)
	if err != nil {
		return nil, Result{}, err
	}
	if len(hashes) != int(part.Count) {
		return nil, gone, nil
	}
	ri := int(req.Offset - part.FirstOffset)
	return &byzlogv1.RecordProof{
		Record:         raw,
		RecordProof:    &byzlogv1.MerkleProof{Total: int64(len(hashes)), Index: int64(ri), Aunts: aunts(hashes, ri)},
		Partition:      part,
		PartitionProof: &byzlogv1.MerkleProof{Total: int64(len(items)), Index: int64(pi), Aunts: aunts(leafHashes(items), pi)},
		Height:         d.Height, PrevAppHash: d.PrevAppHash, RecordsRoot: d.RecordsRoot, MetaRoot: d.MetaRoot,
	}, Result{}, nil
}

// recordToProve finds the stored record a proof request names, with its
// partition's state, or a rejection saying why there is none.
func recordToProve(s Scanner, req *byzlogv1.ProofRequest) ([]byte, *byzlogv1.PartitionState, Result, error) {
	// The topic first: a name no topic has (NUL bytes in it) would make
	// the record scan below reach another topic's keys.
	if r, err := queryPartition(s, req.Topic, req.Partition); err != nil || !r.OK() {
		return nil, nil, r, err
	}
	var ps byzlogv1.PartitionState
	if _, err := getProto(s, CFMeta, partitionKey(req.Topic, req.Partition), &ps); err != nil {
		return nil, nil, Result{}, err
	}
	var raw []byte
	if req.Offset >= ps.LogStartOffset {
		err := scanRecords(s, req.Topic, req.Partition, req.Offset, func(o uint64, v []byte) bool {
			if o == req.Offset {
				raw = bytes.Clone(v)
			}
			return false
		})
		if err != nil {
			return nil, nil, Result{}, err
		}
	}
	if raw == nil {
		return nil, nil, reject(wire.CodeOffsetOutOfRange, "%s/%d holds no record at offset %d (never written, deleted by retention, or removed by compaction)", req.Topic, req.Partition, req.Offset), nil
	}
	return raw, &ps, Result{}, nil
}

// coveringPartition returns the Merkle items of a block digest's partition
// roots and the index of the one whose run holds the requested offset, or
// -1 when none does.
func coveringPartition(d *byzlogv1.BlockDigest, req *byzlogv1.ProofRequest) ([][]byte, int) {
	pi := -1
	items := make([][]byte, len(d.Partitions))
	for i, p := range d.Partitions {
		items[i] = partitionItem(p)
		if p.Topic == req.Topic && p.Partition == req.Partition && req.Offset >= p.FirstOffset && req.Offset < p.FirstOffset+uint64(p.Count) {
			pi = i
		}
	}
	return items, pi
}

// blockRun reads the leaf hashes of one partition's records in a block,
// in offset order, from the records stored (a record compaction removed
// left its leaf hash in its place), stopping at the first gap: fewer than
// part.Count hashes means retention deleted some of them.
func blockRun(s Scanner, part *byzlogv1.PartitionRoot) ([][]byte, error) {
	hashes := make([][]byte, 0, part.Count)
	err := scanStored(s, part.Topic, part.Partition, part.FirstOffset, func(o uint64, v []byte, removed bool) bool {
		if o != part.FirstOffset+uint64(len(hashes)) {
			return false
		}
		if removed {
			hashes = append(hashes, bytes.Clone(v))
		} else {
			hashes = append(hashes, leafHash(v))
		}
		return len(hashes) < int(part.Count)
	})
	return hashes, err
}

// VerifyRecord checks that p proves a record against appHash, the app hash
// after block p.Height (carried by the header of block p.Height+1). It
// returns the proven record. It is pure: callers supply an app hash they
// trust, typically from a header verified by CometBFT's light client.
func VerifyRecord(p *byzlogv1.RecordProof, appHash []byte) (*byzlogv1.StoredRecord, error) {
	if p == nil || p.Partition == nil || p.RecordProof == nil || p.PartitionProof == nil {
		return nil, errors.New("verify record: proof is incomplete")
	}
	var rec byzlogv1.StoredRecord
	if err := proto.Unmarshal(p.Record, &rec); err != nil {
		return nil, fmt.Errorf("verify record: record does not decode: %w", err)
	}
	part := p.Partition
	switch {
	case rec.Topic != part.Topic || rec.Partition != part.Partition:
		return nil, fmt.Errorf("verify record: record is of %s/%d, the proof's partition is %s/%d", rec.Topic, rec.Partition, part.Topic, part.Partition)
	case rec.Offset < part.FirstOffset || rec.Offset-part.FirstOffset != uint64(p.RecordProof.Index) || p.RecordProof.Total != int64(part.Count):
		return nil, fmt.Errorf("verify record: offset %d is not leaf %d of %d starting at %d", rec.Offset, p.RecordProof.Index, p.RecordProof.Total, part.FirstOffset)
	case rec.Height != p.Height:
		return nil, fmt.Errorf("verify record: record is of height %d, the proof of height %d", rec.Height, p.Height)
	}
	if err := verifyLeaf(p.RecordProof, part.Root, p.Record); err != nil {
		return nil, fmt.Errorf("verify record: not in its partition root: %w", err)
	}
	if err := verifyLeaf(p.PartitionProof, p.RecordsRoot, partitionItem(part)); err != nil {
		return nil, fmt.Errorf("verify record: partition not in the records root: %w", err)
	}
	if got := chainStep(p.PrevAppHash, p.Height, p.RecordsRoot, p.MetaRoot); !bytes.Equal(got, appHash) {
		return nil, fmt.Errorf("verify record: the proof yields app hash %X at height %d, the trusted one is %X", got, p.Height, appHash)
	}
	return &rec, nil
}

// leafHashes are the RFC 6962 leaf hashes of items.
func leafHashes(items [][]byte) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		h := sha256.Sum256(append([]byte{0}, it...))
		out[i] = h[:]
	}
	return out
}

// aunts returns the sibling hashes from leaf i up to the root's child, in
// CometBFT's crypto/merkle tree shape (split at the largest power of two
// below n), hashing each node once instead of building every leaf's proof.
func aunts(hashes [][]byte, i int) [][]byte {
	if len(hashes) <= 1 {
		return nil
	}
	k := splitPoint(len(hashes))
	if i < k {
		return append(aunts(hashes[:k], i), subtreeRoot(hashes[k:]))
	}
	return append(aunts(hashes[k:], i-k), subtreeRoot(hashes[:k]))
}

func subtreeRoot(hashes [][]byte) []byte {
	if len(hashes) == 1 {
		return hashes[0]
	}
	k := splitPoint(len(hashes))
	h := sha256.New()
	h.Write([]byte{1})
	h.Write(subtreeRoot(hashes[:k]))
	h.Write(subtreeRoot(hashes[k:]))
	return h.Sum(nil)
}

// splitPoint is the largest power of two less than n (n > 1).
func splitPoint(n int) int {
	k := 1
	for k*2 < n {
		k *= 2
	}
	return k
}

func verifyLeaf(mp *byzlogv1.MerkleProof, root, leaf []byte) error {
	lh := sha256.Sum256(append([]byte{0}, leaf...)) // RFC 6962 leaf hash
	proof := merkle.Proof{Total: mp.Total, Index: mp.Index, LeafHash: lh[:], Aunts: mp.Aunts}
	return proof.Verify(root, leaf)
}
