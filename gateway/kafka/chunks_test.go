package kafka

import (
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

func chunkRecord(offset uint64) *byzlogv1.StoredRecord {
	return &byzlogv1.StoredRecord{Offset: offset, Height: 1, ProducerKey: []byte("p"), KafkaProducerId: int64(offset) + 1,
		Value: []byte("part"), Headers: []*byzlogv1.RecordHeader{{Key: chunkHeader}}}
}

// TestEncodeRecordsHidesChunks: each run of chunk records becomes one empty
// batch spanning its offsets, so that consumers fetch on past them.
func TestEncodeRecordsHidesChunks(t *testing.T) {
	in := []*byzlogv1.StoredRecord{chunkRecord(0), chunkRecord(1), stored(2, 1, 0, "a"), chunkRecord(3), stored(4, 1, 1, "b")}
	out := encodeRecords(in, serving{}, in[0].Offset, in[len(in)-1].Offset+1)
	if got := baseOffsets(out); !slices.Equal(got, []int64{0, 2, 3, 4}) {
		t.Fatalf("base offsets = %v, want [0 2 3 4] (a gap, a, a gap, b)", got)
	}
	batches, err := batch.Decode(out, batch.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, b := range batches {
		sizes = append(sizes, len(b.Records))
	}
	if !slices.Equal(sizes, []int{0, 1, 0, 1}) {
		t.Fatalf("batches of %v records, want [0 1 0 1]", sizes)
	}
	// The first gap's LastOffsetDelta (bytes 23..27 of a v2 batch) is 1:
	// it spans offsets 0 and 1.
	if delta := int32(out[23])<<24 | int32(out[24])<<16 | int32(out[25])<<8 | int32(out[26]); delta != 1 {
		t.Errorf("the first gap's last offset delta = %d, want 1", delta)
	}
}

// TestEncodeRecordsMarkers: a transaction's marker (rules version 8) is a
// control batch of its producer id and epoch, its records a transactional
// batch under them; neither merges with the other, nor with a chunk.
func TestEncodeRecordsMarkers(t *testing.T) {
	marker := func(offset uint64) *byzlogv1.StoredRecord {
		return &byzlogv1.StoredRecord{Offset: offset, Height: 1, ProducerKey: []byte("p"), KafkaProducerId: 9, KafkaEpoch: 2, KafkaControl: &byzlogv1.KafkaControl{Commit: true}}
	}
	txn := stored(0, 1, 0, "a")
	txn.KafkaProducerId, txn.KafkaEpoch, txn.KafkaTransactional = 9, 2, true
	in := []*byzlogv1.StoredRecord{txn, marker(1), chunkRecord(2), stored(3, 1, 1, "b")}
	out := encodeRecords(in, serving{}, in[0].Offset, in[len(in)-1].Offset+1)
	if got := baseOffsets(out); !slices.Equal(got, []int64{0, 1, 2, 3}) {
		t.Fatalf("base offsets = %v, want [0 1 2 3] (a, the marker, a gap, b)", got)
	}
	var attrs []int16
	var pids []int64
	for b := out; len(b) > 0; {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		attrs, pids = append(attrs, rb.Attributes), append(pids, rb.ProducerID)
		b = b[12+int(rb.Length):]
	}
	if !slices.Equal(attrs, []int16{0x10, 0x30, 0, 0}) || pids[0] != 9 || pids[1] != 9 || pids[3] != -1 {
		t.Fatalf("attributes %v, producer ids %v; want a transactional batch and a control batch of producer 9, then plain ones", attrs, pids)
	}
	if r := firstVisible(in[1:]); r == nil || r.Offset != 3 {
		t.Fatalf("firstVisible past the marker = %v, want the record at 3", r)
	}
}

func manifestRecord(t testing.TB, offset uint64, m *byzlogv1.ChunkedValue) *byzlogv1.StoredRecord {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return &byzlogv1.StoredRecord{Offset: offset, Headers: []*byzlogv1.RecordHeader{{Key: "h"}, {Key: manifestHeader, Value: b}}}
}

func TestManifestOf(t *testing.T) {
	sum := sha256.Sum256([]byte("part"))
	chunk := func(offset uint64, size uint32) *byzlogv1.ChunkedValue_Chunk {
		return &byzlogv1.ChunkedValue_Chunk{Offset: offset, Size: size, Sha256: sum[:]}
	}
	good := &byzlogv1.ChunkedValue{Size: 8, Chunks: []*byzlogv1.ChunkedValue_Chunk{chunk(0, 4), chunk(1, 4)}}
	if m := manifestOf(manifestRecord(t, 5, good)); m == nil || len(m.Chunks) != 2 {
		t.Fatalf("manifestOf(a good manifest) = %v", m)
	}
	withValue := manifestRecord(t, 5, good)
	withValue.Value = []byte("v")
	for name, r := range map[string]*byzlogv1.StoredRecord{
		"a value as well":       withValue,
		"sizes not adding up":   manifestRecord(t, 5, &byzlogv1.ChunkedValue{Size: 9, Chunks: good.Chunks}),
		"a chunk at its offset": manifestRecord(t, 1, good),
		"a chunk after it":      manifestRecord(t, 0, good),
		"no chunks":             manifestRecord(t, 5, &byzlogv1.ChunkedValue{}),
		"a chunk too large":     manifestRecord(t, 5, &byzlogv1.ChunkedValue{Size: maxChunkBytes + 1, Chunks: []*byzlogv1.ChunkedValue_Chunk{chunk(0, maxChunkBytes+1)}}),
		"an empty chunk":        manifestRecord(t, 5, &byzlogv1.ChunkedValue{Size: 4, Chunks: []*byzlogv1.ChunkedValue_Chunk{chunk(0, 4), chunk(1, 0)}}),
		"a short hash":          manifestRecord(t, 5, &byzlogv1.ChunkedValue{Size: 4, Chunks: []*byzlogv1.ChunkedValue_Chunk{{Offset: 0, Size: 4, Sha256: []byte{1}}}}),
		"too many chunks":       manifestRecord(t, 100, &byzlogv1.ChunkedValue{Size: 4 * (maxChunks + 1), Chunks: slices.Repeat([]*byzlogv1.ChunkedValue_Chunk{chunk(0, 4)}, maxChunks+1)}),
		"not a manifest":        {Offset: 5, Headers: []*byzlogv1.RecordHeader{{Key: manifestHeader, Value: []byte{0xff}}}},
	} {
		if m := manifestOf(r); m != nil {
			t.Errorf("manifestOf(%s) = %v, want none", name, m)
		}
	}
}

// FuzzManifestOf: any header bytes give no manifest or one whose chunks
// precede the record, with full hashes, adding up to its size.
func FuzzManifestOf(f *testing.F) {
	sum := sha256.Sum256(nil)
	good, _ := proto.Marshal(&byzlogv1.ChunkedValue{Size: 3, Chunks: []*byzlogv1.ChunkedValue_Chunk{{Offset: 1, Size: 3, Sha256: sum[:]}}})
	f.Add(good)
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := manifestOf(&byzlogv1.StoredRecord{Offset: 10, Headers: []*byzlogv1.RecordHeader{{Key: manifestHeader, Value: b}}})
		if m == nil {
			return
		}
		total := uint64(0)
		for _, ch := range m.Chunks {
			if ch.Offset >= 10 || len(ch.Sha256) != sha256.Size || ch.Size == 0 || ch.Size > maxChunkBytes {
				t.Fatalf("manifest %x: chunk %v", b, ch)
			}
			total += uint64(ch.Size)
		}
		if total != m.Size || len(m.Chunks) == 0 || len(m.Chunks) > maxChunks {
			t.Fatalf("manifest %x: %d chunks adding up to %d, size %d", b, len(m.Chunks), total, m.Size)
		}
	})
}
