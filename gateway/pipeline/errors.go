package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/byzlog/byzlog/protos/wire"
)

// The gateway's core returns typed errors: a *RejectedError for what the
// state machine refused, an *Error of one of the kinds below for the
// gateway's own answers, or a context's error. This file alone maps them
// to gRPC codes (GRPCStatus), for the faces (grpcface, and through it
// httpface). Both types also carry GRPCStatus, so a gRPC server or
// status.Code reads them as they are.

// The kinds of Error, for errors.Is.
var (
	// ErrInvalid: the request is wrong; fix it (INVALID_ARGUMENT).
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: the request conflicts with state or a pending one; fix
	// the order or the sequence first (FAILED_PRECONDITION).
	ErrConflict = errors.New("conflict")
	// ErrBusy: a bound is reached; retry after Error.RetryAfter
	// (RESOURCE_EXHAUSTED).
	ErrBusy = errors.New("busy")
	// ErrUnavailable: no answer now; retry, here or elsewhere, with the
	// same sequence (UNAVAILABLE).
	ErrUnavailable = errors.New("unavailable")
	// ErrNotCommitted: not committed in time; it may still commit: retry
	// with the same sequence (DEADLINE_EXCEEDED).
	ErrNotCommitted = errors.New("not committed in time")
	// ErrOutOfRange: the height asked for is not there yet (OUT_OF_RANGE).
	ErrOutOfRange = errors.New("out of range")
	// ErrPruned: the height asked for is gone: f+1 nodes pruned it
	// (NOT_FOUND).
	ErrPruned = errors.New("pruned")
	// ErrInternal: a node or the gateway broke its contract (INTERNAL).
	ErrInternal = errors.New("internal error")
)

// Error is the gateway's own error: a kind and the message a client reads.
type Error struct {
	Kind error  // one of the Err kinds
	Msg  string // what the client reads: what happened and what to do
	// RetryAfter is when to retry an ErrBusy error.
	RetryAfter time.Duration
}

func (e *Error) Error() string        { return e.Msg }
func (e *Error) Is(target error) bool { return target == e.Kind }

// GRPCStatus is e as the gRPC status a client gets.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(kindCode(e.Kind), e.Msg)
	if e.Kind == ErrBusy {
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)}); err == nil {
			return d
		}
	}
	return st
}

func kindCode(kind error) codes.Code {
	switch kind {
	case ErrInvalid:
		return codes.InvalidArgument
	case ErrConflict:
		return codes.FailedPrecondition
	case ErrBusy:
		return codes.ResourceExhausted
	case ErrUnavailable:
		return codes.Unavailable
	case ErrNotCommitted:
		return codes.DeadlineExceeded
	case ErrOutOfRange:
		return codes.OutOfRange
	case ErrPruned:
		return codes.NotFound
	}
	return codes.Internal
}

// errorf is an Error of kind with a formatted message.
func errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Retry hints of ErrBusy errors: soon for a full queue, later for a
// producer over its share or a node's full mempool.
const (
	retrySoon  = 100 * time.Millisecond
	retryLater = time.Second
)

// exhausted is ErrBusy with a retry hint.
func exhausted(after time.Duration, format string, args ...any) error {
	return &Error{Kind: ErrBusy, Msg: fmt.Sprintf(format, args...), RetryAfter: after}
}

// RejectedError is a transaction or batch the state machine refused (or
// would refuse), with its result code and log.
type RejectedError struct {
	Code wire.Code
	Log  string
}

func (e *RejectedError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Log) }

// GRPCStatus is e with the gRPC code of its result code (grpcCode).
func (e *RejectedError) GRPCStatus() *status.Status { return status.New(grpcCode(e.Code), e.Error()) }

// rejected is the error for a transaction or batch the state machine refused.
func rejected(c wire.Code, log string) error { return &RejectedError{Code: c, Log: log} }

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
	case wire.CodeNotAllowed, wire.CodeNotAdmin, wire.CodeNotGroupOwner, wire.CodeBelowThreshold, wire.CodeNotIndexer:
		return codes.PermissionDenied
	case wire.CodeSequenceGap, wire.CodeBadNonce, wire.CodeOffsetBackwards, wire.CodeSequenceReused, wire.CodeProducerFenced:
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

// GRPCStatus is err as the gRPC status a client gets: typed errors by
// their kind or result code, a context's error as CANCELLED or
// DEADLINE_EXCEEDED, anything else as status.Convert makes it.
func GRPCStatus(err error) *status.Status {
	var ge *Error
	var re *RejectedError
	switch {
	case errors.As(err, &re):
		return re.GRPCStatus()
	case errors.As(err, &ge):
		return ge.GRPCStatus()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err)
	}
	return status.Convert(err)
}

// GRPCError is err as a gRPC status error (nil stays nil).
func GRPCError(err error) error {
	if err == nil {
		return nil
	}
	return GRPCStatus(err).Err()
}

// outcomeLabel names err for the batches metric: its gRPC code.
func outcomeLabel(err error) string { return GRPCStatus(err).Code().String() }
