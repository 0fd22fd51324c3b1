package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"testing"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// compress is what a client does to a batch's records for codec.
func compress(t testing.TB, codec Codec, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch codec {
	case CodecNone:
		return raw
	case CodecGzip:
		w := gzip.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case CodecLz4:
		w := lz4.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case CodecZstd:
		w, _ := zstd.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case CodecSnappy:
		return snappy.Encode(nil, raw)
	}
	return buf.Bytes()
}

// xerial frames raw as the Java client does, in chunks of chunk bytes.
func xerial(raw []byte, chunk int) []byte {
	out := append([]byte{}, xerialMagic...)
	out = binary.BigEndian.AppendUint32(out, 1)
	out = binary.BigEndian.AppendUint32(out, 1)
	for len(raw) > 0 {
		n := min(chunk, len(raw))
		block := snappy.Encode(nil, raw[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		raw = raw[n:]
	}
	return out
}

// rawRecords encodes records as a client does, before compression.
func rawRecords(recs []kmsg.Record) []byte {
	var out []byte
	for _, r := range recs {
		inner := r.AppendTo(nil)[1:]
		out = binary.AppendVarint(out, int64(len(inner)))
		out = append(out, inner...)
	}
	return out
}

// clientBatch builds a produce batch as a client would: attributes set
// the codec (and any extra bits), numRecords as given.
func clientBatch(attrs int16, numRecords int32, records []byte) []byte {
	rb := kmsg.RecordBatch{Magic: 2, Attributes: attrs, LastOffsetDelta: numRecords - 1, FirstTimestamp: 1000, MaxTimestamp: 1000,
		ProducerID: 7, ProducerEpoch: 1, FirstSequence: 3, NumRecords: numRecords, Records: records}
	rb.Length = int32(batchHeaderLen - lengthStart + len(records))
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[crcEnd:], castagnoli))
	return b
}

func sampleRecords(n int) []kmsg.Record {
	recs := make([]kmsg.Record, n)
	for i := range recs {
		recs[i] = kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i), Key: []byte(fmt.Sprint("k", i)), Value: bytes.Repeat([]byte{byte(i)}, 100)}
	}
	recs[0].Key = nil // null
	recs[1].Key = []byte{}
	recs[2].Headers = []kmsg.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: nil}}
	return recs
}

