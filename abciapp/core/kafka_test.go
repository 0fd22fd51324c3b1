package core_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// kbatch signs a Kafka producer's batch: seq is its Kafka base sequence.
func kbatch(t testing.TB, s *wire.Signer, pid int64, epoch, seq int32, recs []*byzlogv1.Record) *byzlogv1.SignedBatch {
	t.Helper()
	b, err := s.KafkaBatch("t", 0, pid, epoch, seq, byzlogv1.Codec_CODEC_NONE, 0, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKafkaProducerSequences: a Kafka producer's sequences count records
// in a space of its own per producer id; a retry is a duplicate with the
// original offsets, a gap waits, a new epoch starts at 0 and fences the
// old one, and the key's byzlog sequences are untouched by it.
func TestKafkaProducerSequences(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	first := kbatch(t, p, 7, 0, 0, records("a", "b", "c"))
	c.must(bundle(t, first))
	c.must(bundle(t, batch(t, p, "t", 0, 0, records("sdk"))))  // the key's own sequence 0
	c.must(bundle(t, kbatch(t, p, 9, 0, 0, records("other")))) // another producer id of the key

	steps := []struct {
		name string
		tx   []byte
		want wire.Code
		log  string
	}{
		{"retry of the first batch", bundle(t, first), wire.CodeDuplicate, "offsets 0..2"},
		{"a batch inside the committed one", bundle(t, kbatch(t, p, 7, 0, 1, records("b"))), wire.CodeSequenceReused, "inside a committed batch"},
		{"a gap past the next sequence 3", bundle(t, kbatch(t, p, 7, 0, 4, records("e"))), wire.CodeSequenceGap, "next sequence is 3"},
		{"the next batch", bundle(t, kbatch(t, p, 7, 0, 3, records("d", "e"))), wire.CodeOK, ""},
		{"a new epoch not at 0", bundle(t, kbatch(t, p, 7, 1, 5, records("f"))), wire.CodeSequenceGap, "next sequence is 0"},
		{"a new epoch at 0", bundle(t, kbatch(t, p, 7, 1, 0, records("f"))), wire.CodeOK, ""},
		{"the old epoch after it", bundle(t, kbatch(t, p, 7, 0, 5, records("g"))), wire.CodeProducerFenced, "fenced"},
		{"a retry of a committed batch of the old epoch", bundle(t, first), wire.CodeDuplicate, "offsets 0..2"},
		{"the new epoch's next", bundle(t, kbatch(t, p, 7, 1, 1, records("g"))), wire.CodeOK, ""},
	}
	for _, s := range steps {
		r := c.block(s.tx)[0]
		if r.Code != s.want || !strings.Contains(r.Log, s.log) {
			t.Fatalf("%s = %s %q, want %s with %q", s.name, r.Code, r.Log, s.want, s.log)
		}
	}
	if got := values(c.readAll("t", 0)); got != "0:a,1:b,2:c,3:sdk,4:other,5:d,6:e,7:f,8:g" {
		t.Errorf("partition = %s, want each record once", got)
	}
	recs := c.readAll("t", 0)
	if r := recs[5]; r.KafkaProducerId != 7 || r.KafkaEpoch != 0 || r.Sequence != 3 {
		t.Errorf("record d = producer %d epoch %d sequence %d, want 7, 0, 3", r.KafkaProducerId, r.KafkaEpoch, r.Sequence)
	}
	if r := recs[3]; r.KafkaProducerId != 0 || r.Sequence != 0 {
		t.Errorf("the SDK's record = producer %d sequence %d, want no kafka producer, sequence 0", r.KafkaProducerId, r.Sequence)
	}
	var ps byzlogv1.ProducerState
	c.query(wire.PathProducer, &byzlogv1.ProducerRequest{ProducerKey: p.PublicKey(), Topic: "t", Kafka: &byzlogv1.KafkaProducer{ProducerId: 7}}, &ps)
	if ps.NextSequence != 2 || ps.KafkaEpoch != 1 {
		t.Errorf("producer 7's state = next %d epoch %d, want 2 in epoch 1", ps.NextSequence, ps.KafkaEpoch)
	}
	c.query(wire.PathProducer, &byzlogv1.ProducerRequest{ProducerKey: p.PublicKey(), Topic: "t"}, &ps)
	if ps.NextSequence != 1 || ps.KafkaEpoch != 0 {
		t.Errorf("the key's byzlog state = next %d epoch %d, want 1", ps.NextSequence, ps.KafkaEpoch)
	}
}

// TestKafkaProducerGapWaitsInTheMempool: CheckTx lets a Kafka batch ahead
// of the next sequence (in records) wait, and a block takes the two in order.
func TestKafkaProducerGapWaitsInTheMempool(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	ahead := bundle(t, kbatch(t, p, 1, 0, 2, records("c")))
	if r := c.check(ahead); !r.OK() {
		t.Fatalf("CheckTx(kafka sequence 2 while 0..1 may be in the mempool) = %s %q, want ok", r.Code, r.Log)
	}
	far := bundle(t, kbatch(t, p, 1, 0, wire.MaxKafkaLookahead+1, records("z")))
	if r := c.check(far); r.Code != wire.CodeSequenceGap {
		t.Fatalf("CheckTx(kafka sequence past the lookahead) = %s %q, want %s", r.Code, r.Log, wire.CodeSequenceGap)
	}
	res := c.block(bundle(t, kbatch(t, p, 1, 0, 0, records("a", "b"))), ahead)
	if !res[0].OK() || !res[1].OK() {
		t.Fatalf("in-order block = %s %q, %s %q", res[0].Code, res[0].Log, res[1].Code, res[1].Log)
	}
	if got := values(c.readAll("t", 0)); got != "0:a,1:b,2:c" {
		t.Errorf("partition = %s, want 0:a,1:b,2:c", got)
	}
}

// TestKafkaBatchRules: a Kafka batch's producer fields are checked before
// anything is written, each with a message that names what is wrong.
func TestKafkaBatchRules(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	forge := func(k *byzlogv1.KafkaProducer, seq uint64, recs []*byzlogv1.Record) []byte {
		body, _ := decodeBody(t, kbatch(t, p, 1, 0, 0, recs).Body)
		body.Kafka, body.Sequence = k, seq
		return bundle(t, signedBody(t, body))
	}
	cases := []struct {
		name string
		tx   []byte
		log  string
	}{
		{"producer id 0", forge(&byzlogv1.KafkaProducer{ProducerId: 0, RecordCount: 1}, 0, records("a")), "want an id of 1 or more"},
		{"negative epoch", forge(&byzlogv1.KafkaProducer{ProducerId: 1, Epoch: -1, RecordCount: 1}, 0, records("a")), "epoch -1"},
		{"epoch past int16", forge(&byzlogv1.KafkaProducer{ProducerId: 1, Epoch: wire.MaxKafkaEpoch + 1, RecordCount: 1}, 0, records("a")), "epoch 32768"},
		{"no records declared", forge(&byzlogv1.KafkaProducer{ProducerId: 1}, 0, records("a")), "declares 0 records"},
		{"a count that is not the records'", forge(&byzlogv1.KafkaProducer{ProducerId: 1, RecordCount: 2}, 0, records("a")), "declares 2 records and holds 1"},
		{"past Kafka's largest sequence", forge(&byzlogv1.KafkaProducer{ProducerId: 1, RecordCount: 1}, 1<<31, records("a")), "largest sequence"},
	}
	for _, tc := range cases {
		for name, r := range map[string]core.Result{"CheckTx": c.check(tc.tx), "block": c.block(tc.tx)[0]} {
			if r.Code != wire.CodeMalformedTx || !strings.Contains(r.Log, tc.log) {
				t.Errorf("%s: %s = %s %q, want %s with %q", tc.name, name, r.Code, r.Log, wire.CodeMalformedTx, tc.log)
			}
		}
	}
	if got := c.partition("t", 0).NextOffset; got != 0 {
		t.Errorf("next offset = %d after refused batches, want 0", got)
	}
}

// TestKafkaTopicsRules: from rules version 6 a Kafka batch's codec is
// stored with its records, a topic's Kafka settings are checked, and a
// CreateTime topic's timestamp bounds refuse records stamped too far from
// their block's time; before it, none of that (the bytes a version-5 build
// stores and accepts).
func TestKafkaTopicsRules(t *testing.T) {
	for _, rules := range []uint64{core.KafkaTopicsRulesVersion - 1, core.KafkaTopicsRulesVersion} {
		t.Run(fmt.Sprintf("rules=%d", rules), func(t *testing.T) {
			admin := wire.NewSigner(key("admin"), chainID)
			c := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(admin.PublicKey()), rules))
			v6 := rules >= core.KafkaTopicsRulesVersion
			c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, TimestampBeforeMaxMs: 60_000, TimestampAfterMaxMs: 5_000})
			// The last admin request: a refused one does not use its nonce.
			bad := c.block(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.CreateTopic{Name: "bad", Config: &byzlogv1.TopicConfig{Partitions: 1, CompressionType: "brotli"}}))[0]
			if want := map[bool]wire.Code{false: wire.CodeOK, true: wire.CodeBadTopicConfig}[v6]; bad.Code != want {
				t.Fatalf("compression_type brotli = %s %q, want %s", bad.Code, bad.Log, want)
			}
			p := wire.NewSigner(key("p"), chainID)
			now := (c.time + 1_000_000_000) / 1_000_000 // the next block's time, ms
			stamped := func(ms int64) []*byzlogv1.Record {
				return []*byzlogv1.Record{{Value: []byte("v"), CreateTimeUnixNano: ms * 1_000_000}}
			}
			signed := func(seq uint64, ms int64, codec uint32) []byte {
				b, err := p.PlainKafkaBatch("t", 0, seq, byzlogv1.Codec_CODEC_NONE, codec, stamped(ms))
				if err != nil {
					t.Fatal(err)
				}
				return bundle(t, b)
			}
			if r := c.block(signed(0, now-30_000, 1))[0]; r.Code != wire.CodeOK {
				t.Fatalf("a record 30 s old = %s %q", r.Code, r.Log)
			}
			now += 1000
			old := c.block(signed(1, now-61_000, 1))[0]
			now += 1000
			ahead := c.block(signed(1, now+6_000, 1))[0]
			wantBound := map[bool]wire.Code{false: wire.CodeOK, true: wire.CodeBadTimestamp}[v6]
			if o := outcome(t, old).Batches[0]; wire.Code(o.Code) != wantBound {
				t.Errorf("a record 61 s old: %s, want %s", wire.Code(o.Code), wantBound)
			}
			if a := outcome(t, ahead).Batches[0]; v6 && wire.Code(a.Code) != wantBound {
				t.Errorf("a record 6 s ahead: %s, want %s", wire.Code(a.Code), wantBound)
			}
			if v6 && (!strings.Contains(old.Log, "timestamp_before_max_ms") || !strings.Contains(ahead.Log, "timestamp_after_max_ms")) {
				t.Errorf("logs %q and %q do not name the bounds", old.Log, ahead.Log)
			}
			recs := c.readAll("t", 0)
			if want := map[bool]uint32{false: 0, true: 1}[v6]; recs[0].KafkaCodec != want {
				t.Errorf("stored kafka_codec = %d, want %d", recs[0].KafkaCodec, want)
			}
		})
	}
}
