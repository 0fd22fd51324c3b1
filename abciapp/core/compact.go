package core

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/stateproof"
	"github.com/byzlog/byzlog/protos/wire"
)

// Log compaction (Kafka's cleanup.policy=compact), decided by the state
// machine from committed state and block time only, so every validator
// holds the same compacted log and the state root covers it.
//
// At the start of each block, before its transactions, every partition of
// a compacted topic is passed on from its clean_offset, in offset order,
// up to its last stable offset (an open transaction's records wait for
// its end, so a pass never sees a record whose outcome is unknown), and
// only records whose block is at least min_compaction_lag_ms old. At most
// MaxCompactionPasses records a partition a block; the rest wait for the
// next block. Passing a record:
//
//   - a record with a key and a value (or a tombstone: no value) becomes
//     its key's latest in the key index (prefixCompactKey), and the record
//     the index named before is removed;
//   - a tombstone is also queued (prefixTombstone) with the block time it
//     was passed at: delete_retention_ms later, if it is still its key's
//     latest, it is removed and the key leaves the index;
//   - a record of an aborted transaction, and a record without a key (only
//     written before the topic became compacted: the chain refuses them
//     since), is removed;
//   - a transaction's marker stays.
//
// Offsets never move: a removed record leaves a hole. In its run it is
// replaced by its leaf hash (removedMarker, runs.go), so the block's
// Merkle tree, and so every other record's proof, is unchanged, while the
// record's bytes are gone. Reads skip holes; a proof of a removed record
// is refused. The index holds one entry per live key, each at most its
// live record's key: it costs no more than the records compaction keeps.

// CompactRulesVersion is the first rules version with compacted topics.
const CompactRulesVersion uint64 = 9

// MaxCompactionPasses bounds the records compaction passes in one
// partition in one block (and the tombstones it expires), as
// MaxRetentionDeletes bounds retention.
const MaxCompactionPasses = 10000

var (
	prefixCompactKey = []byte("ck/") // topic, 0, partition, key: be64 offset, 1 byte tombstone[, leaf hash from rules 10]
	prefixTombstone  = []byte("ct/") // topic, 0, partition, be64 offset: be64 passed-at (unix ns), key
)

func compactPartitionPrefix(prefix []byte, topic string, p uint32) []byte {
	return cat(prefix, []byte(topic), []byte{0}, be32(p))
}

func compactKeyKey(topic string, p uint32, key []byte) []byte {
	return stateproof.IndexKey(topic, p, key)
}

func tombstoneKey(topic string, p uint32, offset uint64) []byte {
	return cat(compactPartitionPrefix(prefixTombstone, topic, p), be64(offset))
}

// Compacts reports whether a topic's records are compacted under rules.
// Only the two compacting policies count: a chain before rules version 9
// stored any number unchecked, and a topic with another keeps to delete.
func Compacts(c *byzlogv1.TopicConfig, rules uint64) bool {
	p := c.GetCleanupPolicy()
	return rules >= CompactRulesVersion && (p == byzlogv1.CleanupPolicy_CLEANUP_COMPACT || p == byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE)
}

// Retains reports whether retention (retention_ms, retention_bytes)
// removes a topic's oldest records under rules: not when it is compacted
// only.
func Retains(c *byzlogv1.TopicConfig, rules uint64) bool {
	return rules < CompactRulesVersion || c.GetCleanupPolicy() != byzlogv1.CleanupPolicy_CLEANUP_COMPACT
}

// deleteRetentionNs is how long a passed tombstone stays, in nanoseconds.
func deleteRetentionNs(c *byzlogv1.TopicConfig) int64 {
	return wire.DeleteRetentionMs(c) * 1_000_000
}

// minLagNs is min_compaction_lag_ms in nanoseconds, 0 for a value out of
// range (stored unchecked before rules version 9).
func minLagNs(c *byzlogv1.TopicConfig) int64 {
	if ms := c.MinCompactionLagMs; ms > 0 && ms <= maxRetentionMs {
		return ms * 1_000_000
	}
	return 0
}

