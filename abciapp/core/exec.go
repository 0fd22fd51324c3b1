package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/stateproof"
	"github.com/byzlog/byzlog/protos/wire"
)

// executor applies transactions of one block (or one CheckTx) in order.
type executor struct {
	params *byzlogv1.ChainParams
	block  *overlay
	b      Block
	mode   mode
	// bounded makes the block budget a rule (Prepare, Verify): a
	// transaction that would take the block past it is refused with
	// CodeBlockFull. A decided block (Execute) is always executed.
	bounded bool
	// countOnly (Prepare, Verify) advances offsets without building the
	// stored records: no rule depends on their bytes, and nothing of a
	// proposal is committed.
	countOnly bool
	// base is the committed state under the block's overlay: in modePool
	// it tells a committed sequence (a duplicate) from a pending one.
	base Reader
	// waiting is set by apply in modePool when the transaction failed only
	// because a sequence or nonce before it has not arrived yet (within
	// MaxLookahead): the mempool may hold it until it does.
	waiting bool
	used    budget          // by the accepted transactions of the block
	tx      budget          // by the transaction being applied
	txSeen  map[string]bool // CheckTx: producer sequences seen in this tx
	// appended collects the records appended in this block per partition,
	// for the records root; keyed by recordPrefix, hashed in key order.
	appended map[string]*appendedRun
	// rules is the rules version of the block, read once it is needed (0:
	// not yet).
	rules uint64
}

// rulesVersion is the rules version the block executes under.
func (ex *executor) rulesVersion() (uint64, error) {
	if ex.rules == 0 {
		v, err := RulesAt(ex.base, ex.b.Height)
		if err != nil {
			return 0, err
		}
		ex.rules = v
	}
	return ex.rules, nil
}

// appendedRun is the records one block appended to one partition.
type appendedRun struct {
	topic     string
	partition uint32
	first     uint64
	leaves    [][]byte // stored record bytes, in offset order
}

// budget counts what transactions cost a block.
type budget struct {
	records  int64
	inflated int64 // bytes of records after decompression
	results  int64 // bytes of results the node's ABCI client must receive
}

// MaxBlockResultBytes bounds the results of one block: the FinalizeBlock
// response must stay under the 4 MiB the node's gRPC ABCI client accepts.
const MaxBlockResultBytes = 3 << 20

func newExecutor(r Reader, params *byzlogv1.ChainParams, b Block) *executor {
	return &executor{params: params, block: newOverlay(r), base: r, b: b, appended: map[string]*appendedRun{}}
}

// apply runs one prechecked transaction on a child overlay and keeps its
// writes only if it succeeds. Errors are store failures.
func (ex *executor) apply(c *Checked) (Result, error) {
	ex.waiting = false
	if !c.res.OK() {
		return c.res, nil
	}
	res := c.res
	txo := newOverlay(ex.block)
	ex.tx, ex.txSeen = budget{}, map[string]bool{}
	var pending []*appendedRun
	var err error
	switch k := c.env.Kind.(type) {
	case *byzlogv1.Tx_ProduceBundle:
		res, pending, err = ex.produce(txo, c.batches)
	case *byzlogv1.Tx_Admin:
		res, err = ex.admin(txo, k.Admin)
	case *byzlogv1.Tx_CommitOffsets:
		res, err = ex.commitOffsets(txo, k.CommitOffsets)
	case *byzlogv1.Tx_IndexerProgress:
		res, err = ex.indexerProgress(txo, k.IndexerProgress)
	case *byzlogv1.Tx_Txn:
		res, pending, err = ex.txn(txo, k.Txn)
	case *byzlogv1.Tx_TxnExpire:
		res, pending, err = ex.txnExpire(txo, k.TxnExpire.GetTransactionalId())
	}
	if err != nil || !res.OK() || ex.mode == modeMempool {
		return res, err
	}
	ex.tx.results = resultSize(res)
	if ex.bounded && ex.used.results+ex.tx.results > MaxBlockResultBytes {
		return reject(wire.CodeBlockFull, "the block's results would pass %d bytes; the transaction waits for the next block", MaxBlockResultBytes), nil
	}
	ex.used.records += ex.tx.records
	ex.used.inflated += ex.tx.inflated
	ex.used.results += ex.tx.results
	txo.mergeInto(ex.block)
	for _, run := range pending {
		key := string(recordPrefix(run.topic, run.partition))
		if have, ok := ex.appended[key]; ok && have.first+uint64(len(have.leaves)) == run.first {
			have.leaves = append(have.leaves, run.leaves...)
		} else {
			// A topic deleted and created again in this block restarts at 0:
			// the later run replaces the earlier, deleted one.
			ex.appended[key] = run
		}
	}
	return res, nil
}

// produce applies a bundle: every batch must be valid, or none is applied.
// It stops at the first bad batch; the outcome marks the rest not applied,
// so a gateway can answer the bad one and send the others again.
func (ex *executor) produce(o *overlay, batches []*checkedBatch) (Result, []*appendedRun, error) {
	outcome := &byzlogv1.TxOutcome{Batches: make([]*byzlogv1.BatchResult, len(batches))}
	var failed *Result
	var runs []*appendedRun
	var events []Event
	for i, cb := range batches {
		if failed != nil {
			outcome.Batches[i] = &byzlogv1.BatchResult{Log: "not applied: an earlier batch of the bundle was rejected"}
			continue
		}
		br, run, err := ex.batch(o, cb)
		if err != nil {
			return Result{}, nil, err
		}
		outcome.Batches[i] = br
		if br.Code != uint32(wire.CodeOK) {
			r := reject(wire.Code(br.Code), "batch %d (%s/%d sequence %d): %s", i, wire.Quote(br.Topic), br.Partition, br.Sequence, br.Log)
			failed = &r
			continue
		}
		if run != nil {
			runs = append(runs, run)
			events = append(events, Event{Type: "byzlog.append", Attrs: []Attr{
				{"topic", br.Topic}, {"partition", strconv.FormatUint(uint64(br.Partition), 10)},
				{"base_offset", strconv.FormatUint(br.BaseOffset, 10)}, {"count", strconv.FormatUint(uint64(br.RecordCount), 10)},
			}})
		}
	}
	for i, cb := range batches {
		outcome.Batches[i].Producer, outcome.Batches[i].BodySha256 = cb.sb.ProducerKey, cb.digest
		if k := cb.body.Kafka; k != nil {
			outcome.Batches[i].Kafka = &byzlogv1.KafkaProducer{ProducerId: k.ProducerId, Epoch: k.Epoch}
		}
	}
	if failed != nil {
		for _, br := range outcome.Batches[:] {
			if br.Code == uint32(wire.CodeOK) && br.RecordCount > 0 {
				br.BaseOffset, br.RecordCount = 0, 0
				br.Log = "not applied: another batch of the bundle was rejected"
			}
			if ex.mode == modeBlock {
				// Data is covered by LastResultsHash: no free text in it.
				br.Log = ""
			}
		}
		failed.Data = marshal(outcome)
		return *failed, nil, nil
	}
	return Result{Code: wire.CodeOK, Data: marshal(outcome), Events: events}, runs, nil
}

