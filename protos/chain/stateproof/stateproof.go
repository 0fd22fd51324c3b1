// Package stateproof checks proofs of single state entries of a byzlog
// chain (rules version 10 on): a key's latest record in a compacted
// partition, a producer's sequence state. It owns the layout of the
// entries it proves (their column family and key, as the state machine
// stores them: abciapp/core builds its keys with these functions) and the
// app hash's chaining, and nothing else: it is pure, and lean enough for
// every SDK to link (no storage engine, no CometBFT beyond crypto/merkle).
//
// A proof leads from an entry, through its topic's key tree (or the
// chain's key tree for a producer), to the key tree's root, an item of the
// block's meta root, and through the block's digest to its app hash. The
// caller gives the app hash it trusts: from a header its light client
// verified.
package stateproof

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cometbft/cometbft/crypto/merkle"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/keytree"
)

// Column families of the entries proven (core.CFMeta, core.CFProducers).
const (
	CFMeta      byte = 1
	CFProducers byte = 3
)

// appHashDomain separates byzlog's app hash from any other use of SHA-256
// over the same bytes, and versions its layout.
const appHashDomain = "byzlog/app-hash/v1"

// AppHash is the app hash after block height from its digest:
//
//	SHA-256(domain || app_hash(height-1) || be64(height) || records_root || meta_root)
func AppHash(prev []byte, height int64, recordsRoot, metaRoot []byte) []byte {
	h := sha256.New()
	h.Write([]byte(appHashDomain))
	h.Write(prev)
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(height)))
	h.Write(recordsRoot)
	h.Write(metaRoot)
	return h.Sum(nil)
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// TopicKey is a topic's config entry (CFMeta).
func TopicKey(topic string) []byte { return cat([]byte("t/"), []byte(topic)) }

// PartitionKey is a partition's state entry (CFMeta).
func PartitionKey(topic string, p uint32) []byte {
	return cat([]byte("p/"), []byte(topic), []byte{0}, be32(p))
}

// IndexKey is a compacted key's index entry (CFMeta).
func IndexKey(topic string, p uint32, key []byte) []byte {
	return cat([]byte("ck/"), []byte(topic), []byte{0}, be32(p), key)
}

// ProducerKey is a producer's sequence state entry (CFProducers): of its
// batches to topic/p, or of one Kafka producer id's when kafka is set.
func ProducerKey(pk []byte, topic string, p uint32, kafka *byzlogv1.KafkaProducer) []byte {
	if kafka != nil {
		return cat([]byte("ks/"), pk, []byte(topic), []byte{0}, be32(p), binary.BigEndian.AppendUint64(nil, uint64(kafka.ProducerId)))
	}
	return cat([]byte("s/"), pk, []byte(topic), []byte{0}, be32(p))
}

// KeyTreeKey is where the block writes the key tree's root (CFMeta).
var KeyTreeKey = []byte("keytree")

// Leaf is a state entry's key in its tree: the column family's byte, then
// the entry's key.
func Leaf(cf byte, key []byte) []byte { return cat([]byte{cf}, key) }

// TopicLeaf is a topic's leaf in the key tree, whose value hash is the
// root of the topic's own tree.
func TopicLeaf(topic string) []byte { return cat([]byte{0}, []byte("t/"), []byte(topic)) }

// KeyRootItem is the key tree root's item in its block's meta root: a put
// of KeyTreeKey in CFMeta, as the meta root encodes every change.
func KeyRootItem(root []byte) []byte {
	return cat([]byte{'p', CFMeta}, be32(uint32(len(KeyTreeKey))), KeyTreeKey, root)
}

// LeafHash is a stored record's RFC 6962 leaf hash.
func LeafHash(rec []byte) []byte {
	h := sha256.Sum256(append([]byte{0}, rec...))
	return h[:]
}

// Entry names a state entry to prove.
type Entry struct {
	CF  byte
	Key []byte
}

// LatestEntries are the entries a LatestProof proves, in its order.
func LatestEntries(topic string, partition uint32, key []byte) []Entry {
	return []Entry{{CFMeta, TopicKey(topic)}, {CFMeta, PartitionKey(topic, partition)}, {CFMeta, IndexKey(topic, partition, key)}}
}