func TestDecodeCodecs(t *testing.T) {
	recs := sampleRecords(50)
	raw := rawRecords(recs)
	inputs := map[string]struct {
		codec Codec
		data  []byte
	}{
		"none":          {CodecNone, raw},
		"gzip":          {CodecGzip, compress(t, CodecGzip, raw)},
		"snappy":        {CodecSnappy, compress(t, CodecSnappy, raw)},
		"snappy xerial": {CodecSnappy, xerial(raw, 1000)},
		"lz4":           {CodecLz4, compress(t, CodecLz4, raw)},
		"zstd":          {CodecZstd, compress(t, CodecZstd, raw)},
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			two := append(clientBatch(int16(in.codec), 50, in.data), clientBatch(int16(in.codec), 50, in.data)...)
			got, err := Decode(two, DefaultLimits())
			if err != nil {
				t.Fatalf("Decode = %v", err)
			}
			if len(got) != 2 {
				t.Fatalf("Decode gave %d batches, want 2", len(got))
			}
			b := got[1]
			if b.Codec != in.codec || b.ProducerID != 7 || b.ProducerEpoch != 1 || b.BaseSequence != 3 || len(b.Records) != 50 {
				t.Fatalf("batch = codec %v producer %d/%d seq %d records %d, want %v 7/1 3 50", b.Codec, b.ProducerID, b.ProducerEpoch, b.BaseSequence, len(b.Records), in.codec)
			}
			for i, r := range b.Records {
				w := recs[i]
				if !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) || !bytes.Equal(r.Value, w.Value) || r.TimestampMs != 1000+int64(i) || r.OffsetDelta != int32(i) {
					t.Fatalf("record %d = %+v, want key %q value %q ts %d", i, r, w.Key, w.Value, 1000+i)
				}
			}
			if h := b.Records[2].Headers; len(h) != 2 || h[0].Key != "a" || string(h[0].Value) != "1" || h[1].Value != nil {
				t.Fatalf("record 2 headers = %+v", h)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	raw := rawRecords(sampleRecords(3))
	good := clientBatch(0, 3, raw)
	flipped := append([]byte{}, good...)
	flipped[len(flipped)-1] ^= 1
	magic1 := append([]byte{}, good...)
	magic1[16] = 1
	lim := DefaultLimits()
	manyHeaders := rawRecords([]kmsg.Record{{Headers: make([]kmsg.Header, lim.MaxHeaders+1)}})
	// Headers bounded by bytes: 30 records of 9,000 empty headers are
	// 540 KB encoded and would take 10.8 MB decoded, past the 8 MiB.
	heavy := make([]kmsg.Record, 30)
	for i := range heavy {
		heavy[i].Headers = make([]kmsg.Header, 9000)
	}
	heavyHeaders := rawRecords(heavy)
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"crc flipped", flipped, ErrCorrupt},
		{"truncated tail", good[:len(good)-5], ErrCorrupt},
		{"short header", good[:30], ErrCorrupt},
		{"magic 1", magic1, ErrUnsupportedMagic},
		{"control batch", clientBatch(0x20, 3, raw), ErrInvalidRecord},
		{"control", clientBatch(0x20, 3, raw), ErrInvalidRecord},
		{"unknown codec", clientBatch(6, 3, raw), ErrCorrupt},
		{"count past the bytes", clientBatch(0, 1<<31-1, raw), ErrTooLarge},
		{"count past the bytes, under the record bound", clientBatch(0, 5000, raw), ErrCorrupt},
		{"fewer records than counted", clientBatch(0, 4, raw), ErrCorrupt},
		{"more records than counted", clientBatch(0, 2, raw), ErrCorrupt},
		{"negative count", clientBatch(0, -1, raw), ErrCorrupt},
		{"too many headers", clientBatch(0, 1, manyHeaders), ErrTooLarge},
		{"headers past the decoded bytes", clientBatch(0, 30, heavyHeaders), ErrTooLarge},
		{"broken gzip", clientBatch(int16(CodecGzip), 3, raw), ErrCorrupt},
		{"broken zstd", clientBatch(int16(CodecZstd), 3, raw), ErrCorrupt},
		{"trailing garbage", append(append([]byte{}, good...), 1, 2, 3), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.in, lim)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestDecodeBomb: 128 MiB of zeros compressed to a few KiB must fail
// without inflating them, for every codec: Decode allocates well under
// the bomb's size (the bound is 8 MiB of output).
func TestDecodeBomb(t *testing.T) {
	zeros := make([]byte, 128<<20)
	for _, codec := range []Codec{CodecGzip, CodecSnappy, CodecLz4, CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			in := clientBatch(int16(codec), 1, compress(t, codec, zeros))
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := Decode(in, DefaultLimits())
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Decode = %v, want ErrTooLarge", err)
			}
			t.Logf("%s: %d MiB", codec, (after.TotalAlloc-before.TotalAlloc)>>20)
			if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
				t.Fatalf("Decode allocated %d MiB for a %d-byte bomb; the bound is 8 MiB of output", got>>20, len(in))
			}
		})
	}
}

// TestEncode: every codec, with log-append time and with the records'
// create times, decodes to the records and times encoded, by this
// package's decoder and by franz-go's.
func TestEncode(t *testing.T) {
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLz4, CodecZstd} {
		for _, appendMs := range []int64{5000, 0} {
			t.Run(fmt.Sprintf("%s/append=%d", codec, appendMs), func(t *testing.T) { testEncode(t, codec, appendMs) })
		}
	}
}

