package wire

import "slices"

// Code is the result code of one transaction, as CometBFT reports it in
// CheckTx and in the block results. Zero is success; every other code means
// the transaction changed nothing. Codes are part of the wire contract: never
// renumber one. Each comes with a message that tells the client what to fix.
type Code uint32

// Codespace names byzlog's result codes in CometBFT responses.
const Codespace = "byzlog"

const (
	// CodeOK: the transaction was accepted.
	CodeOK Code = 0
	// CodeMalformedTx: the bytes are not a protobuf byzlog.v1.Tx, or a signed
	// body inside it does not decode.
	CodeMalformedTx Code = 1
	// CodeUnknownTxKind: the envelope (or an admin body) carries no kind this
	// version knows.
	CodeUnknownTxKind Code = 2
	// CodeTxTooLarge: the transaction is larger than the chain accepts.
	CodeTxTooLarge Code = 3
	// CodeEmptyBundle: a ProduceBundle holds no batch.
	CodeEmptyBundle Code = 4
	// CodeBadPublicKey: a signer's key is not a 32-byte ed25519 public key.
	CodeBadPublicKey Code = 5
	// CodeBadSignature: a signature does not verify over the body bytes.
	CodeBadSignature Code = 6
	// CodeEmptyBody: a signed body is empty.
	CodeEmptyBody Code = 7
	// CodeUnknownQuery: the query path is not one the app answers.
	CodeUnknownQuery Code = 8
	// CodeWrongChain: a signed body names another chain.
	CodeWrongChain Code = 9
	// CodeUnknownTopic: the topic does not exist.
	CodeUnknownTopic Code = 10
	// CodeUnknownPartition: the topic has fewer partitions.
	CodeUnknownPartition Code = 11
	// CodeNotAllowed: the topic's allowed_producers does not list the key.
	CodeNotAllowed Code = 12
	// CodeDuplicate: the batch's sequence is already committed; the result's
	// data carries the original offsets. A retry is answered with this.
	CodeDuplicate Code = 13
	// CodeSequenceGap: the batch skips a sequence; send the missing one first.
	CodeSequenceGap Code = 14
	// CodeRecordTooLarge: a record exceeds the topic's or chain's max record bytes.
	CodeRecordTooLarge Code = 15
	// CodeBatchTooLarge: too many records, too many bytes, or a wrong declared
	// uncompressed size.
	CodeBatchTooLarge Code = 16
	// CodeTooManyHeaders: a record has more headers than the chain allows.
	CodeTooManyHeaders Code = 17
	// CodeBadCompression: the records do not decompress with the declared codec.
	CodeBadCompression Code = 18
	// CodeEmptyBatch: a batch holds no record.
	CodeEmptyBatch Code = 19
	// CodeNotAdmin: the admin key is not listed in genesis.
	CodeNotAdmin Code = 20
	// CodeBadNonce: the nonce is not the key's next one.
	CodeBadNonce Code = 21
	// CodeBadTopicName: a topic name is empty, too long or has a character
	// outside [a-zA-Z0-9._-].
	CodeBadTopicName Code = 22
	// CodeTopicExists: create of a topic that exists.
	CodeTopicExists Code = 23
	// CodeBadTopicConfig: a topic config is out of bounds (or shrinks partitions).
	CodeBadTopicConfig Code = 24
	// CodeBadGroup: a consumer group name is empty, too long or holds a NUL.
	CodeBadGroup Code = 25
	// CodeNotGroupOwner: the group's offsets belong to another key.
	CodeNotGroupOwner Code = 26
	// CodeOffsetBackwards: an offset commit moves backwards without reset.
	CodeOffsetBackwards Code = 27
	// CodeOffsetBeyondEnd: an offset commit is past the partition's end.
	CodeOffsetBeyondEnd Code = 28
	// CodeBadQuery: the query's arguments are malformed or out of range.
	CodeBadQuery Code = 29
	// CodeOffsetOutOfRange: the requested offset was deleted by retention or
	// is beyond the log end.
	CodeOffsetOutOfRange Code = 30
	// CodeNotFound: the queried topic, group or key has no state.
	CodeNotFound Code = 31
	// CodeBlockFull: the transaction does not fit this block's budget
	// (records, inflated bytes or result bytes); it waits for the next block.
	CodeBlockFull Code = 32
	// CodeBundleTooLarge: a bundle holds more batches, records or inflated
	// bytes than one transaction may.
	CodeBundleTooLarge Code = 33
	// CodePending: a sequence or nonce of the transaction is held by another
	// transaction waiting in the node's mempool; its outcome decides.
	CodePending Code = 34
	// CodeMempoolFull: the node's mempool has no room for the transaction
	// (in all, or for its signer); retry later.
	CodeMempoolFull Code = 35
	// CodeExpired: the transaction waited in the mempool longer than it may
	// and was dropped; send it again.
	CodeExpired Code = 36
	// CodeInternal: the app failed on the transaction; it is refused, and
	// the failure is in the node's log.
	CodeInternal Code = 37
	// CodeSequenceReused: the batch's sequence is committed, but with a
	// different batch (another body): this one was not written. Never a
	// duplicate; send its records under a new sequence.
	CodeSequenceReused Code = 38
	// CodeBodyExpired: the signed admin or consumer body's expiry_height has
	// passed; sign the request again.
	CodeBodyExpired Code = 39
	// CodeProducerFenced: a Kafka producer's batch carries an epoch older
	// than one the chain has seen for its producer id; the producer was
	// fenced off and must start again (InitProducerId).
	CodeProducerFenced Code = 40
	// CodeBelowThreshold: the admin request needs more admins' signatures
	// (the admin set's threshold) than it carries; collect cosignatures.
	CodeBelowThreshold Code = 41
	// CodeBadValidatorChange: the validator change is refused (unknown
	// validator, too few validators left, too much power moved at once,
	// no change); the message says which.
	CodeBadValidatorChange Code = 42
	// CodeBadAdminSet: the new admin set is refused (no key, a key listed
	// twice, a threshold of 0 or above the number of keys).
	CodeBadAdminSet Code = 43
	// CodeNotIndexer: an indexer progress report is signed by a key that
	// is not a registered indexer (query /indexers).
	CodeNotIndexer Code = 44
	// CodeBadProgress: an indexer progress report does not move forward or
	// names a height the chain has not committed yet.
	CodeBadProgress Code = 45
	// CodeBadIndexerChange: a SetIndexer is refused (a bad key or name,
	// one registered already or unknown, too many indexers).
	CodeBadIndexerChange Code = 46
	// CodeDuplicateSigner: one admin signs a request twice (rules
	// version 2; version 1 answers malformed_tx).
	CodeDuplicateSigner Code = 47
	// CodeBadUpgrade: a ScheduleUpgrade is refused (a version not past the
	// one in force, a height too soon).
	CodeBadUpgrade Code = 48
	// CodeBadTimestamp: a record's create time is further from its block's
	// time than its topic's timestamp_before_max_ms or
	// timestamp_after_max_ms allow (rules version 6; Kafka's
	// INVALID_TIMESTAMP).
	CodeBadTimestamp Code = 49
	// CodeUnknownTxn: a Kafka transaction step names a transactional id
	// the chain does not know, or a producer id that is not the id's (rules
	// version 8; Kafka's INVALID_PRODUCER_ID_MAPPING).
	CodeUnknownTxn Code = 50
	// CodeNotTxnOwner: a transactional id is another key's (Kafka's
	// TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
	CodeNotTxnOwner Code = 51
	// CodeBadTxnState: a step the transaction's state does not allow: an
	// EndTxn with nothing open that is not a retry of the last one (Kafka's
	// INVALID_TXN_STATE).
	CodeBadTxnState Code = 52
	// CodeBadTxnTimeout: a transaction timeout outside 1 ms to 15 minutes
	// (Kafka's INVALID_TRANSACTION_TIMEOUT).
	CodeBadTxnTimeout Code = 53
	// CodeTxnLimit: past a bound of transactions: partitions or offsets of
	// one transaction, transactions open in one partition, transactional
	// ids of one key (wire.MaxTxnPartitions and the others).
	CodeTxnLimit Code = 54
	// CodeNoKey: a record without a key to a compacted topic (Kafka's
	// INVALID_RECORD: "Compacted topic cannot accept message without key").
	CodeNoKey Code = 55
	// CodePartitionFull: a batch that would take a compact-only
	// partition's live records past its topic's retention_bytes (rules
	// version 10 on); tombstones still pass, to free space.
	CodePartitionFull Code = 56
)