// batch runs the stateful checks of one prechecked batch and, in a block,
// appends its records.
//
// A failure found in the precheck is returned as a copy: the caller fills
// in and blanks fields of what it gets, and a Checked is shared (a
// mempool's with the blocks that take it, ProcessProposal's with
// FinalizeBlock), so nothing may write to it.
func (ex *executor) batch(o *overlay, cb *checkedBatch) (*byzlogv1.BatchResult, *appendedRun, error) {
	if cb.early != nil {
		return proto.Clone(cb.early).(*byzlogv1.BatchResult), nil, nil
	}
	sb, body := cb.sb, cb.body
	topic, code, missing, err := topicPartition(o, body.Topic, body.Partition)
	switch {
	case err != nil:
		return nil, nil, err
	case code == wire.CodeUnknownTopic:
		return failBatch(body, code, "%s; create it first", missing), nil, nil
	case topic == nil:
		return failBatch(body, code, "%s", missing), nil, nil
	}
	if !allowed(topic.Config, sb.ProducerKey) {
		return failBatch(body, wire.CodeNotAllowed, "producer key %x is not in topic %q's allowed_producers", sb.ProducerKey, body.Topic), nil, nil
	}
	pkey := producerKey(sb.ProducerKey, body.Topic, body.Partition, body.Kafka)
	if br, err := ex.sequence(o, cb, pkey); br != nil || err != nil {
		return br, nil, err
	}
	if cb.late != nil {
		return proto.Clone(cb.late).(*byzlogv1.BatchResult), nil, nil
	}
	if max := topic.Config.MaxRecordBytes; max != 0 && cb.largest > uint64(max) {
		return failBatch(body, wire.CodeRecordTooLarge, "record %d is %d bytes (key + value + headers), the topic allows %d", cb.largestAt, cb.largest, max), nil, nil
	}
	if br, err := ex.createTimes(topic.Config, cb); br != nil || err != nil {
		return br, nil, err
	}
	if br, err := ex.keys(topic.Config, cb); br != nil || err != nil {
		return br, nil, err
	}
	if br, err := ex.liveBytes(o, topic.Config, cb); br != nil || err != nil {
		return br, nil, err
	}
	var txnID string
	var txn *byzlogv1.TxnState
	if body.Kafka.GetTransactional() {
		// Before TxnRulesVersion the flag is not read: the batch is an
		// idempotent producer's, as a build before it takes it.
		rules, err := ex.rulesVersion()
		if err != nil {
			return nil, nil, err
		}
		if rules >= TxnRulesVersion {
			var fail *byzlogv1.BatchResult
			if txnID, txn, fail, err = ex.txnBatch(o, cb); fail != nil || err != nil {
				return fail, nil, err
			}
		}
	}
	if code, msg := ex.spend(cb.inflated, int64(cb.count)); code != wire.CodeOK {
		return failBatch(body, code, "%s", msg), nil, nil
	}
	br := &byzlogv1.BatchResult{Topic: body.Topic, Partition: body.Partition, Sequence: body.Sequence, RecordCount: cb.count}
	if ex.mode == modeMempool {
		return br, nil, nil
	}
	return ex.appendBatch(o, cb, br, pkey, txnID, txn)
}

// appendBatch writes a batch that passed every check into the block: its
// place in an open transaction (txn, when it is transactional), its records
// from the partition's next offset, the partition's state, the producer's
// next sequence and the batch's reference. br is the batch's result, to
// which it adds the base offset.
func (ex *executor) appendBatch(o *overlay, cb *checkedBatch, br *byzlogv1.BatchResult, pkey []byte, txnID string, txn *byzlogv1.TxnState) (*byzlogv1.BatchResult, *appendedRun, error) {
	sb, body := cb.sb, cb.body
	records := cb.records
	pk := partitionKey(body.Topic, body.Partition)
	var part byzlogv1.PartitionState
	if _, err := getProto(o, CFMeta, pk, &part); err != nil {
		return nil, nil, err
	}
	run := &appendedRun{topic: body.Topic, partition: body.Partition, first: part.NextOffset}
	br.BaseOffset = part.NextOffset
	if txn != nil {
		if fail := ex.txnAppend(o, txnID, txn, body, &part, part.NextOffset); fail != nil {
			return fail, nil, nil
		}
	}
	if ex.countOnly {
		part.NextOffset += uint64(cb.count)
		records = nil
	} else if len(records) != int(cb.count) {
		return nil, nil, fmt.Errorf("batch %s/%d sequence %d was prechecked without its records; execute needs Precheck with keepRecords", body.Topic, body.Partition, body.Sequence)
	}
	first := len(run.leaves)
	var rules uint64
	if len(records) > 0 {
		var err error
		if rules, err = ex.rulesVersion(); err != nil {
			return nil, nil, err
		}
	}
	for _, rec := range records {
		stored := marshal(storedRecord(body, part.NextOffset, rec, sb.ProducerKey, ex.b.Height, ex.b.TimeUnixNano, rules))
		run.leaves = append(run.leaves, stored)
		part.NextOffset++
		part.SizeBytes += uint64(len(stored))
	}
	if len(records) > 0 {
		put := func(last uint64, v []byte) { o.put(CFRecords, recordKey(body.Topic, body.Partition, last), v) }
		if rules >= RunsRulesVersion {
			appendRuns(br.BaseOffset, run.leaves[first:], put)
		} else {
			for i, stored := range run.leaves[first:] {
				put(br.BaseOffset+uint64(i), stored)
			}
		}
	}
	o.put(CFMeta, pk, marshal(&part))
	o.put(CFProducers, pkey, marshal(&byzlogv1.ProducerState{NextSequence: body.Sequence + wire.Span(body), KafkaEpoch: body.Kafka.GetEpoch()}))
	o.put(CFProducers, batchKey(sb.ProducerKey, body.Topic, body.Partition, body.Kafka, body.Sequence),
		marshal(&byzlogv1.BatchRef{BaseOffset: br.BaseOffset, RecordCount: br.RecordCount, Height: ex.b.Height, BodySha256: cb.digest}))
	return br, run, nil
}

