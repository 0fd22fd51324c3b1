package core

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// FuzzDecodePassed: whatever proto.Unmarshal takes as a StoredRecord,
// decodePassed reads with the same fields compaction decides by (a
// difference would make a validator running the other decoder compact
// another log).
func FuzzDecodePassed(f *testing.F) {
	for _, r := range []*byzlogv1.StoredRecord{
		{Topic: "t", Offset: 7, TimestampUnixNano: 1_700_000_000_000_000_000, Key: []byte("k"), Value: []byte("v"), Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte("x")}}},
		{Key: []byte{}, TimestampUnixNano: -5},
		{Value: []byte{}},
		{KafkaProducerId: -1, KafkaTransactional: true, Key: []byte("k")},
		{KafkaControl: &byzlogv1.KafkaControl{}, KafkaProducerId: 1 << 40},
		{},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A field twice (the last wins) and a known field of the wrong type.
	f.Add(protowire.AppendVarint(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 1), 4, protowire.VarintType), 2))
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), []byte("x")))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r byzlogv1.StoredRecord
		if proto.Unmarshal(b, &r) != nil {
			_, _ = decodePassed(b) // must not panic
			return
		}
		p, err := decodePassed(b)
		if err != nil {
			t.Fatalf("decodePassed refuses what proto.Unmarshal takes: %v", err)
		}
		want := passFields{
			timestamp: r.TimestampUnixNano, key: r.Key, hasKey: r.Key != nil, hasValue: r.Value != nil,
			producerID: r.KafkaProducerId, transactional: r.KafkaTransactional, control: r.KafkaControl != nil,
		}
		if p.timestamp != want.timestamp || !bytes.Equal(p.key, want.key) || p.hasKey != want.hasKey || p.hasValue != want.hasValue ||
			p.producerID != want.producerID || p.transactional != want.transactional || p.control != want.control {
			t.Fatalf("decodePassed = %+v, proto.Unmarshal reads %+v", p, want)
		}
	})
}
