package kafka

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
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
// consumer reads. Records are re-encoded as v2 batches, one per producer
// batch, as the topic serves them (serving): each with its producer's codec
// and the producer's create times unless the topic's compression_type and
// timestamp_type say otherwise. A fetch's first batch is whole, however
// large (as Kafka answers it). Fetch sessions: fetchsession.go.

// fetch answers a Fetch of the connection's fetch session, if it names
// one, as fetchWaiting does.
func (c *conn) fetch(ctx context.Context, req *kmsg.FetchRequest) kmsg.Response {
	topics, session, code := c.fetchSessionFor(req)
	if code != nil {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = code.Code
		return resp
	}
	r := *req // the session's partitions, not only those the request names
	r.Topics = topics
	resp := c.fetchWaiting(ctx, &r)
	if session != nil {
		c.trim(session, resp, req.SessionID != 0 && req.SessionEpoch > 0)
	}
	return resp
}

// fetchWaiting answers once MinBytes are ready or MaxWait (capped by
// MaxFetchWait) has passed, looking again as new blocks commit.
func (c *conn) fetchWaiting(ctx context.Context, r *kmsg.FetchRequest) *kmsg.FetchResponse {
	wait := min(time.Duration(r.MaxWaitMillis)*time.Millisecond, c.s.cfg.MaxFetchWait)
	deadline := time.Now().Add(wait)
	maxBytes := int(c.s.cfg.MaxRequestBytes)
	if r.Version >= 3 && r.MaxBytes > 0 {
		maxBytes = min(maxBytes, int(r.MaxBytes))
	}
	for {
		height := c.s.b.Reads.Height()
		resp, size := c.fetchOnce(ctx, r, maxBytes)
		if size >= int(r.MinBytes) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return resp
		}
		// Nothing new until another block commits.
		for c.s.b.Reads.Height() == height && time.Now().Before(deadline) {
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
				c.fetchPartition(ctx, r, rt.Topic, rp, room, &p)
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

func (c *conn) fetchPartition(ctx context.Context, r *kmsg.FetchRequest, topic string, rp kmsg.FetchRequestTopicPartition, room int, out *kmsg.FetchResponseTopicPartition) {
	out.HighWatermark, out.LastStableOffset, out.LogStartOffset = -1, -1, -1
	if rp.Partition < 0 || rp.FetchOffset < 0 {
		out.ErrorCode = kerr.OffsetOutOfRange.Code
		return
	}
	readCommitted := r.Version >= 4 && r.IsolationLevel == 1
	rr, err := c.s.b.Reads.Records(ctx, &byzlogv1.RecordsRequest{Topic: topic, Partition: uint32(rp.Partition), Offset: uint64(rp.FetchOffset), MaxBytes: uint32(room), Aborted: readCommitted})
	if err != nil {
		out.ErrorCode = kafkaError(err).Code
		if out.ErrorCode == kerr.InvalidRecord.Code {
			out.ErrorCode = kerr.UnknownServerError.Code
		}
		c.log.Debug().Err(err).Str("topic", topic).Int32("partition", rp.Partition).Msg("kafka fetch failed")
		return
	}
	lso := rr.NextOffset
	if rr.LastStableOffset != nil {
		lso = *rr.LastStableOffset
	}
	out.HighWatermark, out.LastStableOffset, out.LogStartOffset = int64(rr.NextOffset), int64(lso), int64(rr.LogStartOffset)
	recs, err := decodeStored(rr.Records, uint64(rp.FetchOffset))
	cut := false // reassembling large records left some out
	if err == nil {
		recs, err = c.wholeFirstBatch(ctx, topic, uint32(rp.Partition), recs, rr.NextOffset)
	}
	if err == nil {
		n := len(recs)
		recs = c.reassemble(ctx, topic, uint32(rp.Partition), recs, room)
		cut = len(recs) < n
	}
	if err != nil {
		out.ErrorCode = kerr.UnknownServerError.Code
		c.log.Error().Err(err).Str("topic", topic).Int32("partition", rp.Partition).Msg("kafka fetch: agreed records do not decode")
		return
	}
	if readCommitted {
		// Nothing at or past the last stable offset: an open transaction's
		// records, and whatever follows them. Of the rest, the client
		// skips the aborted transactions' records (Kafka's list).
		for len(recs) > 0 && recs[len(recs)-1].Offset >= lso {
			recs = recs[:len(recs)-1]
		}
		for _, a := range rr.Aborted {
			if a.FirstOffset < lso {
				out.AbortedTransactions = append(out.AbortedTransactions, kmsg.FetchResponseTopicPartitionAbortedTransaction{ProducerID: a.ProducerId, FirstOffset: int64(a.FirstOffset)})
			}
		}
		slices.SortFunc(out.AbortedTransactions, func(a, b kmsg.FetchResponseTopicPartitionAbortedTransaction) int {
			return cmp.Compare(a.FirstOffset, b.FirstOffset)
		})
	}
	// The holes compaction left before, between and after the records
	// are served as empty batches, so a consumer moves past them: up to
	// where the read went (below the last stable offset for
	// read_committed), unless the records were cut short.
	to := uint64(rp.FetchOffset)
	if len(recs) > 0 {
		to = recs[len(recs)-1].Offset + 1
	}
	readTo := rr.ReadTo
	if readCommitted {
		readTo = min(readTo, lso)
	}
	if !cut && readTo > to {
		to = readTo
	}
	if b := encodeRecords(recs, c.serving(ctx, topic, r.Version), uint64(rp.FetchOffset), to); b != nil {
		out.RecordBatches = b
	}
}

// maxBatchReads bounds the reads that complete a fetch's first batch: a
// batch is at most max_batch_bytes (4 MiB by default) and a read answers up
// to wire.MaxQueryBytes, so two or three do.
const maxBatchReads = 8

// wholeFirstBatch reads on past recs while they hold only chunks of large
// records or their first batch continues, so that a fetch answers its
// first producer batch whole even past the fetch's byte bounds, as Kafka
// does: a consumer's bounds on a batch (as franz-go's
// MaxDecompressBatchBytes) then see the batch that was produced. A read
// that fails leaves the batch split; the rest comes with the next fetch.
func (c *conn) wholeFirstBatch(ctx context.Context, topic string, partition uint32, recs []*byzlogv1.StoredRecord, end uint64) ([]*byzlogv1.StoredRecord, error) {
	for range maxBatchReads {
		if len(recs) == 0 {
			return recs, nil
		}
		first := firstVisible(recs)
		last := recs[len(recs)-1]
		if last.Offset+1 >= end || (first != nil && !sameBatch(first, last)) {
			return recs, nil
		}
		rr, err := c.s.b.Reads.Records(ctx, &byzlogv1.RecordsRequest{Topic: topic, Partition: partition, Offset: last.Offset + 1, MaxBytes: wire.MaxQueryBytes})
		if err != nil {
			c.log.Debug().Err(err).Str("topic", topic).Uint32("partition", partition).Msg("kafka fetch: reading the rest of a batch failed")
			return recs, nil
		}
		more, err := decodeStored(rr.Records, last.Offset+1)
		if err != nil {
			return nil, err
		}
		if len(more) == 0 {
			return recs, nil
		}
		for _, r := range more {
			if first != nil && !sameBatch(first, r) {
				return recs, nil
			}
			recs = append(recs, r)
		}
		end = rr.NextOffset
	}
	return recs, nil
}

// firstVisible is the first of recs a Kafka consumer sees (not hidden).
func firstVisible(recs []*byzlogv1.StoredRecord) *byzlogv1.StoredRecord {
	for _, r := range recs {
		if !hidden(r) {
			return r
		}
	}
	return nil
}

// hidden reports whether a stored record is none a Kafka consumer reads:
// a chunk of a large record (served as an empty batch over its offsets) or
// a transaction's marker (a control batch).
func hidden(r *byzlogv1.StoredRecord) bool {
	return isChunk(r) || r.KafkaControl != nil
}

// sameBatch reports whether two stored records came in one signed batch:
// one block, one producer key and one sequence (and Kafka producer id and
// epoch, under which sequences are Kafka's).
func sameBatch(a, b *byzlogv1.StoredRecord) bool {
	return a.Height == b.Height && a.Sequence == b.Sequence && a.KafkaProducerId == b.KafkaProducerId &&
		a.KafkaEpoch == b.KafkaEpoch && bytes.Equal(a.ProducerKey, b.ProducerKey)
}

// decodeStored decodes the records a query answered from offset on, in
// offset order: each at the next offset, or past holes compaction left.
func decodeStored(stored [][]byte, offset uint64) ([]*byzlogv1.StoredRecord, error) {
	out := make([]*byzlogv1.StoredRecord, len(stored))
	for i, b := range stored {
		sr := &byzlogv1.StoredRecord{}
		if err := proto.Unmarshal(b, sr); err != nil {
			return nil, fmt.Errorf("stored record at offset %d or after: %w", offset, err)
		}
		if sr.Offset < offset {
			return nil, fmt.Errorf("stored record has offset %d, want %d or after", sr.Offset, offset)
		}
		out[i] = sr
		offset = sr.Offset + 1
	}
	return out, nil
}

// serving is how a topic's batches are served: compression.type and
// message.timestamp.type as Kafka's, for one Fetch version.
type serving struct {
	// compression is the topic's compression_type: "" and "producer" serve
	// each batch with its producer's codec.
	compression string
	logAppend   bool
	// zstd: the Fetch version carries zstd (v10 on, as Kafka's).
	zstd bool
}

// serving is how topic's batches are served to a Fetch of version v.
func (c *conn) serving(ctx context.Context, topic string, v int16) serving {
	cfg := c.topicInfo(ctx, topic).GetConfig()
	return serving{zstd: v >= 10, compression: cfg.GetCompressionType(),
		logAppend: cfg.GetTimestampType() == byzlogv1.TimestampType_TIMESTAMP_LOG_APPEND_TIME}
}

// codecs names Kafka's codecs as compression.type does.
var codecs = map[string]batch.Codec{"uncompressed": batch.CodecNone, "gzip": batch.CodecGzip, "snappy": batch.CodecSnappy, "lz4": batch.CodecLz4, "zstd": batch.CodecZstd}

// codec is how a batch its producer compressed with stored (0 for the
// SDK's records) is served: as the topic's compression.type says, else as
// produced. A consumer's Fetch before v10 cannot carry zstd: it gets the
// batch uncompressed, where Kafka would refuse it
// (UNSUPPORTED_COMPRESSION_TYPE).
func (s serving) codec(stored uint32) batch.Codec {
	c, ok := codecs[s.compression]
	if !ok {
		c = batch.Codec(min(stored, uint32(batch.CodecZstd)))
	}
	if c == batch.CodecZstd && !s.zstd {
		return batch.CodecNone
	}
	return c
}

// encodeRecords re-encodes stored records as v2 batches, one per producer
// batch, each compressed and timed as s says (a transaction's under its
// producer id and epoch, marked transactional); each run of chunk records
// becomes an empty batch that spans their offsets, and each transaction
// marker a control batch.
func encodeRecords(recs []*byzlogv1.StoredRecord, s serving, from, to uint64) []byte {
	var out []byte
	var run []batch.Record
	gap := -1
	next := from // the offset after what out spans
	for i, sr := range recs {
		ms := sr.TimestampUnixNano / 1e6
		if sr.Offset > next {
			out = batch.EncodeGap(out, int64(next), int32(min(sr.Offset-next, math.MaxInt32)), ms)
		}
		next = sr.Offset + 1
		if c := sr.KafkaControl; c != nil {
			out = batch.EncodeControl(out, int64(sr.Offset), sr.KafkaProducerId, int16(sr.KafkaEpoch), c.Commit, ms)
			continue
		}
		if isChunk(sr) {
			if gap < 0 {
				gap = i
			}
			if i+1 == len(recs) || !isChunk(recs[i+1]) || recs[i+1].Offset != sr.Offset+1 {
				out = batch.EncodeGap(out, int64(recs[gap].Offset), int32(sr.Offset+1-recs[gap].Offset), ms)
				gap = -1
			}
			continue
		}
		rec := batch.Record{Key: sr.Key, Value: sr.Value, TimestampMs: sr.CreateTimeUnixNano / 1e6}
		for _, h := range sr.Headers {
			rec.Headers = append(rec.Headers, batch.Header{Key: h.Key, Value: h.Value})
		}
		run = append(run, rec)
		if i+1 < len(recs) && !hidden(recs[i+1]) && sameBatch(sr, recs[i+1]) && recs[i+1].Offset == next {
			continue
		}
		e := batch.Encoding{Codec: s.codec(sr.KafkaCodec)}
		if sr.KafkaTransactional {
			e.Transactional, e.ProducerID, e.ProducerEpoch = true, sr.KafkaProducerId, int16(sr.KafkaEpoch)
		}
		if s.logAppend {
			e.LogAppendMs = ms
		}
		out = batch.EncodeAs(out, int64(recs[i+1-len(run)].Offset), run, e)
		run = run[:0]
	}
	if to > next {
		ms := int64(-1)
		if len(recs) > 0 {
			ms = recs[len(recs)-1].TimestampUnixNano / 1e6
		}
		out = batch.EncodeGap(out, int64(next), int32(min(to-next, math.MaxInt32)), ms)
	}
	return out
}
