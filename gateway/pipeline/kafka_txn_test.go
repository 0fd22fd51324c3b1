package pipeline_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
