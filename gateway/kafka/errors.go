package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	"github.com/byzlog/byzlog/gateway/pipeline"
	"github.com/byzlog/byzlog/protos/wire"
)

// The error map: what a Kafka client sees for every outcome of a write,
// and whether it may send the same records again. The rule: only what the
// client must change (its records, its topic, its rights, its producer
// state) is fatal; everything else, and every outcome this map does not
// know, is retriable. A chain code always means nothing was written, so
// an unknown one is "not written, retry" (NOT_ENOUGH_REPLICAS); a gateway
// outcome this map does not know may have been written, so it is "timed
// out, retry" (REQUEST_TIMED_OUT), which an idempotent producer retries
// under the same sequence and the chain answers as a duplicate.
//
// Batches of a plain (non-idempotent) producer carry sequences the face
// chose (sequence.go), not the client: a sequence refusal is the face's to
// resolve (it reads the chain's next sequence again), so the client gets a
// retriable error, never OUT_OF_ORDER_SEQUENCE_NUMBER about sequences it
// never sent.

// codeErrors maps every chain result code to the Kafka error of a write
// that got it: idem for an idempotent producer's batch, plain for the
// face's own sequence (nil: as idem). TestCodeErrors fails on a code
// missing here.
var codeErrors = map[wire.Code]struct{ idem, plain *kerr.Error }{
	wire.CodeMalformedTx:      {idem: kerr.CorruptMessage},
	wire.CodeUnknownTxKind:    {idem: kerr.NotEnoughReplicas}, // the gateway and the chain disagree on versions
	wire.CodeTxTooLarge:       {idem: kerr.MessageTooLarge},
	wire.CodeEmptyBundle:      {idem: kerr.NotEnoughReplicas}, // the gateway's bundle, not the client's batch
	wire.CodeBadPublicKey:     {idem: kerr.NotEnoughReplicas}, // the face signed: its fault, not the records'
	wire.CodeBadSignature:     {idem: kerr.NotEnoughReplicas},
	wire.CodeEmptyBody:        {idem: kerr.NotEnoughReplicas},
	wire.CodeUnknownQuery:     {idem: kerr.NotEnoughReplicas},
	wire.CodeWrongChain:       {idem: kerr.NotEnoughReplicas},
	wire.CodeUnknownTopic:     {idem: kerr.UnknownTopicOrPartition},
	wire.CodeUnknownPartition: {idem: kerr.UnknownTopicOrPartition},
	wire.CodeNotAllowed:       {idem: kerr.TopicAuthorizationFailed},
	// The same batch is committed: written. The gateway answers it with
	// the original offsets; one that still gets here is a duplicate.
	wire.CodeDuplicate:      {idem: kerr.DuplicateSequenceNumber, plain: kerr.RequestTimedOut},
	wire.CodeSequenceGap:    {idem: kerr.OutOfOrderSequenceNumber, plain: kerr.NotEnoughReplicas},
	wire.CodeRecordTooLarge: {idem: kerr.MessageTooLarge},
	// Too many records or bytes for the chain, or the signed batch passes
	// the gateway's max_bundle_bytes: a smaller batch fits.
	wire.CodeBatchTooLarge:   {idem: kerr.MessageTooLarge},
	wire.CodeTooManyHeaders:  {idem: kerr.InvalidRecord},
	wire.CodeBadCompression:  {idem: kerr.CorruptMessage},
	wire.CodeEmptyBatch:      {idem: kerr.InvalidRecord},
	wire.CodeNotAdmin:        {idem: kerr.TopicAuthorizationFailed},
	wire.CodeBadNonce:        {idem: kerr.NotEnoughReplicas}, // the face's nonce: read again
	wire.CodeBadTopicName:    {idem: kerr.InvalidTopicException},
	wire.CodeTopicExists:     {idem: kerr.TopicAlreadyExists},
	wire.CodeBadTopicConfig:  {idem: kerr.InvalidConfig},
	wire.CodeBadGroup:        {idem: kerr.InvalidGroupID},
	wire.CodeNotGroupOwner:   {idem: kerr.GroupAuthorizationFailed},
	wire.CodeOffsetBackwards: {idem: kerr.NotEnoughReplicas}, // the face always rewinds
	// Before rules version 5 the chain refuses a commit past the log end
	// (Kafka takes any offset): the end may move past it, so retriable.
	wire.CodeOffsetBeyondEnd:  {idem: kerr.NotEnoughReplicas},
	wire.CodeBadQuery:         {idem: kerr.InvalidRequest},
	wire.CodeOffsetOutOfRange: {idem: kerr.OffsetOutOfRange},
	wire.CodeNotFound:         {idem: kerr.UnknownTopicOrPartition},
	// Nothing was written, or another transaction holds the batch's
	// sequence and its outcome decides: the same batch again is safe.
	wire.CodeBlockFull:      {idem: kerr.NotEnoughReplicas},
	wire.CodeBundleTooLarge: {idem: kerr.NotEnoughReplicas},
	wire.CodePending:        {idem: kerr.NotEnoughReplicas},
	wire.CodeMempoolFull:    {idem: kerr.NotEnoughReplicas},
	wire.CodeExpired:        {idem: kerr.NotEnoughReplicas},
	wire.CodeInternal:       {idem: kerr.NotEnoughReplicas},
	// A reused sequence is a Kafka batch that starts inside a committed
	// one, or another batch under a committed sequence: never a
	// duplicate, so never answered as one.
	wire.CodeSequenceReused: {idem: kerr.OutOfOrderSequenceNumber, plain: kerr.NotEnoughReplicas},
	wire.CodeBodyExpired:    {idem: kerr.NotEnoughReplicas}, // signed again on the retry
	wire.CodeProducerFenced: {idem: kerr.InvalidProducerEpoch},
	// Governance codes never answer a write of the face; if one does, the
	// write changed nothing.
	wire.CodeBelowThreshold:     {idem: kerr.PolicyViolation},
	wire.CodeBadValidatorChange: {idem: kerr.NotEnoughReplicas},
	wire.CodeBadAdminSet:        {idem: kerr.NotEnoughReplicas},
	wire.CodeNotIndexer:         {idem: kerr.NotEnoughReplicas},
	wire.CodeBadProgress:        {idem: kerr.NotEnoughReplicas},
	wire.CodeBadIndexerChange:   {idem: kerr.NotEnoughReplicas},
	wire.CodeDuplicateSigner:    {idem: kerr.NotEnoughReplicas},
	wire.CodeBadUpgrade:         {idem: kerr.NotEnoughReplicas},
	// A record's create time is out of its topic's bounds: the client's
	// records must change, as Kafka's INVALID_TIMESTAMP says.
	wire.CodeBadTimestamp: {idem: kerr.InvalidTimestamp},
	// A transactional batch whose transaction the chain does not hold in
	// that state: the producer must start again (abort, InitProducerId).
	wire.CodeUnknownTxn:    {idem: kerr.InvalidProducerIDMapping},
	wire.CodeNotTxnOwner:   {idem: kerr.TransactionalIDAuthorizationFailed},
	wire.CodeBadTxnState:   {idem: kerr.InvalidTxnState},
	wire.CodeBadTxnTimeout: {idem: kerr.InvalidTransactionTimeout},
	wire.CodeTxnLimit:      {idem: kerr.PolicyViolation},
	// A record without a key to a compacted topic: the client's records
	// must change (Kafka's INVALID_RECORD).
	wire.CodeNoKey: {idem: kerr.InvalidRecord},
	// A compact-only partition holds its retention_bytes of live records:
	// the client must delete keys or the topic's bound go up (Kafka's
	// POLICY_VIOLATION; Kafka itself sets no such bound).
	wire.CodePartitionFull: {idem: kerr.PolicyViolation},
}

