package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	"github.com/byzlog/byzlog/gateway/pipeline"
	"github.com/byzlog/byzlog/protos/wire"
)

// fatalCodes are the chain codes a client must act on (its records, its
// topic, its rights, its producer state): every other code answers a write
// with a retriable error, since a refused transaction wrote nothing.
var fatalCodes = map[wire.Code]bool{
	wire.CodeTxTooLarge: true, wire.CodeNotAllowed: true, wire.CodeRecordTooLarge: true,
	wire.CodeBatchTooLarge: true, wire.CodeTooManyHeaders: true, wire.CodeEmptyBatch: true,
	wire.CodeNotAdmin: true, wire.CodeBadTopicName: true, wire.CodeTopicExists: true,
	wire.CodeBadTopicConfig: true, wire.CodeBadGroup: true, wire.CodeNotGroupOwner: true,
	wire.CodeBadQuery: true, wire.CodeOffsetOutOfRange: true, wire.CodeProducerFenced: true,
	wire.CodeBelowThreshold: true, wire.CodeBadTimestamp: true, wire.CodeNoKey: true, wire.CodePartitionFull: true,
	// A transaction the producer must abort or start again.
	wire.CodeUnknownTxn: true, wire.CodeNotTxnOwner: true, wire.CodeBadTxnState: true,
	wire.CodeBadTxnTimeout: true, wire.CodeTxnLimit: true,
	// An idempotent producer's own sequence: it resolves them (a plain
	// producer's are the face's: retriable, TestCodeErrors checks).
	wire.CodeSequenceGap: true, wire.CodeSequenceReused: true, wire.CodeDuplicate: true,
}

// TestCodeErrors: every chain code has a Kafka error, and only the codes
// that ask the client to change something are fatal; a plain producer
// never hears of sequences (the face's own), and a code this build does
// not know is retriable. A code added to wire without a line in
// codeErrors fails here.
func TestCodeErrors(t *testing.T) {
	for _, code := range wire.Codes() {
		if code == wire.CodeOK {
			continue
		}
		if _, ok := codeErrors[code]; !ok {
			t.Errorf("codeErrors has no entry for %s (%d): say what a Kafka client sees for it", code, code)
			continue
		}
		for _, idem := range []bool{true, false} {
			got := rejectedError(code, idem)
			if got == kerr.InvalidRecord && code != wire.CodeTooManyHeaders && code != wire.CodeEmptyBatch && code != wire.CodeNoKey {
				t.Errorf("rejectedError(%s, %v) = INVALID_RECORD, for a code that says nothing of the records", code, idem)
			}
			wantFatal := fatalCodes[code]
			if !idem && (code == wire.CodeSequenceGap || code == wire.CodeSequenceReused || code == wire.CodeDuplicate) {
				wantFatal = false
			}
			if got.Retriable == wantFatal {
				t.Errorf("rejectedError(%s, idempotent %v) = %v (retriable %v), want retriable %v", code, idem, got, got.Retriable, !wantFatal)
			}
		}
	}
	for _, code := range []wire.Code{150, 200, 1 << 20} {
		if got := rejectedError(code, true); !got.Retriable {
			t.Errorf("rejectedError(unknown %d) = %v, want a retriable error", code, got)
		}
	}
}

// TestRejectedError: the codes the chaos rows and librdkafka's tests met,
// pinned (a batch another transaction holds answered INVALID_RECORD failed
// 283 of 15,676 sends in the kafka-kill chaos row).
func TestRejectedError(t *testing.T) {
	for _, tc := range []struct {
		code wire.Code
		idem bool
		want *kerr.Error
	}{
		{wire.CodePending, true, kerr.NotEnoughReplicas},
		{wire.CodeMempoolFull, false, kerr.NotEnoughReplicas},
		{wire.CodeExpired, false, kerr.NotEnoughReplicas},
		{wire.CodeBlockFull, false, kerr.NotEnoughReplicas},
		{wire.CodeBundleTooLarge, false, kerr.NotEnoughReplicas},
		{wire.CodeSequenceGap, true, kerr.OutOfOrderSequenceNumber},
		{wire.CodeSequenceGap, false, kerr.NotEnoughReplicas},
		{wire.CodeSequenceReused, true, kerr.OutOfOrderSequenceNumber},
		{wire.CodeSequenceReused, false, kerr.NotEnoughReplicas},
		{wire.CodeProducerFenced, true, kerr.InvalidProducerEpoch},
		{wire.CodeBatchTooLarge, false, kerr.MessageTooLarge},
		{wire.CodeUnknownTopic, false, kerr.UnknownTopicOrPartition},
		{wire.CodeBadTopicName, false, kerr.InvalidTopicException},
	} {
		if got := rejectedError(tc.code, tc.idem); got != tc.want {
			t.Errorf("rejectedError(%s, %v) = %v, want %v", tc.code, tc.idem, got, tc.want)
		}
	}
}

// TestWriteError: the gateway's own outcomes. What may have been written
// is REQUEST_TIMED_OUT (an idempotent retry is then a duplicate the chain
// answers with the first offsets), what was not is NOT_ENOUGH_REPLICAS, and
// an error the map does not know is retriable.
func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want *kerr.Error
	}{
		{fmt.Errorf("x: %w", pipeline.ErrNotCommitted), kerr.RequestTimedOut},
		{context.DeadlineExceeded, kerr.RequestTimedOut},
		{context.Canceled, kerr.RequestTimedOut},
		{fmt.Errorf("x: %w", pipeline.ErrInternal), kerr.RequestTimedOut},
		{errors.New("something new"), kerr.RequestTimedOut},
		{fmt.Errorf("x: %w", pipeline.ErrBusy), kerr.NotEnoughReplicas},
		{fmt.Errorf("x: %w", pipeline.ErrUnavailable), kerr.NotEnoughReplicas},
		{fmt.Errorf("x: %w", pipeline.ErrConflict), kerr.NotEnoughReplicas},
		{fmt.Errorf("x: %w", pipeline.ErrInvalid), kerr.NotEnoughReplicas},
		{&pipeline.RejectedError{Code: wire.CodeRecordTooLarge}, kerr.MessageTooLarge},
		{&pipeline.RejectedError{Code: 4242}, kerr.NotEnoughReplicas},
		{fmt.Errorf("x: %w", batch.ErrCorrupt), kerr.CorruptMessage},
		{fmt.Errorf("x: %w", batch.ErrInvalidRecord), kerr.InvalidRecord},
		{fmt.Errorf("x: %w", errUnknownPartition), kerr.UnknownTopicOrPartition},
	} {
		if got := writeError(tc.err, false); got != tc.want {
			t.Errorf("writeError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
