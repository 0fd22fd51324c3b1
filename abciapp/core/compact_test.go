package core_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// kv is a record of key k with value v; v "" is a tombstone (no value).
func kv(pairs ...string) []*byzlogv1.Record {
	var out []*byzlogv1.Record
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		r := &byzlogv1.Record{Key: []byte(k)}
		if v != "" {
			r.Value = []byte(v)
		}
		out = append(out, r)
	}
	return out
}

// keyed lists records as offset:key=value (key= for a tombstone).
func keyed(recs []*byzlogv1.StoredRecord) string {
	var parts []string
	for _, r := range recs {
		parts = append(parts, fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, r.Value))
	}
	return strings.Join(parts, ",")
}

func ms(n int64) *int64 { return &n }

// TestCompaction: a compacted topic keeps the latest record of each key:
// a record is removed once a later one of its key is passed, a tombstone
// delete_retention_ms after it was passed; offsets stay (holes), the
// records left still prove against their blocks' app hashes, a proof of
// a removed one is refused, and the partition's bytes go down.
func TestCompaction(t *testing.T) {
	c := newChain(t, "")
	// Blocks are 1 s apart: a tombstone stays 2.5 blocks once passed.
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, DeleteRetentionMs: ms(2500)})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("a=1", "b=1", "a=2", "c=1"))))
	proofHash := c.state.AppHash
	var kept byzlogv1.RecordProof
	c.query(wire.PathProof, &byzlogv1.ProofRequest{Topic: "t", Offset: 3}, &kept)
	sizeBefore := c.partition("t", 0).SizeBytes
	c.block() // compaction passes the four records
	if got := keyed(c.readAll("t", 0)); got != "1:b=1,2:a=2,3:c=1" {
		t.Fatalf("after a pass = %s, want a=1 removed", got)
	}
	if after := c.partition("t", 0).SizeBytes; after >= sizeBefore {
		t.Errorf("size %d after removing a record, %d before", after, sizeBefore)
	}
	c.must(bundle(t, batch(t, p, "t", 0, 1, kv("b=", "a=3"))))
	c.block()
	if got := keyed(c.readAll("t", 0)); got != "3:c=1,4:b=,5:a=3" {
		t.Fatalf("after the tombstone of b = %s, want b=1 and a=2 removed, the tombstone kept", got)
	}
	for range 3 {
		c.block()
	}
	if got := keyed(c.readAll("t", 0)); got != "3:c=1,5:a=3" {
		t.Fatalf("delete_retention_ms after the tombstone was passed = %s, want it removed", got)
	}
	info := c.partition("t", 0)
	if info.LogStartOffset != 0 || info.NextOffset != 6 {
		t.Errorf("partition = %v, want offsets unmoved: log start 0, next 6", info)
	}
	// c=1 shares its block's Merkle tree with the removed records.
	var again byzlogv1.RecordProof
	c.query(wire.PathProof, &byzlogv1.ProofRequest{Topic: "t", Offset: 3}, &again)
	rec, err := core.VerifyRecord(&again, proofHash)
	if err != nil || string(rec.Value) != "1" || string(rec.Key) != "c" {
		t.Fatalf("proof of c=1 after compaction = %v, %v; want it to verify against its block's app hash", rec, err)
	}
	_, r, err := core.Query(c.store, c.state, wire.PathProof, mustMarshal(t, &byzlogv1.ProofRequest{Topic: "t", Offset: 0}))
	if err != nil || r.Code != wire.CodeOffsetOutOfRange || !strings.Contains(r.Log, "removed by compaction") {
		t.Errorf("proof of removed a=1 = %s %q %v, want %s saying compaction may have removed it", r.Code, r.Log, err, wire.CodeOffsetOutOfRange)
	}
	// A read from a hole starts at the next record; one past the last
	// record reads to the log end.
	var resp byzlogv1.RecordsResponse
	c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Offset: 4}, &resp)
	if len(resp.Records) != 1 || resp.ReadTo != 6 {
		t.Errorf("read from the hole at 4 = %d records, read to %d; want a=3, read to 6", len(resp.Records), resp.ReadTo)
	}
	c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Offset: 0, MaxRecords: 1}, &resp)
	if len(resp.Records) != 1 || resp.ReadTo != 4 {
		t.Errorf("read of one record from 0 = %d records, read to %d; want c=1, read to 4", len(resp.Records), resp.ReadTo)
	}
}