// rejectedError is the Kafka error of chain code c for an idempotent
// producer's batch (idempotent) or one the face sequenced.
func rejectedError(c wire.Code, idempotent bool) *kerr.Error {
	e, ok := codeErrors[c]
	switch {
	case !ok:
		return kerr.NotEnoughReplicas // a code this build does not know: nothing written
	case !idempotent && e.plain != nil:
		return e.plain
	}
	return e.idem
}

// kafkaError maps a gateway or decoding error of a plain write (or a read)
// to the Kafka error a client acts on.
func kafkaError(err error) *kerr.Error { return writeError(err, false) }

// writeError maps a gateway or decoding error to the Kafka error a client
// acts on: retriable ones for what may pass on a retry, fatal ones for
// what must be fixed. The message goes along where the version carries one.
func writeError(err error, idempotent bool) *kerr.Error {
	var re *pipeline.RejectedError
	switch {
	case errors.Is(err, errUnknownPartition):
		return kerr.UnknownTopicOrPartition
	case errors.Is(err, errInvalidTopic):
		return kerr.InvalidTopicException
	case errors.Is(err, errUnknownProducer):
		return kerr.UnknownProducerID
	case errors.As(err, &re):
		return rejectedError(re.Code, idempotent)
	case errors.Is(err, batch.ErrUnsupportedMagic):
		return kerr.UnsupportedForMessageFormat
	case errors.Is(err, batch.ErrCorrupt):
		return kerr.CorruptMessage
	case errors.Is(err, batch.ErrTooLarge):
		return kerr.MessageTooLarge
	case errors.Is(err, batch.ErrInvalidRecord), errors.Is(err, errReservedHeader):
		return kerr.InvalidRecord
	case errors.Is(err, pipeline.ErrBusy), errors.Is(err, pipeline.ErrUnavailable), errors.Is(err, pipeline.ErrConflict):
		// Nothing of the batch was written, or the chain holds it under
		// its sequence: a retry is safe.
		return kerr.NotEnoughReplicas
	case errors.Is(err, pipeline.ErrInvalid):
		// The face's own request to the gateway was wrong: its fault, so
		// it may pass on a retry (after a restart with a fix), never a
		// verdict on the records.
		return kerr.NotEnoughReplicas
	}
	// pipeline.ErrNotCommitted, pipeline.ErrInternal, a context's end, and
	// anything this map does not know: the outcome is open.
	return kerr.RequestTimedOut
}

var (
	errUnknownPartition = errors.New("unknown topic or partition")
	errUnknownProducer  = errors.New("unknown producer id")
	errInvalidTopic     = errors.New("invalid topic name")
)

// message is what the client reads with the code.
func message(err error) *string {
	m := err.Error()
	return &m
}