// checkCompactionConfig checks a topic's compaction settings, from
// CompactRulesVersion on (builds before it took any value and ignored it).
func checkCompactionConfig(c *byzlogv1.TopicConfig, rules uint64) Result {
	if c == nil || rules < CompactRulesVersion {
		return Result{}
	}
	switch {
	case c.CleanupPolicy != byzlogv1.CleanupPolicy_CLEANUP_DELETE && c.CleanupPolicy != byzlogv1.CleanupPolicy_CLEANUP_COMPACT &&
		c.CleanupPolicy != byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE:
		return reject(wire.CodeBadTopicConfig, "cleanup_policy %d: want %d (delete), %d (compact) or %d (compact,delete)", c.CleanupPolicy,
			byzlogv1.CleanupPolicy_CLEANUP_DELETE, byzlogv1.CleanupPolicy_CLEANUP_COMPACT, byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE)
	case c.DeleteRetentionMs != nil && (*c.DeleteRetentionMs < 0 || *c.DeleteRetentionMs > maxRetentionMs):
		return reject(wire.CodeBadTopicConfig, "delete_retention_ms (%d) must be between 0 and %d", *c.DeleteRetentionMs, int64(maxRetentionMs))
	case c.MinCompactionLagMs < 0 || c.MinCompactionLagMs > maxRetentionMs:
		return reject(wire.CodeBadTopicConfig, "min_compaction_lag_ms (%d) must be between 0 and %d", c.MinCompactionLagMs, int64(maxRetentionMs))
	case c.MaxCompactionLagMs < 0 || c.MaxCompactionLagMs > maxRetentionMs:
		return reject(wire.CodeBadTopicConfig, "max_compaction_lag_ms (%d) must be 0 (no bound) or between 1 and %d", c.MaxCompactionLagMs, int64(maxRetentionMs))
	case c.MaxCompactionLagMs > 0 && c.MaxCompactionLagMs < c.MinCompactionLagMs:
		return reject(wire.CodeBadTopicConfig, "max_compaction_lag_ms (%d) must not be below min_compaction_lag_ms (%d)", c.MaxCompactionLagMs, c.MinCompactionLagMs)
	}
	return Result{}
}

// keyless is the index of a batch's first record without a key, or -1.
func keyless(records []*byzlogv1.Record) int {
	for i, r := range records {
		if r.Key == nil {
			return i
		}
	}
	return -1
}

// compact passes the partitions of every compacted topic of topics (the
// committed ones) on, at the start of a block (see the top of this file).
func compact(s Scanner, o *overlay, topics []*byzlogv1.TopicState, blockTime int64, rules uint64) error {
	for _, t := range topics {
		if !Compacts(t.Config, rules) {
			continue
		}
		for p := uint32(0); p < t.Config.Partitions; p++ {
			c := compactor{s: s, o: o, t: t, p: p, now: blockTime, rules: rules, latest: map[string]keyEntry{}, indexed: map[string][]byte{}}
			if err := c.run(); err != nil {
				return fmt.Errorf("compaction of %s/%d: %w", t.Name, p, err)
			}
		}
	}
	return nil
}

// listTopics reads every committed topic, in name order.
func listTopics(s Scanner) ([]*byzlogv1.TopicState, error) {
	var topics []*byzlogv1.TopicState
	var decodeErr error
	err := s.Scan(CFMeta, prefixTopic, prefixEnd(prefixTopic), func(_, v []byte) bool {
		var t byzlogv1.TopicState
		if decodeErr = proto.Unmarshal(v, &t); decodeErr != nil {
			return false
		}
		topics = append(topics, &t)
		return true
	})
	if err = firstErr(err, decodeErr); err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	return topics, nil
}

// keyEntry is a key's latest record in the index: its offset, whether it
// is a tombstone, and (from rules version 10, for proofs of the latest
// value: the key tree commits to the entry) the record's leaf hash. found
// is false for a key the index does not hold.
type keyEntry struct {
	offset    uint64
	tombstone bool
	leaf      []byte
	found     bool
}

