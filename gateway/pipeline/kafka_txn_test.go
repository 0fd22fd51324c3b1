package pipeline_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/gateway/grpcface"
	"github.com/byzlog/byzlog/gateway/kafka"
	"github.com/byzlog/byzlog/gateway/kafka/sasl"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/wire"
)

// TestKafkaFaceTransactions: a franz-go transactional producer commits a
// transaction over two partitions, aborts one, commits another; a
// read_committed consumer reads the committed records only, a
// read_uncommitted one every record, and neither a marker.
func TestKafkaFaceTransactions(t *testing.T) {
	addr, _ := startKafkaFace(t, nil) // topic k, 3 partitions
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("tx1"), kgo.DefaultProduceTopic("k"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	txn := func(commit bool, values ...string) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i, v := range values {
			recs = append(recs, &kgo.Record{Partition: int32(i % 2), Value: []byte(v)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce in a transaction: %v", err)
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction (commit %v): %v", commit, err)
		}
	}
	txn(true, "c1", "c2")
	txn(false, "a1", "a2")
	txn(true, "c3", "c4")

	read := func(level kgo.IsolationLevel, want int) []string {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("k"), kgo.FetchIsolationLevel(level),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var got []string
		for len(got) < want && ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		// Nothing more comes: a marker is never a record.
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		pcancel()
		slices.Sort(got)
		return got
	}
	if got := strings.Join(read(kgo.ReadCommitted(), 4), " "); got != "c1 c2 c3 c4" {
		t.Fatalf("read_committed read %q, want c1 c2 c3 c4", got)
	}
	if got := strings.Join(read(kgo.ReadUncommitted(), 6), " "); got != "a1 a2 c1 c2 c3 c4" {
		t.Fatalf("read_uncommitted read %q, want every record", got)
	}
}

// lockedBuffer is a log sink goroutines may write while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestKafkaFaceTransactionRefusals: bad transaction steps get the Kafka
// error a client understands and a line in the gateway's log, and what was
// committed before stays: an EndTxn for an unknown id, from a fenced
// producer (an epoch from the past), a TxnOffsetCommit to another key's
// group, a transaction over its bounds (offsets, timeout).
func TestKafkaFaceTransactionRefusals(t *testing.T) {
	serverTLS, clientTLS := testTLS(t)
	dir := t.TempDir()
	var entries []sasl.Entry
	for _, u := range []struct{ name, hex string }{{"alice", "cd"}, {"bob", "ab"}} {
		if err := os.WriteFile(filepath.Join(dir, u.name+".key"), []byte(strings.Repeat(u.hex, 32)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		e, err := sasl.NewEntry(u.name, u.name+".key", false, "pw", sasl.MinIterations, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	b, _ := json.Marshal(sasl.File{Users: entries})
	if err := os.WriteFile(filepath.Join(dir, "users.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := sasl.Load(filepath.Join(dir, "users.json"))
	if err != nil {
		t.Fatal(err)
	}
	wide := uint32(wire.MaxTxnOffsets + 1)
	g := pipeline.StartTestGateway(t, &byzlogv1.TopicState{Name: "k", Config: &byzlogv1.TopicConfig{Partitions: 3}},
		&byzlogv1.TopicState{Name: "wide", Config: &byzlogv1.TopicConfig{Partitions: wide}})
	var logs lockedBuffer
	addr := serveKafkaFaceLogging(t, g, func(c *kafka.Config) {
		c.TLS, c.Insecure, c.AnonymousKey, c.Auth = serverTLS, false, nil, kafka.SASL(users)
	}, zerolog.New(&logs))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := func(user string, opts ...kgo.Opt) *kgo.Client {
		t.Helper()
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DialTLSConfig(clientTLS),
			kgo.SASL(plain.Auth{User: user, Pass: "pw"}.AsMechanism())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	alice, bob := client("alice"), client("bob")

	// Bob's group, and a committed transaction of alice's.
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "bobs", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "k"
	cp := kmsg.NewOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset = 0, 0
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	if r, err := commit.RequestWith(ctx, bob); err != nil || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("bob's commit: %v %+v", err, r)
	}
	prod := client("alice", kgo.TransactionalID("a"), kgo.DefaultProduceTopic("k"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("kept-0")}, &kgo.Record{Partition: 1, Value: []byte("kept-1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	init := func(id string, timeoutMs int32) (int64, int16, int16) {
		t.Helper()
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr(id), timeoutMs
		resp, err := req.RequestWith(ctx, alice)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode
	}
	end := func(id string, pid int64, epoch int16) int16 {
		t.Helper()
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, epoch, true
		resp, err := req.RequestWith(ctx, alice)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ErrorCode
	}
	offsets := func(group, topic string, parts uint32, pid int64, epoch int16) int16 {
		t.Helper()
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = "b", group, pid, epoch
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		for p := range parts {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = int32(p), 1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, alice)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	pid, epoch, code := init("b", 60_000)
	if code != 0 {
		t.Fatalf("InitProducerId: %v", kerr.ErrorForCode(code))
	}
	_, newEpoch, _ := init("b", 60_000) // fences the first
	for _, c := range []struct {
		name string
		got  int16
		want []*kerr.Error
		log  []string // what one line of the gateway's log says
	}{
		{"EndTxn of an unknown id", end("nobody", pid, epoch), []*kerr.Error{kerr.InvalidProducerIDMapping},
			[]string{`"transactional_id":"nobody"`, "EndTxn refused", "unknown"}},
		{"EndTxn from a fenced producer", end("b", pid, epoch), []*kerr.Error{kerr.ProducerFenced, kerr.InvalidProducerEpoch},
			[]string{`"transactional_id":"b"`, "EndTxn refused", "epoch"}},
		{"TxnOffsetCommit to another key's group", offsets("bobs", "k", 1, pid, newEpoch), []*kerr.Error{kerr.GroupAuthorizationFailed},
			[]string{`"group":"bobs"`, "TxnOffsetCommit refused"}},
		{"offsets over the bound", offsets("alices", "wide", wide, pid, newEpoch), []*kerr.Error{kerr.PolicyViolation},
			[]string{`"group":"alices"`, "TxnOffsetCommit refused", "1024"}},
		{"a timeout over the bound", func() int16 { _, _, c := init("c", wire.MaxTxnTimeoutMs+1); return c }(), []*kerr.Error{kerr.InvalidTransactionTimeout},
			[]string{`"transactional_id":"c"`, "transaction.timeout.ms out of range"}},
	} {
		if !slices.ContainsFunc(c.want, func(e *kerr.Error) bool { return e.Code == c.got }) {
			t.Errorf("%s: %v, want %v", c.name, kerr.ErrorForCode(c.got), c.want)
		}
		if !slices.ContainsFunc(strings.Split(logs.String(), "\n"), func(line string) bool {
			return !slices.ContainsFunc(c.log, func(s string) bool { return !strings.Contains(line, s) })
		}) {
			t.Errorf("%s: no line of the gateway's log says %q:\n%s", c.name, c.log, logs.String())
		}
	}
	// Nothing committed changed: bob's offset, alice's records.
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = "bobs"
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "k", []int32{0}
	fetch.Topics = append(fetch.Topics, ft)
	if r, err := fetch.RequestWith(ctx, bob); err != nil || r.Topics[0].Partitions[0].Offset != 0 {
		t.Fatalf("bob's group after the refusals: %v %+v", err, r)
	}
	cons := client("alice", kgo.ConsumeTopics("k"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < 2 && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if slices.Sort(got); strings.Join(got, " ") != "kept-0 kept-1" {
		t.Fatalf("read %v after the refusals, want the committed transaction's 2 records", got)
	}
}

// TestSDKWriteAtomically: the producer SDK's WriteAtomically writes
// records over three partitions as one transaction, twice (the second
// under the same producer id and epoch, sequences going on); a write
// whose second partition's batch the chain refuses (a record over the
// topic's max_record_bytes) is aborted, and a read_committed reader of the
// Kafka face sees the two writes' records and none of the third's.
func TestSDKWriteAtomically(t *testing.T) {
	g := pipeline.StartTestGateway(t, &byzlogv1.TopicState{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 3, MaxRecordBytes: 100}})
	srv, _ := grpcface.NewServer(grpcface.Over(g), g.Config().GRPC)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := client.NewProducer(ctx, client.WithGateways(lis.Addr().String()), client.WithTrust(receipt.TrustGateway(pipeline.TestChainID)),
		client.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	write := func(values ...string) ([]client.Receipt, error) {
		var recs []*client.Record
		for i, v := range values {
			part := uint32(i % 3)
			recs = append(recs, &client.Record{Topic: "t", Value: []byte(v), Partition: &part})
		}
		return p.WriteAtomically(ctx, "sdk", recs)
	}
	for _, w := range [][]string{{"a0", "a1", "a2", "a3"}, {"b0", "b1", "b2"}} {
		rcs, err := write(w...)
		if err != nil {
			t.Fatalf("write %v: %v", w, err)
		}
		if len(rcs) != len(w) || rcs[3%len(w)].Partition != uint32(3%len(w)%3) {
			t.Fatalf("write %v: receipts %+v", w, rcs)
		}
	}
	if _, err := write("c0", strings.Repeat("x", 200)); err == nil || !strings.Contains(err.Error(), "t/1") {
		t.Fatalf("a write with a record over max_record_bytes: %v, want an error naming t/1", err)
	}
	if rcs, err := write("d0"); err != nil || rcs[0].Partition != 0 {
		t.Fatalf("a write after the aborted one: %+v %v", rcs, err)
	}
	addr := serveKafkaFace(t, g, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for len(got) < 8 && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		pcancel()
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	pcancel()
	slices.Sort(got)
	if strings.Join(got, " ") != "a0 a1 a2 a3 b0 b1 b2 d0" {
		t.Fatalf("read_committed read %v, want the committed writes' 8 records", got)
	}
}

// TestKafkaFaceStableOffsets (KIP-447): while an open transaction holds a
// group's offsets, an OffsetFetch that asks for stable offsets gets
// UNSTABLE_OFFSET_COMMIT for those partitions (and the others as they
// are), one that does not the committed offsets; once the transaction
// commits, its offsets.
func TestKafkaFaceStableOffsets(t *testing.T) {
	addr, _ := startKafkaFace(t, nil) // topic k, 3 partitions
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	initReq := kmsg.NewPtrInitProducerIDRequest()
	initReq.TransactionalID, initReq.TransactionTimeoutMillis = kmsg.StringPtr("stable"), 60_000
	ir, err := initReq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if ir.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v", kerr.ErrorForCode(ir.ErrorCode))
	}
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = "stable", "g", ir.ProducerID, ir.ProducerEpoch
	ct := kmsg.NewTxnOffsetCommitRequestTopic()
	ct.Topic = "k"
	cp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset = 0, 5
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	if r, err := commit.RequestWith(ctx, cl); err != nil || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("TxnOffsetCommit: %v %+v", err, r)
	}
	fetch := func(stable bool) string {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group, req.RequireStable = 7, "g", stable
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic, ft.Partitions = "k", []int32{0, 1}
		req.Topics = append(req.Topics, ft)
		r, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range r.Topics[0].Partitions {
			s := fmt.Sprint(p.Offset)
			if p.ErrorCode != 0 {
				s = kerr.ErrorForCode(p.ErrorCode).Error()
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	if got := fetch(true); !strings.HasPrefix(got, "UNSTABLE_OFFSET_COMMIT") || !strings.HasSuffix(got, " -1") {
		t.Errorf("stable fetch while the transaction is open: %q, want UNSTABLE_OFFSET_COMMIT for 0 and -1 for 1", got)
	}
	if got := fetch(false); got != "-1 -1" {
		t.Errorf("fetch while the transaction is open: %q, want -1 -1 (nothing committed yet)", got)
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "stable", ir.ProducerID, ir.ProducerEpoch, true
	if r, err := end.RequestWith(ctx, cl); err != nil || r.ErrorCode != 0 {
		t.Fatalf("EndTxn: %v %+v", err, r)
	}
	if got := fetch(true); got != "5 -1" {
		t.Errorf("stable fetch after the commit: %q, want 5 -1", got)
	}
}
