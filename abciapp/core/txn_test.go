package core_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// txnFixture is a chain at the newest rules with topic t (2 partitions)
// and a producer key for transactional id "tx".
type txnFixture struct {
	t    *testing.T
	c    *testChain
	prod *wire.Signer
}

func newTxnFixture(t *testing.T) *txnFixture {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	return &txnFixture{t: t, c: c, prod: wire.NewSigner(key("txn-producer"), chainID)}
}

// step signs op for id with s's next nonce and runs it in a block of its
// own; a refused step gives its nonce back.
func (f *txnFixture) step(s *wire.Signer, id string, op proto.Message) (core.Result, *byzlogv1.TxnOutcome) {
	f.t.Helper()
	req, err := s.Txn(f.c.nextNonce(s), id, op)
	if err != nil {
		f.t.Fatal(err)
	}
	tx, err := wire.TxnTx(req)
	if err != nil {
		f.t.Fatal(err)
	}
	r := f.c.block(tx)[0]
	if !r.OK() {
		f.c.nonces[string(s.PublicKey())]--
		return r, nil
	}
	var out byzlogv1.TxnOutcome
	if err := proto.Unmarshal(r.Data, &out); err != nil {
		f.t.Fatalf("result data is not a TxnOutcome: %v", err)
	}
	return r, &out
}

func (f *txnFixture) mustStep(s *wire.Signer, id string, op proto.Message) *byzlogv1.TxnOutcome {
	f.t.Helper()
	r, out := f.step(s, id, op)
	if !r.OK() {
		f.t.Fatalf("%T of %s refused: %s %s", op, id, r.Code, r.Log)
	}
	return out
}

// write sends a transactional batch of values to t/p as producer id and
// epoch at Kafka sequence seq, and returns its batch result.
func (f *txnFixture) write(p uint32, pid int64, epoch, seq int32, values ...string) *byzlogv1.BatchResult {
	f.t.Helper()
	b, err := f.prod.TransactionalBatch("t", p, pid, epoch, seq, byzlogv1.Codec_CODEC_NONE, 0, records(values...))
	if err != nil {
		f.t.Fatal(err)
	}
	r := f.c.block(bundle(f.t, b))[0]
	return outcome(f.t, r).Batches[0]
}

// log reads t/p from offset 0: the stored records, and the partition's
// last stable offset (nil: none open).
func (f *txnFixture) log(p uint32) ([]*byzlogv1.StoredRecord, *uint64) {
	f.t.Helper()
	var resp byzlogv1.RecordsResponse
	f.c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Partition: p}, &resp)
	out := make([]*byzlogv1.StoredRecord, len(resp.Records))
	for i, b := range resp.Records {
		out[i] = &byzlogv1.StoredRecord{}
		if err := proto.Unmarshal(b, out[i]); err != nil {
			f.t.Fatal(err)
		}
	}
	return out, resp.LastStableOffset
}

// describe is a log as "v0 v1 C A": values, then C or A for a commit or
// abort marker, * after a transactional record.
func describe(recs []*byzlogv1.StoredRecord) string {
	var parts []string
	for _, r := range recs {
		switch {
		case r.KafkaControl != nil && r.KafkaControl.Commit:
			parts = append(parts, "C")
		case r.KafkaControl != nil:
			parts = append(parts, "A")
		case r.KafkaTransactional:
			parts = append(parts, string(r.Value)+"*")
		default:
			parts = append(parts, string(r.Value))
		}
	}
	return strings.Join(parts, " ")
}