func testEncode(t *testing.T, codec Codec, appendMs int64) {
	big := bytes.Repeat([]byte("v"), 80<<10) // past one xerial block
	recs := []Record{{Key: nil, Value: []byte("a"), TimestampMs: 7000}, {Key: []byte("k"), Value: []byte("b"), TimestampMs: 6500, Headers: []Header{{Key: "h", Value: []byte("v")}}},
		{Key: []byte{}, Value: big, TimestampMs: 9000}}
	b := EncodeAs(nil, 41, recs, Encoding{Codec: codec, LogAppendMs: appendMs})
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if got := crc32.Checksum(b[crcEnd:], castagnoli); uint32(rb.CRC) != got {
		t.Fatalf("Encode crc = %08x, the bytes' %08x", uint32(rb.CRC), got)
	}
	wantAttrs, first, maxTs := int16(0x08)|int16(codec), appendMs, appendMs
	if appendMs == 0 {
		wantAttrs, first, maxTs = int16(codec), 7000, 9000
	}
	if rb.FirstOffset != 41 || rb.Attributes != wantAttrs || rb.LastOffsetDelta != 2 || rb.FirstTimestamp != first || rb.MaxTimestamp != maxTs || rb.ProducerID != -1 || rb.NumRecords != 3 || int(rb.Length) != len(b)-lengthStart {
		t.Fatalf("Encode header = %+v", rb)
	}
	got, err := Decode(b, DefaultLimits())
	if err != nil {
		t.Fatalf("Decode(Encode) = %v", err)
	}
	for i, r := range got[0].Records {
		wantTs := recs[i].TimestampMs
		if appendMs != 0 {
			wantTs = appendMs
		}
		if !bytes.Equal(r.Key, recs[i].Key) || (r.Key == nil) != (recs[i].Key == nil) || !bytes.Equal(r.Value, recs[i].Value) || r.TimestampMs != wantTs || len(r.Headers) != len(recs[i].Headers) {
			t.Fatalf("record %d = key %q ts %d, want key %q ts %d", i, r.Key, r.TimestampMs, recs[i].Key, wantTs)
		}
	}
	// franz-go's consumer decompresses and reads the same batch.
	rp := kmsg.FetchResponseTopicPartition{HighWatermark: 44, RecordBatches: b}
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: 41, Topic: "t"}, &rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil || len(fp.Records) != len(recs) {
		t.Fatalf("franz-go read %d records (%v), want %d", len(fp.Records), fp.Err, len(recs))
	}
	for i, r := range fp.Records {
		wantTs := recs[i].TimestampMs
		if appendMs != 0 {
			wantTs = appendMs
		}
		if r.Offset != int64(41+i) || r.Timestamp.UnixMilli() != wantTs || r.Attrs.TimestampType() != int8(min(appendMs, 1)) || !bytes.Equal(r.Value, recs[i].Value) {
			t.Fatalf("franz-go record %d: offset %d ts %d type %d, want offset %d ts %d", i, r.Offset, r.Timestamp.UnixMilli(), r.Attrs.TimestampType(), 41+i, wantTs)
		}
	}
}

func FuzzDecode(f *testing.F) {
	raw := rawRecords(sampleRecords(3))
	for _, codec := range []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLz4, CodecZstd} {
		f.Add(clientBatch(int16(codec), 3, compress(f, codec, raw)))
	}
	f.Add(clientBatch(int16(CodecSnappy), 3, xerial(raw, 100)))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Decode(in, DefaultLimits())
		if err != nil {
			return
		}
		for _, b := range got {
			again, err := Decode(Encode(nil, 0, 1, b.Records), DefaultLimits())
			if err != nil {
				t.Fatalf("Decode(Encode(accepted batch)) = %v", err)
			}
			for i, r := range again[0].Records {
				w := b.Records[i]
				if !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) || !bytes.Equal(r.Value, w.Value) || len(r.Headers) != len(w.Headers) {
					t.Fatalf("record %d re-encoded as %+v, was %+v", i, r, w)
				}
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	recs := make([]kmsg.Record, 1000)
	for i := range recs {
		recs[i] = kmsg.Record{OffsetDelta: int32(i), Value: bytes.Repeat([]byte{'x'}, 100)}
	}
	raw := rawRecords(recs)
	for _, codec := range []Codec{CodecNone, CodecZstd} {
		in := clientBatch(int16(codec), 1000, compress(b, codec, raw))
		b.Run(codec.String(), func(b *testing.B) {
			for b.Loop() {
				if _, err := Decode(in, DefaultLimits()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "records/s")
		})
	}
}
