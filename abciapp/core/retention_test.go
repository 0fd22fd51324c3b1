package core_test

import (
	"strings"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

func TestRetentionByTime(t *testing.T) {
	c := newChain(t, "")
	// Blocks are 1 s apart in the test chain: records live 2.5 blocks.
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: 2500})
	p := wire.NewSigner(key("p"), chainID)
	for seq := uint64(0); seq < 4; seq++ {
		c.must(bundle(t, batch(t, p, "t", 0, seq, records(string(rune('a'+seq))))))
	}
	// a..d were appended at block times T+2..T+5 s. Retention runs at the
	// start of each block: at T+5 the cutoff is T+2.5, so a is gone.
	if got := values(c.readAll("t", 0)); got != "1:b,2:c,3:d" {
		t.Fatalf("after 4 blocks = %s, want a expired", got)
	}
	c.block()
	c.block()
	if got := values(c.readAll("t", 0)); got != "3:d" {
		t.Fatalf("two empty blocks later = %s, want only d", got)
	}
	info := c.partition("t", 0)
	if info.LogStartOffset != 3 || info.NextOffset != 4 {
		t.Errorf("partition = %v, want log start 3, next 4", info)
	}
	_, r, err := core.Query(c.store, c.state, wire.PathRecords, mustMarshal(t, &byzlogv1.RecordsRequest{Topic: "t", Offset: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != wire.CodeOffsetOutOfRange || !strings.Contains(r.Log, "log start offset 3") {
		t.Errorf("query below the log start = %s %q, want %s naming the log start", r.Code, r.Log, wire.CodeOffsetOutOfRange)
	}
	// New records keep their offsets after retention.
	if b := outcome(t, c.must(bundle(t, batch(t, p, "t", 0, 4, records("e"))))).Batches[0]; b.BaseOffset != 4 {
		t.Errorf("next append at offset %d, want 4", b.BaseOffset)
	}
}

func TestRetentionByBytes(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, RetentionBytes: 1000})
	p := wire.NewSigner(key("p"), chainID)
	big := strings.Repeat("x", 300)
	for seq := uint64(0); seq < 6; seq++ {
		c.must(bundle(t, batch(t, p, "t", 0, seq, records(big))))
	}
	c.block() // retention runs at the start of each block
	info := c.partition("t", 0)
	if info.SizeBytes > 1000 || info.SizeBytes < 600 || info.NextOffset != 6 {
		t.Fatalf("partition = %v, want at most 1000 bytes held, oldest records dropped", info)
	}
	recs := c.readAll("t", 0)
	if uint64(len(recs)) != info.NextOffset-info.LogStartOffset || recs[0].Offset != info.LogStartOffset {
		t.Errorf("records %s do not match the partition's log start %d", values(recs), info.LogStartOffset)
	}
}

func TestNoRetentionKeepsEverything(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, records("a"))))
	for i := 0; i < 5; i++ {
		c.block()
	}
	if got := values(c.readAll("t", 0)); got != "0:a" {
		t.Errorf("topic without retention = %s, want 0:a", got)
	}
}
