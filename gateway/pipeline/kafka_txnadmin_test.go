package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaFaceTxnAdmin: kadm's DescribeTransactions,
// ListTransactions and DescribeProducers (KIP-664) see a franz-go
// transactional producer's transaction while it is open, after it commits
// and after the next one aborts, and are answered
// TRANSACTIONAL_ID_NOT_FOUND and UNKNOWN_TOPIC_OR_PARTITION for what the
// chain does not have.
func TestKafkaFaceTxnAdmin(t *testing.T) {
	addr, _ := startKafkaFace(t, nil) // topic k, 3 partitions
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("tx1"), kgo.DefaultProduceTopic("k"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// Three records in partition 0 (sequences 0..2), one in 1, none in 2.
	recs := []*kgo.Record{{Partition: 0, Value: []byte("a")}, {Partition: 1, Value: []byte("b")}, {Partition: 0, Value: []byte("c")}, {Partition: 0, Value: []byte("d")}}
	results := prod.ProduceSync(ctx, recs...)
	if err := results.FirstErr(); err != nil {
		t.Fatalf("produce in a transaction: %v", err)
	}
	firstOffset := map[int32]int64{}
	for _, r := range results {
		if o, ok := firstOffset[r.Record.Partition]; !ok || r.Record.Offset < o {
			firstOffset[r.Record.Partition] = r.Record.Offset
		}
	}
	pid, epoch, err := prod.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	describe := func(id string) kadm.DescribedTransaction {
		t.Helper()
		ds, err := adm.DescribeTransactions(ctx, id)
		if err != nil {
			t.Fatalf("DescribeTransactions(%s): %v", id, err)
		}
		d, ok := ds[id]
		if !ok {
			t.Fatalf("DescribeTransactions(%s) = %v, want %s described", id, ds, id)
		}
		return d
	}
	list := func(pids []int64, states ...string) map[string]kadm.ListedTransaction {
		t.Helper()
		ls, err := adm.ListTransactions(ctx, pids, states)
		if err != nil {
			t.Fatalf("ListTransactions(%v, %v): %v", pids, states, err)
		}
		return ls
	}
	producers := func(s kadm.TopicsSet) kadm.DescribedProducersTopics {
		t.Helper()
		dp, err := adm.DescribeProducers(ctx, s)
		if err != nil {
			t.Fatalf("DescribeProducers(%v): %v", s, err)
		}
		return dp
	}
	all := kadm.TopicsSet{"k": {0: {}, 1: {}, 2: {}}}

	// Open.
	d := describe("tx1")
	if d.Err != nil || d.State != "Ongoing" || d.ProducerID != pid || d.ProducerEpoch != epoch || d.TimeoutMillis != 20000 {
		t.Fatalf("DescribeTransactions(tx1) while open = %+v, want Ongoing, producer %d epoch %d, timeout 20000", d, pid, epoch)
	}
	if start := time.UnixMilli(d.StartTimestamp); start.Before(began.Add(-time.Minute)) || start.After(time.Now().Add(time.Minute)) {
		t.Fatalf("DescribeTransactions(tx1) start %v, want about %v", start, began)
	}
	if got := d.Topics.Sorted(); len(got) != 1 || got[0].Topic != "k" || !slices.Equal(got[0].Partitions, []int32{0, 1}) {
		t.Fatalf("DescribeTransactions(tx1) partitions %v, want k 0 and 1", got)
	}
	if l, ok := list(nil)["tx1"]; !ok || l.State != "Ongoing" || l.ProducerID != pid {
		t.Fatalf("ListTransactions() tx1 = %+v (listed %v), want Ongoing, producer %d", l, ok, pid)
	}
	if _, ok := list(nil, "Ongoing", "Empty")["tx1"]; !ok {
		t.Fatal("ListTransactions(Ongoing, Empty) leaves out tx1, Ongoing")
	}
	if _, ok := list(nil, "CompleteCommit")["tx1"]; ok {
		t.Fatal("ListTransactions(CompleteCommit) lists tx1, Ongoing")
	}
	if _, ok := list([]int64{pid})["tx1"]; !ok {
		t.Fatalf("ListTransactions(producer %d) leaves out tx1", pid)
	}
	if _, ok := list([]int64{pid + 1})["tx1"]; ok {
		t.Fatalf("ListTransactions(producer %d) lists tx1, of producer %d", pid+1, pid)
	}
	dp := producers(all)
	for p, want := range map[int32]struct {
		lastSeq int32
		open    bool
	}{0: {2, true}, 1: {0, true}, 2: {-1, false}} {
		part := dp["k"].Partitions[p]
		if part.Err != nil {
			t.Fatalf("DescribeProducers k/%d: %v", p, part.Err)
		}
		got, ok := part.ActiveProducers[pid]
		if ok != want.open || len(part.ActiveProducers) != map[bool]int{true: 1}[want.open] {
			t.Fatalf("DescribeProducers k/%d = %v, want producer %d listed %v, alone", p, part.ActiveProducers, pid, want.open)
		}
		if !ok {
			continue
		}
		if got.ProducerEpoch != epoch || got.LastSequence != want.lastSeq || got.CurrentTxnStartOffset != firstOffset[p] || got.CoordinatorEpoch != -1 || got.LastTimestamp != -1 {
			t.Fatalf("DescribeProducers k/%d producer %d = %+v, want epoch %d, last sequence %d, transaction from %d, coordinator epoch and timestamp -1",
				p, pid, got, epoch, want.lastSeq, firstOffset[p])
		}
	}

	// Committed.
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	d = describe("tx1")
	if d.Err != nil || d.State != "CompleteCommit" || d.ProducerID != pid || d.ProducerEpoch != epoch || d.StartTimestamp != -1 || len(d.Topics) != 0 {
		t.Fatalf("DescribeTransactions(tx1) after commit = %+v, want CompleteCommit, producer %d epoch %d, no start, no partitions", d, pid, epoch)
	}
	if l, ok := list(nil, "CompleteCommit")["tx1"]; !ok || l.State != "CompleteCommit" {
		t.Fatalf("ListTransactions(CompleteCommit) tx1 = %+v (listed %v), want CompleteCommit", l, ok)
	}
	if _, ok := list(nil, "Ongoing")["tx1"]; ok {
		t.Fatal("ListTransactions(Ongoing) lists tx1 after its commit")
	}
	for p, part := range producers(all)["k"].Partitions {
		if part.Err != nil || len(part.ActiveProducers) != 0 {
			t.Fatalf("DescribeProducers k/%d after the commit = %v (%v), want none", p, part.ActiveProducers, part.Err)
		}
	}

	// Aborted.
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Partition: 2, Value: []byte("e")}).FirstErr(); err != nil {
		t.Fatalf("produce in a transaction: %v", err)
	}
	if err := prod.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if d = describe("tx1"); d.Err != nil || d.State != "CompleteAbort" || d.ProducerID != pid {
		t.Fatalf("DescribeTransactions(tx1) after abort = %+v, want CompleteAbort", d)
	}

	// What the chain does not have.
	if d = describe("nope"); !errors.Is(d.Err, kerr.TransactionalIDNotFound) {
		t.Fatalf("DescribeTransactions(nope) error %v, want TRANSACTIONAL_ID_NOT_FOUND", d.Err)
	}
	// Straight to the broker: kadm answers partitions its metadata lacks
	// without asking.
	broker := cl.SeedBrokers()[0]
	req := kmsg.NewPtrDescribeProducersRequest()
	req.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: "k", Partitions: []int32{7, -1, 0}}, {Topic: "nope", Partitions: []int32{0}}}
	kresp, err := broker.Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int16{}
	for _, rt := range kresp.(*kmsg.DescribeProducersResponse).Topics {
		for _, rp := range rt.Partitions {
			codes[fmt.Sprintf("%s/%d", rt.Topic, rp.Partition)] = rp.ErrorCode
		}
	}
	unknown := kerr.UnknownTopicOrPartition.Code
	if want := map[string]int16{"k/7": unknown, "k/-1": unknown, "k/0": 0, "nope/0": unknown}; !maps.Equal(codes, want) {
		t.Fatalf("DescribeProducers error codes %v, want %v", codes, want)
	}
	lreq := kmsg.NewPtrListTransactionsRequest()
	lreq.StateFilters = []string{"CompleteAbort", "Bogus"}
	lresp, err := lreq.RequestWith(ctx, broker)
	if err != nil {
		t.Fatal(err)
	}
	if lresp.ErrorCode != 0 || !slices.Equal(lresp.UnknownStateFilters, []string{"Bogus"}) || len(lresp.TransactionStates) != 1 || lresp.TransactionStates[0].TransactionalID != "tx1" {
		t.Fatalf("ListTransactions(CompleteAbort, Bogus) = %+v, want tx1 and Bogus unknown", lresp)
	}
	lreq.StateFilters = []string{"Bogus"}
	if lresp, err = lreq.RequestWith(ctx, broker); err != nil || len(lresp.TransactionStates) != 0 {
		t.Fatalf("ListTransactions(Bogus) = %+v, %v, want none listed", lresp, err)
	}
}
