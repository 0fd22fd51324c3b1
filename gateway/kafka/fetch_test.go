package kafka

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

func stored(t *testing.T, offset uint64, blockMs int64, value string) []byte {
	t.Helper()
	b, err := proto.Marshal(&byzlogv1.StoredRecord{Offset: offset, TimestampUnixNano: blockMs * 1e6, Value: []byte(value),
		Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte(value)}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEncodeRecords: stored records become one v2 batch per block, at
// their offsets, with the block time as log-append time.
func TestEncodeRecords(t *testing.T) {
	in := [][]byte{stored(t, 5, 1000, "a"), stored(t, 6, 1000, "b"), stored(t, 7, 2000, "c")}
	out, err := encodeRecords(in, 5)
	if err != nil {
		t.Fatal(err)
	}
	batches, err := batch.Decode(out, batch.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 2 || len(batches[0].Records) != 2 || len(batches[1].Records) != 1 {
		t.Fatalf("encodeRecords gave %d batches, want 2 (one per block time) of 2 and 1", len(batches))
	}
	if b := batches[1]; b.FirstTimestamp != 2000 || string(b.Records[0].Value) != "c" || string(b.Records[0].Headers[0].Value) != "c" {
		t.Fatalf("second batch = %+v", b)
	}
	if batches[0].Codec != batch.CodecNone {
		t.Errorf("a 2-byte batch is %s, want uncompressed", batches[0].Codec)
	}
	big := strings.Repeat("x", compressFetchFrom)
	out, err = encodeRecords([][]byte{stored(t, 0, 1, big), stored(t, 1, 1, "y")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if batches, err = batch.Decode(out, batch.DefaultLimits()); err != nil || batches[0].Codec != batch.CodecLz4 || string(batches[0].Records[0].Value) != big {
		t.Fatalf("a %d-byte batch decodes as %v, %v; want lz4 with its records", compressFetchFrom+1, batches, err)
	}
	for _, tc := range []struct {
		name string
		in   [][]byte
		from uint64
		want string
	}{
		{"gap", [][]byte{stored(t, 5, 1, "a"), stored(t, 7, 1, "b")}, 5, "offset 7, want 6"},
		{"wrong start", [][]byte{stored(t, 9, 1, "a")}, 5, "offset 9, want 5"},
		{"not a record", [][]byte{{0xff, 0xff}}, 5, "stored record at offset 5"},
	} {
		if _, err := encodeRecords(tc.in, tc.from); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: encodeRecords = %v, want %q", tc.name, err, tc.want)
		}
	}
}
