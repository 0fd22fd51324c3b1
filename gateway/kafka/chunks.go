package kafka

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Large records. Kafka takes a record as large as a topic's
// max.message.bytes; the chain takes one of max_record_bytes (1 MiB by
// default) in a transaction of at most 2 MiB, and no node takes a block
// past 4 MiB from the app (the gRPC cap). So the face writes a record too
// large for one chain record (past max_record_bytes) as chunk records of
// 960 KiB (less if the chain's records are smaller), each its
// own committed batch, and then the record itself, with no value and a
// manifest (byzlogv1.ChunkedValue) naming the chunks' offsets and SHA-256
// in the header "byzlog.chunks". Fetch hides the chunks (an empty batch
// spans their offsets, as a compacted Kafka log answers) and hands out the
// record with its value reassembled, from chunks that the same key signed
// and whose hashes match; otherwise the record as stored. SDK and NATS
// readers see the parts, headers saying which.
//
// A chunk of an idempotent producer's record is signed as a batch of its
// own Kafka producer stream, derived from the record's producer id, epoch,
// sequence and place, at sequence 0: a retry through any gateway signs the
// same chunk, which the chain answers with the offset it has, so the
// record's manifest, and the batch, are the same bytes too. Each chunk's
// stream is a producer state the chain keeps, one per chunk.

const (
	// chunkHeader marks a chunk record; manifestHeader holds a large
	// record's manifest. Records produced through the face may carry
	// neither.
	chunkHeader    = "byzlog.chunk"
	manifestHeader = "byzlog.chunks"
	// maxChunkBytes is the value bytes of one chunk: with its framing it
	// stays within a gateway's default 1 MiB bundle.
	maxChunkBytes = 960 << 10
	// maxChunks bounds the chunks of one record, which a reader follows:
	// 8 MiB (the face's largest decoded batch) takes 9.
	maxChunks = 64
)

var errReservedHeader = errors.New("reserved header")

// chunkSize is the value bytes of one chunk under the chain's limits.
func chunkSize(l *byzlogv1.Limits) int {
	return min(maxChunkBytes, int(l.GetMaxRecordBytes())-1<<10)
}