// TestCompactionRefusesKeylessRecords: a record without a key to a
// compacted topic refuses its batch (no_key, which the Kafka face answers
// INVALID_RECORD) and writes nothing; a delete-policy topic takes it.
func TestCompactionRefusesKeylessRecords(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE})
	c.createTopic("d", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	recs := append(kv("a=1"), &byzlogv1.Record{Value: []byte("no key")})
	r := c.block(bundle(t, batch(t, p, "t", 0, 0, recs)))[0]
	if r.Code != wire.CodeNoKey || !strings.Contains(r.Log, "record 1 has no key") {
		t.Fatalf("keyless record to a compacted topic = %s %q, want %s naming record 1", r.Code, r.Log, wire.CodeNoKey)
	}
	if n := c.partition("t", 0).NextOffset; n != 0 {
		t.Errorf("the refused batch moved the log end to %d", n)
	}
	if b := outcome(t, c.must(bundle(t, batch(t, p, "d", 0, 0, recs)))).Batches[0]; b.Code != 0 {
		t.Errorf("keyless record to a delete topic = %s %q, want it taken", wire.Code(b.Code), b.Log)
	}
}

// TestCompactionConfig: compaction settings are checked from rules
// version 9 on, each refusal naming the setting; before it they are
// taken and ignored (as builds before 9 did), so nothing is compacted.
func TestCompactionConfig(t *testing.T) {
	c := newChain(t, "")
	for _, tc := range []struct {
		cfg  *byzlogv1.TopicConfig
		want string
	}{
		{&byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: 7}, "cleanup_policy 7"},
		{&byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, DeleteRetentionMs: ms(-1)}, "delete_retention_ms (-1)"},
		{&byzlogv1.TopicConfig{Partitions: 1, MinCompactionLagMs: -5}, "min_compaction_lag_ms (-5)"},
		{&byzlogv1.TopicConfig{Partitions: 1, MinCompactionLagMs: 10, MaxCompactionLagMs: 5}, "max_compaction_lag_ms (5) must not be below min_compaction_lag_ms (10)"},
	} {
		r := c.block(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.CreateTopic{Name: "bad", Config: tc.cfg}))[0]
		c.nonces[string(c.admin.PublicKey())]-- // a refused request uses no nonce
		if r.Code != wire.CodeBadTopicConfig || !strings.Contains(r.Log, tc.want) {
			t.Errorf("create with %v = %s %q, want %s naming %q", tc.cfg, r.Code, r.Log, wire.CodeBadTopicConfig, tc.want)
		}
	}

	old := chainAt(t, core.CompactRulesVersion-1)
	old.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, RetentionMs: 2500})
	p := wire.NewSigner(key("p"), chainID)
	old.must(bundle(t, batch(t, p, "t", 0, 0, append(kv("a=1", "a=2"), &byzlogv1.Record{Value: []byte("x")}))))
	old.block()
	if got := keyed(old.readAll("t", 0)); got != "0:a=1,1:a=2,2:=x" {
		t.Fatalf("rules %d: %s, want nothing compacted or refused", core.CompactRulesVersion-1, got)
	}
	for range 3 {
		old.block()
	}
	if got := keyed(old.readAll("t", 0)); got != "" {
		t.Errorf("rules %d: %s after retention_ms, want retention to remove them (compaction not yet served)", core.CompactRulesVersion-1, got)
	}
}

// TestCompactOnlyKeepsFromRetention: cleanup_policy compact turns
// retention off; compact,delete keeps both.
func TestCompactOnlyKeepsFromRetention(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("c", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, RetentionMs: 1500})
	c.createTopic("cd", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE, RetentionMs: 1500})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "c", 0, 0, kv("a=1", "b=1")), batch(t, p, "cd", 0, 0, kv("a=1", "b=1"))))
	for range 4 {
		c.block()
	}
	if got := keyed(c.readAll("c", 0)); got != "0:a=1,1:b=1" {
		t.Errorf("compact: %s, want both kept past retention_ms", got)
	}
	if got := keyed(c.readAll("cd", 0)); got != "" {
		t.Errorf("compact,delete: %s, want retention to remove both", got)
	}
}

