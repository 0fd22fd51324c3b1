package publish

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/reconcile"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Streams of compacted topics. The stream of a topic whose config is
// compacted when the indexer makes it is a table (layout.FormatKey): each
// record on its key's subject, one record a message, MaxMsgsPerSubject 1,
// so JetStream keeps each key's latest record, as the chain's compaction
// does, and a plain NATS client reads a key with one get. Exactly once
// holds as for every stream: each message expects the stream's last
// sequence, which removals do not move back, so two indexers, or one
// replaying, store each record once and in offset order, and an older
// value never follows a newer one on a key's subject.
//
// What the stream holds of a partition then has holes (older values of
// keys), so what is read back is checked against the records it still
// holds (keyedRecordsIn). Tombstones stay for the topic's
// delete_retention_ms, by NATS's clock (Nats-TTL, counted from when
// JetStream stored them), not the block's. Records without a key,
// transaction markers and aborted places carry nothing a table keeps: they
// are not published (notInTable).
//
// A stream keeps the format it was made with: a topic made compacted later
// keeps a stream of every record, and one made delete later keeps its
// table. To re-make a stream in the other format, stop every indexer,
// delete the stream (nats stream rm) and the indexers' cursors, and start
// them from the chain's first height: the stream is made again as the
// topic's config now says, and filled from the blocks.

// compacted reports whether a topic of config c is compacted (nil: not
// known, so not).
func compacted(c *byzlogv1.TopicConfig) bool {
	switch c.GetCleanupPolicy() {
	case byzlogv1.CleanupPolicy_CLEANUP_COMPACT, byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE:
		return true
	}
	return false
}

// tombstoneTTL is how long a keyed stream keeps a tombstone of a topic of
// config c, in seconds: its delete_retention_ms rounded up, at least the
// second JetStream takes at least.
func tombstoneTTL(c *byzlogv1.TopicConfig) int64 {
	ms := wire.DeleteRetentionMs(c)
	return max(1, ms/1000+min(1, ms%1000))
}

// notInTable reports whether a keyed stream leaves r out: a record without
// a key (written before the topic was compacted; the chain removes it when
// compaction passes it), or a placeholder (a transaction's marker, an
// aborted record's place).
func notInTable(r *byzlogv1.StoredRecord) bool { return r.Key == nil || layout.Placeholder(r) }

// keyMessage is r as a message of the keyed stream: on its key's subject,
// and, a tombstone, with the stream's TTL for tombstones.
func (p *Publisher) keyMessage(stream string, r *byzlogv1.StoredRecord) *nats.Msg {
	msg := p.enc.KeyMessage(r)
	if r.Value == nil {
		msg.Header.Set(jetstream.MsgTTLHeader, strconv.FormatInt(p.ttls[stream], 10))
	}
	return msg
}

// keyedRecordsIn is recordsIn for a keyed stream: the offset after the
// last record of part's partition it holds (the latest of its key, which
// the stream keeps unless it is a tombstone whose TTL passed). A record it
// holds of part's must be the chain's; past them (ahead), the first of
// part's records it still holds, if any, must be.
func keyedRecordsIn(ctx context.Context, st jetstream.Stream, part core.AppendedPartition) (next uint64, ahead bool, err error) {
	root := part.Root
	filter := layout.KeyPartitionSubjects(root.Topic, root.Partition)
	last, r, err := reconcile.LastRecord(ctx, st, filter)
	if err != nil || r == nil {
		return 0, false, err
	}
	end := root.FirstOffset + uint64(len(part.Records))
	switch {
	case r.Offset < root.FirstOffset:
		return r.Offset + 1, false, nil
	case r.Offset < end:
		return r.Offset + 1, false, chainHas(st, part, last.Sequence, r)
	}
	m, err := firstAtLeast(ctx, st, filter, lastOffset, root.FirstOffset, last)
	if err != nil {
		return 0, false, err
	}
	rs, err := reconcile.StreamRecords(m, filter)
	if err != nil {
		return 0, false, reconcile.Foreign(st.CachedInfo().Config.Name, m.Subject, m.Sequence, err.Error())
	}
	if rs[0].Offset < end {
		err = chainHas(st, part, m.Sequence, rs[0])
	}
	return end, true, err
}

// chainHas checks that r, read from st at seq, is part's record at its
// offset.
func chainHas(st jetstream.Stream, part core.AppendedPartition, seq uint64, r *byzlogv1.StoredRecord) error {
	want := part.Records[r.Offset-part.Root.FirstOffset]
	if layout.SamePublished(r, want) {
		return nil
	}
	return reconcile.Foreign(st.CachedInfo().Config.Name, layout.KeySubject(r.Topic, r.Partition, r.Key), seq,
		fmt.Sprintf("a record at offset %d (height %d) that is not the one the chain committed at that offset (height %d)", r.Offset, r.Height, want.Height))
}