// TestTxnCommitAndAbort: a transaction over two partitions holds back both
// last stable offsets until it ends; its end writes a marker to each in one
// block; an abort is recorded for read_committed; the next one after it
// starts clean; the markers BlockRecords rebuilds match the store's.
func TestTxnCommitAndAbort(t *testing.T) {
	f := newTxnFixture(t)
	init := f.mustStep(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1})
	if init.ProducerId < 1<<62 || init.Epoch != 0 || init.Markers != nil {
		t.Fatalf("first init = %v, want the chain's first producer id at epoch 0", init)
	}
	pid := init.ProducerId
	if br := f.write(0, pid, 0, 0, "a", "b"); br.Code != 0 {
		t.Fatalf("transactional batch to t/0: %d %s", br.Code, br.Log)
	}
	if br := f.write(1, pid, 0, 0, "c"); br.Code != 0 {
		t.Fatalf("transactional batch to t/1: %d %s", br.Code, br.Log)
	}
	recs, lso := f.log(0)
	if describe(recs) != "a* b*" || lso == nil || *lso != 0 {
		t.Fatalf("t/0 while open: %q, LSO %v; want a* b* held back at 0", describe(recs), lso)
	}
	// Offsets wait for the commit.
	f.mustStep(f.prod, "tx", &byzlogv1.TxnOffsets{ProducerId: pid, Group: "g", Offsets: []*byzlogv1.PartitionOffset{{Topic: "t", Partition: 0, Offset: 7}}})
	if _, r := queryRaw(t, f.c, wire.PathGroup, &byzlogv1.GroupRequest{Group: "g"}); r.Code != wire.CodeNotFound {
		t.Fatalf("a transaction's offsets before its commit: /group g = %s, want not_found", r.Code)
	}

	req, err := f.prod.Txn(f.c.nextNonce(f.prod), "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: true})
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := wire.TxnTx(req)
	out := f.c.step(tx)
	r := out.Results[0]
	if !r.OK() {
		t.Fatalf("commit: %s %s", r.Code, r.Log)
	}
	var end byzlogv1.TxnOutcome
	if err := proto.Unmarshal(r.Data, &end); err != nil || len(end.Markers.GetPartitions()) != 2 || !end.Markers.Commit {
		t.Fatalf("commit outcome %v (%v), want commit markers in both partitions", &end, err)
	}
	for p, want := range []string{"a* b* C", "c* C"} {
		recs, lso := f.log(uint32(p))
		if describe(recs) != want || lso != nil {
			t.Fatalf("t/%d after the commit: %q, LSO %v; want %q and none open", p, describe(recs), lso, want)
		}
		if m := recs[len(recs)-1]; m.KafkaProducerId != pid || m.KafkaEpoch != 0 || m.Height != f.c.state.Height || m.Key != nil || m.Value != nil {
			t.Fatalf("t/%d marker = %v", p, m)
		}
	}
	var g byzlogv1.GroupOffsets
	f.c.query(wire.PathGroup, &byzlogv1.GroupRequest{Group: "g"}, &g)
	if len(g.Offsets) != 1 || g.Offsets[0].Offset != 7 {
		t.Fatalf("after the commit, group g holds %v, want t/0 at 7", g.Offsets)
	}
	// The markers BlockRecords rebuilds from the block are the store's.
	a, err := core.BlockRecords(f.c.state.Height, f.c.time, [][]byte{tx}, []core.TxResult{{Code: uint32(r.Code), Data: r.Data}}, core.MaxRulesVersion)
	if err != nil || len(a.Partitions) != 2 {
		t.Fatalf("BlockRecords of the commit: %v, %d partitions", err, len(a.Partitions))
	}
	recs, _ = f.log(1)
	if got, want := a.Partitions[1].Records[0], recs[1]; !proto.Equal(got, want) {
		t.Fatalf("BlockRecords' marker %v, the store's %v", got, want)
	}
	// EndTxn retried after the commit is answered as it was; an abort of
	// nothing is refused.
	f.mustStep(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: true})
	if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: false}); r.Code != wire.CodeBadTxnState {
		t.Fatalf("abort with nothing open = %s %q, want bad_txn_state", r.Code, r.Log)
	}

	// The next transaction aborts: its records stay, marked, and their
	// range is recorded.
	if br := f.write(0, pid, 0, 2, "d"); br.Code != 0 {
		t.Fatalf("second transaction's batch: %d %s", br.Code, br.Log)
	}
	f.mustStep(f.prod, "tx", &byzlogv1.TxnOffsets{ProducerId: pid, Group: "g", Offsets: []*byzlogv1.PartitionOffset{{Topic: "t", Partition: 0, Offset: 9}}})
	f.mustStep(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: false})
	if recs, lso := f.log(0); describe(recs) != "a* b* C d* A" || lso != nil {
		t.Fatalf("t/0 after the abort: %q, LSO %v", describe(recs), lso)
	}
	if recs, _ := f.log(1); describe(recs) != "c* C" {
		t.Fatalf("t/1, which the aborted transaction did not write: %q", describe(recs))
	}
	f.c.query(wire.PathGroup, &byzlogv1.GroupRequest{Group: "g"}, &g)
	if g.Offsets[0].Offset != 7 {
		t.Fatalf("after the abort, group g holds %v, want 7 still", g.Offsets)
	}
	// A read_committed read learns which records were aborted: t/0 holds
	// a* b* C d* A, and d* (offset 3, marker at 4) is.
	for _, tc := range []struct {
		from uint64
		want string
	}{{0, "3-4"}, {3, "3-4"}, {4, ""}, {1, "3-4"}} {
		var resp byzlogv1.RecordsResponse
		f.c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Partition: 0, Offset: tc.from, Aborted: true}, &resp)
		var got []string
		for _, a := range resp.Aborted {
			if a.ProducerId != pid {
				t.Fatalf("aborted entry of producer id %d, want %d", a.ProducerId, pid)
			}
			got = append(got, fmt.Sprintf("%d-%d", a.FirstOffset, a.LastOffset))
		}
		if strings.Join(got, " ") != tc.want {
			t.Fatalf("aborted transactions read from t/0 at %d: %v, want %q", tc.from, got, tc.want)
		}
	}
	var resp byzlogv1.RecordsResponse
	f.c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Partition: 0, Offset: 3, MaxRecords: 1, Aborted: true}, &resp)
	if len(resp.Records) != 1 || len(resp.Aborted) != 1 || resp.Aborted[0].LastOffset != 4 {
		t.Fatalf("t/0's record 3 alone with aborted transactions: %d records, %v; want its transaction, whose marker is past the read", len(resp.Records), resp.Aborted)
	}
	f.c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Partition: 0, MaxRecords: 2, Aborted: true}, &resp)
	if len(resp.Records) != 2 || len(resp.Aborted) != 0 {
		t.Fatalf("t/0's first two records with aborted transactions: %d records, %v; want 2 and none (the committed one's)", len(resp.Records), resp.Aborted)
	}
	// A topic deleted and created again starts clean: the old aborted
	// range (offsets 3-4) does not hide the producer's new records there.
	f.c.must(f.c.adminTx(f.c.admin, f.c.nextNonce(f.c.admin), &byzlogv1.DeleteTopic{Name: "t"}))
	f.c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	if br := f.write(0, pid, 0, 3, "e", "f", "g", "h"); br.Code != 0 {
		t.Fatalf("a batch to the new t/0: %d %s", br.Code, br.Log)
	}
	f.c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Partition: 0, Aborted: true}, &resp)
	if len(resp.Records) != 4 || len(resp.Aborted) != 0 {
		t.Fatalf("the new t/0: %d records, aborted %v; want 4 and none", len(resp.Records), resp.Aborted)
	}
}

