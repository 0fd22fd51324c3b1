package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Fetch reads from the chain: each partition's records come from the
// validators' "/records" query as f+1 of them answer it byte for byte, so
// no single node, and not the indexer or NATS, decides what a Kafka
// consumer reads. Records are re-encoded as v2 batches, one per block, with
// the block time as log-append time. Fetch sessions are not kept (the
// session id answered is 0, so clients send full fetches).

// fetch answers once MinBytes are ready or MaxWait (capped by
// MaxFetchWait) has passed, looking again as new blocks commit.
func (c *conn) fetch(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	wait := min(time.Duration(r.MaxWaitMillis)*time.Millisecond, c.s.cfg.MaxFetchWait)
	deadline := time.Now().Add(wait)
	maxBytes := int(c.s.cfg.MaxRequestBytes)
	if r.Version >= 3 && r.MaxBytes > 0 {
		maxBytes = min(maxBytes, int(r.MaxBytes))
	}
	for {
		height := c.s.b.Height()
		resp, size := c.fetchOnce(ctx, r, maxBytes)
		if size >= int(r.MinBytes) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return resp
		}
		// Nothing new until another block commits.
		for c.s.b.Height() == height && time.Now().Before(deadline) {
			select {
			case <-time.After(c.s.cfg.FetchPoll):
			case <-ctx.Done():
				return resp
			}
		}
	}
}

func (c *conn) fetchOnce(ctx context.Context, r *kmsg.FetchRequest, maxBytes int) (*kmsg.FetchResponse, int) {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	size := 0
	for _, rt := range r.Topics {
		t := kmsg.NewFetchResponseTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			p := kmsg.NewFetchResponseTopicPartition()
			p.Partition = rp.Partition
			p.RecordBatches = []byte{} // empty, not null: librdkafka refuses a null record set
			room := min(int(rp.PartitionMaxBytes), maxBytes-size, wire.MaxQueryBytes)
			// The first partition with data answers at least one block's
			// records even past the bounds, as Kafka does.
			if size == 0 && room <= 0 {
				room = 1
			}
			if room > 0 {
				c.fetchPartition(ctx, rt.Topic, rp, room, &p)
				size += len(p.RecordBatches)
			} else {
				p.HighWatermark, p.LastStableOffset, p.LogStartOffset = -1, -1, -1
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp, size
}

func (c *conn) fetchPartition(ctx context.Context, topic string, rp kmsg.FetchRequestTopicPartition, room int, out *kmsg.FetchResponseTopicPartition) {
	out.HighWatermark, out.LastStableOffset, out.LogStartOffset = -1, -1, -1
	if rp.Partition < 0 || rp.FetchOffset < 0 {
		out.ErrorCode = kerr.OffsetOutOfRange.Code
		return
	}
	rr, err := c.s.b.Records(ctx, &byzlogv1.RecordsRequest{Topic: topic, Partition: uint32(rp.Partition), Offset: uint64(rp.FetchOffset), MaxBytes: uint32(room)})
	if err != nil {
		out.ErrorCode = kafkaError(err).Code
		if out.ErrorCode == kerr.InvalidRecord.Code {
			out.ErrorCode = kerr.UnknownServerError.Code
		}
		c.log.Debug().Err(err).Str("topic", topic).Int32("partition", rp.Partition).Msg("kafka fetch failed")
		return
	}
	out.HighWatermark, out.LastStableOffset, out.LogStartOffset = int64(rr.NextOffset), int64(rr.NextOffset), int64(rr.LogStartOffset)
	b, err := encodeRecords(rr.Records, uint64(rp.FetchOffset))
	if err != nil {
		out.ErrorCode = kerr.UnknownServerError.Code
		c.log.Error().Err(err).Str("topic", topic).Int32("partition", rp.Partition).Msg("kafka fetch: agreed records do not decode")
		return
	}
	if b != nil {
		out.RecordBatches = b
	}
}

// compressFetchFrom is the size of a batch's records (keys, values and
// headers) from which
// Fetch sends it lz4-compressed. Kafka hands consumers the batches as
// producers compressed them, and Kafka's producers compress by default;
// the face re-encodes batches from the chain, so it compresses them itself
// (lz4: fast, and read by every client and Fetch version).
const compressFetchFrom = 256

// encodeRecords re-encodes stored records as v2 batches, one per run of
// consecutive offsets with one block time (lz4 from compressFetchFrom
// bytes). The first must be at offset.
func encodeRecords(stored [][]byte, offset uint64) ([]byte, error) {
	var out []byte
	var run []batch.Record
	var runBase uint64
	var runTime int64
	runBytes := 0
	flush := func() {
		if len(run) > 0 {
			codec := batch.CodecNone
			if runBytes >= compressFetchFrom {
				codec = batch.CodecLz4
			}
			out = batch.EncodeWith(out, int64(runBase), runTime, run, codec)
			runBytes = 0
			run = run[:0]
		}
	}
	next := offset
	for _, b := range stored {
		var sr byzlogv1.StoredRecord
		if err := proto.Unmarshal(b, &sr); err != nil {
			return nil, fmt.Errorf("stored record at offset %d: %w", next, err)
		}
		if sr.Offset != next {
			return nil, fmt.Errorf("stored record has offset %d, want %d", sr.Offset, next)
		}
		ms := sr.TimestampUnixNano / 1e6
		if len(run) > 0 && ms != runTime {
			flush()
		}
		if len(run) == 0 {
			runBase, runTime = sr.Offset, ms
		}
		rec := batch.Record{Key: sr.Key, Value: sr.Value, TimestampMs: ms}
		for _, h := range sr.Headers {
			rec.Headers = append(rec.Headers, batch.Header{Key: h.Key, Value: h.Value})
		}
		run = append(run, rec)
		runBytes += len(sr.Key) + len(sr.Value)
		for _, h := range sr.Headers {
			runBytes += len(h.Key) + len(h.Value)
		}
		next++
	}
	flush()
	return out, nil
}