// createTimes refuses a batch with a record whose create time is further
// from the block's time than its CreateTime topic's bounds allow (rules
// KafkaTopicsRulesVersion on), as Kafka's message.timestamp.before.max.ms
// and after.max.ms do. Without a block time (CheckTx) it is left to the
// block; so is a proposal's check (countOnly: Verify): the mempool, which
// keeps no records, admits such a batch, so a proposal may carry it, and
// the block refuses the batch alone (rejecting the proposal would have
// every proposer propose it again, and halt the chain).
func (ex *executor) createTimes(cfg *byzlogv1.TopicConfig, cb *checkedBatch) (*byzlogv1.BatchResult, error) {
	before, after := cfg.TimestampBeforeMaxMs, cfg.TimestampAfterMaxMs
	if ex.countOnly || ex.b.TimeUnixNano == 0 || (before == 0 && after == 0) || cfg.TimestampType != byzlogv1.TimestampType_TIMESTAMP_CREATE_TIME {
		return nil, nil
	}
	rules, err := ex.rulesVersion()
	if err != nil || rules < KafkaTopicsRulesVersion {
		return nil, err
	}
	now := ex.b.TimeUnixNano / 1_000_000
	for i, r := range cb.records {
		at := r.CreateTimeUnixNano / 1_000_000
		switch {
		case before > 0 && at < now-before:
			return failBatch(cb.body, wire.CodeBadTimestamp, "record %d's create time %d ms is more than the topic's timestamp_before_max_ms (%d) before the block's time %d ms", i, at, before, now), nil
		case after > 0 && at > now+after:
			return failBatch(cb.body, wire.CodeBadTimestamp, "record %d's create time %d ms is more than the topic's timestamp_after_max_ms (%d) after the block's time %d ms", i, at, after, now), nil
		}
	}
	return nil, nil
}

// keys refuses a batch with a record without a key to a compacted topic
// (rules CompactRulesVersion on), as Kafka refuses one: compaction keeps
// the latest record of each key, and a record without one has none.
// CheckTx, which keeps no records, leaves it to the block, and so does a
// proposal's check (countOnly), as createTimes does.
func (ex *executor) keys(cfg *byzlogv1.TopicConfig, cb *checkedBatch) (*byzlogv1.BatchResult, error) {
	if ex.countOnly || cfg.GetCleanupPolicy() == byzlogv1.CleanupPolicy_CLEANUP_DELETE || len(cb.records) == 0 {
		return nil, nil
	}
	rules, err := ex.rulesVersion()
	if err != nil || !Compacts(cfg, rules) {
		return nil, err
	}
	if i := keyless(cb.records); i >= 0 {
		return failBatch(cb.body, wire.CodeNoKey, "record %d has no key: topic %s is compacted (cleanup_policy %s), which keeps the latest record of each key", i, wire.Quote(cb.body.Topic), cfg.CleanupPolicy), nil
	}
	return nil, nil
}

// liveBytes refuses a batch that would take a compact-only partition's
// stored records past the topic's retention_bytes (rules version 10 on):
// compaction keeps every live key's latest record however old, so without
// a bound a partition of ever new keys grows without end. Retention does
// not apply to such a topic, so retention_bytes bounds what it keeps
// instead (Kafka ignores retention.bytes there, and bounds nothing). A
// batch of tombstones alone passes: it frees space once they expire. As
// keys and createTimes, it is the block's check, not a proposal's.
func (ex *executor) liveBytes(o *overlay, cfg *byzlogv1.TopicConfig, cb *checkedBatch) (*byzlogv1.BatchResult, error) {
	if ex.countOnly || cfg.GetCleanupPolicy() != byzlogv1.CleanupPolicy_CLEANUP_COMPACT || cfg.GetRetentionBytes() <= 0 || len(cb.records) == 0 {
		return nil, nil
	}
	rules, err := ex.rulesVersion()
	if err != nil || rules < KeyTreeRulesVersion {
		return nil, err
	}
	var adds uint64
	for _, r := range cb.records {
		if r.Value != nil {
			adds += recordSize(r)
		}
	}
	if adds == 0 {
		return nil, nil
	}
	var part byzlogv1.PartitionState
	if _, err := getProto(o, CFMeta, partitionKey(cb.body.Topic, cb.body.Partition), &part); err != nil {
		return nil, err
	}
	if part.SizeBytes+adds > uint64(cfg.RetentionBytes) {
		return failBatch(cb.body, wire.CodePartitionFull, "compacted partition %s/%d holds %d bytes of live records, and %d more would pass its retention_bytes (%d): delete keys (tombstones) or raise retention_bytes",
			wire.Quote(cb.body.Topic), cb.body.Partition, part.SizeBytes, adds, cfg.RetentionBytes), nil
	}
	return nil, nil
}