func verifyLeaf(mp *byzlogv1.MerkleProof, root, leaf []byte) error {
	if mp == nil {
		return errors.New("no Merkle path")
	}
	lh := LeafHash(leaf)
	proof := merkle.Proof{Total: mp.Total, Index: mp.Index, LeafHash: lh, Aunts: mp.Aunts}
	return proof.Verify(root, leaf)
}

func fromProto(p *byzlogv1.KeyTreeProof) *keytree.Proof {
	if p == nil {
		return nil
	}
	return &keytree.Proof{Siblings: p.Siblings, LeafPath: p.LeafPath, LeafValueHash: p.LeafValueHash}
}

// Verify checks p against appHash (the app hash after block p.Height) and
// returns the values of the entries named by want, in its order (nil for
// an entry the state does not hold). It checks the entries it was asked
// for, never the keys the proof names; topic "" means producers' entries,
// in the key tree itself.
func Verify(p *byzlogv1.StateProof, appHash []byte, topic string, want []Entry) ([][]byte, error) {
	if p == nil || p.KeyRootProof == nil {
		return nil, errors.New("the state proof is incomplete")
	}
	if got := AppHash(p.PrevAppHash, p.Height, p.RecordsRoot, p.MetaRoot); !bytes.Equal(got, appHash) {
		return nil, fmt.Errorf("the proof yields app hash %X at height %d, the trusted one is %X", got, p.Height, appHash)
	}
	if err := verifyLeaf(p.KeyRootProof, p.MetaRoot, KeyRootItem(p.KeyRoot)); err != nil {
		return nil, fmt.Errorf("the key tree's root is not in the block's meta root: %w", err)
	}
	root := p.KeyRoot
	if topic != "" {
		if p.Topic != topic || len(p.TopicRoot) != keytree.HashSize {
			return nil, fmt.Errorf("the proof is of topic %q, not %q", p.Topic, topic)
		}
		if err := fromProto(p.TopicProof).Verify(root, TopicLeaf(topic), p.TopicRoot); err != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, err)
		}
		root = p.TopicRoot
	}
	if len(p.Entries) != len(want) {
		return nil, fmt.Errorf("the proof holds %d entries, want %d", len(p.Entries), len(want))
	}
	values := make([][]byte, len(want))
	for i, w := range want {
		e := p.Entries[i]
		var vh []byte
		if len(e.Value) > 0 {
			vh = keytree.ValueHash(e.Value)
			values[i] = e.Value
		}
		if err := fromProto(e.Proof).Verify(root, Leaf(w.CF, w.Key), vh); err != nil {
			return nil, fmt.Errorf("state entry %x: %w", w.Key, err)
		}
	}
	return values, nil
}

// IndexEntry is a compacted key's index entry: the offset of the key's
// latest record, whether it is a tombstone, and (from rules version 10)
// the record's leaf hash.
type IndexEntry struct {
	Offset    uint64
	Tombstone bool
	Leaf      []byte
}

// DecodeIndexEntry reads a stored index entry: 9 bytes, or 41 with the
// record's leaf hash.
func DecodeIndexEntry(v []byte) (IndexEntry, error) {
	if len(v) != 9 && len(v) != 9+sha256.Size {
		return IndexEntry{}, fmt.Errorf("key index entry is %d bytes, want 9 or %d", len(v), 9+sha256.Size)
	}
	e := IndexEntry{Offset: binary.BigEndian.Uint64(v), Tombstone: v[8] == 1}
	if len(v) > 9 {
		e.Leaf = bytes.Clone(v[9:])
	}
	return e, nil
}

// Encode is the entry as stored.
func (e IndexEntry) Encode() []byte {
	v := binary.BigEndian.AppendUint64(nil, e.Offset)
	if e.Tombstone {
		v = append(v, 1)
	} else {
		v = append(v, 0)
	}
	return append(v, e.Leaf...)
}

// Latest is what a verified LatestProof says of a key: as of block
// Height, compaction has passed the partition's records below CleanOffset
// (of NextOffset written), and among them the key's latest is Record, or
// none: Tombstone when its latest is a tombstone, Removed when retention
// removed its latest record, neither when the key has none there.
type Latest struct {
	Height int64
	// Partitions is the topic's partition count, as proven.
	Partitions  uint32
	CleanOffset uint64
	NextOffset  uint64
	Record      *byzlogv1.StoredRecord
	Offset      uint64
	Tombstone   bool
	Removed     bool
}

