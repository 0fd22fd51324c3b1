package core_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

func TestProduceAssignsDenseOffsets(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("orders", &byzlogv1.TopicConfig{Partitions: 2})
	p := wire.NewSigner(key("p"), chainID)

	r := c.must(bundle(t, batch(t, p, "orders", 0, 0, records("a", "b", "c")), batch(t, p, "orders", 1, 0, records("x"))))
	got := outcome(t, r).Batches
	if len(got) != 2 || got[0].BaseOffset != 0 || got[0].RecordCount != 3 || got[1].BaseOffset != 0 || got[1].RecordCount != 1 {
		t.Fatalf("first bundle outcome = %v, want offsets 0..2 on partition 0 and 0 on partition 1", got)
	}
	if len(r.Events) != 2 || r.Events[0].Type != "byzlog.append" {
		t.Errorf("events = %v, want one byzlog.append per batch", r.Events)
	}
	appendHeight := c.state.Height
	// Two batches of one producer-partition in one bundle, then in separate txs of one block.
	r = c.must(bundle(t, batch(t, p, "orders", 0, 1, records("d")), batch(t, p, "orders", 0, 2, records("e", "f"))))
	if got := outcome(t, r).Batches; got[0].BaseOffset != 3 || got[1].BaseOffset != 4 {
		t.Fatalf("second bundle offsets = %d, %d, want 3, 4", got[0].BaseOffset, got[1].BaseOffset)
	}
	res := c.block(bundle(t, batch(t, p, "orders", 0, 3, records("g"))), bundle(t, batch(t, p, "orders", 0, 4, records("h"))))
	for i, r := range res {
		if !r.OK() || outcome(t, r).Batches[0].BaseOffset != uint64(6+i) {
			t.Fatalf("tx %d of one block = %s %q, want offset %d", i, r.Code, r.Log, 6+i)
		}
	}
	recs := c.readAll("orders", 0)
	if got, want := values(recs), "0:a,1:b,2:c,3:d,4:e,5:f,6:g,7:h"; got != want {
		t.Fatalf("partition 0 = %s, want %s", got, want)
	}
	first := recs[0]
	if first.Height != appendHeight || first.TimestampUnixNano != 1_700_000_000_000_000_000+2*1_000_000_000 ||
		!bytes.Equal(first.ProducerKey, p.PublicKey()) || first.Sequence != 0 || string(first.Key) != "ka" {
		t.Errorf("stored record 0 = %v, want height %d, block time, producer, sequence 0, key ka", first, appendHeight)
	}
	if info := c.partition("orders", 0); info.NextOffset != 8 || info.SizeBytes == 0 {
		t.Errorf("partition 0 = %v, want next offset 8 and a size", info)
	}
}

func TestDuplicateBatchKeepsOriginalOffsets(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	b0 := batch(t, p, "t", 0, 0, records("a", "b"))
	c.must(bundle(t, b0))
	c.must(bundle(t, batch(t, p, "t", 0, 1, records("c"))))

	for name, r := range map[string]core.Result{"CheckTx": c.check(bundle(t, b0)), "block": c.block(bundle(t, b0))[0]} {
		if r.Code != wire.CodeDuplicate {
			t.Fatalf("%s of a committed batch = %s %q, want %s", name, r.Code, r.Log, wire.CodeDuplicate)
		}
		br := outcome(t, r).Batches[0]
		if !br.Duplicate || br.BaseOffset != 0 || br.RecordCount != 2 {
			t.Errorf("%s duplicate outcome = %v, want duplicate with the original offsets 0 (2 records)", name, br)
		}
	}
	if got := values(c.readAll("t", 0)); got != "0:a,1:b,2:c" {
		t.Errorf("partition = %s after retries, want 0:a,1:b,2:c: nothing appended twice", got)
	}
}

