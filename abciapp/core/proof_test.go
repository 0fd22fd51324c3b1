package core_test

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

func TestRecordProofVerifies(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 3})
	p, q := wire.NewSigner(key("p"), chainID), wire.NewSigner(key("q"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, records("a", "b"))))
	// One block appending to three partitions, five records in partition 1.
	c.block(
		bundle(t, batch(t, p, "t", 1, 0, records("c", "d", "e")), batch(t, q, "t", 2, 0, records("f"))),
		bundle(t, batch(t, q, "t", 1, 0, records("g", "h")), batch(t, p, "t", 0, 1, records("i"))),
	)
	appHash := c.state.AppHash
	for _, tc := range []struct {
		part   uint32
		offset uint64
		value  string
	}{{1, 0, "c"}, {1, 4, "h"}, {2, 0, "f"}, {0, 2, "i"}} {
		var proof byzlogv1.RecordProof
		c.query(wire.PathProof, &byzlogv1.ProofRequest{Topic: "t", Partition: tc.part, Offset: tc.offset}, &proof)
		rec, err := core.VerifyRecord(&proof, appHash)
		if err != nil {
			t.Fatalf("VerifyRecord(t/%d@%d) = %v", tc.part, tc.offset, err)
		}
		if string(rec.Value) != tc.value || rec.Offset != tc.offset {
			t.Errorf("proven record t/%d@%d = %q at %d, want %q", tc.part, tc.offset, rec.Value, rec.Offset, tc.value)
		}
	}

	// An older block's record proves against that block's app hash only.
	var old byzlogv1.RecordProof
	c.query(wire.PathProof, &byzlogv1.ProofRequest{Topic: "t", Offset: 1}, &old)
	if _, err := core.VerifyRecord(&old, appHash); err == nil {
		t.Error("a record of an older block verified against the newest app hash")
	}

	var proof byzlogv1.RecordProof
	c.query(wire.PathProof, &byzlogv1.ProofRequest{Topic: "t", Partition: 1, Offset: 3}, &proof)
	tamper := []struct {
		name string
		fn   func(p *byzlogv1.RecordProof)
		want string
	}{
		{"value", func(p *byzlogv1.RecordProof) { p.Record = bytes.Replace(p.Record, []byte("g"), []byte("X"), 1) }, "partition root"},
		{"offset claim", func(p *byzlogv1.RecordProof) { p.RecordProof.Index++ }, "leaf"},
		{"aunt", func(p *byzlogv1.RecordProof) { p.RecordProof.Aunts[0] = bytes.Repeat([]byte{1}, 32) }, "partition root"},
		{"partition root", func(p *byzlogv1.RecordProof) { p.Partition.Root[0] ^= 1 }, "partition root"},
		{"records root", func(p *byzlogv1.RecordProof) { p.RecordsRoot[0] ^= 1 }, "records root"},
		{"meta root", func(p *byzlogv1.RecordProof) { p.MetaRoot[0] ^= 1 }, "app hash"},
		{"previous hash", func(p *byzlogv1.RecordProof) { p.PrevAppHash[0] ^= 1 }, "app hash"},
		{"incomplete", func(p *byzlogv1.RecordProof) { p.PartitionProof = nil }, "incomplete"},
	}
	for _, tt := range tamper {
		p := proto.Clone(&proof).(*byzlogv1.RecordProof)
		tt.fn(p)
		if _, err := core.VerifyRecord(p, appHash); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("VerifyRecord(tampered %s) = %v, want an error about the %s", tt.name, err, tt.want)
		}
	}

	_, r, err := core.Query(c.store, c.state, wire.PathProof, mustMarshal(t, &byzlogv1.ProofRequest{Topic: "t", Offset: 99}))
	if err != nil || r.Code != wire.CodeOffsetOutOfRange {
		t.Errorf("proof of a missing offset = %s %v, want %s", r.Code, err, wire.CodeOffsetOutOfRange)
	}
}
