package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/byzlog/byzlog/gateway"
	"github.com/byzlog/byzlog/gateway/kafka/batch"
	"github.com/byzlog/byzlog/protos/wire"
)

// kafkaError maps a gateway or decoding error to the Kafka error a client
// acts on: retriable ones for what may pass on a retry, fatal ones for
// what must be fixed. The message goes along where the version carries one.
func kafkaError(err error) *kerr.Error {
	var re *gateway.RejectedError
	switch {
	case errors.Is(err, errUnknownPartition):
		return kerr.UnknownTopicOrPartition
	case errors.Is(err, errUnknownProducer):
		return kerr.UnknownProducerID
	case errors.As(err, &re):
		return rejectedError(re.Code)
	case errors.Is(err, batch.ErrUnsupportedMagic):
		return kerr.UnsupportedForMessageFormat
	case errors.Is(err, batch.ErrCorrupt):
		return kerr.CorruptMessage
	case errors.Is(err, batch.ErrTooLarge):
		return kerr.MessageTooLarge
	case errors.Is(err, batch.ErrInvalidRecord), errors.Is(err, errReservedHeader):
		return kerr.InvalidRecord
	case errors.Is(err, gateway.ErrBusy), errors.Is(err, gateway.ErrUnavailable), errors.Is(err, gateway.ErrConflict):
		// Nothing of the batch was written, or the chain holds it under
		// its sequence: a retry is safe.
		return kerr.NotEnoughReplicas
	case errors.Is(err, gateway.ErrNotCommitted), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut
	case errors.Is(err, gateway.ErrInvalid):
		return kerr.InvalidRecord
	}
	return kerr.UnknownServerError
}

func rejectedError(c wire.Code) *kerr.Error {
	switch c {
	case wire.CodeUnknownTopic, wire.CodeUnknownPartition:
		return kerr.UnknownTopicOrPartition
	case wire.CodeNotAllowed:
		return kerr.TopicAuthorizationFailed
	case wire.CodeRecordTooLarge:
		return kerr.MessageTooLarge
	case wire.CodeBatchTooLarge:
		// Too many records or bytes for the chain, or the signed batch
		// passes the gateway's max_bundle_bytes: a smaller batch fits.
		return kerr.MessageTooLarge
	case wire.CodeTooManyHeaders, wire.CodeEmptyBatch:
		return kerr.InvalidRecord
	case wire.CodeBadCompression, wire.CodeMalformedTx:
		return kerr.CorruptMessage
	case wire.CodeSequenceGap, wire.CodeSequenceReused:
		// A reused sequence is a Kafka batch that starts inside a
		// committed one, or another batch under a committed sequence:
		// never a duplicate, so never answered as one.
		return kerr.OutOfOrderSequenceNumber
	case wire.CodeProducerFenced:
		return kerr.InvalidProducerEpoch
	case wire.CodeOffsetOutOfRange:
		return kerr.OffsetOutOfRange
	case wire.CodePending, wire.CodeMempoolFull, wire.CodeExpired, wire.CodeBlockFull, wire.CodeInternal:
		// Nothing was written, or another transaction holds the batch's
		// sequence and its outcome decides: the same batch again is safe.
		return kerr.NotEnoughReplicas
	case wire.CodeBadTopicName:
		return kerr.InvalidTopicException
	}
	return kerr.InvalidRecord
}

var (
	errUnknownPartition = errors.New("unknown topic or partition")
	errUnknownProducer  = errors.New("unknown producer id")
)

// message is what the client reads with the code.
func message(err error) *string {
	m := err.Error()
	return &m
}
