package core_test

import (
	"crypto/ed25519"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Found in review: each of these let a client or a Byzantine proposer make
// validators answer, allocate or store far more than they were sent.

func signedBody(t *testing.T, body *byzlogv1.BatchBody) *byzlogv1.SignedBatch {
	t.Helper()
	b := mustMarshal(t, body)
	return &byzlogv1.SignedBatch{Body: b, ProducerKey: key("p").Public().(ed25519.PublicKey), Signature: ed25519.Sign(key("p"), b)}
}

func TestRejectionsStaySmall(t *testing.T) {
	c := newChain(t, `{"topics": [{"name": "t", "partitions": 1}]}`)
	huge := strings.Repeat("\x01", 500_000)
	tx := bundle(t, signedBody(t, &byzlogv1.BatchBody{ChainId: chainID, Topic: huge}), signedBody(t, &byzlogv1.BatchBody{ChainId: huge, Topic: "t"}))
	for name, r := range map[string]core.Result{"CheckTx": c.check(tx), "block": c.block(tx)[0]} {
		if r.OK() || len(r.Log) > 2048 || len(r.Data) > 4096 {
			t.Errorf("%s(topic of 500 KB) = %s with a %d-byte log and %d bytes of data, want a rejection of a few KB at most", name, r.Code, len(r.Log), len(r.Data))
		}
	}
}

func TestBlockBudget(t *testing.T) {
	c := newChain(t, `{"limits": {"max_batch_records": 3, "max_tx_records": 3, "max_block_records": 5}, "topics": [{"name": "t", "partitions": 1}]}`)
	var txs [][]byte
	for i := 0; i < 3; i++ {
		txs = append(txs, bundle(t, batch(t, wire.NewSigner(key(fmt.Sprint(i)), chainID), "t", 0, 0, records("a", "b"))))
	}
	b := core.Block{Height: 1, TimeUnixNano: 1, Txs: txs}
	picked, err := core.Prepare(c.store, b, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(picked) != 2 {
		t.Errorf("Prepare(3 txs of 2 records, 5 per block) picked %d, want 2", len(picked))
	}
	idx, r, err := core.Verify(c.store, b)
	if err != nil || idx != 2 || r.Code != wire.CodeBlockFull {
		t.Errorf("Verify(6 records, 5 per block) = tx %d %s %v, want tx 2 %s", idx, r.Code, err, wire.CodeBlockFull)
	}
	// A single transaction over max_tx_records is refused everywhere.
	big := bundle(t, batch(t, wire.NewSigner(key("x"), chainID), "t", 0, 0, records("a", "b")), batch(t, wire.NewSigner(key("y"), chainID), "t", 0, 0, records("c", "d")))
	if r := c.check(big); r.Code != wire.CodeBundleTooLarge {
		t.Errorf("Check(4 records, 3 per tx) = %s %q, want %s", r.Code, r.Log, wire.CodeBundleTooLarge)
	}
}

func TestEmptyRecordFloodIsRefusedBeforeDecoding(t *testing.T) {
	c := newChain(t, `{"topics": [{"name": "t", "partitions": 1}]}`)
	// 900,000 empty records: two bytes each on the wire, under the tx limit.
	var raw []byte
	for i := 0; i < 900_000; i++ {
		raw = protowire.AppendTag(raw, 1, protowire.BytesType)
		raw = protowire.AppendVarint(raw, 0)
	}
	tx := bundle(t, signedBody(t, &byzlogv1.BatchBody{ChainId: chainID, Topic: "t", Records: raw, UncompressedSize: uint32(len(raw))}))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := c.check(tx)
	runtime.ReadMemStats(&after)
	if r.Code != wire.CodeBatchTooLarge {
		t.Errorf("Check(900k empty records) = %s %q, want %s", r.Code, r.Log, wire.CodeBatchTooLarge)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Errorf("Check(900k empty records) allocated %d MiB, want the refusal before decoding", got>>20)
	}
}

func TestLookaheadIsBounded(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	if r := c.check(bundle(t, batch(t, p, "t", 0, wire.MaxLookahead, records("a")))); !r.OK() {
		t.Errorf("Check(sequence %d ahead) = %s, want ok", wire.MaxLookahead, r.Code)
	}
	if r := c.check(bundle(t, batch(t, p, "t", 0, wire.MaxLookahead+1, records("a")))); r.Code != wire.CodeSequenceGap {
		t.Errorf("Check(sequence %d ahead) = %s, want %s", wire.MaxLookahead+1, r.Code, wire.CodeSequenceGap)
	}
	if r := c.check(bundle(t, batch(t, p, "t", 0, math.MaxUint64, records("a")))); r.Code != wire.CodeSequenceGap {
		t.Errorf("Check(sequence 2^64-1) = %s, want %s", r.Code, wire.CodeSequenceGap)
	}
	if r := c.check(c.adminTx(c.admin, 1+wire.MaxLookahead+1, &byzlogv1.DeleteTopic{Name: "t"})); r.Code != wire.CodeBadNonce {
		t.Errorf("Check(admin nonce far ahead) = %s, want %s", r.Code, wire.CodeBadNonce)
	}
	// The same sequence twice in one bundle is refused even in the mempool,
	// while sequences out of order within a bundle are left to the block.
	b := batch(t, p, "t", 0, 0, records("a"))
	if r := c.check(bundle(t, b, b)); r.Code != wire.CodeMalformedTx {
		t.Errorf("Check(one batch twice in a bundle) = %s, want %s", r.Code, wire.CodeMalformedTx)
	}
	if r := c.check(bundle(t, batch(t, p, "t", 0, 2, records("c")), batch(t, p, "t", 0, 1, records("b")))); !r.OK() {
		t.Errorf("Check(sequences 2 then 1 in a bundle) = %s %q, want ok: only committed sequences are duplicates", r.Code, r.Log)
	}
}

func TestUnknownFieldsAreRefusedOrDropped(t *testing.T) {
	c := newChain(t, `{"topics": [{"name": "t", "partitions": 1, "max_record_bytes": 100}]}`)
	p := wire.NewSigner(key("p"), chainID)
	tx := bundle(t, batch(t, p, "t", 0, 0, records("a")))
	rewrapped := protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), tx...), 99, protowire.BytesType), []byte("pad"))
	if r := c.check(rewrapped); r.Code != wire.CodeMalformedTx {
		t.Errorf("Check(envelope with an unknown field) = %s, want %s", r.Code, wire.CodeMalformedTx)
	}
	// A header with 200 KB in an unknown field: not stored, not counted.
	h := &byzlogv1.RecordHeader{Key: "h", Value: []byte("v")}
	h.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, 200_000)))
	c.must(bundle(t, batch(t, p, "t", 0, 0, []*byzlogv1.Record{{Value: []byte("x"), Headers: []*byzlogv1.RecordHeader{h}}})))
	var resp byzlogv1.RecordsResponse
	c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t"}, &resp)
	if len(resp.Records) != 1 || len(resp.Records[0]) > 1024 {
		t.Fatalf("stored record is %d bytes, want the unknown header field dropped", len(resp.Records[0]))
	}
	var rec byzlogv1.StoredRecord
	if err := proto.Unmarshal(resp.Records[0], &rec); err != nil || len(rec.Headers) != 1 || rec.Headers[0].Key != "h" {
		t.Errorf("stored headers = %v (%v), want the one known header", rec.Headers, err)
	}
}

func TestRetentionMsCannotOverflow(t *testing.T) {
	c := newChain(t, "")
	r := c.block(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.CreateTopic{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: math.MaxInt64}}))[0]
	if r.Code != wire.CodeBadTopicConfig {
		t.Errorf("create with retention_ms = MaxInt64 = %s, want %s (it would wrap and delete everything)", r.Code, wire.CodeBadTopicConfig)
	}
}