// TestCompactionWaitsForTransactions: records of an open transaction are
// not passed until it ends: its records and those after it wait at the
// last stable offset; then an aborted transaction's records are removed,
// a committed one's compacted as any, and the markers stay.
func TestCompactionWaitsForTransactions(t *testing.T) {
	f := newTxnFixture(t)
	f.c.createTopic("k", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	plain := wire.NewSigner(key("plain"), chainID)
	txnBatch := func(pid int64, epoch, seq int32, recs []*byzlogv1.Record) {
		t.Helper()
		b, err := f.prod.TransactionalBatch("k", 0, pid, epoch, seq, byzlogv1.Codec_CODEC_NONE, 0, recs)
		if err != nil {
			t.Fatal(err)
		}
		if br := outcome(t, f.c.block(bundle(t, b))[0]).Batches[0]; br.Code != 0 {
			t.Fatalf("transactional batch: %d %s", br.Code, br.Log)
		}
	}
	pid := f.mustStep(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1}).ProducerId
	txnBatch(pid, 0, 0, kv("a=1", "b=1"))
	f.c.must(bundle(t, batch(t, plain, "k", 0, 0, kv("a=2"))))
	f.c.block()
	f.c.block()
	if got := keyed(f.c.readAll("k", 0)); got != "0:a=1,1:b=1,2:a=2" {
		t.Fatalf("with the transaction open = %s, want nothing passed", got)
	}
	f.mustStep(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: false})
	f.c.block()
	if got := keyed(f.c.readAll("k", 0)); got != "2:a=2,3:=" {
		t.Fatalf("after the abort = %s, want the aborted records removed, a=2 and the marker kept", got)
	}
	txnBatch(pid, 0, 2, kv("a=3"))
	f.mustStep(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: true})
	f.c.block()
	if got := keyed(f.c.readAll("k", 0)); got != "3:=,4:a=3,5:=" {
		t.Fatalf("after a committed transaction = %s, want a=2 removed by its a=3", got)
	}
}

// TestCompactionAfterRetention: on a compact,delete topic, retention may
// remove a key's indexed record before a later one supersedes it; passing
// the later one then removes nothing (it must not take a later run for
// the gone record's, which halted the chain), and the log start and size
// retention set in the block stand.
func TestCompactionAfterRetention(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE, RetentionMs: 2500})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("a=1", "b=1"))))
	for range 3 {
		c.block() // passed, then removed by retention
	}
	if got := keyed(c.readAll("t", 0)); got != "" {
		t.Fatalf("after retention_ms = %s, want nothing", got)
	}
	c.must(bundle(t, batch(t, p, "t", 0, 1, kv("a=2", "c=1"))))
	c.block()
	if got := keyed(c.readAll("t", 0)); got != "2:a=2,3:c=1" {
		t.Fatalf("after a=2 superseded a retention removed = %s, want a=2 and c=1", got)
	}
	if info := c.partition("t", 0); info.LogStartOffset != 2 || info.NextOffset != 4 {
		t.Errorf("partition = %v, want log start 2 (retention's), next 4", info)
	}
	// b's only record went with retention: the sweep drops it from the
	// index, which keeps the keys the partition has.
	keys, err := core.IndexedKeys(c.store, "t", 0)
	if err != nil || strings.Join(keys, ",") != "a,c" {
		t.Errorf("indexed keys = %v, %v; want a,c", keys, err)
	}
}

// TestCompactionForgetsADeletedTopic: a topic deleted and created again
// under its name starts with no key index: its new records are not
// removed for keys the old topic held at their offsets.
func TestCompactionForgetsADeletedTopic(t *testing.T) {
	c := newChain(t, "")
	cfg := &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT}
	c.createTopic("t", cfg)
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("x0=1", "x1=1", "a=1"))))
	c.block()
	c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteTopic{Name: "t"}))
	c.createTopic("t", cfg)
	q := wire.NewSigner(key("q"), chainID)
	c.must(bundle(t, batch(t, q, "t", 0, 0, kv("y0=1", "y1=1", "y2=1", "a=2"))))
	c.block()
	if got := keyed(c.readAll("t", 0)); got != "0:y0=1,1:y1=1,2:y2=1,3:a=2" {
		t.Fatalf("the topic created again = %s, want its four records (none removed for the old topic's a at 2)", got)
	}
}