// TestTxnFencing: a second init bumps the epoch and aborts the open
// transaction in its block; the zombie's batches and its end are refused;
// another key cannot use the id; a batch needs an initialized id.
func TestTxnFencing(t *testing.T) {
	f := newTxnFixture(t)
	pid := f.mustStep(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1}).ProducerId
	if br := f.write(0, pid, 0, 0, "zombie-1"); br.Code != 0 {
		t.Fatalf("batch: %d %s", br.Code, br.Log)
	}
	again := f.mustStep(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1})
	if again.ProducerId != pid || again.Epoch != 1 || again.Markers.GetCommit() || len(again.Markers.GetPartitions()) != 1 {
		t.Fatalf("second init = %v, want epoch 1 and the open transaction aborted in t/0", again)
	}
	if br := f.write(0, pid, 0, 1, "zombie-2"); wire.Code(br.Code) != wire.CodeProducerFenced {
		t.Fatalf("the zombie's batch after the fence = %d %s, want producer_fenced", br.Code, br.Log)
	}
	if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Epoch: 0, Commit: true}); r.Code != wire.CodeProducerFenced {
		t.Fatalf("the zombie's commit = %s %q, want producer_fenced", r.Code, r.Log)
	}
	if recs, lso := f.log(0); describe(recs) != "zombie-1* A" || lso != nil {
		t.Fatalf("t/0: %q, LSO %v; want the zombie's record aborted and nothing after it", describe(recs), lso)
	}
	// KIP-360: an init naming a stale epoch is fenced.
	if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: pid, Epoch: 0}); r.Code != wire.CodeProducerFenced {
		t.Fatalf("init with a stale epoch = %s %q, want producer_fenced", r.Code, r.Log)
	}
	other := wire.NewSigner(key("someone-else"), chainID)
	if r, _ := f.step(other, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1}); r.Code != wire.CodeNotTxnOwner {
		t.Fatalf("another key's init = %s %q, want not_txn_owner", r.Code, r.Log)
	}
	b, _ := other.TransactionalBatch("t", 0, pid, 1, 0, byzlogv1.Codec_CODEC_NONE, 0, records("x"))
	if br := outcome(t, f.c.block(bundle(t, b))[0]).Batches[0]; wire.Code(br.Code) != wire.CodeNotTxnOwner {
		t.Fatalf("another key's batch under the id's producer id = %d %s, want not_txn_owner", br.Code, br.Log)
	}
	if br := f.write(1, 12345, 0, 0, "x"); wire.Code(br.Code) != wire.CodeUnknownTxn {
		t.Fatalf("a transactional batch of a producer id nobody was given = %d %s, want unknown_txn", br.Code, br.Log)
	}
	if r, _ := f.step(f.prod, "nobody", &byzlogv1.TxnEnd{ProducerId: pid, Commit: true}); r.Code != wire.CodeUnknownTxn {
		t.Fatalf("end of an unknown id = %s, want unknown_txn", r.Code)
	}
}

