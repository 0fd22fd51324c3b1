package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The kinds of decoding error, for errors.Is; each maps to a Kafka error
// code (CORRUPT_MESSAGE, UNSUPPORTED_FOR_MESSAGE_FORMAT, MESSAGE_TOO_LARGE,
// INVALID_RECORD).
var (
	ErrCorrupt          = errors.New("corrupt record batch")
	ErrUnsupportedMagic = errors.New("unsupported message format")
	ErrTooLarge         = errors.New("record batch too large")
	ErrInvalidRecord    = errors.New("invalid record")
)

// Limits bound what one batch may cost to decode.
type Limits struct {
	MaxRecords int // records in one batch
	MaxHeaders int // headers on one record
	// MaxUncompressedBytes bounds a batch's records after decompression,
	// and what they take decoded: each header is charged HeaderCost more
	// (an empty header is 2 bytes encoded), so headers are bounded by
	// bytes, not only by their count.
	MaxUncompressedBytes int
	MaxCompressionRatio  int // uncompressed bytes per compressed byte
}

// HeaderCost is what a decoded header costs beyond its key and value
// bytes: a Header (a string and a slice header), charged against a batch's
// MaxUncompressedBytes.
const HeaderCost = 40

// DefaultLimits are the defaults: 10,000 records, 10,000 headers a
// record (the chain's default max_headers), 8 MiB and a ratio of 256 (the
// chain's own bound, wire.MaxCompressionRatio).
func DefaultLimits() Limits {
	return Limits{MaxRecords: 10000, MaxHeaders: 10_000, MaxUncompressedBytes: 8 << 20, MaxCompressionRatio: 256}
}

// Codec is a batch's compression.
type Codec int8

// The codecs, as attribute bits 0-2 number them.
const (
	CodecNone Codec = iota
	CodecGzip
	CodecSnappy
	CodecLz4
	CodecZstd
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLz4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec %d", int8(c))
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record; a nil Key or Value is Kafka's null, distinct from
// an empty one.
type Record struct {
	OffsetDelta int32
	TimestampMs int64 // absolute: the batch's first timestamp plus the delta
	Key, Value  []byte
	Headers     []Header
}

// Batch is one decoded record batch.
type Batch struct {
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	// Transactional: the batch is its producer's open transaction's
	// (attribute bit 4).
	Transactional                bool
	Codec                        Codec
	FirstTimestamp, MaxTimestamp int64
	Records                      []Record
}

// batchHeaderLen is the bytes of a v2 batch before its records; Length
// counts from PartitionLeaderEpoch on, 12 bytes in.
const (
	batchHeaderLen = 61
	lengthStart    = 12
	crcEnd         = 21 // attributes start here
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Decode reads one or more concatenated record batches.
func Decode(b []byte, lim Limits) ([]Batch, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: no record batch", ErrCorrupt)
	}
	var out []Batch
	for i := 0; len(b) > 0; i++ {
		if len(b) < batchHeaderLen {
			if len(b) >= 17 && b[16] != 2 {
				return nil, fmt.Errorf("%w: batch %d has magic %d; only record batches v2 (Kafka 0.11+) are taken", ErrUnsupportedMagic, i, int8(b[16]))
			}
			return nil, fmt.Errorf("%w: batch %d: %d bytes left, a batch header is %d", ErrCorrupt, i, len(b), batchHeaderLen)
		}
		if magic := int8(b[16]); magic != 2 {
			return nil, fmt.Errorf("%w: batch %d has magic %d; only record batches v2 (Kafka 0.11+) are taken", ErrUnsupportedMagic, i, magic)
		}
		length := int32(binary.BigEndian.Uint32(b[8:12]))
		if length < batchHeaderLen-lengthStart || int64(length) > int64(len(b)-lengthStart) {
			return nil, fmt.Errorf("%w: batch %d declares %d bytes, %d are there", ErrCorrupt, i, length, len(b)-lengthStart)
		}
		one := b[:lengthStart+int(length)]
		b = b[len(one):]
		batch, err := decodeOne(one, lim)
		if err != nil {
			return nil, fmt.Errorf("batch %d: %w", i, err)
		}
		out = append(out, batch)
	}
	return out, nil
}

func decodeOne(b []byte, lim Limits) (Batch, error) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if got := crc32.Checksum(b[crcEnd:], castagnoli); uint32(rb.CRC) != got {
		return Batch{}, fmt.Errorf("%w: crc 0x%08x does not match the bytes' 0x%08x", ErrCorrupt, uint32(rb.CRC), got)
	}
	codec := Codec(rb.Attributes & 0x07)
	switch {
	case rb.Attributes&0x20 != 0:
		return Batch{}, fmt.Errorf("%w: a control batch: only the chain writes transaction markers", ErrInvalidRecord)
	case codec > CodecZstd:
		return Batch{}, fmt.Errorf("%w: unknown compression codec %d", ErrCorrupt, codec)
	case rb.NumRecords < 0:
		return Batch{}, fmt.Errorf("%w: %d records", ErrCorrupt, rb.NumRecords)
	case int(rb.NumRecords) > lim.MaxRecords:
		return Batch{}, fmt.Errorf("%w: %d records, at most %d", ErrTooLarge, rb.NumRecords, lim.MaxRecords)
	}
	raw, err := inflate(codec, rb.Records, lim)
	if err != nil {
		return Batch{}, err
	}
	// A record takes at least 7 bytes: no count can exceed what is there.
	if int(rb.NumRecords) > len(raw)/7+1 {
		return Batch{}, fmt.Errorf("%w: %d records in %d bytes", ErrCorrupt, rb.NumRecords, len(raw))
	}
	out := Batch{ProducerID: rb.ProducerID, ProducerEpoch: rb.ProducerEpoch, BaseSequence: rb.FirstSequence, Transactional: rb.Attributes&0x10 != 0,
		Codec: codec, FirstTimestamp: rb.FirstTimestamp, MaxTimestamp: rb.MaxTimestamp,
		Records: make([]Record, rb.NumRecords)}
	// What the records may take decoded beyond their bytes: headers.
	budget := lim.MaxUncompressedBytes - len(raw)
	for i := range out.Records {
		n, err := decodeRecord(raw, rb.FirstTimestamp, lim, &budget, &out.Records[i])
		if err != nil {
			return Batch{}, fmt.Errorf("record %d: %w", i, err)
		}
		raw = raw[n:]
	}
	if len(raw) != 0 {
		return Batch{}, fmt.Errorf("%w: %d bytes after the %d records", ErrCorrupt, len(raw), rb.NumRecords)
	}
	return out, nil
}