// TestCompactionOfManyVersions: 3,000 records over 10 keys, in runs of
// many records each, compact in one block to the 10 latest.
func TestCompactionOfManyVersions(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	p := wire.NewSigner(key("p"), chainID)
	var txs [][]byte
	for b := range 3 {
		var pairs []string
		for i := range 1000 {
			pairs = append(pairs, fmt.Sprintf("k%d=%d", i%10, b*1000+i))
		}
		txs = append(txs, bundle(t, batch(t, p, "t", 0, uint64(b), kv(pairs...))))
	}
	for _, tx := range txs {
		c.must(tx)
	}
	c.block()
	recs := c.readAll("t", 0)
	if len(recs) != 10 {
		t.Fatalf("after a pass: %d records, want the 10 latest", len(recs))
	}
	for i, r := range recs {
		if want := fmt.Sprint(2990 + i); string(r.Value) != want || r.Offset != uint64(2990+i) {
			t.Errorf("record %d = %s at %d, want %s at %d", i, r.Value, r.Offset, want, 2990+i)
		}
	}
}

// TestDeleteRecordsOverHoles: DeleteRecords up to an offset past holes
// compaction left moves the log start there and is done.
func TestDeleteRecordsOverHoles(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, kv("a=1", "b=1", "a=2", "b=2", "c=1"))))
	c.block() // a=1 and b=1 removed: holes at 0 and 1
	c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteRecords{Topic: "t", Partitions: []*byzlogv1.DeleteRecordsPartition{{Partition: 0, BeforeOffset: 2}}}))
	c.block()
	if info := c.partition("t", 0); info.LogStartOffset != 2 {
		t.Fatalf("partition = %v, want log start 2 once DeleteRecords is done", info)
	}
	if got := keyed(c.readAll("t", 0)); got != "2:a=2,3:b=2,4:c=1" {
		t.Errorf("records = %s, want a=2, b=2, c=1", got)
	}
}

// TestRecordRefusalsLeaveProposalsValid: a batch refused for what its
// records hold (no key on a compacted topic; a create time past a CreateTime
// topic's bounds) passes the mempool, which keeps no records, so a proposal
// may carry it: ProcessProposal (Verify) must take the proposal, and the
// block refuses the batch alone. Rejecting the proposal instead halted the
// chain: every proposer proposed the batch again (e2e, round 53 at one
// height).
func TestRecordRefusalsLeaveProposalsValid(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("k", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	c.createTopic("ts", &byzlogv1.TopicConfig{Partitions: 1, TimestampBeforeMaxMs: 1000})
	p := wire.NewSigner(key("p"), chainID)
	for _, tc := range []struct {
		name string
		tx   []byte
		want wire.Code
	}{
		{"keyless record to a compacted topic", bundle(t, batch(t, p, "k", 0, 0, []*byzlogv1.Record{{Value: []byte("v")}})), wire.CodeNoKey},
		{"create time before the bound", bundle(t, batch(t, p, "ts", 0, 0, []*byzlogv1.Record{{Value: []byte("v"), CreateTimeUnixNano: 1}})), wire.CodeBadTimestamp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := c.check(tc.tx); !r.OK() {
				t.Fatalf("CheckTx = %s %s, want it admitted (the mempool keeps no records)", r.Code, r.Log)
			}
			params, err := core.LoadParams(c.store)
			if err != nil {
				t.Fatal(err)
			}
			b := core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time + 1_000_000_000, Txs: [][]byte{tc.tx},
				Checked: []*core.Checked{core.Precheck(params, tc.tx, true)}}
			bad, r, err := core.Verify(c.store, b)
			if err != nil || bad >= 0 {
				t.Fatalf("Verify = tx %d %s %q, %v; want the proposal taken", bad, r.Code, r.Log, err)
			}
			if r := c.block(tc.tx)[0]; r.Code != tc.want {
				t.Errorf("in the block: %s %q, want %s", r.Code, r.Log, tc.want)
			}
		})
	}
}
