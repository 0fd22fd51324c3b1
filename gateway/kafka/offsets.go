package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// listOffsets answers earliest (-2), latest (-1) and by timestamp: the
// first offset whose log-append (block) time is at or after it, found by
// binary search over the partition, since block times never decrease.
func (c *conn) listOffsets(ctx context.Context, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range r.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition = rp.Partition
			off, ts, err := c.offsetFor(ctx, rt.Topic, rp.Partition, rp.Timestamp)
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

// offsetFor returns the offset and timestamp ListOffsets answers.
func (c *conn) offsetFor(ctx context.Context, topic string, partition int32, ts int64) (int64, int64, error) {
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
	case ts == -1:
		return int64(hi), -1, nil
	case ts < 0:
		return -1, -1, fmt.Errorf("timestamp %d: want -2 (earliest), -1 (latest) or a time in ms", ts)
	}
	// The first offset in [lo, hi) with time >= ts; hi if none.
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
	return int64(found.Offset), found.TimestampUnixNano / 1e6, nil
}

type recordAt struct {
	resp *byzlogv1.RecordsResponse
	rec  *byzlogv1.StoredRecord // nil past the end
}

// recordAt reads the record at offset (offset 0 reads the bounds: a
// partition whose log starts later answers OFFSET_OUT_OF_RANGE, so it is
// asked again at its start).
func (c *conn) recordAt(ctx context.Context, topic string, partition int32, offset uint64) (recordAt, error) {
	req := &byzlogv1.RecordsRequest{Topic: topic, Partition: uint32(partition), Offset: offset, MaxRecords: 1}
	rr, err := c.s.b.Reads.Records(ctx, req)
	if err != nil && offset == 0 && kafkaError(err) == kerr.OffsetOutOfRange {
		// Below the log start: read the bounds from the topic instead.
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
