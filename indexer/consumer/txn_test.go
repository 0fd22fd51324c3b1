package consumer_test

import (
	"testing"

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