// TestTxnTimeout: past its timeout by block time a transaction takes no
// batch and no commit, an expiry before it is refused, and one after it
// aborts the transaction and fences its producer.
func TestTxnTimeout(t *testing.T) {
	f := newTxnFixture(t)
	for _, ms := range []uint32{0, wire.MaxTxnTimeoutMs + 1} {
		if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: ms, ProducerId: -1, Epoch: -1}); r.Code != wire.CodeBadTxnTimeout {
			t.Fatalf("init with a timeout of %d ms = %s, want bad_txn_timeout", ms, r.Code)
		}
	}
	pid := f.mustStep(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 2_500, ProducerId: -1, Epoch: -1}).ProducerId
	if br := f.write(0, pid, 0, 0, "late"); br.Code != 0 { // starts it; blocks are 1 s apart
		t.Fatalf("batch: %d %s", br.Code, br.Log)
	}
	expire, _ := wire.TxnExpireTx("tx")
	if r := f.c.block(expire)[0]; r.Code != wire.CodeBadTxnState || !strings.Contains(r.Log, "times out") {
		t.Fatalf("expiry 1 s into a 2.5 s timeout = %s %q, want bad_txn_state", r.Code, r.Log)
	}
	f.c.block() // 2 s
	f.c.block() // 3 s: past it
	if br := f.write(0, pid, 0, 1, "later"); wire.Code(br.Code) != wire.CodeProducerFenced {
		t.Fatalf("a batch past the timeout = %d %s, want producer_fenced", br.Code, br.Log)
	}
	if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: true}); r.Code != wire.CodeProducerFenced {
		t.Fatalf("a commit past the timeout = %s %q, want producer_fenced", r.Code, r.Log)
	}
	r := f.c.block(expire)[0]
	var out byzlogv1.TxnOutcome
	if !r.OK() || proto.Unmarshal(r.Data, &out) != nil || out.Epoch != 1 || out.Markers.GetCommit() || len(out.Markers.GetPartitions()) != 1 {
		t.Fatalf("expiry past the timeout = %s %q (%v), want an abort in t/0 and epoch 1", r.Code, r.Log, &out)
	}
	if recs, lso := f.log(0); describe(recs) != "late* A" || lso != nil {
		t.Fatalf("t/0 after the expiry: %q, LSO %v", describe(recs), lso)
	}
	if r := f.c.block(expire)[0]; r.Code != wire.CodeBadTxnState {
		t.Fatalf("a second expiry = %s, want bad_txn_state", r.Code)
	}
}

