package core

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Kafka transactions (rules version 8; scripts/model/txn.pml is their
// design, checked before this was built). The chain is the transaction
// coordinator: a transactional id's producer id, epoch and open
// transaction are state, and every step is a transaction in a block.
//
//   - TxnInit (InitProducerId) makes the id its signer's, with a producer
//     id the chain hands out, and bumps the epoch: every older producer of
//     the id is fenced, and its open transaction is aborted in the block.
//   - A transactional batch (KafkaProducer.transactional) of the current
//     epoch opens the transaction (at its block's time) and adds its
//     partition, from its first offset: the partition's last stable offset
//     stays there until the transaction ends.
//   - TxnOffsets holds a group's offsets until the transaction commits.
//   - TxnEnd writes a marker to every partition of the transaction in the
//     one block that takes it, commits its offsets on commit, and records
//     an abort's range in each partition (Kafka's aborted-transactions
//     index), so no reader sees one partition's part without the others.
//   - TxnExpire aborts a transaction open past its timeout by block time,
//     and bumps the epoch; until it does, the transaction takes no batch
//     and no commit.

// TxnRulesVersion is the first rules version with Kafka transactions.
const TxnRulesVersion uint64 = 8

// firstTxnProducerID is the first producer id the chain hands out; the
// Kafka face's idempotent producers draw theirs at random, and a producer
// id is a sequence space of its key's only, so the two never meet.
const firstTxnProducerID = int64(1) << 62

var (
	prefixTxn      = []byte("x/")  // transactional id: TxnState
	prefixTxnPID   = []byte("xp/") // producer id: transactional id
	prefixTxnOwner = []byte("xo/") // key: how many transactional ids it holds
	prefixTxnDue   = []byte("xd/") // deadline, transactional id: an open transaction
	prefixAborted  = []byte("xa/") // topic, partition, producer id, last offset: AbortedTxn
	prefixAbortEnd = []byte("xe/") // topic, partition, last offset, producer id: empty (for retention)
	keyTxnNextPID  = []byte("xn")  // the next producer id to hand out
)

func txnKey(id string) []byte     { return cat(prefixTxn, []byte(id)) }
func txnPIDKey(pid int64) []byte  { return cat(prefixTxnPID, be64(uint64(pid))) }
func txnOwnerKey(k []byte) []byte { return cat(prefixTxnOwner, k) }
func txnDueKey(t *byzlogv1.TxnState, id string) []byte {
	return cat(prefixTxnDue, be64(uint64(txnDeadline(t))), []byte(id))
}

// abortEndKey is abortedKey's entry in the order of the ranges' ends, for
// retention to drop those wholly below the log start.
func abortEndKey(topic string, p uint32, last uint64, pid int64) []byte {
	return cat(prefixAbortEnd, []byte(topic), []byte{0}, be32(p), be64(last), be64(uint64(pid)))
}

// dropAborted deletes topic/p's aborted ranges that end below logStart
// (retention moved the log start past them), at most MaxRetentionDeletes.
func dropAborted(s Scanner, o *overlay, topic string, p uint32, logStart uint64) error {
	prefix := cat(prefixAbortEnd, []byte(topic), []byte{0}, be32(p))
	n := 0
	var bad error
	err := s.Scan(CFMeta, prefix, cat(prefix, be64(logStart)), func(k, _ []byte) bool {
		rest := k[len(prefix):]
		if len(rest) != 16 {
			bad = fmt.Errorf("aborted range key %x is malformed", k)
			return false
		}
		last, pid := binary.BigEndian.Uint64(rest[:8]), int64(binary.BigEndian.Uint64(rest[8:]))
		o.del(CFMeta, abortEndKey(topic, p, last, pid))
		o.del(CFMeta, abortedKey(topic, p, pid, last))
		n++
		return n < MaxRetentionDeletes
	})
	return firstErr(err, bad)
}

// abortedKey keys an aborted transaction's range in a partition by its
// producer id and its marker's offset: one producer id's transactions in a
// partition follow one another, so ranges sorted by their end are sorted
// by their start too, and the first that ends at or after an offset is the
// only one that may span it (abortedIn).
func abortedKey(topic string, p uint32, pid int64, last uint64) []byte {
	return cat(prefixAborted, []byte(topic), []byte{0}, be32(p), be64(uint64(pid)), be64(last))
}

// txnDeadline is when t's open transaction times out (unix nanoseconds).
func txnDeadline(t *byzlogv1.TxnState) int64 {
	return t.StartedUnixNano + int64(t.TimeoutMs)*1_000_000
}

// checkTxnID refuses a transactional id Kafka would not take.
func checkTxnID(id string) Result {
	if id == "" || len(id) > wire.MaxTxnID || bytes.IndexByte([]byte(id), 0) >= 0 {
		return reject(wire.CodeMalformedTx, "transactional id %s: want 1 to %d bytes without NUL", wire.Quote(id), wire.MaxTxnID)
	}
	return Result{}
}

// loadTxn reads transactional id's state; nil when the chain has none.
func loadTxn(r Reader, id string) (*byzlogv1.TxnState, error) {
	var t byzlogv1.TxnState
	found, err := getProto(r, CFMeta, txnKey(id), &t)
	if err != nil || !found {
		return nil, err
	}
	return &t, nil
}

// txnOfProducer reads the transactional id that holds producer id pid,
// and its state; "" when none does.
func txnOfProducer(r Reader, pid int64) (string, *byzlogv1.TxnState, error) {
	id, err := r.Get(CFMeta, txnPIDKey(pid))
	if err != nil || id == nil {
		return "", nil, err
	}
	t, err := loadTxn(r, string(id))
	if err != nil {
		return "", nil, err
	}
	if t == nil {
		return "", nil, fmt.Errorf("producer id %d names transactional id %q, which has no state", pid, id)
	}
	return string(id), t, nil
}

// txnOutcome is the OK result of a transaction step: the id's producer id
// and epoch after it, and the markers it wrote.
func txnOutcome(t *byzlogv1.TxnState, markers *byzlogv1.TxnMarkers, op, id string) Result {
	res := Result{Code: wire.CodeOK, Data: marshal(&byzlogv1.TxnOutcome{ProducerId: t.ProducerId, Epoch: t.Epoch, Markers: markers}),
		Events: []Event{{Type: "byzlog.txn", Attrs: []Attr{{"op", op}, {"transactional_id", id},
			{"producer_id", strconv.FormatInt(t.ProducerId, 10)}, {"epoch", strconv.Itoa(int(t.Epoch))}}}}}
	if markers != nil {
		res.Events[0].Attrs = append(res.Events[0].Attrs, Attr{"commit", strconv.FormatBool(markers.Commit)}, Attr{"partitions", strconv.Itoa(len(markers.Partitions))})
	}
	return res
}

// txn applies a signed step of a Kafka transaction.
func (ex *executor) txn(o *overlay, req *byzlogv1.TxnRequest) (Result, []*appendedRun, error) {
	rules, err := ex.rulesVersion()
	if err != nil || rules < TxnRulesVersion {
		return reject(wire.CodeUnknownTxKind, "Kafka transactions need rules version %d (query /rules)", TxnRulesVersion), nil, err
	}
	var body byzlogv1.TxnBody
	if err := proto.Unmarshal(req.Body, &body); err != nil {
		return reject(wire.CodeMalformedTx, "body is not a byzlog.v1.TxnBody: %v", err), nil, nil
	}
	if body.ChainId != ex.params.ChainId {
		return reject(wire.CodeWrongChain, "transaction step signed for chain %s, this is %q", wire.Quote(body.ChainId), ex.params.ChainId), nil, nil
	}
	if r := ex.expired("transaction step", body.ExpiryHeight); !r.OK() {
		return r, nil, nil
	}
	if r := checkTxnID(body.TransactionalId); !r.OK() {
		return r, nil, nil
	}
	if body.Op == nil {
		return reject(wire.CodeMalformedTx, "transaction step has no operation this version knows"), nil, nil
	}
	if r, err := ex.useNonce(o, req.ProducerKey, body.Nonce); err != nil || !r.OK() {
		return r, nil, err
	}
	id := body.TransactionalId
	t, err := loadTxn(o, id)
	if err != nil {
		return Result{}, nil, err
	}
	if t != nil && !bytes.Equal(t.Owner, req.ProducerKey) {
		return reject(wire.CodeNotTxnOwner, "transactional id %s belongs to key %x", wire.Quote(id), t.Owner), nil, nil
	}
	switch op := body.Op.(type) {
	case *byzlogv1.TxnBody_Init:
		return ex.txnInit(o, req.ProducerKey, id, t, op.Init)
	case *byzlogv1.TxnBody_End:
		if t == nil {
			return reject(wire.CodeUnknownTxn, "transactional id %s is unknown: InitProducerId first", wire.Quote(id)), nil, nil
		}
		return ex.txnEnd(o, id, t, op.End)
	case *byzlogv1.TxnBody_Offsets:
		if t == nil {
			return reject(wire.CodeUnknownTxn, "transactional id %s is unknown: InitProducerId first", wire.Quote(id)), nil, nil
		}
		res, err := ex.txnOffsets(o, id, t, op.Offsets)
		return res, nil, err
	}
	return reject(wire.CodeMalformedTx, "transaction step has no operation this version knows"), nil, nil
}

// current refuses a step of producer id pid and epoch that is not t's
// current one: a fenced producer's.
func (ex *executor) current(t *byzlogv1.TxnState, id string, pid int64, epoch int32) Result {
	switch {
	case pid != t.ProducerId:
		return reject(wire.CodeUnknownTxn, "producer id %d is not transactional id %s's (%d)", pid, wire.Quote(id), t.ProducerId)
	case epoch != t.Epoch:
		return reject(wire.CodeProducerFenced, "epoch %d of transactional id %s is fenced: its epoch is %d", epoch, wire.Quote(id), t.Epoch)
	case t.Open && ex.b.TimeUnixNano > 0 && ex.b.TimeUnixNano > txnDeadline(t):
		return reject(wire.CodeProducerFenced, "transactional id %s's transaction timed out (%d ms after its start); it is aborted, and its producer fenced",
			wire.Quote(id), t.TimeoutMs)
	}
	return Result{}
}

// txnInit is InitProducerId: a new id, or the next epoch of a known one,
// whose open transaction it aborts.
func (ex *executor) txnInit(o *overlay, key []byte, id string, t *byzlogv1.TxnState, op *byzlogv1.TxnInit) (Result, []*appendedRun, error) {
	if op.TimeoutMs == 0 || op.TimeoutMs > wire.MaxTxnTimeoutMs {
		return reject(wire.CodeBadTxnTimeout, "transaction timeout %d ms: want 1 to %d (transaction.timeout.ms)", op.TimeoutMs, wire.MaxTxnTimeoutMs), nil, nil
	}
	var markers *byzlogv1.TxnMarkers
	var runs []*appendedRun
	if t == nil {
		if op.ProducerId >= 0 {
			return reject(wire.CodeUnknownTxn, "producer id %d: transactional id %s is unknown, so it holds none (send -1 to start)", op.ProducerId, wire.Quote(id)), nil, nil
		}
		n, err := loadCount(o, txnOwnerKey(key))
		if err != nil {
			return Result{}, nil, err
		}
		if n >= wire.MaxTxnIDs {
			return reject(wire.CodeTxnLimit, "key %x holds %d transactional ids, the chain's bound", key, n), nil, nil
		}
		o.put(CFMeta, txnOwnerKey(key), be32(n+1))
		t = &byzlogv1.TxnState{Owner: key}
		if err := ex.newProducerID(o, t, id); err != nil {
			return Result{}, nil, err
		}
	} else {
		if op.ProducerId >= 0 {
			if r := ex.current(&byzlogv1.TxnState{ProducerId: t.ProducerId, Epoch: t.Epoch}, id, op.ProducerId, op.Epoch); !r.OK() {
				return r, nil, nil
			}
		}
		if t.Open {
			var r Result
			var err error
			if markers, runs, r, err = ex.endTxn(o, id, t, false); err != nil || !r.OK() {
				return r, nil, err
			}
		}
		if err := ex.bumpEpoch(o, t, id); err != nil {
			return Result{}, nil, err
		}
	}
	t.TimeoutMs = op.TimeoutMs
	o.put(CFMeta, txnKey(id), marshal(t))
	return txnOutcome(t, markers, "init", id), runs, nil
}

// newProducerID gives t the chain's next producer id, at epoch 0.
func (ex *executor) newProducerID(o *overlay, t *byzlogv1.TxnState, id string) error {
	next := firstTxnProducerID
	b, err := o.Get(CFMeta, keyTxnNextPID)
	if err != nil {
		return err
	}
	if len(b) == 8 {
		next = int64(be64Value(b))
	}
	if t.ProducerId != 0 {
		o.del(CFMeta, txnPIDKey(t.ProducerId))
	}
	t.ProducerId, t.Epoch = next, 0
	o.put(CFMeta, keyTxnNextPID, be64(uint64(next+1)))
	o.put(CFMeta, txnPIDKey(next), []byte(id))
	return nil
}

// bumpEpoch moves t to its next epoch (a new producer id past the last
// epoch Kafka has, as Kafka does).
func (ex *executor) bumpEpoch(o *overlay, t *byzlogv1.TxnState, id string) error {
	if t.Epoch >= wire.MaxKafkaEpoch {
		return ex.newProducerID(o, t, id)
	}
	t.Epoch++
	return nil
}

// txnEnd is EndTxn.
func (ex *executor) txnEnd(o *overlay, id string, t *byzlogv1.TxnState, op *byzlogv1.TxnEnd) (Result, []*appendedRun, error) {
	if !t.Open {
		// A retry of the EndTxn that ended the last transaction is
		// answered as it was; anything else has nothing to end.
		if op.ProducerId == t.ProducerId && t.Ended && op.Epoch == t.EndedEpoch && op.Commit == t.EndedCommit {
			return txnOutcome(t, nil, "end", id), nil, nil
		}
		if r := ex.current(t, id, op.ProducerId, op.Epoch); !r.OK() {
			return r, nil, nil
		}
		return reject(wire.CodeBadTxnState, "transactional id %s has no open transaction to %s", wire.Quote(id), map[bool]string{true: "commit", false: "abort"}[op.Commit]), nil, nil
	}
	if r := ex.current(t, id, op.ProducerId, op.Epoch); !r.OK() {
		return r, nil, nil
	}
	if op.Commit {
		if r, err := ex.txnGroupsFree(o, t); err != nil || !r.OK() {
			return r, nil, err
		}
	}
	markers, runs, r, err := ex.endTxn(o, id, t, op.Commit)
	if err != nil || !r.OK() {
		return r, nil, err
	}
	o.put(CFMeta, txnKey(id), marshal(t))
	return txnOutcome(t, markers, "end", id), runs, nil
}

// txnGroupsFree refuses a commit whose offsets went to a group that is
// now another key's (deleted and taken since TxnOffsets).
func (ex *executor) txnGroupsFree(o *overlay, t *byzlogv1.TxnState) (Result, error) {
	for _, g := range t.Offsets {
		owner, err := o.Get(CFMeta, groupKey(g.Group))
		if err != nil {
			return Result{}, err
		}
		if owner != nil && !bytes.Equal(owner, t.Owner) {
			return reject(wire.CodeNotGroupOwner, "group %s, whose offsets the transaction commits, belongs to key %x now: abort it", wire.Quote(g.Group), owner), nil
		}
	}
	return Result{}, nil
}

// endTxn ends t's open transaction: a marker in every partition it wrote
// (all in this block), each partition's open transaction closed, an
// abort's range recorded, and on commit its offsets committed. t is
// changed, not stored.
func (ex *executor) endTxn(o *overlay, id string, t *byzlogv1.TxnState, commit bool) (*byzlogv1.TxnMarkers, []*appendedRun, Result, error) {
	// Each marker is a record of the block: charged to its budget, so a
	// block of ends of wide transactions waits as a block of batches does.
	if code, msg := ex.spend(0, int64(len(t.Partitions))); code != wire.CodeOK {
		return nil, nil, reject(code, "%s", msg), nil
	}
	markers := &byzlogv1.TxnMarkers{ProducerKey: t.Owner, ProducerId: t.ProducerId, Epoch: t.Epoch, Commit: commit}
	var runs []*appendedRun
	for _, tp := range t.Partitions {
		pk := partitionKey(tp.Topic, tp.Partition)
		var part byzlogv1.PartitionState
		found, err := getProto(o, CFMeta, pk, &part)
		if err != nil {
			return nil, nil, Result{}, err
		}
		if !found || !slices.ContainsFunc(part.OpenTxns, func(ot *byzlogv1.OpenTxn) bool { return ot.ProducerId == t.ProducerId }) {
			// The topic was deleted since (and perhaps created again):
			// nothing of the transaction is left there to mark.
			continue
		}
		offset := part.NextOffset
		run := &appendedRun{topic: tp.Topic, partition: tp.Partition, first: offset}
		stored := marshal(storedMarker(markers, tp.Topic, tp.Partition, offset, ex.b.Height, ex.b.TimeUnixNano))
		if !ex.countOnly {
			run.leaves = append(run.leaves, stored)
			appendRuns(offset, run.leaves, func(last uint64, v []byte) { o.put(CFRecords, recordKey(tp.Topic, tp.Partition, last), v) })
		}
		part.NextOffset++
		part.SizeBytes += uint64(len(stored))
		part.OpenTxns = slices.DeleteFunc(part.OpenTxns, func(ot *byzlogv1.OpenTxn) bool { return ot.ProducerId == t.ProducerId })
		o.put(CFMeta, pk, marshal(&part))
		if !commit {
			o.put(CFMeta, abortedKey(tp.Topic, tp.Partition, t.ProducerId, offset),
				marshal(&byzlogv1.AbortedTxn{ProducerId: t.ProducerId, FirstOffset: tp.FirstOffset, LastOffset: offset}))
			o.put(CFMeta, abortEndKey(tp.Topic, tp.Partition, offset, t.ProducerId), nil)
		}
		markers.Partitions = append(markers.Partitions, &byzlogv1.TxnMarker{Topic: tp.Topic, Partition: tp.Partition, Offset: offset})
		runs = append(runs, run)
	}
	if commit {
		for _, g := range t.Offsets {
			if err := ex.writeOffsets(o, g.Group, t.Owner, g.Offsets); err != nil {
				return nil, nil, Result{}, err
			}
		}
	}
	o.del(CFMeta, txnDueKey(t, id))
	t.Open, t.StartedUnixNano, t.Partitions, t.Offsets = false, 0, nil, nil
	t.Ended, t.EndedEpoch, t.EndedCommit = true, t.Epoch, commit
	return markers, runs, Result{}, nil
}

// storedMarker is a transaction's marker as the log stores it, written by
// Execute and rebuilt by BlockRecords from the step's outcome.
func storedMarker(m *byzlogv1.TxnMarkers, topic string, p uint32, offset uint64, height, timeUnixNano int64) *byzlogv1.StoredRecord {
	return &byzlogv1.StoredRecord{
		Topic: topic, Partition: p, Offset: offset,
		TimestampUnixNano: timeUnixNano, CreateTimeUnixNano: timeUnixNano,
		ProducerKey: m.ProducerKey, Height: height,
		KafkaProducerId: m.ProducerId, KafkaEpoch: m.Epoch,
		KafkaControl: &byzlogv1.KafkaControl{Commit: m.Commit},
	}
}

// open opens t's transaction at the block's time, if it is not open.
func (ex *executor) openTxn(o *overlay, t *byzlogv1.TxnState, id string) {
	if !t.Open {
		t.Open, t.StartedUnixNano = true, ex.b.TimeUnixNano
		o.put(CFMeta, txnDueKey(t, id), nil)
	}
}

// txnOffsets is TxnOffsetCommit: the offsets wait in t for its commit.
func (ex *executor) txnOffsets(o *overlay, id string, t *byzlogv1.TxnState, op *byzlogv1.TxnOffsets) (Result, error) {
	if r := ex.current(t, id, op.ProducerId, op.Epoch); !r.OK() {
		return r, nil
	}
	if r := checkGroupName(op.Group); !r.OK() {
		return r, nil
	}
	n := len(op.Offsets)
	for _, g := range t.Offsets {
		n += len(g.Offsets)
	}
	if len(op.Offsets) == 0 || n > wire.MaxTxnOffsets {
		return reject(wire.CodeTxnLimit, "a transaction commits 1 to %d offsets; this one would hold %d", wire.MaxTxnOffsets, n), nil
	}
	owner, err := o.Get(CFMeta, groupKey(op.Group))
	if err != nil {
		return Result{}, err
	}
	if owner != nil && !bytes.Equal(owner, t.Owner) {
		return reject(wire.CodeNotGroupOwner, "group %s belongs to key %x", wire.Quote(op.Group), owner), nil
	}
	// Checked now as a commit would be, so the commit cannot fail on them.
	rules, err := ex.rulesVersion()
	if err != nil {
		return Result{}, err
	}
	if r, err := ex.checkOffsets(o, op.Offsets, rules); err != nil || !r.OK() {
		return r, err
	}
	merged := false
	for _, g := range t.Offsets {
		if g.Group == op.Group {
			g.Offsets = mergeOffsets(g.Offsets, op.Offsets)
			merged = true
		}
	}
	if !merged {
		t.Offsets = append(t.Offsets, &byzlogv1.TxnGroupOffsets{Group: op.Group, Offsets: op.Offsets})
	}
	ex.openTxn(o, t, id)
	o.put(CFMeta, txnKey(id), marshal(t))
	return txnOutcome(t, nil, "offsets", id), nil
}

// mergeOffsets is have with add's offsets put over it, partition by
// partition, in have's order then add's.
func mergeOffsets(have, add []*byzlogv1.PartitionOffset) []*byzlogv1.PartitionOffset {
	for _, a := range add {
		i := slices.IndexFunc(have, func(h *byzlogv1.PartitionOffset) bool { return h.Topic == a.Topic && h.Partition == a.Partition })
		if i >= 0 {
			have[i] = a
		} else {
			have = append(have, a)
		}
	}
	return have
}

// txnExpire aborts a transaction open past its timeout, by block time.
func (ex *executor) txnExpire(o *overlay, id string) (Result, []*appendedRun, error) {
	rules, err := ex.rulesVersion()
	if err != nil || rules < TxnRulesVersion {
		return reject(wire.CodeUnknownTxKind, "Kafka transactions need rules version %d (query /rules)", TxnRulesVersion), nil, err
	}
	if r := checkTxnID(id); !r.OK() {
		return r, nil, nil
	}
	t, err := loadTxn(o, id)
	switch {
	case err != nil:
		return Result{}, nil, err
	case t == nil:
		return reject(wire.CodeUnknownTxn, "transactional id %s is unknown", wire.Quote(id)), nil, nil
	case !t.Open:
		return reject(wire.CodeBadTxnState, "transactional id %s has no open transaction", wire.Quote(id)), nil, nil
	case ex.b.TimeUnixNano == 0:
		return Result{Code: wire.CodeOK}, nil, nil // CheckTx: the block decides, by its time
	case ex.b.TimeUnixNano <= txnDeadline(t):
		return reject(wire.CodeBadTxnState, "transactional id %s's transaction times out at %d, after this block's time %d", wire.Quote(id), txnDeadline(t), ex.b.TimeUnixNano), nil, nil
	}
	markers, runs, r, err := ex.endTxn(o, id, t, false)
	if err != nil || !r.OK() {
		return r, nil, err
	}
	if err := ex.bumpEpoch(o, t, id); err != nil {
		return Result{}, nil, err
	}
	o.put(CFMeta, txnKey(id), marshal(t))
	return txnOutcome(t, markers, "expire", id), runs, nil
}

// txnBatch checks a transactional batch against its transaction (rules
// version 8 on) before it is applied: its producer id must be a
// transactional id's, its key the id's owner, its epoch the current one,
// the transaction not timed out, and a partition it adds within bounds.
// It returns the id and its state, or the batch's failure.
func (ex *executor) txnBatch(o *overlay, cb *checkedBatch) (string, *byzlogv1.TxnState, *byzlogv1.BatchResult, error) {
	body, k := cb.body, cb.body.Kafka
	id, t, err := txnOfProducer(o, k.ProducerId)
	if err != nil || t == nil {
		return "", nil, failBatch(body, wire.CodeUnknownTxn, "kafka producer id %d is no transactional id's: InitProducerId with a transactional id first", k.ProducerId), err
	}
	if !bytes.Equal(t.Owner, cb.sb.ProducerKey) {
		return "", nil, failBatch(body, wire.CodeNotTxnOwner, "transactional id %s belongs to key %x", wire.Quote(id), t.Owner), nil
	}
	if r := ex.current(t, id, k.ProducerId, k.Epoch); !r.OK() {
		return "", nil, failBatch(body, r.Code, "%s", r.Log), nil
	}
	if !slices.ContainsFunc(t.Partitions, func(tp *byzlogv1.TxnPartition) bool { return tp.Topic == body.Topic && tp.Partition == body.Partition }) &&
		len(t.Partitions) >= wire.MaxTxnPartitions {
		return "", nil, failBatch(body, wire.CodeTxnLimit, "transactional id %s's transaction writes %d partitions, the chain's bound", wire.Quote(id), len(t.Partitions)), nil
	}
	return id, t, nil, nil
}

// txnAppend adds a transactional batch, landing at base in part, to its
// transaction: it opens the transaction and the partition's part of it.
func (ex *executor) txnAppend(o *overlay, id string, t *byzlogv1.TxnState, body *byzlogv1.BatchBody, part *byzlogv1.PartitionState, base uint64) *byzlogv1.BatchResult {
	if !slices.ContainsFunc(t.Partitions, func(tp *byzlogv1.TxnPartition) bool { return tp.Topic == body.Topic && tp.Partition == body.Partition }) {
		if len(part.OpenTxns) >= wire.MaxOpenTxns {
			return failBatch(body, wire.CodeTxnLimit, "%s/%d has %d transactions open, the chain's bound: wait for one to end", wire.Quote(body.Topic), body.Partition, len(part.OpenTxns))
		}
		t.Partitions = append(t.Partitions, &byzlogv1.TxnPartition{Topic: body.Topic, Partition: body.Partition, FirstOffset: base})
		part.OpenTxns = append(part.OpenTxns, &byzlogv1.OpenTxn{ProducerId: t.ProducerId, FirstOffset: base})
	}
	ex.openTxn(o, t, id)
	o.put(CFMeta, txnKey(id), marshal(t))
	return nil
}

// LastStable is a partition's last stable offset: the first offset of its
// oldest open transaction, or its next offset.
func LastStable(p *byzlogv1.PartitionState) uint64 {
	lso := p.NextOffset
	for _, ot := range p.OpenTxns {
		lso = min(lso, ot.FirstOffset)
	}
	return lso
}

// lastStable is a partition's last stable offset for a query answer: set
// only while a transaction is open there, so answers stay byte for byte
// what builds before transactions give.
func lastStable(p *byzlogv1.PartitionState) *uint64 {
	if len(p.OpenTxns) == 0 {
		return nil
	}
	lso := LastStable(p)
	return &lso
}

// loadCount reads a be32 counter (0 when absent).
func loadCount(r Reader, key []byte) (uint32, error) {
	b, err := r.Get(CFMeta, key)
	if err != nil || len(b) != 4 {
		return 0, err
	}
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), nil
}