func (e keyEntry) value() []byte {
	return stateproof.IndexEntry{Offset: e.offset, Tombstone: e.tombstone, Leaf: e.leaf}.Encode()
}

// decodeKeyEntry reads a stored index entry: 9 bytes, or 41 with the
// record's leaf hash.
func decodeKeyEntry(v []byte) (keyEntry, error) {
	e, err := stateproof.DecodeIndexEntry(v)
	if err != nil {
		return keyEntry{}, err
	}
	return keyEntry{offset: e.Offset, tombstone: e.Tombstone, leaf: e.Leaf, found: true}, nil
}

// compactor passes one partition on in one block.
type compactor struct {
	s     Scanner
	o     *overlay
	t     *byzlogv1.TopicState
	p     uint32
	now   int64
	rules uint64
	// latest caches the index entries this block read or wrote (looked
	// up by key, never ranged over).
	latest map[string]keyEntry
	// indexed holds, for each key the pass made the latest of (in
	// indexOrder, first seen first), its latest stored record: its index
	// entry is written when the pass ends (writeIndexed).
	indexed    map[string][]byte
	indexOrder []string
	removed    []uint64 // offsets to remove, in the order found
	logStart   uint64   // below it retention or DeleteRecords removed the records
}

func (c *compactor) run() error {
	// The partition as retention left it in this block (its log start,
	// its size), not as committed.
	pk := partitionKey(c.t.Name, c.p)
	var ps byzlogv1.PartitionState
	if _, err := getProto(c.o, CFMeta, pk, &ps); err != nil {
		return err
	}
	c.logStart = logStart(&ps)
	clean, err := c.pass(&ps)
	if err != nil {
		return err
	}
	if err := c.expireTombstones(); err != nil {
		return err
	}
	swept := ps.IndexSwept
	if c.logStart > 0 {
		if swept, err = c.sweep(ps.IndexSwept); err != nil {
			return err
		}
	}
	if clean == ps.CleanOffset && len(c.removed) == 0 && bytes.Equal(swept, ps.IndexSwept) {
		return nil
	}
	ps.IndexSwept = swept
	freed, err := removeRecords(c.s, c.o, c.t.Name, c.p, c.removed)
	if err != nil {
		return err
	}
	ps.CleanOffset = clean
	ps.Compacted += uint64(len(c.removed))
	ps.SizeBytes -= min(ps.SizeBytes, freed)
	c.o.put(CFMeta, pk, marshal(&ps))
	return nil
}

// pass passes the partition's records on from its clean offset and
// returns the new clean offset.
func (c *compactor) pass(ps *byzlogv1.PartitionState) (uint64, error) {
	end := LastStable(ps)
	from := max(ps.CleanOffset, logStart(ps))
	if from >= end {
		return ps.CleanOffset, nil
	}
	lagCut := c.now - minLagNs(c.t.Config)
	clean, passed, held := from, 0, false
	var ferr error
	err := scanRecords(c.s, c.t.Name, c.p, from, func(offset uint64, v []byte) bool {
		if offset >= end {
			return false
		}
		if passed == MaxCompactionPasses {
			held = true
			return false
		}
		var r passFields
		if r, ferr = decodePassed(v); ferr != nil {
			return false
		}
		if r.timestamp > lagCut {
			held = true // block times only grow along the log
			return false
		}
		if ferr = c.passRecord(&r, offset, v); ferr != nil {
			return false
		}
		clean, passed = offset+1, passed+1
		return true
	})
	if err = firstErr(err, ferr); err != nil {
		return 0, err
	}
	if !held {
		clean = end // the holes up to it are passed too
	}
	c.writeIndexed()
	return clean, nil
}

// maxDeferredLeaf is the largest stored record whose leaf hash a pass
// defers to writeIndexed, holding a copy meanwhile: a pass holds at most
// MaxCompactionPasses of them (10 MiB); bigger ones are hashed at once.
const maxDeferredLeaf = 1024