// decodeRecord reads one record from the front of b and returns the
// bytes it took, charging its headers to budget.
func decodeRecord(b []byte, firstTimestamp int64, lim Limits, budget *int, out *Record) (int, error) {
	length, n := binary.Varint(b)
	if n <= 0 || length < 0 || length > int64(len(b)-n) {
		return 0, fmt.Errorf("%w: record length %d with %d bytes left", ErrCorrupt, length, len(b)-n)
	}
	r := kbin.Reader{Src: b[n : n+int(length)]}
	r.Int8() // attributes, unused
	out.TimestampMs = firstTimestamp + r.Varlong()
	out.OffsetDelta = r.Varint()
	var err error
	if out.Key, err = nullableBytes(&r, "key"); err != nil {
		return 0, err
	}
	if out.Value, err = nullableBytes(&r, "value"); err != nil {
		return 0, err
	}
	headers := r.Varint()
	switch {
	case !r.Ok():
		return 0, fmt.Errorf("%w: record ends early", ErrCorrupt)
	case headers < 0 || int(headers) > len(r.Src):
		return 0, fmt.Errorf("%w: %d headers in %d bytes", ErrCorrupt, headers, len(r.Src))
	case int(headers) > lim.MaxHeaders:
		return 0, fmt.Errorf("%w: %d headers, at most %d", ErrTooLarge, headers, lim.MaxHeaders)
	}
	if *budget -= int(headers) * HeaderCost; *budget < 0 {
		return 0, fmt.Errorf("%w: the batch's headers take more than %d bytes decoded with its records (%d bytes a header)",
			ErrTooLarge, lim.MaxUncompressedBytes, HeaderCost)
	}
	if headers > 0 {
		out.Headers = make([]Header, headers)
	}
	for i := range out.Headers {
		kl := r.Varint()
		if kl < 0 {
			return 0, fmt.Errorf("%w: header %d has a null key", ErrInvalidRecord, i)
		}
		out.Headers[i].Key = string(r.Span(int(kl)))
		if out.Headers[i].Value, err = nullableBytes(&r, "header value"); err != nil {
			return 0, err
		}
	}
	if !r.Ok() {
		return 0, fmt.Errorf("%w: record ends early", ErrCorrupt)
	}
	if len(r.Src) != 0 {
		return 0, fmt.Errorf("%w: record declares %d bytes and leaves %d unread", ErrCorrupt, length, len(r.Src))
	}
	return n + int(length), nil
}