// sequence checks the batch's sequence against the producer's state; a
// non-nil result is the batch's failure.
func (ex *executor) sequence(o *overlay, cb *checkedBatch, pkey []byte) (*byzlogv1.BatchResult, error) {
	sb, body := cb.sb, cb.body
	next, fenced, err := nextSequence(o, pkey, body)
	if err != nil {
		return nil, err
	}
	committed, refs := next, Reader(o)
	if ex.mode == modePool {
		// The overlay holds the pool's pending batches; only what the base
		// holds is committed and may be answered as a duplicate.
		if committed, _, err = nextSequence(ex.base, pkey, body); err != nil {
			return nil, err
		}
		refs = ex.base
	}
	lookahead := wire.Lookahead(body)
	var ref byzlogv1.BatchRef
	if body.Sequence < committed || fenced {
		if _, err := getProto(refs, CFProducers, batchKey(sb.ProducerKey, body.Topic, body.Partition, body.Kafka, body.Sequence), &ref); err != nil {
			return nil, err
		}
	}
	switch {
	case fenced && !bytes.Equal(ref.BodySha256, cb.digest):
		// A fenced epoch's batch that is committed is still answered as
		// the duplicate it is; any other is refused.
		return failBatch(body, wire.CodeProducerFenced, "kafka producer %d epoch %d is fenced: the chain has seen a newer epoch of it; start again (InitProducerId)", body.Kafka.ProducerId, body.Kafka.Epoch), nil
	case body.Sequence < committed || fenced:
		if !bytes.Equal(ref.BodySha256, cb.digest) {
			// Another batch took this sequence (or, for a Kafka producer,
			// a batch began at none of the sequences committed): this
			// one's records were never written, so it must not be
			// answered with their offsets.
			if len(ref.BodySha256) == 0 {
				return failBatch(body, wire.CodeSequenceReused, "sequence %d is inside a committed batch of kafka producer %d epoch %d (none starts there); these records were not written: the next sequence is %d",
					body.Sequence, body.Kafka.GetProducerId(), body.Kafka.GetEpoch(), committed), nil
			}
			return failBatch(body, wire.CodeSequenceReused, "sequence %d is already committed (height %d) with a different batch; these records were not written: send them under a new sequence (the next is %d)",
				body.Sequence, ref.Height, committed), nil
		}
		br := failBatch(body, wire.CodeDuplicate, "sequence %d is already committed at offsets %d..%d (height %d); the next sequence is %d",
			body.Sequence, ref.BaseOffset, ref.BaseOffset+uint64(ref.RecordCount)-1, ref.Height, committed)
		br.Duplicate, br.BaseOffset, br.RecordCount, br.Height = true, ref.BaseOffset, ref.RecordCount, ref.Height
		return br, nil
	case body.Sequence < next:
		return failBatch(body, wire.CodePending, "sequence %d is already waiting in this node's mempool in another transaction; its receipt comes with that one", body.Sequence), nil
	case body.Sequence > next && (ex.mode != modeMempool || body.Sequence-next > lookahead):
		if ex.mode == modePool && body.Sequence-next <= lookahead {
			ex.waiting = true
		}
		return failBatch(body, wire.CodeSequenceGap, "sequence %d skips ahead: the next sequence is %d; send the missing batches first", body.Sequence, next), nil
	}
	if ex.mode == modeMempool {
		// CheckTx writes nothing, so a sequence repeated within one bundle
		// is caught here rather than by the producer state.
		seen := string(pkey) + string(be64(body.Sequence))
		if ex.txSeen[seen] {
			return failBatch(body, wire.CodeMalformedTx, "sequence %d of this producer appears twice in the bundle", body.Sequence), nil
		}
		ex.txSeen[seen] = true
	}
	return nil, nil
}

func digestOfBody(body []byte) []byte {
	d := sha256.Sum256(body)
	return d[:]
}

// nextSequence is the next sequence of body's sequence space (see
// wire.NextSequence) as r holds it.
func nextSequence(r Reader, pkey []byte, body *byzlogv1.BatchBody) (next uint64, fenced bool, err error) {
	var ps byzlogv1.ProducerState
	if _, err := getProto(r, CFProducers, pkey, &ps); err != nil {
		return 0, false, err
	}
	next, fenced = wire.NextSequence(&ps, body)
	return next, fenced, nil
}

func failBatch(body *byzlogv1.BatchBody, code wire.Code, format string, args ...any) *byzlogv1.BatchResult {
	return &byzlogv1.BatchResult{
		Topic: body.Topic, Partition: body.Partition, Sequence: body.Sequence,
		Code: uint32(code), Log: truncate(fmt.Sprintf(format, args...), 256),
	}
}

// spend charges a batch's inflated bytes and records to the transaction
// and, when the block is bounded, checks the block's budget. The
// transaction's own budget was checked by Precheck.
func (ex *executor) spend(inflated, records int64) (wire.Code, string) {
	l := ex.params.Limits
	ex.tx.inflated += inflated
	ex.tx.records += records
	switch {
	case ex.bounded && ex.used.inflated+ex.tx.inflated > int64(l.MaxBlockUncompressedBytes):
		return wire.CodeBlockFull, fmt.Sprintf("the block would inflate past max_block_uncompressed_bytes (%d); the transaction waits for the next block", l.MaxBlockUncompressedBytes)
	case ex.bounded && ex.used.records+ex.tx.records > int64(l.MaxBlockRecords):
		return wire.CodeBlockFull, fmt.Sprintf("the block would pass max_block_records (%d); the transaction waits for the next block", l.MaxBlockRecords)
	}
	return wire.CodeOK, ""
}

// resultSize is an upper bound of what a result adds to the FinalizeBlock
// response.
func resultSize(r Result) int64 {
	n := int64(len(r.Data) + len(r.Log) + 32)
	for _, e := range r.Events {
		n += int64(len(e.Type)) + 8
		for _, a := range e.Attrs {
			n += int64(len(a.Key)+len(a.Value)) + 8
		}
	}
	return n
}

