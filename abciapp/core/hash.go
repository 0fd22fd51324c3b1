package core

import (
	"bytes"
	"sort"

	"github.com/cometbft/cometbft/crypto/merkle"

	"github.com/byzlog/byzlog/protos/chain/stateproof"
)

// Digest is what one block's app hash commits to:
//
//	app_hash(h) = SHA-256(domain || app_hash(h-1) || be64(h) || records_root || meta_root)
//
// records_root is the RFC 6962 Merkle root (CometBFT's crypto/merkle) of one
// item per partition the block appended to, in (topic, partition) order:
//
//	item = topic || 0x00 || be32(partition) || be64(first offset) || be32(count) || partition_root
//
// where partition_root is the Merkle root of the appended records' stored
// bytes in offset order. meta_root is the Merkle root of every other change
// the block made (topics, partitions, producers, offsets, nonces, range
// deletes), in the order the change set lists them. Both roots of an empty
// block are the Merkle root of no items.
type Digest struct {
	PrevAppHash []byte
	Height      int64
	Partitions  []PartitionRoot
	RecordsRoot []byte
	MetaRoot    []byte
}

// PartitionRoot is one partition's records appended in a block.
type PartitionRoot struct {
	Topic       string
	Partition   uint32
	FirstOffset uint64
	Count       uint32
	Root        []byte
}

// Item is the partition's leaf in the records root.
func (p PartitionRoot) Item() []byte {
	return cat([]byte(p.Topic), []byte{0}, be32(p.Partition), be64(p.FirstOffset), be32(p.Count), p.Root)
}

// AppHash is the chained hash of the digest.
func (d Digest) AppHash() []byte {
	return chainStep(d.PrevAppHash, d.Height, d.RecordsRoot, d.MetaRoot)
}

func chainStep(prev []byte, height int64, recordsRoot, metaRoot []byte) []byte {
	return stateproof.AppHash(prev, height, recordsRoot, metaRoot)
}

func digestOf(prev []byte, height int64, appended map[string]*appendedRun, changes ChangeSet) Digest {
	keys := make([]string, 0, len(appended))
	for k := range appended {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	d := Digest{PrevAppHash: prev, Height: height}
	items := make([][]byte, 0, len(keys))
	for _, k := range keys {
		run := appended[k]
		p := PartitionRoot{
			Topic: run.topic, Partition: run.partition, FirstOffset: run.first,
			Count: uint32(len(run.leaves)), Root: merkle.HashFromByteSlices(run.leaves),
		}
		d.Partitions = append(d.Partitions, p)
		items = append(items, p.Item())
	}
	d.RecordsRoot = merkle.HashFromByteSlices(items)
	d.MetaRoot = merkle.HashFromByteSlices(metaItems(changes))
	return d
}

// metaItems encodes every change but record puts (which records_root
// covers) and the key tree's nodes (derived from the entries its root,
// an item, commits to; rules version 10 on, before which no key had their
// prefix).
func metaItems(cs ChangeSet) [][]byte {
	var items [][]byte
	for _, r := range cs.RangeDeletes {
		if r.CF == CFMeta && bytes.HasPrefix(r.Start, prefixTree) {
			continue
		}
		items = append(items, cat([]byte{'r', byte(r.CF)}, be32(uint32(len(r.Start))), r.Start, r.End))
	}
	for _, c := range cs.Changes {
		if (c.CF == CFRecords && !c.Delete) || (c.CF == CFMeta && bytes.HasPrefix(c.Key, prefixTree)) {
			continue
		}
		items = append(items, metaItem(c))
	}
	return items
}

// metaItem is a change's item in the meta root.
func metaItem(c Change) []byte {
	op := []byte{'p', byte(c.CF)}
	if c.Delete {
		op[0] = 'd'
	}
	return cat(op, be32(uint32(len(c.Key))), c.Key, c.Value)
}