// nullableBytes reads varint-length bytes: -1 is null, other negatives
// are refused.
func nullableBytes(r *kbin.Reader, what string) ([]byte, error) {
	l := r.Varint()
	if l < -1 {
		return nil, fmt.Errorf("%w: %s length %d", ErrInvalidRecord, what, l)
	}
	if l == -1 {
		return nil, nil
	}
	b := r.Span(int(l))
	if !r.Ok() {
		return nil, fmt.Errorf("%w: %s of %d bytes past the record's end", ErrCorrupt, what, l)
	}
	return append([]byte{}, b...), nil
}

// Encode appends one v2 batch of records, uncompressed, at baseOffset,
// with the log-append time logAppendMs as every record's timestamp
// (attribute bit 3) and no producer (id and epoch -1, sequence -1).
func Encode(dst []byte, baseOffset, logAppendMs int64, records []Record) []byte {
	return EncodeAs(dst, baseOffset, records, Encoding{LogAppendMs: logAppendMs})
}

// Encoding is how EncodeAs writes a batch.
type Encoding struct {
	// Codec compresses the records (any of Kafka's five).
	Codec Codec
	// Transactional marks the batch as its producer's transaction's
	// (attribute bit 4), under ProducerID and ProducerEpoch: what a
	// read_committed consumer matches against the aborted transactions.
	Transactional bool
	ProducerID    int64
	ProducerEpoch int16
	// LogAppendMs, when not 0, is every record's timestamp, as the
	// log-append time (attribute bit 3); 0 keeps each record's own
	// TimestampMs, as create time.
	LogAppendMs int64
	// control: a transaction marker's batch (EncodeControl).
	control bool
}

// EncodeAs appends one v2 batch of records at baseOffset, encoded as e
// says, with no producer (id and epoch -1, sequence -1).
func EncodeAs(dst []byte, baseOffset int64, records []Record, e Encoding) []byte {
	return encode(dst, baseOffset, int32(len(records)), records, e)
}

// EncodeControl appends a transaction marker at offset: a control batch
// (attribute bits 4 and 5) of producer id and epoch holding one control
// record, commit or abort, as Kafka's coordinator writes them.
func EncodeControl(dst []byte, offset, producerID int64, epoch int16, commit bool, timestampMs int64) []byte {
	key := []byte{0, 0, 0, 0} // version 0, type 0: abort
	if commit {
		key[3] = 1
	}
	value := []byte{0, 0, 0, 0, 0, 0} // version 0, coordinator epoch 0
	return encode(dst, offset, 1, []Record{{Key: key, Value: value, TimestampMs: timestampMs}},
		Encoding{Transactional: true, ProducerID: producerID, ProducerEpoch: epoch, control: true})
}

// EncodeGap appends an empty v2 batch that spans offsets baseOffset up to
// baseOffset+span-1, which hold nothing a Kafka consumer reads, as a
// compacted Kafka log keeps one (KAFKA-5443): clients fetch on from the
// offset after it.
func EncodeGap(dst []byte, baseOffset int64, span int32, logAppendMs int64) []byte {
	return encode(dst, baseOffset, span, nil, Encoding{LogAppendMs: logAppendMs})
}

// encode appends a v2 batch of records whose offsets span from baseOffset,
// the records at the first ones.
func encode(dst []byte, baseOffset int64, span int32, records []Record, e Encoding) []byte {
	first, maxTs := e.LogAppendMs, e.LogAppendMs
	attrs := int16(0x08)
	if e.LogAppendMs == 0 {
		attrs = 0
		if len(records) > 0 {
			first, maxTs = records[0].TimestampMs, records[0].TimestampMs
		}
		for _, r := range records {
			maxTs = max(maxTs, r.TimestampMs)
		}
	}
	var body []byte
	for i, r := range records {
		kr := kmsg.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		if attrs == 0 {
			kr.TimestampDelta64 = r.TimestampMs - first
		}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		inner := kr.AppendTo(nil)[1:] // without the zero Length varint
		body = binary.AppendVarint(body, int64(len(inner)))
		body = append(body, inner...)
	}
	if e.Codec != CodecNone && len(records) > 0 {
		body, attrs = deflate(e.Codec, body), attrs|int16(e.Codec)
	}
	pid, epoch := int64(-1), int16(-1)
	if e.Transactional {
		attrs |= 0x10
		pid, epoch = e.ProducerID, e.ProducerEpoch
	}
	if e.control {
		attrs |= 0x20
	}
	rb := kmsg.RecordBatch{
		FirstOffset: baseOffset, Length: int32(batchHeaderLen - lengthStart + len(body)), Magic: 2,
		Attributes: attrs, LastOffsetDelta: span - 1, FirstTimestamp: first, MaxTimestamp: maxTs,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: -1, NumRecords: int32(len(records)), Records: body,
	}
	start := len(dst)
	dst = rb.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start+17:], crc32.Checksum(dst[start+crcEnd:], castagnoli))
	return dst
}