// copyHeaders keeps only the fields byzlog knows, so that unknown fields
// cannot carry bytes past max_record_bytes into the log.
// copyHeaders copies a record's headers as rules stores them (empty
// values as null before KafkaRulesVersion).
func copyHeaders(hs []*byzlogv1.RecordHeader, rules uint64) []*byzlogv1.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*byzlogv1.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = &byzlogv1.RecordHeader{Key: h.Key, Value: stored(h.Value, rules)}
	}
	return out
}

// stored is a key, value or header value as rules stores it: before
// KafkaRulesVersion an empty one is null, as the chain could not tell them
// apart; from it on, as sent.
func stored(b []byte, rules uint64) []byte {
	if len(b) == 0 && rules < KafkaRulesVersion {
		return nil
	}
	return b
}

func recordSize(r *byzlogv1.Record) uint64 {
	n := uint64(len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += uint64(len(h.Key) + len(h.Value))
	}
	return n
}

func allowed(cfg *byzlogv1.TopicConfig, key []byte) bool {
	if len(cfg.AllowedProducers) == 0 {
		return true
	}
	for _, k := range cfg.AllowedProducers {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}

// admin applies an admin-signed topic change.
func (ex *executor) admin(o *overlay, req *byzlogv1.AdminRequest) (Result, error) {
	var body byzlogv1.AdminBody
	if err := proto.Unmarshal(req.Body, &body); err != nil {
		return reject(wire.CodeMalformedTx, "admin body is not a byzlog.v1.AdminBody: %v", err), nil
	}
	if r, err := ex.authorizeAdmin(o, req, &body); err != nil || !r.OK() {
		return r, err
	}
	return ex.applyAdmin(o, &body)
}

// authorizeAdmin checks an admin request before its operation runs: the
// chain it was signed for, its signers against the admin set (a threshold
// of them for a dangerous operation), its expiry, and its nonce, which in a
// block it uses up.
func (ex *executor) authorizeAdmin(o *overlay, req *byzlogv1.AdminRequest, body *byzlogv1.AdminBody) (Result, error) {
	if body.ChainId != ex.params.ChainId {
		return reject(wire.CodeWrongChain, "admin request signed for chain %s, this is %q", wire.Quote(body.ChainId), ex.params.ChainId), nil
	}
	admins, err := loadAdmins(o, ex.params)
	if err != nil {
		return Result{}, err
	}
	op, needsThreshold := dangerous(body)
	rules, err := RulesAt(o, ex.b.Height)
	if err != nil {
		return Result{}, err
	}
	if r := checkSigners(admins, req, op, needsThreshold, rules); !r.OK() {
		return r, nil
	}
	if r := ex.expired("admin request", body.ExpiryHeight); !r.OK() {
		return r, nil
	}
	return ex.useNonce(o, req.AdminKey, body.Nonce)
}

// applyAdmin runs the operation of an authorized admin request.
func (ex *executor) applyAdmin(o *overlay, body *byzlogv1.AdminBody) (Result, error) {
	l := ex.params.Limits
	switch op := body.Op.(type) {
	case *byzlogv1.AdminBody_CreateTopic, *byzlogv1.AdminBody_UpdateTopic:
		rules, err := ex.rulesVersion()
		if err != nil {
			return Result{}, err
		}
		if c, ok := op.(*byzlogv1.AdminBody_CreateTopic); ok {
			return createTopic(o, l, c.CreateTopic, ex.b.Height, rules)
		}
		return updateTopic(o, l, op.(*byzlogv1.AdminBody_UpdateTopic).UpdateTopic, rules)
	case *byzlogv1.AdminBody_CreateTopics:
		rules, err := ex.rulesVersion()
		if err != nil || rules < CreateTopicsRulesVersion {
			return reject(wire.CodeUnknownTxKind, "admin request has no operation this version knows"), err
		}
		return createTopics(o, l, op.CreateTopics, ex.b.Height, rules)
	case *byzlogv1.AdminBody_DeleteTopic:
		rules, err := ex.rulesVersion()
		if err != nil {
			return Result{}, err
		}
		res, err := deleteTopic(o, op.DeleteTopic)
		if err == nil && res.OK() && rules >= TxnRulesVersion {
			// Its aborted transactions (and, from CompactRulesVersion, its
			// key index and tombstone queue) go with it: a topic created
			// again under the name starts at offset 0, where they would
			// otherwise hide a producer id's committed records, or make
			// compaction remove the new topic's records.
			prefixes := [][]byte{prefixAborted, prefixAbortEnd}
			if rules >= CompactRulesVersion {
				prefixes = append(prefixes, prefixCompactKey, prefixTombstone)
			}
			if rules >= KeyTreeRulesVersion {
				prefixes = append(prefixes, prefixTopicTree) // the key tree drops its leaf (updateKeyTree)
			}
			for _, pre := range prefixes {
				prefix := cat(pre, []byte(op.DeleteTopic.Name), []byte{0})
				o.deleteRange(CFMeta, prefix, prefixEnd(prefix))
			}
		}
		return res, err
	case *byzlogv1.AdminBody_DeleteRecords:
		rules, err := ex.rulesVersion()
		if err != nil || rules < KafkaTopicsRulesVersion {
			return reject(wire.CodeUnknownTxKind, "admin request has no operation this version knows"), err
		}
		return deleteRecords(o, op.DeleteRecords)
	case *byzlogv1.AdminBody_SetValidator:
		v := op.SetValidator
		start, err := LoadValidators(ex.base)
		if err != nil {
			return Result{}, err
		}
		if r, err := setValidator(o, start, ex.b.Height, v); err != nil || !r.OK() {
			return r, err
		}
		return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.admin", Attrs: []Attr{
			{"op", "set_validator"}, {"pub_key", fmt.Sprintf("%x", v.PubKey)}, {"power", strconv.FormatInt(v.Power, 10)}}}}}, nil
	case *byzlogv1.AdminBody_SetIndexer:
		return setIndexer(o, ex.b.Height, op.SetIndexer)
	case *byzlogv1.AdminBody_ScheduleUpgrade:
		return scheduleUpgrade(o, ex.b.Height, op.ScheduleUpgrade)
	case *byzlogv1.AdminBody_SetAdmins:
		if r := setAdmins(o, op.SetAdmins); !r.OK() {
			return r, nil
		}
		return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.admin", Attrs: []Attr{
			{"op", "set_admins"}, {"admins", strconv.Itoa(len(op.SetAdmins.Admins))}, {"threshold", strconv.FormatUint(uint64(op.SetAdmins.Threshold), 10)}}}}}, nil
	}
	return reject(wire.CodeUnknownTxKind, "admin request has no operation this version knows"), nil
}

