package core

import (
	"bytes"
	"errors"
	"fmt"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/keytree"
	"github.com/byzlog/byzlog/protos/chain/stateproof"
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
	root, err := s.Get(CFMeta, keyKeyTree)
	if err != nil {
		return Result{}, err
	}
	if root == nil {
		return reject(wire.CodeNotFound, "no block has committed the key tree yet: ask again after the next block"), nil
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
		v, err := s.Get(CF(e.CF), e.Key)
		if err != nil {
			return nil, err
		}
		p, err := tree.Prove(treeLeaf(CF(e.CF), e.Key))
		if err != nil {
			return nil, err
		}
		ep := &byzlogv1.StateEntryProof{Cf: uint32(e.CF), Key: e.Key, Proof: treeProof(p)}
		if len(v) > 0 {
			ep.Value = bytes.Clone(v)
		}
		out.Entries = append(out.Entries, ep)
	}
	return out, nil
}

// stateKey names a state entry.
type stateKey = stateproof.Entry

func treeProof(p *keytree.Proof) *byzlogv1.KeyTreeProof {
	return &byzlogv1.KeyTreeProof{Siblings: p.Siblings, LeafPath: p.LeafPath, LeafValueHash: p.LeafValueHash}
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
	t, err := loadTopic(s, req.Topic)
	if err != nil {
		return nil, Result{}, err
	}
	if pol := t.GetConfig().GetCleanupPolicy(); pol != byzlogv1.CleanupPolicy_CLEANUP_COMPACT && pol != byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE {
		return nil, reject(wire.CodeBadQuery, "topic %s is not compacted (cleanup_policy %s): it keeps no latest record per key", wire.Quote(req.Topic), pol), nil
	}
	if len(req.Key) == 0 {
		return nil, reject(wire.CodeBadQuery, "no key: ask for the latest record of a key (records of a compacted topic all have one)"), nil
	}
	sp, err := stateProof(s, st, req.Topic, stateproof.LatestEntries(req.Topic, req.Partition, req.Key))
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
			if out.Record, _, err = storedRecordAt(s, newOverlay(s), req.Topic, req.Partition, e.offset); err != nil {
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
	sp, err := stateProof(s, st, "", []stateKey{{CF: byte(CFProducers), Key: producerKey(req.ProducerKey, req.Topic, req.Partition, req.Kafka)}})
	if err != nil {
		return nil, Result{}, err
	}
	return marshal(sp), Result{Code: wire.CodeOK}, nil
}
