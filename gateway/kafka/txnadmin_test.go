package kafka

import (
	"testing"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

func TestTxnStateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *byzlogv1.TxnState
		want string
	}{
		{"initialized", &byzlogv1.TxnState{Epoch: 0}, "Empty"},
		{"open", &byzlogv1.TxnState{Epoch: 2, Open: true, Ended: true, EndedEpoch: 2, EndedCommit: true}, "Ongoing"},
		{"committed", &byzlogv1.TxnState{Epoch: 2, Ended: true, EndedEpoch: 2, EndedCommit: true}, "CompleteCommit"},
		{"aborted", &byzlogv1.TxnState{Epoch: 2, Ended: true, EndedEpoch: 2}, "CompleteAbort"},
		{"committed, then a new epoch", &byzlogv1.TxnState{Epoch: 3, Ended: true, EndedEpoch: 2, EndedCommit: true}, "Empty"},
		{"timed out: aborted at the old epoch", &byzlogv1.TxnState{Epoch: 3, Ended: true, EndedEpoch: 2}, "Empty"},
	} {
		if got := txnStateName(tc.in); got != tc.want {
			t.Errorf("txnStateName(%s) = %s, want %s", tc.name, got, tc.want)
		}
	}
}