// writeIndexed writes the index entry of each key the pass indexed, once,
// as its latest record left it: a pass sees a busy key many times in a
// block, and the entry (with its record's leaf hash, from rules version
// 10) is written and hashed for the last of them only.
func (c *compactor) writeIndexed() {
	for _, k := range c.indexOrder {
		e := c.latest[k]
		if stored := c.indexed[k]; c.rules >= KeyTreeRulesVersion && stored != nil {
			e.leaf = leafHash(stored)
			c.latest[k] = e
		}
		c.o.put(CFMeta, compactKeyKey(c.t.Name, c.p, []byte(k)), e.value())
	}
	c.indexed, c.indexOrder = nil, nil
}

// passRecord passes one record (see the top of this file).
func (c *compactor) passRecord(r *passFields, offset uint64, stored []byte) error {
	if r.control {
		return nil
	}
	if r.transactional {
		aborted, err := c.aborted(r.producerID, offset)
		if err != nil {
			return err
		}
		if aborted {
			c.remove(offset)
			return nil
		}
	}
	if !r.hasKey {
		c.remove(offset)
		return nil
	}
	prev, err := c.entry(r.key)
	if err != nil {
		return err
	}
	if prev.found && prev.offset < offset {
		c.remove(prev.offset)
	}
	e := keyEntry{offset: offset, tombstone: !r.hasValue, found: true}
	k := string(r.key)
	if _, ok := c.indexed[k]; !ok {
		c.indexOrder = append(c.indexOrder, k)
	}
	switch {
	case c.rules < KeyTreeRulesVersion:
		c.indexed[k] = nil // no leaf hash in the entry
	case len(stored) > maxDeferredLeaf:
		e.leaf = leafHash(stored) // a big record is hashed now, not held
		c.indexed[k] = nil
	default:
		c.indexed[k] = bytes.Clone(stored)
	}
	c.latest[k] = e
	if e.tombstone {
		c.o.put(CFMeta, tombstoneKey(c.t.Name, c.p, offset), cat(be64(uint64(c.now)), r.key))
	}
	return nil
}

// remove removes the record at offset, unless retention or DeleteRecords
// did (the index and the tombstone queue may still name it). The bytes it
// frees are counted where its run is rewritten (removeRecords), which
// reads the run once for all of its removals.
func (c *compactor) remove(offset uint64) {
	if offset < c.logStart {
		return
	}
	c.removed = append(c.removed, offset)
}

// entry is key's latest record by the index, as this block left it.
func (c *compactor) entry(key []byte) (keyEntry, error) {
	if e, ok := c.latest[string(key)]; ok {
		return e, nil
	}
	v, err := c.o.Get(CFMeta, compactKeyKey(c.t.Name, c.p, key))
	if err != nil || v == nil {
		return keyEntry{}, err
	}
	e, err := decodeKeyEntry(v)
	if err != nil {
		return keyEntry{}, fmt.Errorf("%s/%d: %w", c.t.Name, c.p, err)
	}
	c.latest[string(key)] = e
	return e, nil
}

// storedRecordAt is the stored record at offset of topic/p as o has it,
// or nil when it is a hole or gone, and the bytes of the run it read.
func storedRecordAt(s Scanner, o *overlay, topic string, p uint32, offset uint64) ([]byte, int, error) {
	key, value, err := runHolding(s, o, topic, p, offset)
	if err != nil || value == nil || runFirst(key, value) > offset {
		return nil, len(value), err
	}
	first := runFirst(key, value)
	var out []byte
	_, err = decodeStored(value, func(i int, rec []byte, removed bool) bool {
		if first+uint64(i) == offset && !removed {
			out = bytes.Clone(rec)
		}
		return first+uint64(i) < offset
	})
	return out, len(value), err
}

// be32At reads a big-endian uint32 from the start of b (4 bytes or more).
func be32At(b []byte) uint32 { return binary.BigEndian.Uint32(b) }