// createTopic creates topic c at height.
func createTopic(o *overlay, l *byzlogv1.Limits, c *byzlogv1.CreateTopic, height int64, rules uint64) (Result, error) {
	if r := checkTopicName(c.Name); !r.OK() {
		return r, nil
	}
	if r := checkTopicConfig(l, c.Config, rules); !r.OK() {
		return r, nil
	}
	have, err := loadTopic(o, c.Name)
	if err != nil {
		return Result{}, err
	}
	if have != nil {
		return reject(wire.CodeTopicExists, "topic %q exists (created at height %d); update or delete it instead", c.Name, have.CreatedHeight), nil
	}
	writeTopic(o, &byzlogv1.TopicState{Name: c.Name, Config: c.Config}, height)
	return adminOK("create_topic", c.Name), nil
}

// createTopics creates every topic of c at height, or none: the first
// that createTopic would refuse, or a name listed twice, refuses them all.
func createTopics(o *overlay, l *byzlogv1.Limits, c *byzlogv1.CreateTopics, height int64, rules uint64) (Result, error) {
	if n := len(c.Topics); n == 0 || n > wire.MaxCreateTopics {
		return reject(wire.CodeMalformedTx, "a create_topics request holds 1 to %d topics, this one %d", wire.MaxCreateTopics, n), nil
	}
	// Topics are checked in the order listed: a name listed twice is
	// refused at its second place, before any is written.
	seen := make(map[string]bool, len(c.Topics))
	for i, t := range c.Topics {
		if seen[t.Name] {
			return reject(wire.CodeTopicExists, "topics[%d]: topic %s is listed twice", i, wire.Quote(t.Name)), nil
		}
		seen[t.Name] = true
		if r := checkTopicName(t.Name); !r.OK() {
			return topicsRefused(i, r), nil
		}
		if r := checkTopicConfig(l, t.Config, rules); !r.OK() {
			return topicsRefused(i, r), nil
		}
		have, err := loadTopic(o, t.Name)
		if err != nil {
			return Result{}, err
		}
		if have != nil {
			return reject(wire.CodeTopicExists, "topics[%d]: topic %s exists (created at height %d); none of the %d was created",
				i, wire.Quote(t.Name), have.CreatedHeight, len(c.Topics)), nil
		}
	}
	for _, t := range c.Topics {
		writeTopic(o, &byzlogv1.TopicState{Name: t.Name, Config: t.Config}, height)
	}
	return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.admin", Attrs: []Attr{
		{"op", "create_topics"}, {"topics", strconv.Itoa(len(c.Topics))}}}}}, nil
}

// topicsRefused is r, the refusal of a create_topics request's topic i,
// saying which topic and that none was created.
func topicsRefused(i int, r Result) Result {
	r.Log = truncate(fmt.Sprintf("topics[%d]: %s; none was created", i, r.Log), 256)
	return r
}

// updateTopic changes a topic's config; its partitions may grow, never
// shrink.
func updateTopic(o *overlay, l *byzlogv1.Limits, u *byzlogv1.UpdateTopic, rules uint64) (Result, error) {
	have, err := loadTopic(o, u.Name)
	if err != nil {
		return Result{}, err
	}
	if have == nil {
		return reject(wire.CodeUnknownTopic, "topic %s does not exist", wire.Quote(u.Name)), nil
	}
	if r := checkTopicConfig(l, u.Config, rules); !r.OK() {
		return r, nil
	}
	if u.Config.Partitions < have.Config.Partitions {
		return reject(wire.CodeBadTopicConfig, "partitions can grow, never shrink: topic %q has %d, the update asks for %d", u.Name, have.Config.Partitions, u.Config.Partitions), nil
	}
	for p := have.Config.Partitions; p < u.Config.Partitions; p++ {
		o.put(CFMeta, partitionKey(u.Name, p), marshal(&byzlogv1.PartitionState{}))
	}
	have.Config = u.Config
	o.put(CFMeta, topicKey(u.Name), marshal(have))
	return adminOK("update_topic", u.Name), nil
}

// deleteTopic deletes a topic, its partitions and its records.
func deleteTopic(o *overlay, d *byzlogv1.DeleteTopic) (Result, error) {
	have, err := loadTopic(o, d.Name)
	if err != nil {
		return Result{}, err
	}
	if have == nil {
		return reject(wire.CodeUnknownTopic, "topic %s does not exist", wire.Quote(d.Name)), nil
	}
	o.del(CFMeta, topicKey(d.Name))
	for p := uint32(0); p < have.Config.Partitions; p++ {
		o.del(CFMeta, partitionKey(d.Name, p))
		o.del(CFMeta, purgeKey(d.Name, p))
	}
	start, end := topicRecords(d.Name)
	o.deleteRange(CFRecords, start, end)
	return adminOK("delete_topic", d.Name), nil
}