func TestSequenceGapWaitsForTheMissingBatch(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, records("a"))))
	ahead := bundle(t, batch(t, p, "t", 0, 2, records("c")))

	if r := c.check(ahead); !r.OK() {
		t.Fatalf("CheckTx(sequence 2 while 1 may be in the mempool) = %s %q, want ok", r.Code, r.Log)
	}
	if r := c.block(ahead)[0]; r.Code != wire.CodeSequenceGap || !strings.Contains(r.Log, "next sequence is 1") {
		t.Fatalf("block with sequence 2 after 0 = %s %q, want %s naming the next sequence", r.Code, r.Log, wire.CodeSequenceGap)
	}
	// The missing batch and the waiting one, in order, in one block.
	res := c.block(bundle(t, batch(t, p, "t", 0, 1, records("b"))), ahead)
	if !res[0].OK() || !res[1].OK() {
		t.Fatalf("in-order block = %s, %s", res[0].Code, res[1].Code)
	}
	if got := values(c.readAll("t", 0)); got != "0:a,1:b,2:c" {
		t.Errorf("partition = %s, want 0:a,1:b,2:c", got)
	}
}

func TestBundleIsAllOrNothing(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	r := c.block(bundle(t, batch(t, p, "t", 0, 0, records("a")), batch(t, p, "nope", 0, 0, records("b"))))[0]
	if r.Code != wire.CodeUnknownTopic || !strings.Contains(r.Log, "batch 1") {
		t.Fatalf("bundle with an unknown topic in batch 1 = %s %q, want %s naming batch 1", r.Code, r.Log, wire.CodeUnknownTopic)
	}
	o := outcome(t, r)
	if o.Batches[0].Code != 0 || o.Batches[0].RecordCount != 0 || o.Batches[1].Code != uint32(wire.CodeUnknownTopic) {
		t.Errorf("outcome = %v, want batch 0 not applied (no offsets) and batch 1 rejected", o.Batches)
	}
	if info := c.partition("t", 0); info.NextOffset != 0 {
		t.Errorf("next offset = %d after a rejected bundle, want 0", info.NextOffset)
	}
	// The good batch alone still goes through with sequence 0.
	c.must(bundle(t, batch(t, p, "t", 0, 0, records("a"))))
}