func be64Value(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}

// checkOffsets checks a transaction's offsets as an offset commit does
// (commitOffsets), before they wait for the commit: none listed twice, and
// each as checkOffset checks it.
func (ex *executor) checkOffsets(o *overlay, offsets []*byzlogv1.PartitionOffset, rules uint64) (Result, error) {
	seen := map[string]bool{}
	for i, po := range offsets {
		k := string(cat([]byte(po.Topic), []byte{0}, be32(po.Partition)))
		if seen[k] {
			return reject(wire.CodeMalformedTx, "offsets[%d]: %s/%d is listed twice", i, wire.Quote(po.Topic), po.Partition), nil
		}
		seen[k] = true
		if r, err := checkOffset(o, i, po, rules); err != nil || !r.OK() {
			return r, err
		}
	}
	return Result{}, nil
}

// writeOffsets commits a committed transaction's offsets of group for
// owner, who takes the group if nobody holds it. They were checked when
// they joined the transaction; a partition deleted since is left out.
func (ex *executor) writeOffsets(o *overlay, group string, owner []byte, offsets []*byzlogv1.PartitionOffset) error {
	have, err := o.Get(CFMeta, groupKey(group))
	if err != nil {
		return err
	}
	if have == nil {
		o.put(CFMeta, groupKey(group), owner)
	}
	for _, po := range offsets {
		topic, _, _, err := topicPartition(o, po.Topic, po.Partition)
		if err != nil {
			return err
		}
		if topic != nil {
			o.put(CFOffsets, offsetKey(group, po.Topic, po.Partition), marshal(&byzlogv1.GroupOffset{Offset: po.Offset, Metadata: po.Metadata, Height: ex.b.Height}))
		}
	}
	return nil
}

