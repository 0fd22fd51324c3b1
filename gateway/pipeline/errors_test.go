package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/byzlog/byzlog/protos/wire"
)

// TestGRPCStatus: the one mapping from the core's typed errors to what a
// gRPC (or HTTP) client gets.
func TestGRPCStatus(t *testing.T) {
	for _, tc := range []struct {
		err       error
		code      codes.Code
		msg       string
		retryHint time.Duration
	}{
		{rejected(wire.CodeSequenceGap, "expected 3"), codes.FailedPrecondition, "expected 3", 0},
		{rejected(wire.CodeUnknownTopic, "no such topic"), codes.NotFound, "no such topic", 0},
		{rejected(wire.CodeNotAllowed, "key not allowed"), codes.PermissionDenied, "key not allowed", 0},
		{rejected(wire.CodeBadSignature, "bad"), codes.InvalidArgument, "bad", 0},
		{rejected(wire.CodePending, "held"), codes.Aborted, "held", 0},
		{fmt.Errorf("admit: %w", rejected(wire.CodeTopicExists, "t")), codes.AlreadyExists, "t", 0},
		{errorf(ErrInvalid, "request carries no batch"), codes.InvalidArgument, "request carries no batch", 0},
		{errorf(ErrConflict, "sequence pending"), codes.FailedPrecondition, "sequence pending", 0},
		{exhausted(retrySoon, "queue full"), codes.ResourceExhausted, "queue full", retrySoon},
		{exhausted(retryLater, "producer over its share"), codes.ResourceExhausted, "producer over its share", retryLater},
		{errorf(ErrUnavailable, "retry"), codes.Unavailable, "retry", 0},
		{errorf(ErrNotCommitted, "not committed within 30s"), codes.DeadlineExceeded, "not committed", 0},
		{errorf(ErrOutOfRange, "no header yet"), codes.OutOfRange, "no header yet", 0},
		{errorf(ErrInternal, "bad outcome"), codes.Internal, "bad outcome", 0},
		{context.Canceled, codes.Canceled, "context canceled", 0},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "deadline exceeded", 0},
		{status.Error(codes.PermissionDenied, "as it was"), codes.PermissionDenied, "as it was", 0},
		{errors.New("something else"), codes.Unknown, "something else", 0},
	} {
		st := GRPCStatus(tc.err)
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("GRPCStatus(%v) = %s %q, want %s mentioning %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
		}
		var hint time.Duration
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				hint = ri.RetryDelay.AsDuration()
			}
		}
		if hint != tc.retryHint {
			t.Errorf("GRPCStatus(%v) retry hint = %s, want %s", tc.err, hint, tc.retryHint)
		}
		if got := status.Code(tc.err); got != tc.code && tc.code != codes.Canceled && tc.code != codes.DeadlineExceeded {
			t.Errorf("status.Code(%v) = %s, want %s (GRPCStatus)", tc.err, got, tc.code)
		}
	}
	if GRPCError(nil) != nil {
		t.Errorf("GRPCError(nil) != nil")
	}
}

// TestErrorKinds: a caller branches on the kind with errors.Is.
func TestErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind error
	}{
		{errorf(ErrUnavailable, "x"), ErrUnavailable},
		{fmt.Errorf("ctx: %w", exhausted(time.Second, "x")), ErrBusy},
		{errorf(ErrNotCommitted, "x"), ErrNotCommitted},
	} {
		if !errors.Is(tc.err, tc.kind) {
			t.Errorf("errors.Is(%v, %v) = false, want true", tc.err, tc.kind)
		}
		if errors.Is(tc.err, ErrInvalid) {
			t.Errorf("errors.Is(%v, ErrInvalid) = true, want false", tc.err)
		}
	}
	var re *RejectedError
	if err := fmt.Errorf("x: %w", rejected(wire.CodeSequenceGap, "gap")); !errors.As(err, &re) || re.Code != wire.CodeSequenceGap {
		t.Errorf("errors.As(rejected) = %v, want the code", re)
	}
}