// TestTxnBounds: partitions of one transaction and the offsets it commits
// are bounded, and so are the ids of one key.
func TestTxnBounds(t *testing.T) {
	f := newTxnFixture(t)
	pid := f.mustStep(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1}).ProducerId
	many := make([]*byzlogv1.PartitionOffset, wire.MaxTxnOffsets+1)
	for i := range many {
		many[i] = &byzlogv1.PartitionOffset{Topic: "t", Partition: uint32(i % 2), Offset: uint64(i)}
	}
	if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnOffsets{ProducerId: pid, Group: "g", Offsets: many}); r.Code != wire.CodeTxnLimit {
		t.Fatalf("%d offsets in one transaction = %s, want txn_limit", len(many), r.Code)
	}
	if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnOffsets{ProducerId: pid, Group: "g", Offsets: []*byzlogv1.PartitionOffset{{Topic: "nope", Partition: 0}}}); r.Code != wire.CodeUnknownTopic {
		t.Fatalf("offsets of an unknown topic = %s, want unknown_topic", r.Code)
	}
	consumer := wire.NewSigner(key("group-owner"), chainID)
	f.c.must(offsetsTx(t, f.c, consumer, "owned", &byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 1}))
	if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnOffsets{ProducerId: pid, Group: "owned", Offsets: []*byzlogv1.PartitionOffset{{Topic: "t", Partition: 0, Offset: 5}}}); r.Code != wire.CodeNotGroupOwner {
		t.Fatalf("offsets of another key's group = %s, want not_group_owner", r.Code)
	}
	if r, _ := f.step(f.prod, strings.Repeat("x", wire.MaxTxnID+1), &byzlogv1.TxnInit{TimeoutMs: 1000, ProducerId: -1, Epoch: -1}); r.Code != wire.CodeMalformedTx {
		t.Fatalf("a transactional id of %d bytes = %s, want malformed_tx", wire.MaxTxnID+1, r.Code)
	}
}

// TestTxnBeforeRules8: before rules version 8 a transaction step is a kind
// the chain does not know, and a batch flagged transactional is an
// idempotent producer's, as a build before transactions takes them.
func TestTxnBeforeRules8(t *testing.T) {
	admin := wire.NewSigner(key("admin"), chainID)
	c := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(admin.PublicKey()), core.TxnRulesVersion-1))
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	f := &txnFixture{t: t, c: c, prod: wire.NewSigner(key("txn-producer"), chainID)}
	if r, _ := f.step(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 1000, ProducerId: -1, Epoch: -1}); r.Code != wire.CodeUnknownTxKind {
		t.Fatalf("init at rules %d = %s, want unknown_tx_kind", core.TxnRulesVersion-1, r.Code)
	}
	expire, _ := wire.TxnExpireTx("tx")
	if r := c.block(expire)[0]; r.Code != wire.CodeUnknownTxKind {
		t.Fatalf("expiry at rules %d = %s, want unknown_tx_kind", core.TxnRulesVersion-1, r.Code)
	}
	if br := f.write(0, 77, 0, 0, "v"); br.Code != 0 {
		t.Fatalf("a transactional batch at rules %d = %d %s, want it taken as an idempotent one", core.TxnRulesVersion-1, br.Code, br.Log)
	}
	if recs, lso := f.log(0); describe(recs) != "v" || lso != nil {
		t.Fatalf("t/0 at rules %d: %q, LSO %v; want a plain record", core.TxnRulesVersion-1, describe(recs), lso)
	}
}

