package core

import (
	"bytes"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/keytree"
	"github.com/byzlog/byzlog/protos/wire"
)

// keyRootProof is the key tree's root the block wrote and the Merkle path
// of its item among the block's meta items.
func keyRootProof(changes ChangeSet) ([]byte, *byzlogv1.MerkleProof, error) {
	for _, c := range changes.Changes {
		if c.CF == CFMeta && !c.Delete && bytes.Equal(c.Key, keyKeyTree) {
			if p := metaItemProof(changes, metaItem(c)); p != nil {
				return c.Value, p, nil
			}
		}
	}
	return nil, nil, errors.New("the block wrote no key tree root")
}

func keyRootItem(root []byte) []byte {
	return metaItem(Change{CF: CFMeta, Key: keyKeyTree, Value: root})
}

// keyTreeReady refuses proofs of state entries on a chain before rules
// version 10, or while the key tree is still taking the older entries.
func keyTreeReady(s Scanner) (Result, error) {
	rules, err := LoadRules(s)
	if err != nil {
		return Result{}, err
	}
	if rules.GetVersion() < KeyTreeRulesVersion {
		return reject(wire.CodeNotFound, "proofs of state entries need rules version %d; the chain runs %d", KeyTreeRulesVersion, rules.GetVersion()), nil
	}
	cursor, err := s.Get(CFMeta, keyKeyTreeMigration)
	if err != nil {
		return Result{}, err
	}
	if cursor != nil {
		return reject(wire.CodeNotFound, "the key tree is still taking the state from before rules version %d (%d entries a block): ask again later", KeyTreeRulesVersion, MaxKeyTreeMigration), nil
	}
	return Result{}, nil
}

// stateProof proves entries (of topic's tree, or of the key tree itself
// when topic is "") in the committed state st.
func stateProof(s Scanner, st State, topic string, entries []stateKey) (*byzlogv1.StateProof, error) {
	var d byzlogv1.BlockDigest
	ok, err := getProto(s, CFMeta, digestKey(st.Height), &d)
	if err != nil {
		return nil, err
	}
	if !ok || d.KeyRoot == nil {
		return nil, fmt.Errorf("no key tree root stored with the digest of height %d", st.Height)
	}
	o := newOverlay(s)
	out := &byzlogv1.StateProof{Height: d.Height, PrevAppHash: d.PrevAppHash, RecordsRoot: d.RecordsRoot, MetaRoot: d.MetaRoot,
		KeyRoot: d.KeyRoot, KeyRootProof: d.KeyRootProof, Topic: topic}
	tree := keyTree(o)
	if topic != "" {
		p, err := tree.Prove(topicLeaf(topic))
		if err != nil {
			return nil, err
		}
		out.TopicProof = treeProof(p)
		tree = topicTree(o, topic)
		if out.TopicRoot, err = tree.Root(); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		v, err := s.Get(e.cf, e.key)
		if err != nil {
			return nil, err
		}
		p, err := tree.Prove(treeLeaf(e.cf, e.key))
		if err != nil {
			return nil, err
		}
		ep := &byzlogv1.StateEntryProof{Cf: uint32(e.cf), Key: e.key, Proof: treeProof(p)}
		if len(v) > 0 {
			ep.Value = bytes.Clone(v)
		}
		out.Entries = append(out.Entries, ep)
	}
	return out, nil
}

// stateKey names a state entry.
type stateKey struct {
	cf  CF
	key []byte
}

func treeProof(p *keytree.Proof) *byzlogv1.KeyTreeProof {
	return &byzlogv1.KeyTreeProof{Siblings: p.Siblings, LeafPath: p.LeafPath, LeafValueHash: p.LeafValueHash}
}

func fromTreeProof(p *byzlogv1.KeyTreeProof) *keytree.Proof {
	if p == nil {
		return nil
	}
	return &keytree.Proof{Siblings: p.Siblings, LeafPath: p.LeafPath, LeafValueHash: p.LeafValueHash}
}

// latestKeys are the entries a LatestProof proves, in its order.
func latestKeys(topic string, partition uint32, key []byte) []stateKey {
	return []stateKey{{CFMeta, topicKey(topic)}, {CFMeta, partitionKey(topic, partition)}, {CFMeta, compactKeyKey(topic, partition, key)}}
}

// queryLatest answers the latest record of a key in a compacted partition
// with its proofs (LatestProof).
func queryLatest(s Scanner, st State, req *byzlogv1.LatestRequest) ([]byte, Result, error) {
	if r, err := keyTreeReady(s); err != nil || !r.OK() {
		return nil, r, err
	}
	if r, err := queryPartition(s, req.Topic, req.Partition); err != nil || !r.OK() {
		return nil, r, err
	}
	if len(req.Key) == 0 {
		return nil, reject(wire.CodeBadQuery, "no key: ask for the latest record of a key (records of a compacted topic all have one)"), nil
	}
	sp, err := stateProof(s, st, req.Topic, latestKeys(req.Topic, req.Partition, req.Key))
	if err != nil {
		return nil, Result{}, err
	}
	out := &byzlogv1.LatestProof{State: sp}
	if v := sp.Entries[2].Value; v != nil {
		e, err := decodeKeyEntry(v)
		if err != nil {
			return nil, Result{}, err
		}
		if !e.tombstone {
			if out.Record, err = storedRecordAt(s, newOverlay(s), req.Topic, req.Partition, e.offset); err != nil {
				return nil, Result{}, err
			}
		}
	}
	return marshal(out), Result{Code: wire.CodeOK}, nil
}