func TestBatchRules(t *testing.T) {
	limits := `"limits": {"max_batch_records": 3, "max_headers": 2, "max_record_bytes": 100, "max_batch_bytes": 1000}`
	admin := wire.NewSigner(key("admin"), chainID)
	genesis := fmt.Sprintf(`{"admins": [%q], %s}`, hex.EncodeToString(admin.PublicKey()), limits)
	p := wire.NewSigner(key("p"), chainID)
	stranger := wire.NewSigner(key("stranger"), chainID)
	otherChain := wire.NewSigner(key("p"), "other-chain")

	raw := func(body *byzlogv1.BatchBody) *byzlogv1.SignedBatch {
		body.ChainId = chainID
		b, err := proto.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		return &byzlogv1.SignedBatch{Body: b, ProducerKey: p.PublicKey(), Signature: ed25519.Sign(key("p"), b)}
	}
	recordSet := func(recs ...*byzlogv1.Record) []byte {
		b, err := proto.Marshal(&byzlogv1.RecordSet{Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	twoRecords := recordSet(records("a", "b")...)
	header := &byzlogv1.RecordHeader{Key: "h", Value: []byte("v")}

	tests := []struct {
		name string
		b    *byzlogv1.SignedBatch
		want wire.Code
	}{
		{"ok", batch(t, p, "t", 0, 0, records("a")), wire.CodeOK},
		{"wrong chain", batch(t, otherChain, "t", 0, 0, records("a")), wire.CodeWrongChain},
		{"unknown topic", batch(t, p, "nope", 0, 0, records("a")), wire.CodeUnknownTopic},
		{"unknown partition", batch(t, p, "t", 2, 0, records("a")), wire.CodeUnknownPartition},
		{"producer not allowed", batch(t, stranger, "acl", 0, 0, records("a")), wire.CodeNotAllowed},
		{"allowed producer", batch(t, p, "acl", 0, 0, records("a")), wire.CodeOK},
		{"record over the chain limit", batch(t, p, "t", 0, 0, records(strings.Repeat("x", 101))), wire.CodeRecordTooLarge},
		{"record over the topic limit", batch(t, p, "small", 0, 0, records(strings.Repeat("x", 20))), wire.CodeRecordTooLarge},
		{"headers count toward the record size", batch(t, p, "small", 0, 0, []*byzlogv1.Record{{Value: []byte("123456789"), Headers: []*byzlogv1.RecordHeader{header}}}), wire.CodeRecordTooLarge},
		{"too many headers", batch(t, p, "t", 0, 0, []*byzlogv1.Record{{Headers: []*byzlogv1.RecordHeader{header, header, header}}}), wire.CodeTooManyHeaders},
		{"too many records", batch(t, p, "t", 0, 0, records("a", "b", "c", "d")), wire.CodeBatchTooLarge},
		{"empty batch", batch(t, p, "t", 0, 0, nil), wire.CodeEmptyBatch},
		{"body not protobuf", &byzlogv1.SignedBatch{Body: []byte{0xff}, ProducerKey: p.PublicKey(), Signature: ed25519.Sign(key("p"), []byte{0xff})}, wire.CodeMalformedTx},
		{"records not a record set", raw(&byzlogv1.BatchBody{Topic: "t", Records: []byte{0xff}, UncompressedSize: 1}), wire.CodeMalformedTx},
		{"declared size wrong", raw(&byzlogv1.BatchBody{Topic: "t", Records: twoRecords, UncompressedSize: uint32(len(twoRecords)) + 1}), wire.CodeBatchTooLarge},
		{"declared size over max_batch_bytes", raw(&byzlogv1.BatchBody{Topic: "t", Records: twoRecords, UncompressedSize: 1001}), wire.CodeBatchTooLarge},
		{"zstd garbage", raw(&byzlogv1.BatchBody{Topic: "t", Codec: byzlogv1.Codec_CODEC_ZSTD, Records: []byte("not zstd"), UncompressedSize: 10}), wire.CodeBadCompression},
		{"unknown codec", raw(&byzlogv1.BatchBody{Topic: "t", Codec: 7, Records: twoRecords, UncompressedSize: uint32(len(twoRecords))}), wire.CodeBadCompression},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newChain(t, genesis)
			c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
			c.createTopic("small", &byzlogv1.TopicConfig{Partitions: 1, MaxRecordBytes: 10})
			c.createTopic("acl", &byzlogv1.TopicConfig{Partitions: 1, AllowedProducers: [][]byte{p.PublicKey()}})
			tx := bundle(t, tt.b)
			for name, r := range map[string]core.Result{"CheckTx": c.check(tx), "block": c.block(tx)[0]} {
				if r.Code != tt.want {
					t.Fatalf("%s(%s) = %s %q, want %s", name, tt.name, r.Code, r.Log, tt.want)
				}
				if !r.OK() && (r.Log == "" || len(outcome(t, r).Batches) != 1) {
					t.Errorf("%s(%s): log %q, data %x: want a reason and the batch's outcome", name, tt.name, r.Log, r.Data)
				}
			}
		})
	}
}

func TestZstdBatch(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	recs := records(strings.Repeat("compressible ", 50), "b")
	b, err := p.Batch("t", 0, 0, byzlogv1.Codec_CODEC_ZSTD, recs)
	if err != nil {
		t.Fatal(err)
	}
	plain := batch(t, p, "t", 0, 0, recs)
	if len(b.Body) >= len(plain.Body) {
		t.Errorf("zstd body is %d bytes, plain %d: want it smaller", len(b.Body), len(plain.Body))
	}
	c.must(bundle(t, b))
	got := c.readAll("t", 0)
	if len(got) != 2 || string(got[0].Value) != string(recs[0].Value) {
		t.Fatalf("records after a zstd batch = %s, want the two records", values(got))
	}
}

// TestZstdBatchPastTheRatio commits records that compress far better than
// the chain's 256:1 ratio (3 MiB of zeros zstd to ~300 bytes): the signer
// pads the frame to 1/256 of their size with a skippable frame, and the
// chain takes it and returns the records intact.
func TestZstdBatchPastTheRatio(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	big := make([]byte, 1<<20)
	recs := []*byzlogv1.Record{{Value: big}, {Value: big}, {Value: big}}
	b, err := p.Batch("t", 0, 0, byzlogv1.Codec_CODEC_ZSTD, recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Body) > 3<<20/wire.MaxCompressionRatio+1<<10 {
		t.Errorf("zstd body is %d bytes for 3 MiB of zeros: want it near 1/%d of them", len(b.Body), wire.MaxCompressionRatio)
	}
	c.must(bundle(t, b))
	got := c.readAll("t", 0)
	if len(got) != 3 || !bytes.Equal(got[2].Value, big) {
		t.Fatalf("records after the batch: %d, want the three 1 MiB records", len(got))
	}
}

func TestAdminRules(t *testing.T) {
	c := newChain(t, "")
	a := c.admin
	mallory := wire.NewSigner(key("mallory"), chainID)
	wrongChain := wire.NewSigner(key("admin"), "other-chain")
	create := func(name string, parts uint32) *byzlogv1.CreateTopic {
		return &byzlogv1.CreateTopic{Name: name, Config: &byzlogv1.TopicConfig{Partitions: parts}}
	}
	steps := []struct {
		name string
		tx   []byte
		want wire.Code
	}{
		{"create", c.adminTx(a, 0, create("t", 2)), wire.CodeOK},
		{"replayed nonce", c.adminTx(a, 0, create("u", 1)), wire.CodeBadNonce},
		{"nonce ahead", c.adminTx(a, 5, create("u", 1)), wire.CodeBadNonce},
		{"not an admin", c.adminTx(mallory, 0, create("u", 1)), wire.CodeNotAdmin},
		{"wrong chain", c.adminTx(wrongChain, 1, create("u", 1)), wire.CodeWrongChain},
		{"exists", c.adminTx(a, 1, create("t", 1)), wire.CodeTopicExists},
		{"bad name", c.adminTx(a, 1, create("a/b", 1)), wire.CodeBadTopicName},
		{"long name", c.adminTx(a, 1, create(strings.Repeat("x", 250), 1)), wire.CodeBadTopicName},
		{"zero partitions", c.adminTx(a, 1, create("u", 0)), wire.CodeBadTopicConfig},
		{"too many partitions", c.adminTx(a, 1, create("u", 1025)), wire.CodeBadTopicConfig},
		{"negative retention", c.adminTx(a, 1, &byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: -1}}), wire.CodeBadTopicConfig},
		{"bad allowed key", c.adminTx(a, 1, &byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1, AllowedProducers: [][]byte{{1}}}}), wire.CodeBadTopicConfig},
		{"bad reader key", c.adminTx(a, 1, &byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1, Readers: [][]byte{{1}}}}), wire.CodeBadTopicConfig},
		{"reader twice", c.adminTx(a, 1, &byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1, Readers: [][]byte{make([]byte, 32), make([]byte, 32)}}}), wire.CodeBadTopicConfig},
		{"too many readers", c.adminTx(a, 1, &byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1, Readers: readerKeys(wire.MaxReaders + 1)}}), wire.CodeBadTopicConfig},
		{"shrink", c.adminTx(a, 1, &byzlogv1.UpdateTopic{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 1}}), wire.CodeBadTopicConfig},
		{"update unknown", c.adminTx(a, 1, &byzlogv1.UpdateTopic{Name: "nope", Config: &byzlogv1.TopicConfig{Partitions: 1}}), wire.CodeUnknownTopic},
		{"grow", c.adminTx(a, 1, &byzlogv1.UpdateTopic{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 3}}), wire.CodeOK},
		{"delete unknown", c.adminTx(a, 2, &byzlogv1.DeleteTopic{Name: "nope"}), wire.CodeUnknownTopic},
	}
	for _, s := range steps {
		if r := c.block(s.tx)[0]; r.Code != s.want || (!r.OK() && r.Log == "") {
			t.Fatalf("%s = %s %q, want %s", s.name, r.Code, r.Log, s.want)
		}
	}
	if info := c.partition("t", 2); info.NextOffset != 0 {
		t.Errorf("grown partition 2 = %v, want an empty partition", info)
	}
}

