package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/byzlog/byzlog/protos/wire"
)

// TestRejectedError: what a client may send again is retriable (a batch
// another transaction holds answered INVALID_RECORD failed 283 of 15,676
// sends in the kafka-kill chaos row), and sequence refusals are never
// answered as success.
func TestRejectedError(t *testing.T) {
	for code, want := range map[wire.Code]*kerr.Error{
		wire.CodePending:        kerr.NotEnoughReplicas,
		wire.CodeMempoolFull:    kerr.NotEnoughReplicas,
		wire.CodeExpired:        kerr.NotEnoughReplicas,
		wire.CodeBlockFull:      kerr.NotEnoughReplicas,
		wire.CodeSequenceGap:    kerr.OutOfOrderSequenceNumber,
		wire.CodeSequenceReused: kerr.OutOfOrderSequenceNumber,
		wire.CodeProducerFenced: kerr.InvalidProducerEpoch,
		wire.CodeBatchTooLarge:  kerr.MessageTooLarge,
	} {
		if got := rejectedError(code); got != want {
			t.Errorf("rejectedError(%s) = %v, want %v", code, got, want)
		}
	}
}