// queryProducerProof answers a producer's sequence state with its proof.
func queryProducerProof(s Scanner, st State, req *byzlogv1.ProducerRequest) ([]byte, Result, error) {
	if r, err := keyTreeReady(s); err != nil || !r.OK() {
		return nil, r, err
	}
	if len(req.ProducerKey) != 32 {
		return nil, reject(wire.CodeBadQuery, "producer_key is %d bytes, want 32 (an ed25519 public key)", len(req.ProducerKey)), nil
	}
	sp, err := stateProof(s, st, "", []stateKey{{CFProducers, producerKey(req.ProducerKey, req.Topic, req.Partition, req.Kafka)}})
	if err != nil {
		return nil, Result{}, err
	}
	return marshal(sp), Result{Code: wire.CodeOK}, nil
}

// verifyState checks p against appHash (the app hash after block
// p.Height) and returns the values of the entries named by want, in its
// order (nil for an entry the state does not hold). It checks the entries
// it was asked for, never the keys the proof names.
func verifyState(p *byzlogv1.StateProof, appHash []byte, topic string, want []stateKey) ([][]byte, error) {
	if p == nil || p.KeyRootProof == nil {
		return nil, errors.New("the state proof is incomplete")
	}
	if got := chainStep(p.PrevAppHash, p.Height, p.RecordsRoot, p.MetaRoot); !bytes.Equal(got, appHash) {
		return nil, fmt.Errorf("the proof yields app hash %X at height %d, the trusted one is %X", got, p.Height, appHash)
	}
	if err := verifyLeaf(p.KeyRootProof, p.MetaRoot, keyRootItem(p.KeyRoot)); err != nil {
		return nil, fmt.Errorf("the key tree's root is not in the block's meta root: %w", err)
	}
	root := p.KeyRoot
	if topic != "" {
		if p.Topic != topic || len(p.TopicRoot) != keytree.HashSize {
			return nil, fmt.Errorf("the proof is of topic %q, not %q", p.Topic, topic)
		}
		if err := fromTreeProof(p.TopicProof).Verify(root, topicLeaf(topic), p.TopicRoot); err != nil {
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
		if err := fromTreeProof(e.Proof).Verify(root, treeLeaf(w.cf, w.key), vh); err != nil {
			return nil, fmt.Errorf("state entry %x: %w", w.key, err)
		}
	}
	return values, nil
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
// (carried by the header of the block after it). It is pure: callers
// supply an app hash they trust, typically from a header the light client
// verified.
func VerifyLatest(p *byzlogv1.LatestProof, appHash []byte, topic string, partition uint32, key []byte) (*Latest, error) {
	if p == nil {
		return nil, errors.New("verify latest: no proof")
	}
	values, err := verifyState(p.State, appHash, topic, latestKeys(topic, partition, key))
	if err != nil {
		return nil, fmt.Errorf("verify latest: %w", err)
	}
	var t byzlogv1.TopicState
	var ps byzlogv1.PartitionState
	if values[0] == nil {
		return nil, fmt.Errorf("verify latest: the proof shows no topic %s", topic)
	}
	if err := firstErr(proto.Unmarshal(values[0], &t), proto.Unmarshal(values[1], &ps)); err != nil {
		return nil, fmt.Errorf("verify latest: a proven state entry does not decode: %w", err)
	}
	if partition >= t.GetConfig().GetPartitions() {
		return nil, fmt.Errorf("verify latest: topic %s has %d partitions, not %d", topic, t.GetConfig().GetPartitions(), partition)
	}
	out := &Latest{Height: p.State.Height, Partitions: t.GetConfig().GetPartitions(), CleanOffset: ps.CleanOffset, NextOffset: ps.NextOffset}
	if values[2] == nil {
		return out, nil
	}
	offset, tombstone, leaf, err := DecodeIndexEntry(values[2])
	if err != nil {
		return nil, fmt.Errorf("verify latest: %w", err)
	}
	out.Offset, out.Tombstone = offset, tombstone
	switch {
	case tombstone:
		return out, nil
	case offset < logStart(&ps):
		out.Removed = true
		return out, nil
	case p.Record == nil:
		return nil, fmt.Errorf("verify latest: the key index names offset %d, and no record came with the proof", offset)
	case !bytes.Equal(leafHash(p.Record), leaf):
		return nil, fmt.Errorf("verify latest: the record sent is not the one the key index names at offset %d", offset)
	}
	var rec byzlogv1.StoredRecord
	if err := proto.Unmarshal(p.Record, &rec); err != nil {
		return nil, fmt.Errorf("verify latest: the record does not decode: %w", err)
	}
	if rec.Topic != topic || rec.Partition != partition || rec.Offset != offset || !bytes.Equal(rec.Key, key) {
		return nil, fmt.Errorf("verify latest: the indexed record is %s/%d offset %d, not key %x at offset %d of %s/%d", rec.Topic, rec.Partition, rec.Offset, key, offset, topic, partition)
	}
	out.Record = &rec
	return out, nil
}

// VerifyProducerState checks that p proves the sequence state of a
// producer (producer key, topic, partition, and Kafka producer id when
// kafka is set) against appHash, and returns it (zero when the chain holds
// none: nothing committed yet).
func VerifyProducerState(p *byzlogv1.StateProof, appHash []byte, req *byzlogv1.ProducerRequest) (*byzlogv1.ProducerState, error) {
	values, err := verifyState(p, appHash, "", []stateKey{{CFProducers, producerKey(req.ProducerKey, req.Topic, req.Partition, req.Kafka)}})
	if err != nil {
		return nil, fmt.Errorf("verify producer state: %w", err)
	}
	var ps byzlogv1.ProducerState
	if err := proto.Unmarshal(values[0], &ps); err != nil {
		return nil, fmt.Errorf("verify producer state: it does not decode: %w", err)
	}
	return &ps, nil
}
