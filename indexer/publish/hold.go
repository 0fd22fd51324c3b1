package publish

import (
	"cmp"
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/reconcile"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// hold is a partition held back at its last stable offset (package
// layout: streams hold committed data only): its records from the first
// of a Kafka transaction not yet ended, in offset order, each pending
// until its transaction's marker says commit or abort, or ready to go out
// as published. Records go out from the front while they are ready.
//
// It is rebuilt by following: a restart publishes again from a height at
// or before its first record's (Publisher.HoldFrom keeps the acknowledged
// height there), the stream skips what it already holds, and a
// transaction's records the stream already holds are ones whose marker
// was seen, so the records of an open transaction are all held again.
//
// Memory is bounded (Config.MaxHeldBytes): past it, the hold that grew
// last goes lean. A lean hold keeps no records, only its open
// transactions, and remembers each one's outcome as its marker comes
// (Publisher.decided); once the transaction it was held back for ends, it
// asks to publish again from its first record's height (Publisher.Replay),
// and then the remembered transactions' records go out as they come.
type hold struct {
	key     string // reconcile.Key of the partition
	records []held1
	bytes   int                // the records' encoded size
	open    map[int64]*openTxn // producer id -> its transaction here
	// lean, once set, is the first record held when the hold went lean:
	// it holds no records from then on, and replay is set when the
	// transaction of lean ends.
	lean   *byzlogv1.StoredRecord
	replay bool
}

// held1 is one held record: as it will be published, and whether its
// transaction has ended.
type held1 struct {
	r       *byzlogv1.StoredRecord
	pending bool
}

// openTxn is a transaction open in a partition: its first offset there,
// and its outcome when an earlier pass learned it (nil: not known).
type openTxn struct {
	first  uint64
	height int64 // of its first record here
	commit *bool
}

// outcome is how a transaction ended, noted while its partition was
// lean, and the height of its first record in the partition: a pass from
// a later height cannot meet that record, so it needs the outcome no
// more (Publisher.pruneDecided).
type outcome struct {
	commit bool
	height int64
}

// txnKey names a transaction by partition, producer id and its first
// offset in the partition.
type txnKey struct {
	part  string
	pid   int64
	first uint64
}

// add takes r, the partition's next record (offsets in order), and
// returns the records ready to go out now, in offset order, as they are
// published: a committed transaction's records whole, an aborted one's as
// their places (layout.Aborted), markers as they are. decided holds the
// outcomes learned while a hold was lean: add uses them, and adds to them
// while h is lean.
func (h *hold) add(r *byzlogv1.StoredRecord, decided map[txnKey]outcome) []*byzlogv1.StoredRecord {
	pid := r.KafkaProducerId
	switch {
	case r.KafkaControl != nil:
		if t := h.open[pid]; t != nil {
			delete(h.open, pid)
			switch {
			case h.lean != nil:
				decided[txnKey{h.key, pid, t.first}] = outcome{commit: r.KafkaControl.Commit, height: t.height}
				h.replay = h.replay || t.first == h.lean.Offset
			case t.commit == nil:
				h.resolve(pid, r.KafkaControl.Commit)
			}
		}
	case r.KafkaTransactional:
		t := h.open[pid]
		if t == nil {
			t = &openTxn{first: r.Offset, height: r.Height}
			if o, ok := decided[txnKey{h.key, pid, t.first}]; ok {
				t.commit = &o.commit
			}
			if h.open == nil {
				h.open = map[int64]*openTxn{}
			}
			h.open[pid] = t
		}
		if t.commit == nil {
			if h.lean == nil {
				h.push(held1{r: r, pending: true})
			}
			return nil
		}
		if !*t.commit {
			r = layout.Aborted(r)
		}
	}
	switch {
	case h.lean != nil:
		return nil
	case len(h.records) == 0:
		return []*byzlogv1.StoredRecord{r}
	}
	h.push(held1{r: r})
	return h.release()
}

// push appends e to the held records.
func (h *hold) push(e held1) {
	h.records = append(h.records, e)
	h.bytes += proto.Size(e.r)
}

// resolve readies the pending records of producer pid: whole on commit,
// as their places on abort.
func (h *hold) resolve(pid int64, commit bool) {
	for i := range h.records {
		e := &h.records[i]
		if !e.pending || e.r.KafkaProducerId != pid {
			continue
		}
		if !commit {
			a := layout.Aborted(e.r)
			h.bytes += proto.Size(a) - proto.Size(e.r)
			e.r = a
		}
		e.pending = false
	}
}

// release takes the ready records from the front.
func (h *hold) release() []*byzlogv1.StoredRecord {
	n := 0
	for n < len(h.records) && !h.records[n].pending {
		n++
	}
	if n == 0 {
		return nil
	}
	out := make([]*byzlogv1.StoredRecord, n)
	for i := range out {
		out[i] = h.records[i].r
		h.bytes -= proto.Size(out[i])
	}
	rest := copy(h.records, h.records[n:])
	clear(h.records[rest:])
	h.records = h.records[:rest]
	return out
}

// goLean drops h's records, keeping its first.
func (h *hold) goLean() {
	h.lean = h.records[0].r
	clear(h.records)
	h.records, h.bytes = nil, 0
}

// first is the first held record, or nil.
func (h *hold) first() *byzlogv1.StoredRecord {
	switch {
	case h == nil:
		return nil
	case h.lean != nil:
		return h.lean
	case len(h.records) == 0:
		return nil
	}
	return h.records[0].r
}

// done reports whether h holds nothing back, waits to be published again
// nor follows an open transaction (one whose outcome a lean pass noted
// goes out as it comes, and must be known at its next record too).
func (h *hold) done() bool { return h.first() == nil && !h.replay && len(h.open) == 0 }

// pruneDecided drops the noted outcomes no pass can use: the indexer
// publishes again from no earlier than the first held record's height
// (HoldFrom), and a transaction whose first record is before it has its
// records in the streams already.
func (p *Publisher) pruneDecided() {
	from := p.HoldFrom()
	for k, o := range p.decided {
		if from == 0 || o.height < from {
			delete(p.decided, k)
		}
	}
}

// HoldFrom is the height of the block of the first record held back
// behind an open transaction, in any partition, or 0 if none is: the
// indexer acknowledges no height from it on, so that a restart publishes
// again from before it and holds the same records again.
func (p *Publisher) HoldFrom() int64 {
	from := int64(0)
	for _, h := range p.holds {
		if r := h.first(); r != nil && (from == 0 || r.Height < from) {
			from = r.Height
		}
	}
	return from
}

// Held is how many records, and how many bytes of them, are held back
// behind open transactions, and how many partitions are lean (their
// records dropped, to be published again: see hold).
func (p *Publisher) Held() (records, bytes, lean int) {
	for _, h := range p.holds {
		records += len(h.records)
		bytes += h.bytes
		if h.lean != nil {
			lean++
		}
	}
	return records, bytes, lean
}

// ErrReplay stops following so that it goes on from the acknowledged
// height (see Replay): not a failure.
var ErrReplay = errors.New("publishing again the records of a partition held back past the memory bound")

// Replay is the height to publish again from, when a partition held back
// past the memory bound can go on now that the transaction it was held
// back for has ended (0: none). The indexer stops following and follows
// again from its acknowledged height, at or before it (HoldFrom), with
// Reset; the outcomes learned meanwhile are kept.
func (p *Publisher) Replay() int64 {
	from := int64(0)
	for _, h := range p.holds {
		if h.replay && (from == 0 || h.lean.Height < from) {
			from = h.lean.Height
		}
	}
	return from
}

// bound makes the hold h lean if the records held pass MaxHeldBytes.
func (p *Publisher) bound(h *hold) {
	if h.lean != nil || len(h.records) == 0 {
		return
	}
	_, bytes, _ := p.Held()
	if bytes <= p.cfg.MaxHeldBytes {
		return
	}
	p.log.Warn().Str("partition", h.key).Int("records", len(h.records)).Int("bytes", h.bytes).Int("max_held_bytes", p.cfg.MaxHeldBytes).
		Uint64("from_offset", h.records[0].r.Offset).Int64("from_height", h.records[0].r.Height).
		Msg("records held back behind an open transaction pass the bound: dropping them, to publish again from their height once it ends")
	h.goLean()
}

// Ends is what block b, as Publish published it, moves: each partition's
// end, where its stream's records now end, and the topics b deletes. A
// partition held back ends before its first held record: at the last
// record published of it by this block, or where it ended before (it is
// left out).
func (p *Publisher) Ends(b *verify.Block) (map[string]reconcile.End, []string) {
	ends, deleted := reconcile.BlockEnds(b)
	for _, part := range b.Appended.Partitions {
		k := reconcile.Key(part.Root.Topic, part.Root.Partition)
		out := p.out[k]
		switch {
		case p.holds[k].first() == nil:
			if e, ok := ends[k]; ok && out.first != nil {
				e.FirstHeight = out.first.Height // released records of earlier blocks
				ends[k] = e
			}
		case out.last == nil:
			delete(ends, k)
		default:
			// out.first is nil when this block's records of the partition
			// were all in the stream already or held.
			ends[k] = reconcile.End{Next: out.last.Offset + 1, FirstHeight: cmp.Or(out.first, out.last).Height, LastHeight: out.last.Height, LastTime: out.last.TimestampUnixNano}
		}
	}
	return ends, deleted
}

// outRange is the first and last record of a partition that one Publish
// published or found its stream holding.
type outRange struct{ first, last *byzlogv1.StoredRecord }

// dropHolds forgets what is held of topic (deleted), and the outcomes
// learned of its transactions.
func (p *Publisher) dropHolds(topic string) {
	for k := range p.holds {
		if t, _, _ := reconcile.SplitKey(k); t == topic {
			delete(p.holds, k)
		}
	}
	for k := range p.decided {
		if t, _, _ := reconcile.SplitKey(k.part); t == topic {
			delete(p.decided, k)
		}
	}
}
