package core

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/stateproof"
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
//
// CFRecords changes are kept apart, in runs: a block appends thousands of
// records, each partition's in offset order, and a run per partition spares
// a map entry per record here, another in mergeInto, and a sort of them
// all in changeSet. Either way a key's last change wins and the change set
// is sorted by (CF, Key).
type overlay struct {
	parent  Reader
	writes  map[string]*Change // by string(cf byte + key); every CF but CFRecords
	runs    map[string]*recordRun
	last    *recordRun // where the latest record change went
	records int        // changes in runs
	ranges  []RangeDelete
}

// recordRun is the CFRecords changes under one prefix (a record key
// without its 8-byte offset: one partition), in the order they were made.
type recordRun struct {
	prefix  []byte
	changes []Change
}

func newOverlay(parent Reader) *overlay {
	return &overlay{parent: parent, writes: map[string]*Change{}, runs: map[string]*recordRun{}}
}

func wkey(cf CF, key []byte) string { return string(append([]byte{byte(cf)}, key...)) }

// runPrefix is the part of a record key its run is kept under.
func runPrefix(key []byte) []byte { return key[:max(len(key)-8, 0)] }

// run returns the run for prefix, making it if need be.
func (o *overlay) run(prefix []byte) *recordRun {
	if o.last != nil && bytes.Equal(o.last.prefix, prefix) {
		return o.last
	}
	r, ok := o.runs[string(prefix)]
	if !ok {
		r = &recordRun{prefix: prefix}
		o.runs[string(prefix)] = r
	}
	o.last = r
	return r
}

// Get reads a key as written. For CFRecords that is a stored value, one
// record or a run of them (runs.go): nothing reads records appended in
// the block it is executing, and a reader that would must go by runs.
func (o *overlay) Get(cf CF, key []byte) ([]byte, error) {
	if cf == CFRecords {
		if r, ok := o.runs[string(runPrefix(key))]; ok {
			for i := len(r.changes) - 1; i >= 0; i-- {
				if c := &r.changes[i]; bytes.Equal(c.Key, key) {
					if c.Delete {
						return nil, nil
					}
					return c.Value, nil
				}
			}
		}
	} else if c, ok := o.writes[wkey(cf, key)]; ok {
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

func (o *overlay) put(cf CF, key, value []byte) { o.change(Change{CF: cf, Key: key, Value: value}) }

func (o *overlay) del(cf CF, key []byte) { o.change(Change{CF: cf, Key: key, Delete: true}) }

func (o *overlay) change(c Change) {
	if c.CF != CFRecords {
		o.writes[wkey(c.CF, c.Key)] = &c
		return
	}
	r := o.run(runPrefix(c.Key))
	r.changes = append(r.changes, c)
	o.records++
}

// deleteRange drops every key in [start, end), including this overlay's own
// earlier writes there; later writes in the range stand.
func (o *overlay) deleteRange(cf CF, start, end []byte) {
	inRange := func(key []byte) bool { return bytes.Compare(key, start) >= 0 && bytes.Compare(key, end) < 0 }
	if cf == CFRecords {
		for _, r := range o.runs {
			n := len(r.changes)
			r.changes = slices.DeleteFunc(r.changes, func(c Change) bool { return inRange(c.Key) })
			o.records -= n - len(r.changes)
		}
	} else {
		for k, c := range o.writes {
			if c.CF == cf && inRange(c.Key) {
				delete(o.writes, k)
			}
		}
	}
	o.ranges = append(o.ranges, RangeDelete{CF: cf, Start: start, End: end})
}

// sorted returns the overlay's writes in (CF, Key) order, each key's last
// change only. It sorts pointers (cheap swaps, no reflection) and copies
// once; the records' runs go in between, already in order.
func (o *overlay) sorted() []Change {
	ptrs := make([]*Change, 0, len(o.writes))
	for _, c := range o.writes {
		ptrs = append(ptrs, c)
	}
	slices.SortFunc(ptrs, compareChanges)
	out := make([]Change, 0, len(ptrs)+o.records)
	i := 0
	for ; i < len(ptrs) && ptrs[i].CF < CFRecords; i++ {
		out = append(out, *ptrs[i])
	}
	out = o.appendRecords(out)
	for ; i < len(ptrs); i++ {
		out = append(out, *ptrs[i])
	}
	return out
}

// appendRecords appends the record changes to out in key order, each key's
// last change only. Runs are sorted by prefix and each is normally in
// order already (a partition's offsets only grow); if the result is not
// strictly increasing, it is sorted again, stably, and each key's earlier
// changes dropped.
func (o *overlay) appendRecords(out []Change) []Change {
	runs := make([]*recordRun, 0, len(o.runs))
	for _, r := range o.runs {
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b *recordRun) int { return bytes.Compare(a.prefix, b.prefix) })
	from := len(out)
	for _, r := range runs {
		out = append(out, r.changes...)
	}
	recs := out[from:]
	for i := 1; i < len(recs); i++ {
		if bytes.Compare(recs[i-1].Key, recs[i].Key) >= 0 {
			return append(out[:from], lastOfEachKey(recs)...)
		}
	}
	return out
}

// lastOfEachKey sorts changes of one CF by key, keeping each key's last
// change.
func lastOfEachKey(changes []Change) []Change {
	sorted := slices.Clone(changes)
	slices.SortStableFunc(sorted, func(a, b Change) int { return bytes.Compare(a.Key, b.Key) })
	out := sorted[:0]
	for i, c := range sorted {
		if i+1 < len(sorted) && bytes.Equal(sorted[i+1].Key, c.Key) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// mergeInto applies this child's range deletes, then its writes, to parent.
// The writes go in map order: each is to a distinct key (or, for records,
// to its own run, in order) and none reads another, so the parent ends the
// same whatever the order (the block's change set is sorted once, in
// changeSet).
func (o *overlay) mergeInto(parent *overlay) {
	for _, r := range o.ranges {
		parent.deleteRange(r.CF, r.Start, r.End)
	}
	for k, c := range o.writes {
		parent.writes[k] = c
	}
	for _, r := range o.runs {
		pr := parent.run(r.prefix)
		pr.changes = append(pr.changes, r.changes...)
		parent.records += len(r.changes)
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
	// prefixPurge marks partitions with records DeleteRecords deleted and
	// retention has yet to remove (retain).
	prefixPurge    = []byte("d/")
	prefixProducer = []byte("s/")
	prefixBatch    = []byte("b/")
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

func topicKey(topic string) []byte { return stateproof.TopicKey(topic) }

func partitionKey(topic string, p uint32) []byte { return stateproof.PartitionKey(topic, p) }

// partitionPrefix spans every partition key of a topic.
func partitionPrefix(topic string) []byte { return cat(prefixPartition, []byte(topic), []byte{0}) }

func nonceKey(key []byte) []byte { return cat(prefixNonce, key) }

func groupKey(group string) []byte { return cat(prefixGroup, []byte(group)) }

// purgeKey marks a partition with records to remove; the value is empty.
func purgeKey(topic string, p uint32) []byte {
	return cat(prefixPurge, []byte(topic), []byte{0}, be32(p))
}

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
	return stateproof.ProducerKey(pk, topic, p, kafka)
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