// aborted reports whether producer pid's transactional record at offset
// belongs to a transaction that aborted (its range in the aborted index).
func (c *compactor) aborted(pid int64, offset uint64) (bool, error) {
	prefix := cat(prefixAborted, []byte(c.t.Name), []byte{0}, be32(c.p), be64(uint64(pid)))
	found := false
	var bad error
	err := c.s.Scan(CFMeta, cat(prefix, be64(offset)), prefixEnd(prefix), func(_, v []byte) bool {
		var a byzlogv1.AbortedTxn
		if bad = proto.Unmarshal(v, &a); bad == nil {
			found = a.FirstOffset <= offset
		}
		return false
	})
	return found, firstErr(err, bad)
}

// expireTombstones removes the tombstones passed delete_retention_ms ago
// or more that are still their key's latest, and their keys from the
// index; a queued tombstone a later record superseded was removed then.
func (c *compactor) expireTombstones() error {
	prefix := compactPartitionPrefix(prefixTombstone, c.t.Name, c.p)
	due := c.now - deleteRetentionNs(c.t.Config)
	type expired struct {
		offset uint64
		key    []byte
	}
	var out []expired
	var bad error
	err := c.s.Scan(CFMeta, prefix, prefixEnd(prefix), func(k, v []byte) bool {
		if len(out) == MaxCompactionPasses {
			return false
		}
		if len(k) != len(prefix)+8 || len(v) < 8 {
			bad = fmt.Errorf("tombstone queue entry %x is malformed", k)
			return false
		}
		if int64(binary.BigEndian.Uint64(v)) > due {
			return false // passed in offset order, so in time order
		}
		out = append(out, expired{binary.BigEndian.Uint64(k[len(prefix):]), bytes.Clone(v[8:])})
		return true
	})
	if err = firstErr(err, bad); err != nil {
		return err
	}
	for _, x := range out {
		c.o.del(CFMeta, tombstoneKey(c.t.Name, c.p, x.offset))
		e, err := c.entry(x.key)
		if err != nil {
			return err
		}
		if !e.found || e.offset != x.offset {
			continue
		}
		c.remove(x.offset)
		c.latest[string(x.key)] = keyEntry{}
		c.o.del(CFMeta, compactKeyKey(c.t.Name, c.p, x.key))
	}
	return nil
}

// sweep drops from the key index up to MaxCompactionPasses keys, from the
// one after the last swept on, whose latest record is below the log start
// (retention or DeleteRecords removed it), so the index holds only keys
// the partition still has; it returns the last key it looked at, or
// nothing when it reached the end (the next sweep starts again). Keys
// this block indexed are left alone.
func (c *compactor) sweep(after []byte) ([]byte, error) {
	prefix := compactPartitionPrefix(prefixCompactKey, c.t.Name, c.p)
	start := prefix
	if len(after) > 0 {
		start = cat(prefix, after, []byte{0})
	}
	var last []byte
	n := 0
	var bad error
	err := c.s.Scan(CFMeta, start, prefixEnd(prefix), func(k, v []byte) bool {
		if n == MaxCompactionPasses {
			return false
		}
		n++
		key := k[len(prefix):]
		last = bytes.Clone(key)
		if _, bad = decodeKeyEntry(v); bad != nil {
			bad = fmt.Errorf("%s/%d: %w", c.t.Name, c.p, bad)
			return false
		}
		if _, touched := c.latest[string(key)]; !touched && binary.BigEndian.Uint64(v) < c.logStart {
			c.o.del(CFMeta, bytes.Clone(k))
		}
		return true
	})
	if err = firstErr(err, bad); err != nil {
		return nil, err
	}
	if n < MaxCompactionPasses {
		return nil, nil // the end: start again next time
	}
	return last, nil
}

