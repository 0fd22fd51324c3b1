package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// TestTransactionPlacesAreSkipped: a stream holds a transaction's markers
// and an aborted transaction's records' places at their offsets; Next
// returns neither and reports no gap for them, alone and in a group, and
// the position moves past them.
func TestTransactionPlacesAreSkipped(t *testing.T) {
	for _, group := range []string{"", "g"} {
		t.Run("group="+group, func(t *testing.T) {
			e := newEnv(t)
			e.stream("t", false)
			txn := func(o uint64) *byzlogv1.StoredRecord {
				r := rec("t", 0, o, int64(o)+1)
				r.KafkaProducerId, r.KafkaEpoch, r.KafkaTransactional = 1<<62, 0, true
				return r
			}
			marker := func(o uint64, commit bool) *byzlogv1.StoredRecord {
				r := txn(o)
				r.Key, r.Value, r.Headers, r.KafkaTransactional = nil, nil, nil, false
				r.KafkaControl = &byzlogv1.KafkaControl{Commit: commit}
				return r
			}
			e.publish(rec("t", 0, 0, 1), layout.Aborted(txn(1)), layout.Aborted(txn(2)), marker(3, false),
				txn(4), marker(5, true), rec("t", 0, 6, 7), marker(7, false))
			var opts []consumer.SubscribeOption
			if group != "" {
				opts = append(opts, consumer.WithGroup(group))
			}
			s := e.subscribe(e.consumer(), "t", opts...)
			rs := read(t, s, 3)
			if got := desc(rs...); got != "0@0 0@4 0@6" {
				t.Fatalf("read %s, want 0@0 0@4 0@6", got)
			}
			if string(rs[1].Value) != "v0-4" {
				t.Errorf("the committed transaction's record has value %q", rs[1].Value)
			}
			quiet(t, s)
			if p := s.Positions(); len(p) != 1 || p[0].Offset != 8 {
				t.Errorf("positions %v, want partition 0 at 8 (past the last marker)", p)
			}
		})
	}
}

// TestAbortedPlacesAreProven: in verify mode an aborted transaction's
// places are proven by its marker: a stream that shows a committed
// transaction's records as aborted places (each place checks against the
// chain's record, as the real verifier's does) is caught at the commit
// marker; an honest stream reads on.
func TestAbortedPlacesAreProven(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit bool
	}{{"aborted", false}, {"committed shown as aborted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.stream("t", false)
			txn := func(o uint64, pid int64) *byzlogv1.StoredRecord {
				r := rec("t", 0, o, int64(o)+1)
				r.KafkaProducerId, r.KafkaTransactional = pid, true
				return r
			}
			marker := func(o uint64, pid int64, commit bool) *byzlogv1.StoredRecord {
				r := txn(o, pid)
				r.Key, r.Value, r.Headers, r.KafkaTransactional = nil, nil, nil, false
				r.KafkaControl = &byzlogv1.KafkaControl{Commit: commit}
				return r
			}
			// Another producer's committed transaction between them.
			e.publish(layout.Aborted(txn(0, 7)), txn(1, 9), layout.Aborted(txn(2, 7)), marker(3, 9, true), marker(4, 7, tc.commit), rec("t", 0, 5, 6))
			s := e.subscribe(e.consumer(consumer.WithVerifier(&refuseOffset{bad: 100})), "t")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := s.Next(ctx)
			if err != nil || r.Offset != 1 {
				t.Fatalf("Next = %v, %v; want the other producer's committed record at 1", r, err)
			}
			r, err = s.Next(ctx)
			if !tc.commit {
				if err != nil || r.Offset != 5 {
					t.Fatalf("Next = %v, %v; want the record at 5", r, err)
				}
				return
			}
			if !errors.Is(err, consumer.ErrUnverified) || !strings.Contains(err.Error(), "from offset 0 as an aborted transaction's records") || !strings.Contains(err.Error(), "marker at offset 4") {
				t.Fatalf("Next = %v, %v; want ErrUnverified naming the places from 0 and the commit marker at 4", r, err)
			}
		})
	}
}
