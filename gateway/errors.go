package gateway

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/byzlog/byzlog/abciapp/core"
)

// grpcCode maps a state machine result code to the gRPC code a client
// branches on: InvalidArgument means fix the request, FailedPrecondition
// means fix the order or state first, NotFound and PermissionDenied mean
// what they say; Aborted, ResourceExhausted and Unavailable mean send the
// same batch again later.
func grpcCode(c core.Code) codes.Code {
	switch c {
	case core.CodeOK, core.CodeDuplicate:
		return codes.OK
	case core.CodeUnknownTopic, core.CodeUnknownPartition, core.CodeNotFound:
		return codes.NotFound
	case core.CodeNotAllowed, core.CodeNotAdmin, core.CodeNotGroupOwner:
		return codes.PermissionDenied
	case core.CodeSequenceGap, core.CodeBadNonce, core.CodeOffsetBackwards, core.CodeSequenceReused:
		return codes.FailedPrecondition
	case core.CodeTopicExists:
		return codes.AlreadyExists
	case core.CodeOffsetBeyondEnd, core.CodeOffsetOutOfRange:
		return codes.OutOfRange
	case core.CodeUnknownQuery:
		return codes.Unimplemented
	case core.CodePending:
		// Another transaction holds the sequence: retrying the same batch
		// is answered by its outcome (a duplicate with offsets once it
		// commits), so the client retries, as after a concurrency conflict.
		return codes.Aborted
	case core.CodeMempoolFull:
		return codes.ResourceExhausted
	case core.CodeExpired:
		return codes.Unavailable
	case core.CodeInternal:
		return codes.Internal
	}
	return codes.InvalidArgument
}

// rejected is the error for a transaction or batch the state machine refused.
func rejected(c core.Code, log string) error {
	return status.Errorf(grpcCode(c), "%s: %s", c, log)
}

// exhausted is RESOURCE_EXHAUSTED with a retry hint.
func exhausted(after time.Duration, format string, args ...any) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf(format, args...))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); err == nil {
		return d.Err()
	}
	return st.Err()
}
