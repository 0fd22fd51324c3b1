package core

import (
	"crypto/sha256"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Checked is a transaction after every check that needs no state: decoded,
// within the chain's size limits, every signature verified, every batch's
// body decoded and its records inflated, counted and measured. Precheck
// makes one; the stateful rules (Execute, Prepare, Verify, Check and the
// mempool's Pool) run on it. The expensive part of a transaction therefore
// runs once, before any state is read, and a caller can run it outside its
// locks and on several goroutines.
type Checked struct {
	// Tx is the transaction's bytes.
	Tx []byte
	// Hash is sha256(Tx), the transaction's key in CometBFT.
	Hash [sha256.Size]byte
	// Cost is what the transaction may make the app hold in memory at once
	// while executing it: its bytes, its records inflated, and a heap
	// charge per record header. It is bounded by max_tx_uncompressed_bytes.
	Cost int64

	env     *byzlogv1.Tx
	res     Result // a rejection of the whole transaction, or OK
	batches []*checkedBatch
}

// IsBundle reports whether the transaction decoded as a ProduceBundle.
func (c *Checked) IsBundle() bool {
	_, ok := c.env.GetKind().(*byzlogv1.Tx_ProduceBundle)
	return ok
}

// Result is the stateless verdict: OK, or why the whole transaction is
// refused before any state is read. A bundle with a bad batch may still be
// OK here: the batch's result is reported in the bundle's outcome.
func (c *Checked) Result() Result { return c.res }

// Signers lists the keys that signed the transaction's bodies, each once,
// in order of first appearance: a mempool's per-signer limits count them.
func (c *Checked) Signers() [][]byte {
	if c.env == nil {
		return nil
	}
	switch k := c.env.Kind.(type) {
	case *byzlogv1.Tx_ProduceBundle:
		var out [][]byte
		seen := map[string]bool{}
		for _, b := range k.ProduceBundle.Batches {
			if !seen[string(b.ProducerKey)] {
				seen[string(b.ProducerKey)] = true
				out = append(out, b.ProducerKey)
			}
		}
		return out
	case *byzlogv1.Tx_Admin:
		return [][]byte{k.Admin.AdminKey}
	case *byzlogv1.Tx_CommitOffsets:
		return [][]byte{k.CommitOffsets.ConsumerKey}
	case *byzlogv1.Tx_IndexerProgress:
		return [][]byte{k.IndexerProgress.IndexerKey}
	case *byzlogv1.Tx_Txn:
		return [][]byte{k.Txn.ProducerKey}
	}
	return nil
}

// checkedBatch is one batch of a bundle after its stateless checks.
type checkedBatch struct {
	sb   *byzlogv1.SignedBatch
	body *byzlogv1.BatchBody
	// digest is SHA-256 of the signed body bytes: the batch's identity in
	// its BatchRef and in its result.
	digest []byte
	// early is a failure found before any state is read (the body, the
	// topic name, the chain); late one found in the records, reported after
	// the topic and the producer's sequence are known to be right, as a
	// client retrying a committed batch must hear "duplicate" first.
	early, late *byzlogv1.BatchResult
	// records is nil unless Precheck was asked to keep them (a block to
	// execute); count and the largest record are kept always.
	records     []*byzlogv1.Record
	count       uint32
	largest     uint64 // bytes of the largest record: key + value + headers
	largestAt   int
	inflated    int64 // the batch's share of Cost
	headerBytes int64
}

// HeaderHeap is what a decoded record header costs in the heap beyond its
// key and value bytes (a *RecordHeader and its message state), charged to
// a transaction's and a block's inflated-bytes budgets: empty headers are 2
// bytes on the wire and ~90 bytes decoded, so without the charge a batch of
// them inflated ~44× past its budget (issue 13).
const HeaderHeap = 96

// Precheck runs every stateless check of tx under the chain's params. With
// keepRecords the decoded records are kept for execution; a mempool drops
// them and keeps only their counts and sizes.
func Precheck(params *byzlogv1.ChainParams, tx []byte, keepRecords bool) *Checked {
	return PrecheckSum(params, tx, sha256.Sum256(tx), keepRecords)
}

// PrecheckSum is Precheck for a caller that has already hashed tx: sum must
// be sha256(tx).
func PrecheckSum(params *byzlogv1.ChainParams, tx []byte, sum [sha256.Size]byte, keepRecords bool) *Checked {
	c := &Checked{Tx: tx, Hash: sum, Cost: int64(len(tx))}
	c.env, c.res = decodeTx(tx, params.Limits.MaxBundleBatches)
	if c.res.OK() {
		c.precheckBatches(params, keepRecords, nil)
	}
	return c
}

// ProposerOnly reports whether c is a transaction only a block's proposer
// adds (a TxnExpire, when a Kafka transaction's timeout has passed by the
// block's time): a mempool does not take it.
func (c *Checked) ProposerOnly() bool {
	_, ok := c.env.GetKind().(*byzlogv1.Tx_TxnExpire)
	return ok
}

// WithRecords is what PrecheckSum(params, c.Tx, c.Hash, true) returns, for
// c that Precheck made under the same params without keeping records (a
// mempool's): the envelope, its signatures and every batch body are taken
// from c, decoded and verified already; only inflating and decoding the
// records runs again. A c that needs no records (refused, not a bundle, or
// made with them) is returned as it is. c is not changed: the two share
// the decoded envelope, bodies and early failures, which nothing writes to
// (execution copies a failure before it fills one in).
func (c *Checked) WithRecords(params *byzlogv1.ChainParams) *Checked {
	if !c.res.OK() || len(c.batches) == 0 || c.batches[0].records != nil {
		return c
	}
	out := &Checked{Tx: c.Tx, Hash: c.Hash, Cost: int64(len(c.Tx)), env: c.env, res: c.res}
	out.precheckBatches(params, true, c.batches)
	return out
}

// precheckBatches prechecks c's batches, if c is a bundle: decoding each
// body, or taking it from decoded (the same bundle's batches, decoded under
// the same params) when that is not nil.
func (c *Checked) precheckBatches(params *byzlogv1.ChainParams, keepRecords bool, decoded []*checkedBatch) {
	pb, ok := c.env.Kind.(*byzlogv1.Tx_ProduceBundle)
	if !ok {
		return
	}
	var inflated, records int64
	c.batches = make([]*checkedBatch, len(pb.ProduceBundle.Batches))
	for i, sb := range pb.ProduceBundle.Batches {
		cb := &checkedBatch{sb: sb}
		if decoded != nil {
			cb.body, cb.digest, cb.early = decoded[i].body, decoded[i].digest, decoded[i].early
		} else {
			cb.digest = digestOfBody(sb.Body)
			cb.early = cb.decode(params)
		}
		if cb.early == nil {
			cb.precheckRecords(params, keepRecords, &inflated, &records)
		}
		c.batches[i] = cb
		c.Cost += cb.inflated
		if cb.early == nil && cb.late == nil {
			continue
		}
		// A bundle stops at its first bad batch: what follows is never
		// applied, so it is not inflated either.
		for j := i + 1; j < len(c.batches); j++ {
			c.batches[j] = &checkedBatch{sb: pb.ProduceBundle.Batches[j], body: &byzlogv1.BatchBody{}, digest: digestOfBody(pb.ProduceBundle.Batches[j].Body),
				early: failBatch(&byzlogv1.BatchBody{}, wire.CodeMalformedTx, "not checked: an earlier batch of the bundle was rejected")}
		}
		return
	}
}

// precheckRecords inflates and decodes the records of a batch whose body
// decoded, charging the transaction's budgets (inflated bytes and records,
// shared across its batches) before each step that would spend them.
func (cb *checkedBatch) precheckRecords(params *byzlogv1.ChainParams, keepRecords bool, inflated, records *int64) {
	raw, late := cb.inflate(params.Limits, inflated)
	if late == nil {
		late = cb.decodeRecords(params.Limits, raw, inflated, records, keepRecords)
	}
	cb.late = late
}

// decode decodes the batch's body and checks what fails it early (before
// its topic is known): a body, topic name or chain that is wrong.
func (cb *checkedBatch) decode(params *byzlogv1.ChainParams) *byzlogv1.BatchResult {
	var body byzlogv1.BatchBody
	if err := proto.Unmarshal(cb.sb.Body, &body); err != nil {
		cb.body = &byzlogv1.BatchBody{}
		return failBatch(cb.body, wire.CodeMalformedTx, "body is not a byzlog.v1.BatchBody: %v", err)
	}
	cb.body = &body
	if r := checkTopicName(body.Topic); !r.OK() {
		return failBatch(&byzlogv1.BatchBody{Partition: body.Partition, Sequence: body.Sequence}, wire.CodeUnknownTopic, "%s", r.Log)
	}
	if body.ChainId != params.ChainId {
		return failBatch(&body, wire.CodeWrongChain, "signed for chain %s, this is %q", wire.Quote(body.ChainId), params.ChainId)
	}
	if k := body.Kafka; k != nil {
		switch {
		case k.ProducerId < 1 || k.Epoch < 0 || k.Epoch > wire.MaxKafkaEpoch:
			return failBatch(&body, wire.CodeMalformedTx, "kafka producer id %d epoch %d: want an id of 1 or more and an epoch in 0..%d", k.ProducerId, k.Epoch, wire.MaxKafkaEpoch)
		case k.RecordCount == 0 || k.RecordCount > params.Limits.MaxBatchRecords:
			return failBatch(&body, wire.CodeMalformedTx, "kafka batch declares %d records, want 1..%d (max_batch_records)", k.RecordCount, params.Limits.MaxBatchRecords)
		case body.Sequence+uint64(k.RecordCount) > 1<<31:
			return failBatch(&body, wire.CodeMalformedTx, "kafka sequence %d + %d records passes Kafka's largest sequence (2^31-1)", body.Sequence, k.RecordCount)
		}
	}
	return nil
}

// inflate decompresses the batch's records, charging their declared size
// to the transaction's budget first, so that a bundle cannot make the app
// inflate more than that budget.
func (cb *checkedBatch) inflate(l *byzlogv1.Limits, inflated *int64) ([]byte, *byzlogv1.BatchResult) {
	body := cb.body
	if body.UncompressedSize > l.MaxBatchBytes {
		return nil, failBatch(body, wire.CodeBatchTooLarge, "declared uncompressed size %d exceeds the chain's max_batch_bytes (%d)", body.UncompressedSize, l.MaxBatchBytes)
	}
	if *inflated += int64(body.UncompressedSize); *inflated > int64(l.MaxTxUncompressedBytes) {
		return nil, failBatch(body, wire.CodeBundleTooLarge, "the bundle's batches inflate to more than the chain's max_tx_uncompressed_bytes (%d)", l.MaxTxUncompressedBytes)
	}
	cb.inflated = int64(body.UncompressedSize)
	raw, err := decompress(body.Codec, body.Records, int(body.UncompressedSize))
	if err != nil {
		return nil, failBatch(body, wire.CodeBadCompression, "%s", err.Error())
	}
	if len(raw) != int(body.UncompressedSize) {
		return nil, failBatch(body, wire.CodeBatchTooLarge, "records are %d bytes uncompressed, the batch declares %d", len(raw), body.UncompressedSize)
	}
	return raw, nil
}

// decodeRecords counts the inflated records and their headers without
// decoding them (scanRecordSet bounds both), charges them to the
// transaction's budgets, then decodes them and checks each record's size.
func (cb *checkedBatch) decodeRecords(l *byzlogv1.Limits, raw []byte, inflated, records *int64, keepRecords bool) *byzlogv1.BatchResult {
	body := cb.body
	n, headers, code, msg := scanRecordSet(raw, int(l.MaxBatchRecords), int(l.MaxHeaders))
	if code != wire.CodeOK {
		return failBatch(body, code, "%s", msg)
	}
	// Headers are charged before decoding: empty ones cost the heap far
	// more than their bytes.
	cb.headerBytes = int64(headers) * HeaderHeap
	if *inflated += cb.headerBytes; *inflated > int64(l.MaxTxUncompressedBytes) {
		return failBatch(body, wire.CodeBundleTooLarge, "the bundle's records and their %d headers take more than the chain's max_tx_uncompressed_bytes (%d) decoded (%d bytes a header)",
			headers, l.MaxTxUncompressedBytes, HeaderHeap)
	}
	cb.inflated += cb.headerBytes
	if *records += int64(n); *records > int64(l.MaxTxRecords) {
		return failBatch(body, wire.CodeBundleTooLarge, "the bundle holds more than the chain's max_tx_records (%d)", l.MaxTxRecords)
	}
	var set byzlogv1.RecordSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		return failBatch(body, wire.CodeMalformedTx, "records are not a byzlog.v1.RecordSet: %v", err)
	}
	// The scan has bounded the records and each record's headers: a field
	// the scan counted but Unmarshal would not decode fails Unmarshal.
	if len(set.Records) == 0 {
		return failBatch(body, wire.CodeEmptyBatch, "batch holds no record")
	}
	for i, r := range set.Records {
		size := recordSize(r)
		if size > uint64(l.MaxRecordBytes) {
			return failBatch(body, wire.CodeRecordTooLarge, "record %d is %d bytes (key + value + headers), the chain allows %d", i, size, l.MaxRecordBytes)
		}
		if size > cb.largest {
			cb.largest, cb.largestAt = size, i
		}
	}
	cb.count = uint32(len(set.Records))
	if k := body.Kafka; k != nil && k.RecordCount != cb.count {
		return failBatch(body, wire.CodeMalformedTx, "kafka batch declares %d records and holds %d", k.RecordCount, cb.count)
	}
	if keepRecords {
		cb.records = set.Records
	}
	return nil
}

// precheckAll prechecks a block's transactions.
func precheckAll(params *byzlogv1.ChainParams, txs [][]byte, keepRecords bool) []*Checked {
	out := make([]*Checked, len(txs))
	for i, tx := range txs {
		out[i] = Precheck(params, tx, keepRecords)
	}
	return out
}