// VerifyLatest checks that p answers the latest record of key in
// topic/partition against appHash, the app hash after block p.State.Height
// (carried by the header of the block after it).
func VerifyLatest(p *byzlogv1.LatestProof, appHash []byte, topic string, partition uint32, key []byte) (*Latest, error) {
	if p == nil {
		return nil, errors.New("verify latest: no proof")
	}
	values, err := Verify(p.State, appHash, topic, LatestEntries(topic, partition, key))
	if err != nil {
		return nil, fmt.Errorf("verify latest: %w", err)
	}
	var t byzlogv1.TopicState
	var ps byzlogv1.PartitionState
	if values[0] == nil {
		return nil, fmt.Errorf("verify latest: the proof shows no topic %s", topic)
	}
	if err := errors.Join(proto.Unmarshal(values[0], &t), proto.Unmarshal(values[1], &ps)); err != nil {
		return nil, fmt.Errorf("verify latest: a proven state entry does not decode: %w", err)
	}
	if pol := t.GetConfig().GetCleanupPolicy(); pol != byzlogv1.CleanupPolicy_CLEANUP_COMPACT && pol != byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE {
		return nil, fmt.Errorf("verify latest: topic %s is not compacted (cleanup policy %s): it keeps no latest record per key", topic, pol)
	}
	if partition >= t.GetConfig().GetPartitions() {
		return nil, fmt.Errorf("verify latest: topic %s has %d partitions, not %d", topic, t.GetConfig().GetPartitions(), partition)
	}
	out := &Latest{Height: p.State.Height, Partitions: t.GetConfig().GetPartitions(), CleanOffset: ps.CleanOffset, NextOffset: ps.NextOffset}
	if values[2] == nil {
		return out, nil
	}
	e, err := DecodeIndexEntry(values[2])
	if err == nil && e.Leaf == nil {
		err = fmt.Errorf("key index entry of %d bytes holds no leaf hash", len(values[2]))
	}
	if err != nil {
		return nil, fmt.Errorf("verify latest: %w", err)
	}
	out.Offset, out.Tombstone = e.Offset, e.Tombstone
	switch {
	case e.Tombstone:
		return out, nil
	case e.Offset < LogStart(&ps):
		out.Removed = true
		return out, nil
	case p.Record == nil:
		return nil, fmt.Errorf("verify latest: the key index names offset %d, and no record came with the proof", e.Offset)
	case !bytes.Equal(LeafHash(p.Record), e.Leaf):
		return nil, fmt.Errorf("verify latest: the record sent is not the one the key index names at offset %d", e.Offset)
	}
	var rec byzlogv1.StoredRecord
	if err := proto.Unmarshal(p.Record, &rec); err != nil {
		return nil, fmt.Errorf("verify latest: the record does not decode: %w", err)
	}
	if rec.Topic != topic || rec.Partition != partition || rec.Offset != e.Offset || !bytes.Equal(rec.Key, key) {
		return nil, fmt.Errorf("verify latest: the indexed record is %s/%d offset %d, not key %x at offset %d of %s/%d", rec.Topic, rec.Partition, rec.Offset, key, e.Offset, topic, partition)
	}
	out.Record = &rec
	return out, nil
}

// LogStart is a partition's log start offset: below it retention or
// DeleteRecords removed the records (reads refuse them at once).
func LogStart(ps *byzlogv1.PartitionState) uint64 { return max(ps.LogStartOffset, ps.DeleteBelow) }

// VerifyProducerState checks that p proves the sequence state of a
// producer (producer key, topic, partition, and Kafka producer id when
// kafka is set) against appHash, and returns it (zero when the chain holds
// none: nothing committed yet).
func VerifyProducerState(p *byzlogv1.StateProof, appHash []byte, req *byzlogv1.ProducerRequest) (*byzlogv1.ProducerState, error) {
	values, err := Verify(p, appHash, "", []Entry{{CFProducers, ProducerKey(req.ProducerKey, req.Topic, req.Partition, req.Kafka)}})
	if err != nil {
		return nil, fmt.Errorf("verify producer state: %w", err)
	}
	var ps byzlogv1.ProducerState
	if err := proto.Unmarshal(values[0], &ps); err != nil {
		return nil, fmt.Errorf("verify producer state: it does not decode: %w", err)
	}
	return &ps, nil
}
