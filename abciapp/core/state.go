package core

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// CF names a column family of the committed state. The store maps each to
// a RocksDB column family; the core only names them.
type CF uint8

const (
	// CFMeta: chain params, topics, partitions, key nonces, group owners,
	// per-height digests.
	CFMeta CF = iota + 1
	// CFRecords: the log itself, by (topic, partition, offset).
	CFRecords
	// CFProducers: producer sequences and where each batch landed.
	CFProducers
	// CFOffsets: consumer groups' committed offsets.
	CFOffsets
)

// CFs lists every column family the core uses, in order.
var CFs = []CF{CFMeta, CFRecords, CFProducers, CFOffsets}

// String is the column family's name in the store.
func (c CF) String() string {
	switch c {
	case CFMeta:
		return "meta"
	case CFRecords:
		return "records"
	case CFProducers:
		return "producers"
	case CFOffsets:
		return "offsets"
	}
	return fmt.Sprintf("cf%d", uint8(c))
}

// Reader reads committed state. A missing key reads as nil, no error; an
// error means the store is broken.
type Reader interface {
	Get(cf CF, key []byte) ([]byte, error)
}

// Scanner is a Reader that can also walk a key range in order, for queries.
type Scanner interface {
	Reader
	// Scan calls fn for each key in [start, end) in key order until fn
	// returns false. The slices are only valid during the call.
	Scan(cf CF, start, end []byte, fn func(key, value []byte) bool) error
}

// Change is one write of a change set: a put, or a delete when Delete is set.
type Change struct {
	CF     CF
	Key    []byte
	Value  []byte
	Delete bool
}

// RangeDelete removes every key in [Start, End) of a column family.
type RangeDelete struct {
	CF         CF
	Start, End []byte
}

// ChangeSet is everything a block changes. The store applies RangeDeletes
// first, then Changes, in one atomic write.
type ChangeSet struct {
	RangeDeletes []RangeDelete // in the order they happened
	Changes      []Change      // sorted by (CF, Key)
}

// overlay is a write buffer over a Reader: reads see its own writes. Blocks
// get one overlay, and each transaction a child that is merged into it only
// when the transaction succeeds, so a rejected transaction changes nothing.
type overlay struct {
	parent Reader
	writes map[string]*Change // by string(cf byte + key)
	ranges []RangeDelete
}

func newOverlay(parent Reader) *overlay {
	return &overlay{parent: parent, writes: map[string]*Change{}}
}

func wkey(cf CF, key []byte) string { return string(append([]byte{byte(cf)}, key...)) }

func (o *overlay) Get(cf CF, key []byte) ([]byte, error) {
	if c, ok := o.writes[wkey(cf, key)]; ok {
		if c.Delete {
			return nil, nil
		}
		return c.Value, nil
	}
	for _, r := range o.ranges {
		if r.CF == cf && bytes.Compare(key, r.Start) >= 0 && bytes.Compare(key, r.End) < 0 {
			return nil, nil
		}
	}
	return o.parent.Get(cf, key)
}

func (o *overlay) put(cf CF, key, value []byte) {
	o.writes[wkey(cf, key)] = &Change{CF: cf, Key: key, Value: value}
}

func (o *overlay) del(cf CF, key []byte) {
	o.writes[wkey(cf, key)] = &Change{CF: cf, Key: key, Delete: true}
}

// deleteRange drops every key in [start, end), including this overlay's own
// earlier writes there; later writes in the range stand.
func (o *overlay) deleteRange(cf CF, start, end []byte) {
	for k, c := range o.writes {
		if c.CF == cf && bytes.Compare(c.Key, start) >= 0 && bytes.Compare(c.Key, end) < 0 {
			delete(o.writes, k)
		}
	}
	o.ranges = append(o.ranges, RangeDelete{CF: cf, Start: start, End: end})
}

// sorted returns the overlay's writes in (CF, Key) order. It sorts
// pointers (cheap swaps, no reflection) and copies once.
func (o *overlay) sorted() []Change {
	ptrs := make([]*Change, 0, len(o.writes))
	for _, c := range o.writes {
		ptrs = append(ptrs, c)
	}
	slices.SortFunc(ptrs, compareChanges)
	out := make([]Change, len(ptrs))
	for i, c := range ptrs {
		out[i] = *c
	}
	return out
}

