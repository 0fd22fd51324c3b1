package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// listOffsets answers earliest (-2), latest (-1) and by timestamp: the
// first offset whose timestamp is at or after it. On a LogAppendTime topic
// that is a binary search over the partition, since block times never
// decrease. Create times may (a producer's clock, several producers), so on
// a CreateTime topic, Kafka's default, the search finds the first block
// that can hold a record stamped at or after the time (block time at least
// the time less the topic's timestamp_after_max_ms, or an hour when it has
// no bound), and reads on from there for the first such record, as Kafka's
// time index and scan do, up to maxTimeScanReads reads; past them, or for a
// record stamped more than that hour ahead of its block, the answer is the
// first record whose block time is at or after the time.
func (c *conn) listOffsets(ctx context.Context, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range r.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition = rp.Partition
			off, ts, err := c.offsetFor(ctx, rt.Topic, rp.Partition, rp.Timestamp, r.Version >= 2 && r.IsolationLevel == 1)
			if err != nil {
				p.ErrorCode = kafkaError(err).Code
				c.log.Debug().Err(err).Str("topic", rt.Topic).Int32("partition", rp.Partition).Msg("kafka list offsets failed")
			}
			p.Offset, p.Timestamp = off, ts
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// offsetFor returns the offset and timestamp ListOffsets answers; latest
// is the last stable offset for a read_committed client.
func (c *conn) offsetFor(ctx context.Context, topic string, partition int32, ts int64, readCommitted bool) (int64, int64, error) {
	if partition < 0 {
		return -1, -1, fmt.Errorf("partition %d: %w", partition, errUnknownPartition)
	}
	first, err := c.recordAt(ctx, topic, partition, 0)
	if err != nil {
		return -1, -1, err
	}
	lo, hi := first.resp.LogStartOffset, first.resp.NextOffset
	switch {
	case ts == -2:
		return int64(lo), -1, nil
	case ts == -1 && readCommitted && first.resp.LastStableOffset != nil:
		return int64(*first.resp.LastStableOffset), -1, nil
	case ts == -1:
		return int64(hi), -1, nil
	case ts < 0:
		return -1, -1, fmt.Errorf("timestamp %d: want -2 (earliest), -1 (latest) or a time in ms", ts)
	}
	if c.logAppendTime(ctx, topic) {
		return c.firstInBlocksFrom(ctx, topic, partition, lo, hi, ts, true)
	}
	slack := time.Hour.Milliseconds()
	if ti := c.topicInfo(ctx, topic); ti != nil && ti.GetConfig().GetTimestampAfterMaxMs() > 0 {
		slack = ti.GetConfig().GetTimestampAfterMaxMs()
	}
	from, _, err := c.firstInBlocksFrom(ctx, topic, partition, lo, hi, ts-slack, false)
	if err != nil {
		return -1, -1, err
	}
	if from >= 0 {
		off, at, done, err := c.scanCreateTimes(ctx, topic, partition, uint64(from), hi, ts)
		if err != nil || done {
			return off, at, err
		}
	}
	return c.firstInBlocksFrom(ctx, topic, partition, lo, hi, ts, false)
}

// maxTimeScanReads bounds the reads of one ListOffsets by create time.
const maxTimeScanReads = 16

// scanCreateTimes reads from offset on for the first record a consumer sees
// whose create time is at or after ts: done once found, or once the
// partition's end (hi) is reached without one (-1, -1 then).
func (c *conn) scanCreateTimes(ctx context.Context, topic string, partition int32, offset, hi uint64, ts int64) (int64, int64, bool, error) {
	for range maxTimeScanReads {
		if offset >= hi {
			return -1, -1, true, nil
		}
		rr, err := c.s.b.Reads.Records(ctx, &byzlogv1.RecordsRequest{Topic: topic, Partition: uint32(partition), Offset: offset, MaxBytes: wire.MaxQueryBytes})
		if err != nil {
			return -1, -1, false, err
		}
		recs, err := decodeStored(rr.Records, offset)
		if err != nil {
			return -1, -1, false, err
		}
		if len(recs) == 0 {
			return -1, -1, true, nil
		}
		for _, r := range recs {
			if !hidden(r) && r.CreateTimeUnixNano/1e6 >= ts {
				return int64(r.Offset), r.CreateTimeUnixNano / 1e6, true, nil
			}
		}
		offset = recs[len(recs)-1].Offset + 1
	}
	return -1, -1, false, nil
}

// firstInBlocksFrom is the first offset in [lo, hi) whose block time is at
// or after ts (ms), and its timestamp: the block time (logAppend) or its
// create time; -1, -1 if there is none.
func (c *conn) firstInBlocksFrom(ctx context.Context, topic string, partition int32, lo, hi uint64, ts int64, logAppend bool) (int64, int64, error) {
	var found *byzlogv1.StoredRecord
	for lo < hi {
		mid := lo + (hi-lo)/2
		at, err := c.recordAt(ctx, topic, partition, mid)
		if err != nil {
			return -1, -1, err
		}
		if at.rec == nil {
			hi = mid
			continue
		}
		if at.rec.TimestampUnixNano/1e6 >= ts {
			hi, found = mid, at.rec
		} else {
			lo = mid + 1
		}
	}
	if found == nil || found.Offset != lo {
		return -1, -1, nil // no record at or after ts: Kafka answers -1
	}
	if logAppend {
		return int64(found.Offset), found.TimestampUnixNano / 1e6, nil
	}
	return int64(found.Offset), found.CreateTimeUnixNano / 1e6, nil
}

// topicInfo is topic as the cache holds it; nil when unknown.
func (c *conn) topicInfo(ctx context.Context, topic string) *byzlogv1.TopicInfo {
	topics, _, err := c.s.topics.get(ctx, false)
	if err != nil {
		return nil
	}
	return topics[topic]
}

// logAppendTime reports whether topic's timestamps are its blocks' times.
func (c *conn) logAppendTime(ctx context.Context, topic string) bool {
	return c.topicInfo(ctx, topic).GetConfig().GetTimestampType() == byzlogv1.TimestampType_TIMESTAMP_LOG_APPEND_TIME
}

type recordAt struct {
	resp *byzlogv1.RecordsResponse
	rec  *byzlogv1.StoredRecord // nil past the end
}

// recordAt reads the record at offset (offset 0 reads the bounds: a
// partition whose log starts later answers OFFSET_OUT_OF_RANGE, so it is
// asked again at its start, from the topic as the chain holds it now: a
// DeleteRecords moves the start at once).
func (c *conn) recordAt(ctx context.Context, topic string, partition int32, offset uint64) (recordAt, error) {
	req := &byzlogv1.RecordsRequest{Topic: topic, Partition: uint32(partition), Offset: offset, MaxRecords: 1}
	rr, err := c.s.b.Reads.Records(ctx, req)
	for try := 0; err != nil && offset == 0 && kafkaError(err) == kerr.OffsetOutOfRange && try < 2; try++ {
		// Below the log start: read the bounds from the topic instead,
		// the cache's first, then the chain's.
		if try == 1 {
			c.s.topics.expire()
			if _, _, terr := c.s.topics.get(ctx, true); terr != nil {
				return recordAt{}, terr
			}
		}
		info, ierr := c.partitionInfo(ctx, topic, partition)
		if ierr != nil {
			return recordAt{}, ierr
		}
		req.Offset = info.LogStartOffset
		rr, err = c.s.b.Reads.Records(ctx, req)
	}
	if err != nil {
		return recordAt{}, err
	}
	at := recordAt{resp: rr}
	if len(rr.Records) > 0 {
		at.rec = &byzlogv1.StoredRecord{}
		if err := proto.Unmarshal(rr.Records[0], at.rec); err != nil {
			return recordAt{}, fmt.Errorf("stored record at offset %d: %w", offset, err)
		}
	}
	return at, nil
}

func (c *conn) partitionInfo(ctx context.Context, topic string, partition int32) (*byzlogv1.PartitionInfo, error) {
	topics, _, err := c.s.topics.get(ctx, false)
	if err != nil {
		return nil, err
	}
	if ti := topics[topic]; ti != nil {
		for _, p := range ti.Partitions {
			if int32(p.Partition) == partition {
				return p, nil
			}
		}
	}
	return nil, fmt.Errorf("topic %s partition %d: %w", topic, partition, errUnknownPartition)
}