// readerKeys returns n distinct 32-byte keys.
func readerKeys(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, 32)
		out[i][0], out[i][1] = byte(i), byte(i>>8)
	}
	return out
}

func TestDeleteTopicAndCreateAgain(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	old := batch(t, p, "t", 0, 0, records("a", "b"))
	c.must(bundle(t, old))
	c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteTopic{Name: "t"}))

	if r := c.block(bundle(t, batch(t, p, "t", 0, 1, records("c"))))[0]; r.Code != wire.CodeUnknownTopic {
		t.Fatalf("produce to a deleted topic = %s, want %s", r.Code, wire.CodeUnknownTopic)
	}
	var list byzlogv1.TopicList
	c.query(wire.PathTopics, nil, &list)
	if len(list.Topics) != 0 {
		t.Fatalf("topics after delete = %v, want none", list.Topics)
	}
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	if got := c.readAll("t", 0); len(got) != 0 {
		t.Fatalf("re-created topic holds %s, want nothing of the old one", values(got))
	}
	// Old batches cannot be replayed into the new topic: sequences carry on.
	if r := c.block(bundle(t, old))[0]; r.Code != wire.CodeDuplicate {
		t.Fatalf("replay of an old batch into the re-created topic = %s, want %s", r.Code, wire.CodeDuplicate)
	}
	c.must(bundle(t, batch(t, p, "t", 0, 1, records("c"))))
	if got := values(c.readAll("t", 0)); got != "0:c" {
		t.Errorf("re-created topic = %s, want 0:c", got)
	}
}