// removeRecords replaces the records at offsets (of topic/p) by their leaf
// hashes in their runs, and returns the stored bytes that went: the
// block's Merkle tree stays.
// Offsets already removed stay as they are. Each run is rewritten once,
// for all of its offsets: a run is up to MaxRunBytes, and a block removes
// up to MaxCompactionPasses records a partition, often many of one run.
func removeRecords(s Scanner, o *overlay, topic string, p uint32, offsets []uint64) (uint64, error) {
	sorted := slices.Clone(offsets)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var freed uint64
	for len(sorted) > 0 {
		key, value, err := runHolding(s, o, topic, p, sorted[0])
		if err != nil {
			return 0, err
		}
		if value == nil {
			return freed, nil // no run at or after it: retention removed them all
		}
		first, last := runFirst(key, value), binary.BigEndian.Uint64(key[len(key)-8:])
		n := 0
		for n < len(sorted) && sorted[n] <= last {
			n++
		}
		in := slices.DeleteFunc(slices.Clone(sorted[:n]), func(o uint64) bool { return o < first })
		sorted = sorted[n:]
		if len(in) == 0 {
			continue // retention removed them: the run found is a later one
		}
		out, gone, err := removeFromRun(value, first, in)
		if err != nil {
			return 0, fmt.Errorf("remove from %s/%d offsets %d..%d: %w", topic, p, in[0], in[len(in)-1], err)
		}
		freed += gone
		o.put(CFRecords, key, out)
	}
	return freed, nil
}

// runHolding finds the stored value whose run holds offset: the first
// record key at or after it in s, its value as o has it (compaction runs
// before a block's appends, so it moves no key).
func runHolding(s Scanner, o *overlay, topic string, p uint32, offset uint64) ([]byte, []byte, error) {
	prefix := recordPrefix(topic, p)
	var key []byte
	err := s.Scan(CFRecords, recordKey(topic, p, offset), prefixEnd(prefix), func(k, _ []byte) bool {
		key = bytes.Clone(k)
		return false
	})
	if err != nil || key == nil {
		return nil, nil, err
	}
	v, err := o.Get(CFRecords, key)
	return key, v, err
}

// runFirst is the first offset of the run stored under key.
func runFirst(key, value []byte) uint64 {
	last := binary.BigEndian.Uint64(key[len(key)-8:])
	n, err := runLen(value)
	if err != nil || uint64(n) > last+1 {
		return last
	}
	return last - uint64(n-1)
}

// leafHash is a stored record's RFC 6962 leaf hash.
func leafHash(rec []byte) []byte { return stateproof.LeafHash(rec) }

// passFields is what a compaction pass reads of a stored record, decoded
// without the rest of it: a whole StoredRecord decoded per record passed
// was a sixth of the app's CPU time on a compacted topic's write load
// (docs/benchmarks.md). Field numbers are StoredRecord's.
type passFields struct {
	timestamp     int64  // timestamp_unix_nano (4)
	key           []byte // key (6), nil when absent (hasKey)
	hasKey        bool
	hasValue      bool  // value (7) present: not a tombstone
	producerID    int64 // kafka_producer_id (12)
	transactional bool  // kafka_transactional (15)
	control       bool  // kafka_control (16) present: a transaction's marker
}

// decodePassed reads a stored record's passFields. A record
// proto.Unmarshal takes reads the same here (FuzzDecodePassed); a field of
// another wire type than its own is skipped, as proto.Unmarshal keeps it
// as unknown.
func decodePassed(b []byte) (passFields, error) {
	var p passFields
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return passFields{}, fmt.Errorf("stored record: bad field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return passFields{}, fmt.Errorf("stored record: field %d: %w", num, protowire.ParseError(n))
		}
		field := b[:n]
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(field)
			switch num {
			case 4:
				p.timestamp = int64(v)
			case 12:
				p.producerID = int64(v)
			case 15:
				p.transactional = protowire.DecodeBool(v)
			}
		case typ == protowire.BytesType:
			v, _ := protowire.ConsumeBytes(field)
			switch num {
			case 6:
				p.key, p.hasKey = v, true
			case 7:
				p.hasValue = true
			case 16:
				p.control = true
			}
		}
	}
	return p, nil
}
