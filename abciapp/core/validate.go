package core

import (
	"crypto/ed25519"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// ValidateTx runs the stateless checks of a transaction: it decodes, is
// within size, and every signature verifies over exactly the body bytes it
// carries. Execute, Prepare, Verify and Check all start with it.
func ValidateTx(tx []byte) Result {
	_, r := decodeTx(tx, 0)
	return r
}

// decodeTx decodes and checks tx. With maxBatches > 0 a bundle with more
// batches is rejected before any signature is verified, so an oversized
// bundle costs one decode, not thousands of verifications.
func decodeTx(tx []byte, maxBatches uint32) (*byzlogv1.Tx, Result) {
	if len(tx) > wire.MaxTxBytes {
		return nil, reject(wire.CodeTxTooLarge, "transaction is %d bytes, the chain accepts at most %d", len(tx), wire.MaxTxBytes)
	}
	var env byzlogv1.Tx
	if err := proto.Unmarshal(tx, &env); err != nil {
		return nil, reject(wire.CodeMalformedTx, "transaction is not a byzlog.v1.Tx: %v", err)
	}
	// Fields this version does not know would let anyone re-wrap someone
	// else's signed batches into ever new transaction hashes.
	if hasUnknown(&env) {
		return nil, reject(wire.CodeMalformedTx, "transaction carries fields this version does not know; upgrade the client or the validators")
	}
	switch k := env.Kind.(type) {
	case *byzlogv1.Tx_ProduceBundle:
		n := len(k.ProduceBundle.GetBatches())
		if n == 0 {
			return nil, reject(wire.CodeEmptyBundle, "produce bundle holds no batch")
		}
		if maxBatches > 0 && n > int(maxBatches) {
			return nil, reject(wire.CodeBundleTooLarge, "bundle holds %d batches, the chain allows %d", n, maxBatches)
		}
		for i, b := range k.ProduceBundle.Batches {
			if r := checkSigned(fmt.Sprintf("batch %d", i), b.GetBody(), b.GetProducerKey(), b.GetSignature()); !r.OK() {
				return nil, r
			}
		}
	case *byzlogv1.Tx_Admin:
		a := k.Admin
		if r := checkSigned("admin request", a.GetBody(), a.GetAdminKey(), a.GetSignature()); !r.OK() {
			return nil, r
		}
		if n := len(a.Cosignatures); n > wire.MaxCosignatures {
			return nil, reject(wire.CodeMalformedTx, "admin request carries %d cosignatures, at most %d are read", n, wire.MaxCosignatures)
		}
		for i, c := range a.Cosignatures {
			if r := checkSigned(fmt.Sprintf("admin request cosignature %d", i), a.GetBody(), c.GetAdminKey(), c.GetSignature()); !r.OK() {
				return nil, r
			}
		}
	case *byzlogv1.Tx_CommitOffsets:
		c := k.CommitOffsets
		if r := checkSigned("commit offsets", c.GetBody(), c.GetConsumerKey(), c.GetSignature()); !r.OK() {
			return nil, r
		}
	case *byzlogv1.Tx_IndexerProgress:
		p := k.IndexerProgress
		if r := checkSigned("indexer progress", p.GetBody(), p.GetIndexerKey(), p.GetSignature()); !r.OK() {
			return nil, r
		}
	case *byzlogv1.Tx_Txn:
		// Rules version 8 on; before, the executor refuses it as a kind it
		// does not know (as a build before it does here).
		t := k.Txn
		if r := checkSigned("transaction step", t.GetBody(), t.GetProducerKey(), t.GetSignature()); !r.OK() {
			return nil, r
		}
	case *byzlogv1.Tx_TxnExpire:
		// Unsigned: a block takes it only if the transaction timed out.
		if k.TxnExpire == nil {
			return nil, reject(wire.CodeMalformedTx, "txn_expire names no transactional id")
		}
	case *byzlogv1.Tx_BundleRef:
		// Malformed, as it was before the kind existed (an unknown field):
		// a reference is resolved by the app before core sees a block.
		return nil, reject(wire.CodeMalformedTx, "a bundle reference (bundle_ref) is made by a proposer, in a block of rules version 3 or later; it is never submitted: submit the transaction it names")
	default:
		return nil, reject(wire.CodeUnknownTxKind, "transaction has no kind this version knows (empty envelope or a newer client)")
	}
	return &env, Result{Code: wire.CodeOK}
}

func checkSigned(what string, body, key, sig []byte) Result {
	if len(body) == 0 {
		return reject(wire.CodeEmptyBody, "%s: body is empty", what)
	}
	if len(key) != ed25519.PublicKeySize {
		return reject(wire.CodeBadPublicKey, "%s: signer key is %d bytes, an ed25519 public key is %d", what, len(key), ed25519.PublicKeySize)
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(ed25519.PublicKey(key), body, sig) {
		return reject(wire.CodeBadSignature, "%s: signature does not verify over the body with the given key", what)
	}
	return Result{Code: wire.CodeOK}
}

// maxLog bounds a result's message: it is echoed to clients and peers, and
// must never grow with what an attacker sends.
const maxLog = 1024

func reject(c wire.Code, format string, args ...any) Result {
	return Result{Code: c, Log: truncate(fmt.Sprintf(format, args...), maxLog)}
}

// truncate cuts s to at most n bytes plus an ellipsis. Messages land in
// protobuf string fields, which must be valid UTF-8 or marshalling fails, so
// the cut never splits a rune and invalid bytes from a client are replaced.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// hasUnknown reports unknown fields in the envelope and the messages it
// carries unsigned (signed bodies are covered by their signatures).
func hasUnknown(env *byzlogv1.Tx) bool {
	if len(env.ProtoReflect().GetUnknown()) > 0 {
		return true
	}
	switch k := env.Kind.(type) {
	case *byzlogv1.Tx_ProduceBundle:
		if len(k.ProduceBundle.ProtoReflect().GetUnknown()) > 0 {
			return true
		}
		for _, b := range k.ProduceBundle.Batches {
			if len(b.ProtoReflect().GetUnknown()) > 0 {
				return true
			}
		}
	case *byzlogv1.Tx_Admin:
		if len(k.Admin.ProtoReflect().GetUnknown()) > 0 {
			return true
		}
		for _, c := range k.Admin.Cosignatures {
			if len(c.ProtoReflect().GetUnknown()) > 0 {
				return true
			}
		}
	case *byzlogv1.Tx_CommitOffsets:
		return len(k.CommitOffsets.ProtoReflect().GetUnknown()) > 0
	case *byzlogv1.Tx_IndexerProgress:
		return len(k.IndexerProgress.ProtoReflect().GetUnknown()) > 0
	case *byzlogv1.Tx_Txn:
		return len(k.Txn.ProtoReflect().GetUnknown()) > 0
	case *byzlogv1.Tx_TxnExpire:
		return len(k.TxnExpire.ProtoReflect().GetUnknown()) > 0
	}
	return false
}

func checkTopicName(name string) Result {
	if err := wire.CheckTopicName(name); err != nil {
		return reject(wire.CodeBadTopicName, "%s", err)
	}
	return Result{}
}

func checkGroupName(group string) Result {
	if err := wire.CheckGroupName(group); err != nil {
		return reject(wire.CodeBadGroup, "%s", err)
	}
	return Result{}
}

// maxRetentionMs keeps retention_ms * 1e6 (nanoseconds) inside int64.
const maxRetentionMs = math.MaxInt64 / 1_000_000

// CompressionTypes are the values of a topic's compression_type, as Kafka's
// compression.type takes them ("" is "producer").
var CompressionTypes = []string{"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"}

func checkKafkaConfig(c *byzlogv1.TopicConfig, rules uint64) Result {
	if c == nil || rules < KafkaTopicsRulesVersion {
		return Result{}
	}
	switch {
	case c.CompressionType != "" && !slices.Contains(CompressionTypes, c.CompressionType):
		return reject(wire.CodeBadTopicConfig, "compression_type %s: want one of %s", wire.Quote(c.CompressionType), strings.Join(CompressionTypes, ", "))
	case c.TimestampType != byzlogv1.TimestampType_TIMESTAMP_CREATE_TIME && c.TimestampType != byzlogv1.TimestampType_TIMESTAMP_LOG_APPEND_TIME:
		return reject(wire.CodeBadTopicConfig, "timestamp_type %d: want %d (CreateTime) or %d (LogAppendTime)", c.TimestampType,
			byzlogv1.TimestampType_TIMESTAMP_CREATE_TIME, byzlogv1.TimestampType_TIMESTAMP_LOG_APPEND_TIME)
	case c.TimestampBeforeMaxMs < 0 || c.TimestampBeforeMaxMs > maxRetentionMs:
		return reject(wire.CodeBadTopicConfig, "timestamp_before_max_ms (%d) must be 0 (no bound) or between 1 and %d", c.TimestampBeforeMaxMs, int64(maxRetentionMs))
	case c.TimestampAfterMaxMs < 0 || c.TimestampAfterMaxMs > maxRetentionMs:
		return reject(wire.CodeBadTopicConfig, "timestamp_after_max_ms (%d) must be 0 (no bound) or between 1 and %d", c.TimestampAfterMaxMs, int64(maxRetentionMs))
	}
	return Result{}
}

// maxAllowedProducers bounds a topic's producer list.
const maxAllowedProducers = 1000

// checkTopicConfig checks a topic's config as rules does: the Kafka
// settings (compression_type, timestamp_*) only from KafkaTopicsRulesVersion
// on, as builds before it took any value and ignored it.
func checkTopicConfig(l *byzlogv1.Limits, c *byzlogv1.TopicConfig, rules uint64) Result {
	if r := checkKafkaConfig(c, rules); !r.OK() {
		return r
	}
	if r := checkCompactionConfig(c, rules); !r.OK() {
		return r
	}
	switch {
	case c == nil:
		return reject(wire.CodeBadTopicConfig, "topic config is missing")
	case c.Partitions == 0 || c.Partitions > l.MaxPartitions:
		return reject(wire.CodeBadTopicConfig, "partitions (%d) must be between 1 and the chain's max_partitions (%d)", c.Partitions, l.MaxPartitions)
	case c.MaxRecordBytes > l.MaxRecordBytes:
		return reject(wire.CodeBadTopicConfig, "max_record_bytes (%d) must not exceed the chain's max_record_bytes (%d); 0 means the chain's", c.MaxRecordBytes, l.MaxRecordBytes)
	case c.RetentionMs < 0 || c.RetentionMs > maxRetentionMs:
		return reject(wire.CodeBadTopicConfig, "retention_ms (%d) must be 0 (forever) or between 1 and %d", c.RetentionMs, int64(maxRetentionMs))
	case c.RetentionBytes < 0:
		return reject(wire.CodeBadTopicConfig, "retention_bytes (%d) must be 0 (no limit) or positive", c.RetentionBytes)
	case len(c.AllowedProducers) > maxAllowedProducers:
		return reject(wire.CodeBadTopicConfig, "allowed_producers lists %d keys, at most %d", len(c.AllowedProducers), maxAllowedProducers)
	case len(c.Readers) > wire.MaxReaders:
		return reject(wire.CodeBadTopicConfig, "readers lists %d keys, at most %d", len(c.Readers), wire.MaxReaders)
	}
	for i, k := range c.AllowedProducers {
		if len(k) != ed25519.PublicKeySize {
			return reject(wire.CodeBadTopicConfig, "allowed_producers[%d] is %d bytes, an ed25519 public key is %d", i, len(k), ed25519.PublicKeySize)
		}
	}
	seen := make(map[string]bool, len(c.Readers))
	for i, k := range c.Readers {
		switch {
		case len(k) != ed25519.PublicKeySize:
			return reject(wire.CodeBadTopicConfig, "readers[%d] is %d bytes, an ed25519 public key is %d", i, len(k), ed25519.PublicKeySize)
		case seen[string(k)]:
			return reject(wire.CodeBadTopicConfig, "readers[%d] (%x) is listed twice", i, k)
		}
		seen[string(k)] = true
	}
	return Result{}
}