// deleteRecords moves partitions' log start to the offsets asked: reads
// below them are refused at once, and retention removes the records in the
// blocks that follow (retain), a bounded number a block.
func deleteRecords(o *overlay, d *byzlogv1.DeleteRecords) (Result, error) {
	if len(d.Partitions) == 0 {
		return reject(wire.CodeMalformedTx, "delete records of topic %s names no partition", wire.Quote(d.Topic)), nil
	}
	seen := map[uint32]bool{}
	for i, dp := range d.Partitions {
		topic, code, missing, err := topicPartition(o, d.Topic, dp.Partition)
		if err != nil {
			return Result{}, err
		}
		if topic == nil {
			return reject(code, "partitions[%d]: %s", i, missing), nil
		}
		if seen[dp.Partition] {
			return reject(wire.CodeMalformedTx, "partitions[%d]: partition %d is listed twice", i, dp.Partition), nil
		}
		seen[dp.Partition] = true
		pk := partitionKey(d.Topic, dp.Partition)
		var ps byzlogv1.PartitionState
		if _, err := getProto(o, CFMeta, pk, &ps); err != nil {
			return Result{}, err
		}
		if dp.BeforeOffset > ps.NextOffset {
			return reject(wire.CodeOffsetOutOfRange, "partitions[%d]: offset %d is past %s/%d's high watermark %d", i, dp.BeforeOffset, wire.Quote(d.Topic), dp.Partition, ps.NextOffset), nil
		}
		if dp.BeforeOffset <= logStart(&ps) {
			continue
		}
		ps.DeleteBelow = dp.BeforeOffset
		o.put(CFMeta, pk, marshal(&ps))
		o.put(CFMeta, purgeKey(d.Topic, dp.Partition), []byte{})
	}
	return adminOK("delete_records", d.Topic), nil
}

// logStart is the first offset a partition serves: retention's log start,
// or past it what DeleteRecords deleted and retention has not removed yet.
func logStart(ps *byzlogv1.PartitionState) uint64 { return stateproof.LogStart(ps) }

func adminOK(op, topic string) Result {
	return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.admin", Attrs: []Attr{{"op", op}, {"topic", topic}}}}}
}

// expired refuses a signed body whose expiry height is before the block's
// (or, in the mempool, the next block's) height. CheckTx on committed state
// alone (height 0) leaves it to the block.
func (ex *executor) expired(what string, expiry int64) Result {
	if expiry != 0 && ex.b.Height > 0 && ex.b.Height > expiry {
		return reject(wire.CodeBodyExpired, "%s expired at height %d, this is height %d: sign it again", what, expiry, ex.b.Height)
	}
	return Result{}
}

// useNonce checks that nonce is key's next one (in a block) or not already
// used (in the mempool), and in a block advances it.
func (ex *executor) useNonce(o *overlay, key []byte, nonce uint64) (Result, error) {
	next, err := loadNonce(o, key)
	if err != nil {
		return Result{}, err
	}
	committed := next
	if ex.mode == modePool {
		if committed, err = loadNonce(ex.base, key); err != nil {
			return Result{}, err
		}
	}
	switch {
	case nonce >= committed && nonce < next:
		return reject(wire.CodePending, "nonce %d of key %x is already waiting in this node's mempool in another transaction", nonce, key), nil
	case nonce < next || (nonce > next && (ex.mode != modeMempool || nonce-next > wire.MaxLookahead)):
		if ex.mode == modePool && nonce > next && nonce-next <= wire.MaxLookahead {
			ex.waiting = true
		}
		return reject(wire.CodeBadNonce, "nonce %d is not key %x's next nonce, %d", nonce, key, next), nil
	}
	// The height goes with it: the block that holds the transaction which
	// used nonce, so a client can be shown that transaction (NonceUse).
	o.put(CFMeta, nonceKey(key), cat(be64(nonce+1), be64(uint64(ex.b.Height))))
	return Result{}, nil
}

func loadNonce(r Reader, key []byte) (uint64, error) {
	next, _, err := loadNonceState(r, key)
	return next, err
}

// loadNonceState returns key's next nonce and the height of the block that
// used the one before it (0, 0: none used).
func loadNonceState(r Reader, key []byte) (next uint64, usedAt int64, err error) {
	b, err := r.Get(CFMeta, nonceKey(key))
	if err != nil || b == nil {
		return 0, 0, err
	}
	if len(b) != 16 {
		return 0, 0, fmt.Errorf("nonce of %x: stored value is %d bytes, want 16", key, len(b))
	}
	return binary.BigEndian.Uint64(b), int64(binary.BigEndian.Uint64(b[8:])), nil
}

// maxOffsetMetadata is Kafka's offset.metadata.max.bytes default.
const maxOffsetMetadata = 4096

// commitOffsets applies a consumer-signed offset commit.
func (ex *executor) commitOffsets(o *overlay, req *byzlogv1.CommitOffsets) (Result, error) {
	var body byzlogv1.CommitOffsetsBody
	if err := proto.Unmarshal(req.Body, &body); err != nil {
		return reject(wire.CodeMalformedTx, "commit offsets body is not a byzlog.v1.CommitOffsetsBody: %v", err), nil
	}
	if body.ChainId != ex.params.ChainId {
		return reject(wire.CodeWrongChain, "offset commit signed for chain %s, this is %q", wire.Quote(body.ChainId), ex.params.ChainId), nil
	}
	if r := checkGroupName(body.Group); !r.OK() {
		return r, nil
	}
	if r := ex.expired("offset commit", body.ExpiryHeight); !r.OK() {
		return r, nil
	}
	rules, err := ex.rulesVersion()
	if err != nil {
		return Result{}, err
	}
	deleting := body.Delete && rules >= KafkaTopicsRulesVersion
	if n := len(body.Offsets); (n == 0 && !deleting) || n > int(ex.params.Limits.MaxCommitOffsets) {
		return reject(wire.CodeMalformedTx, "an offset commit holds 1 to %d offsets, this one %d", ex.params.Limits.MaxCommitOffsets, n), nil
	}
	if r, err := ex.useNonce(o, req.ConsumerKey, body.Nonce); err != nil || !r.OK() {
		return r, err
	}
	owner, err := o.Get(CFMeta, groupKey(body.Group))
	if err != nil {
		return Result{}, err
	}
	if owner != nil && !bytes.Equal(owner, req.ConsumerKey) {
		return reject(wire.CodeNotGroupOwner, "group %q belongs to key %x", body.Group, owner), nil
	}
	if deleting {
		return deleteOffsets(o, &body, owner != nil)
	}
	if owner == nil {
		o.put(CFMeta, groupKey(body.Group), req.ConsumerKey)
	}
	seen := map[string]bool{}
	for i, po := range body.Offsets {
		k := offsetKey(body.Group, po.Topic, po.Partition)
		if seen[string(k)] {
			return reject(wire.CodeMalformedTx, "offsets[%d]: %s/%d is listed twice", i, wire.Quote(po.Topic), po.Partition), nil
		}
		seen[string(k)] = true
		if r, err := checkOffset(o, i, po, rules); err != nil || !r.OK() {
			return r, err
		}
		var have byzlogv1.GroupOffset
		found, err := getProto(o, CFOffsets, k, &have)
		if err != nil {
			return Result{}, err
		}
		if found && po.Offset < have.Offset && !body.Rewind {
			return reject(wire.CodeOffsetBackwards, "offsets[%d]: %s/%d would move back from %d to %d; set rewind to move it back", i, po.Topic, po.Partition, have.Offset, po.Offset), nil
		}
		o.put(CFOffsets, k, marshal(&byzlogv1.GroupOffset{Offset: po.Offset, Metadata: po.Metadata, Height: ex.b.Height}))
	}
	return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.offsets", Attrs: []Attr{{"group", body.Group}, {"count", strconv.Itoa(len(body.Offsets))}}}}}, nil
}