// recordBytes is a record's size as the chain counts it: key, value, and
// every header's key and value.
func recordBytes(r *batch.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// chunkLarge writes each of b's records that is too large for one chain
// record as chunks, committed whatever b's acks (its manifest names their
// offsets), and puts the manifest in its place. A topic with its own
// max_record_bytes keeps it, and a compacted topic takes no keyless chunks:
// their large records go to the chain as they are, and are refused there.
func (c *conn) chunkLarge(ctx context.Context, signer *wire.Signer, topic string, partition uint32, b *batch.Batch) error {
	large := false
	for i := range b.Records {
		r := &b.Records[i]
		for _, h := range r.Headers {
			if h.Key == chunkHeader || h.Key == manifestHeader {
				return fmt.Errorf("%w: record %d has header %q, which the Kafka face keeps for records larger than the chain takes", errReservedHeader, i, h.Key)
			}
		}
		large = large || recordBytes(r) > maxChunkBytes
	}
	if !large {
		return nil
	}
	topics, _, err := c.s.topics.get(ctx, false)
	if err != nil {
		return err
	}
	l, err := c.s.b.Reads.Limits(ctx)
	if err != nil {
		return err
	}
	cs := chunkSize(l)
	if cfg := topics[topic].GetConfig(); cfg.GetMaxRecordBytes() != 0 || cfg.GetCleanupPolicy() != byzlogv1.CleanupPolicy_CLEANUP_DELETE || cs < 1<<10 {
		return nil
	}
	for i := range b.Records {
		r := &b.Records[i]
		if recordBytes(r) <= int(l.MaxRecordBytes) || len(r.Value) <= cs {
			continue
		}
		m, err := c.writeChunks(ctx, signer, topic, partition, b, i, cs)
		if err != nil {
			return fmt.Errorf("record %d (%d bytes) in chunks: %w", i, recordBytes(r), err)
		}
		manifest, err := proto.Marshal(m)
		if err != nil {
			return err
		}
		r.Value = nil
		r.Headers = append(r.Headers, batch.Header{Key: manifestHeader, Value: manifest})
	}
	return nil
}

// writeChunks writes record i's value as chunks of cs bytes, all at once,
// and returns the manifest.
func (c *conn) writeChunks(ctx context.Context, signer *wire.Signer, topic string, partition uint32, b *batch.Batch, i, cs int) (*byzlogv1.ChunkedValue, error) {
	value := b.Records[i].Value
	n := (len(value) + cs - 1) / cs
	if n > maxChunks {
		return nil, fmt.Errorf("%w: %d bytes take %d chunks of %d, more than the %d a record may have", batch.ErrTooLarge, len(value), n, cs, maxChunks)
	}
	m := &byzlogv1.ChunkedValue{Size: uint64(len(value)), Chunks: make([]*byzlogv1.ChunkedValue_Chunk, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for j := range n {
		data := value[j*cs : min(len(value), (j+1)*cs)]
		sum := sha256.Sum256(data)
		m.Chunks[j] = &byzlogv1.ChunkedValue_Chunk{Size: uint32(len(data)), Sha256: sum[:]}
		wg.Go(func() {
			rec := &byzlogv1.Record{Value: data, CreateTimeUnixNano: b.Records[i].TimestampMs * 1e6, Headers: []*byzlogv1.RecordHeader{{Key: chunkHeader}}}
			var sb *byzlogv1.SignedBatch
			err := c.work(ctx, func() (err error) {
				sb, err = signer.KafkaBatch(topic, partition, chunkStream(b, i, j), 0, 0, signedCodecOf(len(data)), 0, []*byzlogv1.Record{rec})
				return err
			})
			if err == nil {
				var rc *byzlogv1.Receipt
				if rc, err = c.s.b.Log.Produce(ctx, sb, byzlogv1.Ack_ACK_COMMIT); err == nil {
					m.Chunks[j].Offset = rc.GetBaseOffset()
				}
			}
			errs[j] = err
		})
	}
	wg.Wait()
	return m, errors.Join(errs...)
}

// chunkStream is the Kafka producer id chunk j of record i of b is signed
// under: derived from b's producer, epoch, sequence and the chunk's place
// for an idempotent producer, so that every gateway derives the same, and
// random otherwise. It is never 0 and never negative.
func chunkStream(b *batch.Batch, i, j int) int64 {
	var seed []byte
	if b.ProducerID >= 0 {
		seed = fmt.Appendf(nil, "byzlog.chunk/%d/%d/%d/%d/%d", b.ProducerID, b.ProducerEpoch, b.BaseSequence, i, j)
	} else {
		seed = make([]byte, 32)
		_, _ = rand.Read(seed)
	}
	sum := sha256.Sum256(seed)
	return max(1, int64(binary.BigEndian.Uint64(sum[:])>>1))
}

// isChunk reports whether a stored record is a chunk of a large record.
func isChunk(r *byzlogv1.StoredRecord) bool {
	return len(r.Headers) == 1 && r.Headers[0].Key == chunkHeader
}

// manifestOf returns a stored record's manifest, if it has a valid one.
func manifestOf(r *byzlogv1.StoredRecord) *byzlogv1.ChunkedValue {
	if len(r.Headers) == 0 || r.Headers[len(r.Headers)-1].Key != manifestHeader || len(r.Value) != 0 {
		return nil
	}
	var m byzlogv1.ChunkedValue
	if proto.Unmarshal(r.Headers[len(r.Headers)-1].Value, &m) != nil || len(m.Chunks) == 0 || len(m.Chunks) > maxChunks {
		return nil
	}
	total := uint64(0)
	for _, ch := range m.Chunks {
		if ch.Offset >= r.Offset || len(ch.Sha256) != sha256.Size || ch.Size == 0 || ch.Size > maxChunkBytes {
			return nil
		}
		total += uint64(ch.Size)
	}
	if total != m.Size {
		return nil
	}
	return &m
}

// reassemble gives each manifest record among recs its value back, from
// chunks among recs or read by offset, each checked: a chunk record, signed
// by the record's key, with the manifest's hash. A record whose chunks do
// not check out, or are gone (retention), stays as stored. Values add up to
// at most budget bytes; the first record is reassembled regardless, as
// Fetch answers its first batch whole.
func (c *conn) reassemble(ctx context.Context, topic string, partition uint32, recs []*byzlogv1.StoredRecord, budget int) []*byzlogv1.StoredRecord {
	byOffset := make(map[uint64]*byzlogv1.StoredRecord, len(recs))
	for _, r := range recs {
		byOffset[r.Offset] = r
	}
	spent := 0
	for i, r := range recs {
		m := manifestOf(r)
		if m == nil || m.Size > uint64(c.s.cfg.Batch.MaxUncompressedBytes) {
			continue // not a manifest, or larger than any record the face writes
		}
		if spent > 0 && spent+int(m.Size) > budget {
			return recs[:i]
		}
		value, err := c.chunkValue(ctx, topic, partition, r, m, byOffset)
		if err != nil {
			c.log.Debug().Err(err).Str("topic", topic).Uint32("partition", partition).Uint64("offset", r.Offset).Msg("kafka fetch: a large record stays as stored")
			continue
		}
		whole := proto.Clone(r).(*byzlogv1.StoredRecord)
		whole.Value, whole.Headers = value, whole.Headers[:len(whole.Headers)-1]
		recs[i] = whole
		spent += len(value)
	}
	return recs
}

// chunkValue reads and checks the chunks m names for record r.
func (c *conn) chunkValue(ctx context.Context, topic string, partition uint32, r *byzlogv1.StoredRecord, m *byzlogv1.ChunkedValue, have map[uint64]*byzlogv1.StoredRecord) ([]byte, error) {
	var value []byte // grown as chunks check out, not by what m claims
	for j, ch := range m.Chunks {
		part := have[ch.Offset]
		if part == nil {
			rr, err := c.s.b.Reads.Records(ctx, &byzlogv1.RecordsRequest{Topic: topic, Partition: partition, Offset: ch.Offset, MaxBytes: 1})
			if err != nil {
				return nil, fmt.Errorf("chunk %d at offset %d: %w", j, ch.Offset, err)
			}
			got, err := decodeStored(rr.Records, ch.Offset)
			if err != nil || len(got) == 0 {
				return nil, fmt.Errorf("chunk %d at offset %d: not readable (%v)", j, ch.Offset, err)
			}
			part = got[0]
		}
		sum := sha256.Sum256(part.Value)
		switch {
		case !isChunk(part):
			return nil, fmt.Errorf("offset %d is not a chunk", ch.Offset)
		case !bytes.Equal(part.ProducerKey, r.ProducerKey):
			return nil, fmt.Errorf("chunk %d at offset %d is signed by another key", j, ch.Offset)
		case len(part.Value) != int(ch.Size) || !bytes.Equal(sum[:], ch.Sha256):
			return nil, fmt.Errorf("chunk %d at offset %d does not match the manifest's size and hash", j, ch.Offset)
		}
		value = append(value, part.Value...)
	}
	return value, nil
}
