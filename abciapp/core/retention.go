package core

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// MaxRetentionDeletes bounds how many records retention deletes from one
// partition in one block, so lowering a topic's retention on a large log
// spreads the work over blocks instead of stalling one.
const MaxRetentionDeletes = 10000

// retain applies every topic's retention at the start of a block, from the
// block time: records whose log-append time is older than retention_ms, the
// oldest records of a partition larger than retention_bytes, and those
// below a partition's delete_below (DeleteRecords) are deleted with one
// range delete per partition, and its log start offset moves up. It reads
// committed state only: records appended in this block are never older
// than the block itself. A topic compacted only (rules CompactRulesVersion
// on) keeps its records from retention; DeleteRecords still removes them.
func retain(s Scanner, o *overlay, topics []*byzlogv1.TopicState, blockTime int64, rules uint64) error {
	done := map[string]bool{}
	for _, t := range topics {
		if !Retains(t.Config, rules) || (t.Config.GetRetentionMs() <= 0 && t.Config.GetRetentionBytes() <= 0) {
			continue
		}
		done[t.Name] = true
		for p := uint32(0); p < t.Config.Partitions; p++ {
			if err := retainPartition(s, o, t, p, blockTime); err != nil {
				return fmt.Errorf("retention of %s/%d: %w", t.Name, p, err)
			}
		}
	}
	return purge(s, o, done, blockTime, rules)
}

// purge removes what DeleteRecords deleted from the partitions of topics
// without retention (done lists the others, whose retention did it).
func purge(s Scanner, o *overlay, done map[string]bool, blockTime int64, rules uint64) error {
	type part struct {
		topic string
		p     uint32
	}
	var parts []part
	var bad error
	err := s.Scan(CFMeta, prefixPurge, prefixEnd(prefixPurge), func(k, _ []byte) bool {
		rest := k[len(prefixPurge):]
		if len(rest) < 5 || rest[len(rest)-5] != 0 {
			bad = fmt.Errorf("purge key %x is malformed", k)
			return false
		}
		parts = append(parts, part{string(rest[:len(rest)-5]), binary.BigEndian.Uint32(rest[len(rest)-4:])})
		return true
	})
	if err = firstErr(err, bad); err != nil {
		return fmt.Errorf("retention: list partitions to purge: %w", err)
	}
	for _, pt := range parts {
		if done[pt.topic] {
			continue
		}
		t, err := loadTopic(s, pt.topic)
		if err != nil {
			return err
		}
		if t == nil || pt.p >= t.Config.Partitions {
			o.del(CFMeta, purgeKey(pt.topic, pt.p)) // deleted with its topic
			continue
		}
		if !Retains(t.Config, rules) {
			// DeleteRecords alone: the topic's retention settings stay off.
			t = proto.Clone(t).(*byzlogv1.TopicState)
			t.Config.RetentionMs, t.Config.RetentionBytes = 0, 0
		}
		if err := retainPartition(s, o, t, pt.p, blockTime); err != nil {
			return fmt.Errorf("retention of %s/%d: %w", pt.topic, pt.p, err)
		}
	}
	return nil
}

func retainPartition(s Scanner, o *overlay, t *byzlogv1.TopicState, p uint32, blockTime int64) error {
	pk := partitionKey(t.Name, p)
	var ps byzlogv1.PartitionState
	if _, err := getProto(s, CFMeta, pk, &ps); err != nil {
		return err
	}
	if ps.DeleteBelow != 0 && ps.DeleteBelow <= ps.LogStartOffset {
		// DeleteRecords' records are gone.
		ps.DeleteBelow = 0
		o.put(CFMeta, pk, marshal(&ps))
		o.del(CFMeta, purgeKey(t.Name, p))
		return nil
	}
	if ps.LogStartOffset == ps.NextOffset {
		return nil
	}
	limit := ps.NextOffset
	if limit-ps.LogStartOffset > MaxRetentionDeletes {
		limit = ps.LogStartOffset + MaxRetentionDeletes
	}
	cutoff := int64(-1 << 63)
	if ms := t.Config.RetentionMs; ms > 0 {
		cutoff = blockTime - ms*1_000_000
	}
	// Walk from the oldest record: delete while it is too old or the
	// partition is still over its byte budget. Timestamps never decrease
	// along the log, so the walk stops at the first record to keep.
	newStart, size := ps.LogStartOffset, ps.SizeBytes
	reach := limit // every record the walk saw below it is deleted
	var decodeErr error
	// Offset by offset, however the records are stored (one a key or in
	// runs): what retention deletes is a rule, the same on every layout.
	err := scanRecords(s, t.Name, p, ps.LogStartOffset, func(offset uint64, v []byte) bool {
		if offset >= limit {
			return false
		}
		overBytes := t.Config.RetentionBytes > 0 && size > uint64(t.Config.RetentionBytes)
		var r byzlogv1.StoredRecord
		if decodeErr = proto.Unmarshal(v, &r); decodeErr != nil {
			return false
		}
		if r.TimestampUnixNano >= cutoff && !overBytes && offset >= ps.DeleteBelow {
			reach = offset
			return false
		}
		newStart = offset + 1
		size -= uint64(len(v))
		return true
	})
	if err = firstErr(err, decodeErr); err != nil {
		return err
	}
	// Holes compaction left below DeleteRecords' offset (the walk only
	// meets records) are passed too, so DeleteRecords completes; without
	// holes newStart is already there.
	if ps.DeleteBelow > newStart {
		newStart = max(newStart, min(ps.DeleteBelow, reach))
	}
	if newStart == ps.LogStartOffset {
		return nil
	}
	o.deleteRange(CFRecords, recordKey(t.Name, p, ps.LogStartOffset), recordKey(t.Name, p, newStart))
	ps.LogStartOffset, ps.SizeBytes = newStart, size
	o.put(CFMeta, pk, marshal(&ps))
	// Kafka transactions' aborted ranges wholly below the new start are
	// no reader's business any more (there are none before rules
	// version 8).
	return dropAborted(s, o, t.Name, p, newStart)
}