// MaxExpiriesPerBlock bounds the expiries a proposer adds to a block.
const MaxExpiriesPerBlock = 16

// DueTxns are the expiries (TxnExpire transactions) of the transactions
// that have timed out by timeUnixNano, oldest deadline first, at most
// limit: what a proposer adds to its block, so that no transaction stays
// open past its timeout for want of someone to end it.
func DueTxns(s Scanner, timeUnixNano int64, limit int) ([][]byte, error) {
	var ids []string
	err := s.Scan(CFMeta, prefixTxnDue, cat(prefixTxnDue, be64(uint64(max(timeUnixNano, 0)))), func(k, _ []byte) bool {
		if len(k) > len(prefixTxnDue)+8 {
			ids = append(ids, string(k[len(prefixTxnDue)+8:]))
		}
		return len(ids) < limit
	})
	if err != nil {
		return nil, err
	}
	txs := make([][]byte, 0, len(ids))
	for _, id := range ids {
		tx, err := wire.TxnExpireTx(id)
		if err != nil {
			return nil, err
		}
		txs = append(txs, tx)
	}
	return txs, nil
}

// abortedIn are the aborted transactions of topic/p with a record among
// recs (serialized StoredRecords in offset order): for each producer id
// with transactional records there, the ranges from the first that ends at
// or after its first such record, while they start at or before its last.
// A read is bounded by the records it returns.
func abortedIn(s Scanner, topic string, p uint32, recs [][]byte) ([]*byzlogv1.AbortedTxn, error) {
	type span struct{ first, last uint64 }
	spans := map[int64]*span{}
	var pids []int64
	for _, b := range recs {
		var r byzlogv1.StoredRecord
		if err := proto.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("stored record of %s/%d: %w", topic, p, err)
		}
		if !r.KafkaTransactional {
			continue
		}
		if sp := spans[r.KafkaProducerId]; sp != nil {
			sp.last = r.Offset
		} else {
			spans[r.KafkaProducerId] = &span{r.Offset, r.Offset}
			pids = append(pids, r.KafkaProducerId)
		}
	}
	slices.Sort(pids)
	var out []*byzlogv1.AbortedTxn
	for _, pid := range pids {
		sp := spans[pid]
		prefix := cat(prefixAborted, []byte(topic), []byte{0}, be32(p), be64(uint64(pid)))
		var scanErr error
		err := s.Scan(CFMeta, cat(prefix, be64(sp.first)), prefixEnd(prefix), func(_, v []byte) bool {
			var a byzlogv1.AbortedTxn
			if scanErr = proto.Unmarshal(v, &a); scanErr != nil {
				return false
			}
			if a.FirstOffset > sp.last {
				return false
			}
			out = append(out, &a)
			return true
		})
		if err == nil {
			err = scanErr
		}
		if err != nil {
			return nil, fmt.Errorf("aborted transactions of %s/%d: %w", topic, p, err)
		}
	}
	return out, nil
}

