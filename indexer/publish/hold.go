package publish

import (
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
type hold struct {
	records []held1
	open    map[int64]int // producer id -> its pending records here
}

// held1 is one held record: as it will be published, and whether its
// transaction has ended.
type held1 struct {
	r       *byzlogv1.StoredRecord
	pending bool
}

// add takes r, the partition's next record (offsets in order), and
// returns the records ready to go out now, in offset order, as they are
// published: a committed transaction's records whole, an aborted one's as
// their places (layout.Aborted), markers as they are.
func (h *hold) add(r *byzlogv1.StoredRecord) []*byzlogv1.StoredRecord {
	switch {
	case r.KafkaControl != nil:
		if n := h.open[r.KafkaProducerId]; n > 0 {
			for i := range h.records {
				e := &h.records[i]
				if !e.pending || e.r.KafkaProducerId != r.KafkaProducerId {
					continue
				}
				if !r.KafkaControl.Commit {
					e.r = layout.Aborted(e.r)
				}
				e.pending = false
			}
			delete(h.open, r.KafkaProducerId)
		}
		h.records = append(h.records, held1{r: r})
	case r.KafkaTransactional:
		if h.open == nil {
			h.open = map[int64]int{}
		}
		h.open[r.KafkaProducerId]++
		h.records = append(h.records, held1{r: r, pending: true})
	default:
		if len(h.records) == 0 {
			return []*byzlogv1.StoredRecord{r}
		}
		h.records = append(h.records, held1{r: r})
	}
	return h.release()
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
	}
	rest := copy(h.records, h.records[n:])
	clear(h.records[rest:])
	h.records = h.records[:rest]
	return out
}

// first is the first held record, or nil.
func (h *hold) first() *byzlogv1.StoredRecord {
	if h == nil || len(h.records) == 0 {
		return nil
	}
	return h.records[0].r
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

// Held counts the records held back behind open transactions.
func (p *Publisher) Held() int {
	n := 0
	for _, h := range p.holds {
		n += len(h.records)
	}
	return n
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
			ends[k] = reconcile.End{Next: out.last.Offset + 1, FirstHeight: out.first.Height, LastHeight: out.last.Height, LastTime: out.last.TimestampUnixNano}
		}
	}
	return ends, deleted
}

// outRange is the first and last record of a partition that one Publish
// published or found its stream holding.
type outRange struct{ first, last *byzlogv1.StoredRecord }

// dropHolds forgets what is held of topic (deleted).
func (p *Publisher) dropHolds(topic string) {
	for k := range p.holds {
		if t, _, _ := reconcile.SplitKey(k); t == topic {
			delete(p.holds, k)
		}
	}
}