func TestDeleteAndCreateInOneBlock(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	n := c.nextNonce(c.admin)
	res := c.block(
		bundle(t, batch(t, p, "t", 0, 0, records("old"))),
		c.adminTx(c.admin, n, &byzlogv1.DeleteTopic{Name: "t"}),
		c.adminTx(c.admin, n+1, &byzlogv1.CreateTopic{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 1}}),
		bundle(t, batch(t, p, "t", 0, 1, records("new"))),
	)
	c.nonces[string(c.admin.PublicKey())] = n + 2
	for i, r := range res {
		if !r.OK() {
			t.Fatalf("tx %d = %s %q", i, r.Code, r.Log)
		}
	}
	if got := values(c.readAll("t", 0)); got != "0:new" {
		t.Errorf("topic after delete and create in one block = %s, want 0:new", got)
	}
}

func TestCommitOffsetsRules(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, records("a", "b", "c", "d", "e"))))
	alice, bob := wire.NewSigner(key("alice"), chainID), wire.NewSigner(key("bob"), chainID)
	commit := func(s *wire.Signer, nonce uint64, group string, rewind bool, offs ...*byzlogv1.PartitionOffset) []byte {
		co, err := s.CommitOffsets(nonce, group, rewind, offs...)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := wire.OffsetsTx(co)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	at := func(off uint64) *byzlogv1.PartitionOffset {
		return &byzlogv1.PartitionOffset{Topic: "t", Offset: off, Metadata: "m"}
	}
	steps := []struct {
		name string
		tx   []byte
		want wire.Code
	}{
		{"first commit claims the group", commit(alice, 0, "g", false, at(3)), wire.CodeOK},
		{"another key", commit(bob, 0, "g", false, at(4)), wire.CodeNotGroupOwner},
		{"replayed nonce", commit(alice, 0, "g", false, at(4)), wire.CodeBadNonce},
		{"backwards", commit(alice, 1, "g", false, at(2)), wire.CodeOffsetBackwards},
		{"unknown topic", commit(alice, 1, "g", false, &byzlogv1.PartitionOffset{Topic: "nope"}), wire.CodeUnknownTopic},
		{"unknown partition", commit(alice, 1, "g", false, &byzlogv1.PartitionOffset{Topic: "t", Partition: 2}), wire.CodeUnknownPartition},
		{"listed twice", commit(alice, 1, "g", false, at(4), at(5)), wire.CodeMalformedTx},
		{"no offsets", commit(alice, 1, "g", false), wire.CodeMalformedTx},
		{"empty group", commit(alice, 1, "", false, at(4)), wire.CodeBadGroup},
		{"big metadata", commit(alice, 1, "g", false, &byzlogv1.PartitionOffset{Topic: "t", Metadata: strings.Repeat("m", 4097)}), wire.CodeMalformedTx},
		{"forward", commit(alice, 1, "g", false, at(5)), wire.CodeOK},
		{"rewind", commit(alice, 2, "g", true, at(1), &byzlogv1.PartitionOffset{Topic: "t", Partition: 1}), wire.CodeOK},
	}
	for _, s := range steps {
		if r := c.block(s.tx)[0]; r.Code != s.want || (!r.OK() && r.Log == "") {
			t.Fatalf("%s = %s %q, want %s", s.name, r.Code, r.Log, s.want)
		}
	}
	var g byzlogv1.GroupOffsets
	c.query(wire.PathGroup, &byzlogv1.GroupRequest{Group: "g"}, &g)
	if !bytes.Equal(g.OwnerKey, alice.PublicKey()) || len(g.Offsets) != 2 || g.Offsets[0].Offset != 1 || g.Offsets[1].Partition != 1 {
		t.Errorf("group g = %v, want alice's offsets 1 (p0) and 0 (p1)", &g)
	}
}

