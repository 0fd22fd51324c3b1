package kafka

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

func stored(offset uint64, height int64, seq uint64, value string) *byzlogv1.StoredRecord {
	return &byzlogv1.StoredRecord{Offset: offset, Height: height, TimestampUnixNano: height * 1e9, CreateTimeUnixNano: height*1e9 - 300e6, Sequence: seq, ProducerKey: []byte("p"),
		Value: []byte(value), Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte(value)}}}
}

func marshalStored(t *testing.T, recs ...*byzlogv1.StoredRecord) [][]byte {
	t.Helper()
	out := make([][]byte, len(recs))
	for i, r := range recs {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// TestEncodeRecords: stored records become one v2 batch per producer
// batch, at their offsets, with the producer's create times.
func TestEncodeRecords(t *testing.T) {
	other := stored(7, 1, 0, "c")
	other.ProducerKey = []byte("q")
	in := []*byzlogv1.StoredRecord{stored(5, 1, 0, "a"), stored(6, 1, 0, "b"), other, stored(8, 1, 1, "d"), stored(9, 2, 2, "e")}
	batches, err := batch.Decode(encodeRecords(in, serving{}, in[0].Offset, in[len(in)-1].Offset+1), batch.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, b := range batches {
		sizes = append(sizes, len(b.Records))
	}
	if !slices.Equal(sizes, []int{2, 1, 1, 1}) {
		t.Fatalf("encodeRecords gave batches of %v records, want [2 1 1 1] (one per producer batch)", sizes)
	}
	if got := baseOffsets(encodeRecords(in, serving{}, in[0].Offset, in[len(in)-1].Offset+1)); !slices.Equal(got, []int64{5, 7, 8, 9}) {
		t.Errorf("batches' base offsets = %v, want [5 7 8 9]", got)
	}
	if b := batches[3]; b.FirstTimestamp != 1700 || b.Records[0].TimestampMs != 1700 || string(b.Records[0].Value) != "e" || string(b.Records[0].Headers[0].Value) != "e" {
		t.Fatalf("last batch = %+v, want create time 1700", b)
	}
	batches, err = batch.Decode(encodeRecords(in, serving{logAppend: true}, in[0].Offset, in[len(in)-1].Offset+1), batch.DefaultLimits())
	if err != nil || batches[3].Records[0].TimestampMs != 2000 {
		t.Fatalf("LogAppendTime: last batch %+v, %v; want the block time 2000", batches[3], err)
	}
}

// TestServedCodec: a batch is served with its producer's codec unless the
// topic's compression.type names one; zstd only to Fetch v10 on.
func TestServedCodec(t *testing.T) {
	big := strings.Repeat("x", 4096)
	for _, tc := range []struct {
		s      serving
		stored uint32
		want   batch.Codec
	}{
		{serving{zstd: true}, 0, batch.CodecNone},
		{serving{zstd: true}, uint32(batch.CodecGzip), batch.CodecGzip},
		{serving{compression: "producer", zstd: true}, uint32(batch.CodecSnappy), batch.CodecSnappy},
		{serving{zstd: true}, uint32(batch.CodecZstd), batch.CodecZstd},
		{serving{}, uint32(batch.CodecZstd), batch.CodecNone},
		{serving{compression: "uncompressed", zstd: true}, uint32(batch.CodecGzip), batch.CodecNone},
		{serving{compression: "lz4", zstd: true}, uint32(batch.CodecGzip), batch.CodecLz4},
		{serving{compression: "gzip"}, 0, batch.CodecGzip},
	} {
		a, b := stored(0, 1, 0, big), stored(1, 1, 0, "y")
		a.KafkaCodec, b.KafkaCodec = tc.stored, tc.stored
		batches, err := batch.Decode(encodeRecords([]*byzlogv1.StoredRecord{a, b}, tc.s, a.Offset, b.Offset+1), batch.DefaultLimits())
		if err != nil || len(batches) != 1 || batches[0].Codec != tc.want || string(batches[0].Records[0].Value) != big {
			t.Errorf("%+v, produced with codec %d: served %v, %v; want %s with its records", tc.s, tc.stored, batches, err, tc.want)
		}
	}
}

// baseOffsets reads each v2 batch's base offset (8 bytes, then a 4-byte
// length of the rest).
func baseOffsets(b []byte) []int64 {
	var out []int64
	for len(b) >= 12 {
		out = append(out, int64(binary.BigEndian.Uint64(b)))
		b = b[12+binary.BigEndian.Uint32(b[8:]):]
	}
	return out
}

func TestDecodeStored(t *testing.T) {
	got, err := decodeStored(marshalStored(t, stored(5, 1, 0, "a"), stored(6, 1, 0, "b")), 5)
	if err != nil || len(got) != 2 || string(got[1].Value) != "b" {
		t.Fatalf("decodeStored = %v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		in   [][]byte
		from uint64
		want string
	}{
		{"backwards", marshalStored(t, stored(5, 1, 0, "a"), stored(5, 1, 0, "b")), 5, "offset 5, want 6 or after"},
		{"before the start", marshalStored(t, stored(4, 1, 0, "a")), 5, "offset 4, want 5 or after"},
		{"not a record", [][]byte{{0xff, 0xff}}, 5, "stored record at offset 5 or after"},
	} {
		if _, err := decodeStored(tc.in, tc.from); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: decodeStored = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// spans reads each v2 batch's first and last offset (the last offset
// delta is 4 bytes at 23).
func spans(b []byte) [][2]int64 {
	var out [][2]int64
	for len(b) >= 27 {
		base := int64(binary.BigEndian.Uint64(b))
		out = append(out, [2]int64{base, base + int64(int32(binary.BigEndian.Uint32(b[23:])))})
		b = b[12+binary.BigEndian.Uint32(b[8:]):]
	}
	return out
}

// TestEncodeRecordsOverHoles: holes compaction left before, inside and
// after a fetch's records are served as empty batches over their offsets,
// and a producer batch with a hole inside is split at it, so every offset
// from the fetch's to the read's end is in exactly one batch and a
// consumer moves past the holes.
func TestEncodeRecordsOverHoles(t *testing.T) {
	in := []*byzlogv1.StoredRecord{stored(3, 1, 0, "a"), stored(5, 1, 0, "c"), stored(6, 1, 0, "d")}
	out := encodeRecords(in, serving{}, 1, 9)
	want := [][2]int64{{1, 2}, {3, 3}, {4, 4}, {5, 6}, {7, 8}}
	if got := spans(out); !slices.Equal(got, want) {
		t.Fatalf("batches span %v, want %v", got, want)
	}
	batches, err := batch.Decode(out, batch.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, b := range batches {
		for _, r := range b.Records {
			values = append(values, string(r.Value))
		}
	}
	if !slices.Equal(values, []string{"a", "c", "d"}) {
		t.Errorf("records %v, want a c d", values)
	}
	if got := spans(encodeRecords(nil, serving{}, 4, 6)); !slices.Equal(got, [][2]int64{{4, 5}}) {
		t.Errorf("a fetch of holes alone spans %v, want [[4 5]]", got)
	}
}
