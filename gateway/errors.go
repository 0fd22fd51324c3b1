package gateway

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/byzlog/byzlog/protos/wire"
)

// grpcCode maps a state machine result code to the gRPC code a client
// branches on: InvalidArgument means fix the request, FailedPrecondition
// means fix the order or state first, NotFound and PermissionDenied mean
// what they say; Aborted, ResourceExhausted and Unavailable mean send the
// same batch again later.
func grpcCode(c wire.Code) codes.Code {
	switch c {
	case wire.CodeOK, wire.CodeDuplicate:
		return codes.OK
	case wire.CodeUnknownTopic, wire.CodeUnknownPartition, wire.CodeNotFound:
		return codes.NotFound
	case wire.CodeNotAllowed, wire.CodeNotAdmin, wire.CodeNotGroupOwner:
		return codes.PermissionDenied
	case wire.CodeSequenceGap, wire.CodeBadNonce, wire.CodeOffsetBackwards, wire.CodeSequenceReused:
		return codes.FailedPrecondition
	case wire.CodeTopicExists:
		return codes.AlreadyExists
	case wire.CodeOffsetBeyondEnd, wire.CodeOffsetOutOfRange:
		return codes.OutOfRange
	case wire.CodeUnknownQuery:
		return codes.Unimplemented
	case wire.CodePending:
		// Another transaction holds the sequence: retrying the same batch
		// is answered by its outcome (a duplicate with offsets once it
		// commits), so the client retries, as after a concurrency conflict.
		return codes.Aborted
	case wire.CodeMempoolFull:
		return codes.ResourceExhausted
	case wire.CodeExpired:
		return codes.Unavailable
	case wire.CodeInternal:
		return codes.Internal
	}
	return codes.InvalidArgument
}

// rejected is the error for a transaction or batch the state machine refused.
func rejected(c wire.Code, log string) error {
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