// mergeInto applies this child's range deletes, then its writes, to parent.
// The writes go in map order: each is to a distinct key and none reads
// another, so the parent ends the same whatever the order (the block's
// change set is sorted once, in changeSet).
func (o *overlay) mergeInto(parent *overlay) {
	for _, r := range o.ranges {
		parent.deleteRange(r.CF, r.Start, r.End)
	}
	for k, c := range o.writes {
		parent.writes[k] = c
	}
}

// compareChanges orders changes by (CF, Key).
func compareChanges(a, b *Change) int {
	if a.CF != b.CF {
		return int(a.CF) - int(b.CF)
	}
	return bytes.Compare(a.Key, b.Key)
}

// insertChange puts c into changes, sorted by (CF, Key), replacing a change
// to the same key.
func insertChange(changes []Change, c Change) []Change {
	i, found := slices.BinarySearchFunc(changes, c, func(a, b Change) int { return compareChanges(&a, &b) })
	if found {
		changes[i] = c
		return changes
	}
	return slices.Insert(changes, i, c)
}

func (o *overlay) changeSet() ChangeSet {
	return ChangeSet{RangeDeletes: append([]RangeDelete(nil), o.ranges...), Changes: o.sorted()}
}

// Keys. Topic names are [a-zA-Z0-9._-] and group names hold no NUL, so a 0x00
// after a name ends it unambiguously; keys are 32 bytes; numbers are
// big-endian so that key order is numeric order.

var (
	keyParams       = []byte("params")
	prefixTopic     = []byte("t/")
	prefixPartition = []byte("p/")
	prefixNonce     = []byte("n/")
	prefixGroup     = []byte("g/")
	prefixProducer  = []byte("s/")
	prefixBatch     = []byte("b/")
	// A Kafka producer's sequence state and batches, by producer id.
	prefixKafkaProducer = []byte("ks/")
	prefixKafkaBatch    = []byte("kb/")
)

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func cat(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func topicKey(topic string) []byte { return cat(prefixTopic, []byte(topic)) }

func partitionKey(topic string, p uint32) []byte {
	return cat(prefixPartition, []byte(topic), []byte{0}, be32(p))
}

// partitionPrefix spans every partition key of a topic.
func partitionPrefix(topic string) []byte { return cat(prefixPartition, []byte(topic), []byte{0}) }

func nonceKey(key []byte) []byte { return cat(prefixNonce, key) }

func groupKey(group string) []byte { return cat(prefixGroup, []byte(group)) }

// recordPrefix spans a topic-partition's records; recordKey is one record.
func recordPrefix(topic string, p uint32) []byte { return cat([]byte(topic), []byte{0}, be32(p)) }
func recordKey(topic string, p uint32, offset uint64) []byte {
	return cat([]byte(topic), []byte{0}, be32(p), be64(offset))
}

// topicRecords spans every record of a topic.
func topicRecords(topic string) (start, end []byte) {
	return cat([]byte(topic), []byte{0}), cat([]byte(topic), []byte{1})
}

// producerKey is the state of a producer's sequence space: a byzlog
// producer's in a topic-partition, or with kafka one Kafka producer id's.
func producerKey(pk []byte, topic string, p uint32, kafka *byzlogv1.KafkaProducer) []byte {
	if kafka != nil {
		return cat(prefixKafkaProducer, pk, []byte(topic), []byte{0}, be32(p), be64(uint64(kafka.ProducerId)))
	}
	return cat(prefixProducer, pk, []byte(topic), []byte{0}, be32(p))
}

// batchKey is where a committed batch landed, by its sequence (and a Kafka
// producer's id and epoch).
func batchKey(pk []byte, topic string, p uint32, kafka *byzlogv1.KafkaProducer, seq uint64) []byte {
	if kafka != nil {
		return cat(prefixKafkaBatch, pk, []byte(topic), []byte{0}, be32(p), be64(uint64(kafka.ProducerId)), be32(uint32(kafka.Epoch)), be64(seq))
	}
	return cat(prefixBatch, pk, []byte(topic), []byte{0}, be32(p), be64(seq))
}

func offsetKey(group, topic string, p uint32) []byte {
	return cat([]byte(group), []byte{0}, []byte(topic), []byte{0}, be32(p))
}

// groupOffsets spans a group's committed offsets.
func groupOffsets(group string) (start, end []byte) {
	return cat([]byte(group), []byte{0}), cat([]byte(group), []byte{1})
}

// prefixEnd is the first key after every key that starts with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