// TestCommitPastTheEnd: from rules version 5 a commit may name any offset,
// past the log end too (Kafka's coordinator takes any; the consumer's
// position is its own); before, it is offset_beyond_end.
func TestCommitPastTheEnd(t *testing.T) {
	for _, tc := range []struct {
		rules uint64
		want  wire.Code
	}{{4, wire.CodeOffsetBeyondEnd}, {5, wire.CodeOK}} {
		admin := wire.NewSigner(key("admin"), chainID)
		c := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(admin.PublicKey()), tc.rules))
		c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
		c.must(bundle(t, batch(t, wire.NewSigner(key("p"), chainID), "t", 0, 0, records("a", "b"))))
		co, err := wire.NewSigner(key("alice"), chainID).CommitOffsets(0, "g", true, &byzlogv1.PartitionOffset{Topic: "t", Offset: 1000})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := wire.OffsetsTx(co)
		if err != nil {
			t.Fatal(err)
		}
		if r := c.block(tx)[0]; r.Code != tc.want {
			t.Errorf("rules %d: a commit of offset 1000 in a log of 2 = %s %q, want %s", tc.rules, r.Code, r.Log, tc.want)
		}
	}
}

// TestVerifyRejectsByzantineBlocks: a proposer that includes a forged,
// replayed, oversized or misdirected batch gets its block rejected, while the
// valid block is accepted and Prepare would have left the bad txs out.
func TestVerifyRejectsByzantineBlocks(t *testing.T) {
	c := newChain(t, `{"admins": [], "topics": [{"name": "t", "partitions": 1, "max_record_bytes": 64}]}`)
	p := wire.NewSigner(key("p"), chainID)
	first := batch(t, p, "t", 0, 0, records("a"))
	c.must(bundle(t, first))
	good := bundle(t, batch(t, p, "t", 0, 1, records("b")))
	forged := batch(t, p, "t", 0, 1, records("b"))
	forged.Body = bytes.Replace(forged.Body, []byte("kb"), []byte("kX"), 1)

	bad := []struct {
		name string
		tx   []byte
		want wire.Code
	}{
		{"forged signature", bundle(t, forged), wire.CodeBadSignature},
		{"replayed sequence", bundle(t, first), wire.CodeDuplicate},
		{"oversized record", bundle(t, batch(t, wire.NewSigner(key("q"), chainID), "t", 0, 0, records(strings.Repeat("x", 65)))), wire.CodeRecordTooLarge},
		{"unknown topic", bundle(t, batch(t, p, "nope", 0, 0, records("a"))), wire.CodeUnknownTopic},
		{"sequence gap", bundle(t, batch(t, p, "t", 0, 5, records("a"))), wire.CodeSequenceGap},
		{"same batch twice in a block", good, wire.CodeDuplicate},
	}
	next := core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time + 1}
	for _, b := range bad {
		next.Txs = [][]byte{good, b.tx}
		idx, r, err := core.Verify(c.store, next)
		if err != nil {
			t.Fatal(err)
		}
		if idx != 1 || r.Code != b.want {
			t.Errorf("Verify(good, %s) = tx %d %s, want tx 1 %s", b.name, idx, r.Code, b.want)
		}
		picked, err := core.Prepare(c.store, next, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(picked) != 1 || !bytes.Equal(picked[0], good) {
			t.Errorf("Prepare(good, %s) picked %d txs, want only the good one", b.name, len(picked))
		}
	}
	next.Txs = [][]byte{good}
	if idx, r, err := core.Verify(c.store, next); err != nil || idx != -1 {
		t.Fatalf("Verify(good block) = tx %d %s %v, want accepted", idx, r.Code, err)
	}
}