// checkOffset checks offsets[i] of a commit: its metadata within Kafka's
// bound, a partition that exists, and, before KafkaRulesVersion, an offset
// not past the partition's end.
func checkOffset(o *overlay, i int, po *byzlogv1.PartitionOffset, rules uint64) (Result, error) {
	if len(po.Metadata) > maxOffsetMetadata {
		return reject(wire.CodeMalformedTx, "offsets[%d]: metadata is %d bytes, at most %d", i, len(po.Metadata), maxOffsetMetadata), nil
	}
	topic, code, missing, err := topicPartition(o, po.Topic, po.Partition)
	if err != nil {
		return Result{}, err
	}
	if topic == nil {
		return reject(code, "offsets[%d]: %s", i, missing), nil
	}
	var part byzlogv1.PartitionState
	if _, err := getProto(o, CFMeta, partitionKey(po.Topic, po.Partition), &part); err != nil {
		return Result{}, err
	}
	if po.Offset > part.NextOffset && rules < KafkaRulesVersion {
		return reject(wire.CodeOffsetBeyondEnd, "offsets[%d]: offset %d is past %s/%d's end (%d)", i, po.Offset, po.Topic, po.Partition, part.NextOffset), nil
	}
	return Result{}, nil
}

// deleteOffsets deletes the listed offsets of a group (Kafka's
// OffsetDelete) or, with none listed, the group (DeleteGroups): its
// offsets and its owner, so that its name is free again. A group with no
// committed offsets is not found.
func deleteOffsets(o *overlay, body *byzlogv1.CommitOffsetsBody, exists bool) (Result, error) {
	if !exists {
		return reject(wire.CodeNotFound, "group %q has committed no offsets", body.Group), nil
	}
	if len(body.Offsets) == 0 {
		start, end := groupOffsets(body.Group)
		o.deleteRange(CFOffsets, start, end)
		o.del(CFMeta, groupKey(body.Group))
		return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.offsets", Attrs: []Attr{{"group", body.Group}, {"deleted", "group"}}}}}, nil
	}
	for _, po := range body.Offsets {
		o.del(CFOffsets, offsetKey(body.Group, po.Topic, po.Partition))
	}
	return Result{Code: wire.CodeOK, Events: []Event{{Type: "byzlog.offsets", Attrs: []Attr{{"group", body.Group}, {"deleted", strconv.Itoa(len(body.Offsets))}}}}}, nil
}

// topicPartition loads a topic and checks that partition is one of its
// partitions: a batch, an offset commit, a proof and a records query all ask
// it. When either is missing, code says which and missing says so in words
// (the caller adds its own context); the topic is nil then.
func topicPartition(r Reader, name string, partition uint32) (t *byzlogv1.TopicState, code wire.Code, missing string, err error) {
	t, err = loadTopic(r, name)
	switch {
	case err != nil:
		return nil, 0, "", err
	case t == nil:
		return nil, wire.CodeUnknownTopic, "topic " + wire.Quote(name) + " does not exist", nil
	case partition >= t.Config.Partitions:
		return nil, wire.CodeUnknownPartition, fmt.Sprintf("topic %q has partitions 0..%d", name, t.Config.Partitions-1), nil
	}
	return t, wire.CodeOK, "", nil
}

func loadTopic(r Reader, name string) (*byzlogv1.TopicState, error) {
	var t byzlogv1.TopicState
	ok, err := getProto(r, CFMeta, topicKey(name), &t)
	if err != nil || !ok {
		return nil, err
	}
	if t.Config == nil {
		t.Config = &byzlogv1.TopicConfig{}
	}
	return &t, nil
}

func writeTopic(o *overlay, t *byzlogv1.TopicState, height int64) {
	t.CreatedHeight = height
	o.put(CFMeta, topicKey(t.Name), marshal(t))
	for p := uint32(0); p < t.Config.Partitions; p++ {
		o.put(CFMeta, partitionKey(t.Name, p), marshal(&byzlogv1.PartitionState{}))
	}
}

// getProto reads and decodes key into m; ok is false when the key is absent.
func getProto(r Reader, cf CF, key []byte, m proto.Message) (bool, error) {
	b, err := r.Get(cf, key)
	if err != nil {
		return false, fmt.Errorf("read %s %x: %w", cf, key, err)
	}
	if b == nil {
		return false, nil
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return false, fmt.Errorf("decode %s %x: %w", cf, key, err)
	}
	return true, nil
}