// TestTxnRetentionDropsAbortedRanges: once the log start passes an aborted
// transaction's marker, its range goes from the state; one still spanning
// the log start stays.
func TestTxnRetentionDropsAbortedRanges(t *testing.T) {
	f := newTxnFixture(t)
	pid := f.mustStep(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1}).ProducerId
	for i, seq := range []int32{0, 1} {
		if br := f.write(0, pid, 0, seq, fmt.Sprint(i)); br.Code != 0 {
			t.Fatalf("batch %d: %d %s", i, br.Code, br.Log)
		}
		f.mustStep(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: false}) // 0 A 1 A: ranges 0-1 and 2-3
	}
	count := func() int {
		t.Helper()
		n, err := core.CountAborted(f.c.store, "t", 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 4 {
		t.Fatalf("two aborted transactions: %d keys, want 4", n)
	}
	f.c.must(f.c.adminTx(f.c.admin, f.c.nextNonce(f.c.admin), &byzlogv1.DeleteRecords{Topic: "t", Partitions: []*byzlogv1.DeleteRecordsPartition{{Partition: 0, BeforeOffset: 3}}}))
	f.c.block() // retention runs at the start of the next block
	if n := count(); n != 2 {
		t.Fatalf("log start at 3: %d keys, want the range 2-3's 2", n)
	}
}

// TestTxnOverADeletedTopic: a topic deleted (and created again) while a
// transaction that wrote it is open gets no marker from its end.
func TestTxnOverADeletedTopic(t *testing.T) {
	f := newTxnFixture(t)
	f.c.createTopic("u", &byzlogv1.TopicConfig{Partitions: 1})
	pid := f.mustStep(f.prod, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1}).ProducerId
	if br := f.write(0, pid, 0, 0, "gone"); br.Code != 0 {
		t.Fatalf("batch: %d %s", br.Code, br.Log)
	}
	b, _ := f.prod.TransactionalBatch("u", 0, pid, 0, 0, byzlogv1.Codec_CODEC_NONE, 0, records("kept"))
	if br := outcome(t, f.c.block(bundle(t, b))[0]).Batches[0]; br.Code != 0 {
		t.Fatalf("batch to u: %d %s", br.Code, br.Log)
	}
	f.c.must(f.c.adminTx(f.c.admin, f.c.nextNonce(f.c.admin), &byzlogv1.DeleteTopic{Name: "t"}))
	f.c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	end := f.mustStep(f.prod, "tx", &byzlogv1.TxnEnd{ProducerId: pid, Commit: true})
	if ps := end.Markers.GetPartitions(); len(ps) != 1 || ps[0].Topic != "u" {
		t.Fatalf("commit markers %v, want u/0's only", ps)
	}
	if recs, lso := f.log(0); len(recs) != 0 || lso != nil {
		t.Fatalf("the new t/0: %q, LSO %v; want it empty", describe(recs), lso)
	}
}

// TestTxnsQuery: "/txns" answers one transactional id with its state, or
// the ids a page at a time, in id order.
func TestTxnsQuery(t *testing.T) {
	f := newTxnFixture(t)
	for _, id := range []string{"b", "a", "c"} {
		f.mustStep(f.prod, id, &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1})
	}
	pid := f.mustStep(f.prod, "b", &byzlogv1.TxnInit{TimeoutMs: 5_000, ProducerId: -1, Epoch: -1}).ProducerId
	if br := f.write(0, pid, 1, 0, "v"); br.Code != 0 {
		t.Fatalf("batch: %d %s", br.Code, br.Log)
	}
	var list byzlogv1.TxnList
	f.c.query(wire.PathTxns, &byzlogv1.TxnsRequest{TransactionalId: "b"}, &list)
	if len(list.Txns) != 1 || list.Txns[0].State.Epoch != 1 || !list.Txns[0].State.Open || len(list.Txns[0].State.Partitions) != 1 || list.Txns[0].State.TimeoutMs != 5_000 {
		t.Fatalf("/txns b = %v, want epoch 1, open over t/0, 5 s", list.Txns)
	}
	ids := func(l *byzlogv1.TxnList) (out []string) {
		for _, x := range l.Txns {
			out = append(out, x.TransactionalId)
		}
		return out
	}
	f.c.query(wire.PathTxns, &byzlogv1.TxnsRequest{Limit: 2}, &list)
	if got := strings.Join(ids(&list), " "); got != "a b" || !list.More {
		t.Fatalf("/txns limit 2 = %q more %v, want a b and more", got, list.More)
	}
	f.c.query(wire.PathTxns, &byzlogv1.TxnsRequest{StartAfter: "b"}, &list)
	if got := strings.Join(ids(&list), " "); got != "c" || list.More {
		t.Fatalf("/txns after b = %q more %v, want c", got, list.More)
	}
	if _, r := queryRaw(t, f.c, wire.PathTxns, &byzlogv1.TxnsRequest{TransactionalId: "nope"}); r.Code != wire.CodeNotFound {
		t.Fatalf("/txns of an unknown id = %s, want not_found", r.Code)
	}
}