func TestPrepareRespectsMaxBytes(t *testing.T) {
	c := newChain(t, `{"topics": [{"name": "t", "partitions": 1}]}`)
	var txs [][]byte
	for i := 0; i < 5; i++ {
		txs = append(txs, bundle(t, batch(t, wire.NewSigner(key(fmt.Sprint(i)), chainID), "t", 0, 0, records(strings.Repeat("x", 100)))))
	}
	budget := int64(len(txs[0])*3 + 10)
	picked, err := core.Prepare(c.store, core.Block{Height: 1, TimeUnixNano: 1, Txs: txs}, budget)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, tx := range picked {
		size += int64(len(tx))
	}
	if len(picked) != 3 || size > budget {
		t.Errorf("Prepare(5 txs, room for 3) picked %d txs of %d bytes (budget %d)", len(picked), size, budget)
	}
}

func TestGenesis(t *testing.T) {
	admin := hex.EncodeToString(key("admin").Public().(ed25519.PublicKey))
	tests := []struct {
		appState string
		wantErr  string
	}{
		{``, ""},
		{`{}`, ""},
		{fmt.Sprintf(`{"admins": [%q], "limits": {"max_headers": 4}, "topics": [{"name": "t", "partitions": 3}]}`, admin), ""},
		{`{"admins": ["zz"]}`, "not hex"},
		{`{"admins": ["abcd"]}`, "2 bytes"},
		{fmt.Sprintf(`{"admins": [%q, %q]}`, admin, admin), "listed twice"},
		{`{"admin": []}`, "unknown field"},
		{`{"limits": {"max_record_bytes": 5000000}}`, "max_record_bytes"},
		{`{"topics": [{"name": "bad name", "partitions": 1}]}`, "topics[0]"},
		{`{"topics": [{"name": "t", "partitions": 0}]}`, "partitions (0)"},
		{`{"topics": [{"name": "t", "partitions": 1}, {"name": "t", "partitions": 1}]}`, "listed twice"},
		{`{"rules_version": 3}`, ""},
		{`{"rules_version": 4}`, ""},
		{`{"rules_version": 5}`, ""},
		{`{"rules_version": 6}`, ""},
		{`{"rules_version": 7}`, ""},
		{`{"rules_version": 8}`, ""},
		{`{"rules_version": 11}`, "knows versions 1 to 10"},
	}
	for _, tt := range tests {
		_, _, err := core.ParseGenesis(chainID, []byte(tt.appState))
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("ParseGenesis(%s) = %v, want error containing %q", tt.appState, err, tt.wantErr)
		}
	}
	if _, _, err := core.ParseGenesis("", nil); err == nil {
		t.Error("ParseGenesis with no chain id = nil error")
	}
}