var codeNames = map[Code]string{
	CodeOK: "ok", CodeMalformedTx: "malformed_tx", CodeUnknownTxKind: "unknown_tx_kind",
	CodeTxTooLarge: "tx_too_large", CodeEmptyBundle: "empty_bundle", CodeBadPublicKey: "bad_public_key",
	CodeBadSignature: "bad_signature", CodeEmptyBody: "empty_body", CodeUnknownQuery: "unknown_query",
	CodeWrongChain: "wrong_chain", CodeUnknownTopic: "unknown_topic", CodeUnknownPartition: "unknown_partition",
	CodeNotAllowed: "not_allowed", CodeDuplicate: "duplicate", CodeSequenceGap: "sequence_gap",
	CodeRecordTooLarge: "record_too_large", CodeBatchTooLarge: "batch_too_large", CodeTooManyHeaders: "too_many_headers",
	CodeBadCompression: "bad_compression", CodeEmptyBatch: "empty_batch", CodeNotAdmin: "not_admin",
	CodeBadNonce: "bad_nonce", CodeBadTopicName: "bad_topic_name", CodeTopicExists: "topic_exists",
	CodeBadTopicConfig: "bad_topic_config", CodeBadGroup: "bad_group", CodeNotGroupOwner: "not_group_owner",
	CodeOffsetBackwards: "offset_backwards", CodeOffsetBeyondEnd: "offset_beyond_end", CodeBadQuery: "bad_query",
	CodeOffsetOutOfRange: "offset_out_of_range", CodeNotFound: "not_found",
	CodeBlockFull: "block_full", CodeBundleTooLarge: "bundle_too_large",
	CodePending: "pending", CodeMempoolFull: "mempool_full", CodeExpired: "expired", CodeInternal: "internal",
	CodeSequenceReused: "sequence_reused", CodeBodyExpired: "body_expired",
	CodeProducerFenced: "producer_fenced", CodeBelowThreshold: "below_threshold",
	CodeBadValidatorChange: "bad_validator_change", CodeBadAdminSet: "bad_admin_set",
	CodeNotIndexer: "not_indexer", CodeBadProgress: "bad_progress", CodeBadIndexerChange: "bad_indexer_change",
	CodeDuplicateSigner: "duplicate_signer", CodeBadUpgrade: "bad_upgrade",
	CodeBadTimestamp: "bad_timestamp",
	CodeUnknownTxn:   "unknown_txn", CodeNotTxnOwner: "not_txn_owner", CodeBadTxnState: "bad_txn_state",
	CodeBadTxnTimeout: "bad_txn_timeout", CodeTxnLimit: "txn_limit", CodeNoKey: "no_key",
	CodePartitionFull: "partition_full",
}

// String names the code for logs and messages.
func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return "unknown_code"
}

// Codes lists every code this version defines, in numeric order: tables
// that map codes (the Kafka face's error map) test that they cover them.
func Codes() []Code {
	out := make([]Code, 0, len(codeNames))
	for c := range codeNames {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