// queryTxns answers "/txns": one transactional id, or a page of them.
func queryTxns(s Scanner, req *byzlogv1.TxnsRequest) ([]byte, Result, error) {
	if req.TransactionalId != "" {
		t, err := loadTxn(s, req.TransactionalId)
		if err != nil {
			return nil, Result{}, err
		}
		if t == nil {
			return nil, reject(wire.CodeNotFound, "transactional id %s is unknown", wire.Quote(req.TransactionalId)), nil
		}
		return marshal(&byzlogv1.TxnList{Txns: []*byzlogv1.TxnInfo{{TransactionalId: req.TransactionalId, State: t}}}), Result{}, nil
	}
	limit := int(req.Limit)
	switch {
	case limit == 0:
		limit = defaultGroupsPage
	case limit > maxGroupsPage:
		return nil, reject(wire.CodeBadQuery, "limit (%d) must be at most %d", limit, maxGroupsPage), nil
	}
	start := prefixTxn
	if req.StartAfter != "" {
		start = cat(txnKey(req.StartAfter), []byte{0})
	}
	list := &byzlogv1.TxnList{}
	var bad error
	err := s.Scan(CFMeta, start, prefixEnd(prefixTxn), func(k, v []byte) bool {
		if len(list.Txns) == limit {
			list.More = true
			return false
		}
		var t byzlogv1.TxnState
		if bad = proto.Unmarshal(v, &t); bad != nil {
			return false
		}
		list.Txns = append(list.Txns, &byzlogv1.TxnInfo{TransactionalId: string(k[len(prefixTxn):]), State: &t})
		return true
	})
	if err = firstErr(err, bad); err != nil {
		return nil, Result{}, fmt.Errorf("list transactional ids: %w", err)
	}
	return marshal(list), Result{}, nil
}