func TestExecuteRejectsHeightsOutOfSequence(t *testing.T) {
	c := newChain(t, "")
	c.block()
	c.block()
	for _, h := range []int64{2, 4, 0} {
		if _, err := core.Execute(c.store, c.state, core.Block{Height: h}); err == nil {
			t.Errorf("Execute(committed 2, block %d) = nil error, want an error", h)
		}
	}
	if _, err := core.Execute(newMemStore(), core.State{}, core.Block{Height: 1}); err == nil {
		t.Error("Execute on a store without InitChain = nil error, want an error")
	}
}

func TestBundleBatchLimitBeforeSignatures(t *testing.T) {
	c := newChain(t, `{"limits": {"max_bundle_batches": 2}, "topics": [{"name": "t", "partitions": 1}]}`)
	p := wire.NewSigner(key("p"), chainID)
	b := batch(t, p, "t", 0, 0, records("a"))
	forged := batch(t, p, "t", 0, 1, records("b"))
	forged.Signature = make([]byte, ed25519.SignatureSize)
	// Three batches, the last forged: the count is what is reported, because
	// it is checked before any signature is verified.
	if r := c.check(bundle(t, b, b, forged)); r.Code != wire.CodeBundleTooLarge {
		t.Errorf("Check(3 batches, limit 2) = %s %q, want %s", r.Code, r.Log, wire.CodeBundleTooLarge)
	}
}

// TestPrepareRefsCountsReferences: with references, a bundle of at least
// wire.MinBundleRefBytes costs the block its 36-byte reference, so a
// block.max_bytes that carries 3 such bundles whole takes all 5, within
// the resolved budget; the resolved budget still bounds them, and a
// bundle below the reference size counts whole.
func TestPrepareRefsCountsReferences(t *testing.T) {
	c := newChain(t, `{"topics": [{"name": "t", "partitions": 1}]}`)
	var big, small [][]byte
	for i := range 5 {
		big = append(big, bundle(t, batch(t, wire.NewSigner(key(fmt.Sprint(i)), chainID), "t", 0, 0, records(strings.Repeat("x", 2000)))))
		small = append(small, bundle(t, batch(t, wire.NewSigner(key(fmt.Sprint("small", i)), chainID), "t", 0, 0, records("y"))))
	}
	if len(big[0]) < wire.MinBundleRefBytes || len(small[0]) >= wire.MinBundleRefBytes {
		t.Fatalf("bundles of %d and %d bytes: want one past and one below %d", len(big[0]), len(small[0]), wire.MinBundleRefBytes)
	}
	wireBudget := int64(len(big[0])*3 + 10)
	for _, tc := range []struct {
		name     string
		txs      [][]byte
		resolved int64
		want     int
	}{
		{"references fit where the bundles would not", big, 1 << 20, 5},
		{"the resolved budget still bounds them", big, int64(len(big[0])*2 + 10), 2},
		{"small bundles are carried and count whole", small, 1 << 20, min(5, int(wireBudget)/(len(small[0])+3))},
	} {
		picked, err := core.PrepareRefs(c.store, core.Block{Height: 1, TimeUnixNano: 1, Txs: tc.txs}, tc.resolved, wireBudget, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(picked) != tc.want {
			t.Errorf("%s: picked %d, want %d", tc.name, len(picked), tc.want)
		}
	}
	// Without references every bundle counts whole against both.
	picked, err := core.PrepareRefs(c.store, core.Block{Height: 1, TimeUnixNano: 1, Txs: big}, 1<<20, wireBudget, false)
	if err != nil || len(picked) != 3 {
		t.Errorf("without references: picked %d (%v), want 3", len(picked), err)
	}
}
