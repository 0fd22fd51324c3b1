package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The transactional half of the checker: what Jepsen's Kafka and
// Bufstream analyses look for in a consume-transform-produce pipeline
// (txn.go). Processors read an input topic at read_committed and, in one
// transaction each, write one output record per input record and commit
// the offsets they consumed; verifiers read the output at read_committed
// and read_uncommitted, during the run and once more at the end. The
// anomalies:
//
//   - aborted-read: a read_committed reader got a record of a transaction
//     that aborted (or whose processor asked to abort it: it can never
//     commit).
//   - torn-read: at the end, read_committed shows some of a transaction's
//     records and not the others (an intermediate state: its marker
//     reached some partitions only).
//   - lost-commit: a transaction whose commit was acknowledged, with none
//     of its records readable committed at the end, or the group's
//     committed input offset at the end below the one it committed.
//   - txn-duplicate: an input record with more than one output record in
//     the committed output at the end (exactly once broken).
//   - txn-nonmonotonic-poll: a read_committed reader going back within an
//     output partition, or passing over a committed record.
//   - unprocessed: an input record the validators hold with no committed
//     output at the end, once the pipeline drained.
//
// A record read committed that no transaction wrote is forged.

// TxnOutcome is how a transaction ended, as its processor learned.
type TxnOutcome int

const (
	// TxnCommitted: EndTxn's commit was acknowledged.
	TxnCommitted TxnOutcome = iota
	// TxnAborted: the transaction was aborted and the abort acknowledged
	// (asked for, or the session's own after a rebalance or a failed
	// offset commit).
	TxnAborted
	// TxnUnknown: ending it failed; it may have committed or aborted,
	// but all or nothing.
	TxnUnknown
)

func (o TxnOutcome) String() string {
	switch o {
	case TxnCommitted:
		return "committed"
	case TxnAborted:
		return "aborted"
	}
	return "of unknown outcome"
}

// TxnRecord is one input record a transaction consumed and the output
// value it wrote for it (unique in the history).
type TxnRecord struct {
	InPartition uint32
	InOffset    uint64
	Out         string
}

// Txn is one transaction a processor ran.
type Txn struct {
	Processor string
	Seq       int // orders the processor's transactions
	Records   []TxnRecord
	// Offsets are the input offsets (partition -> next offset to read)
	// committed with the transaction.
	Offsets map[uint32]int64
	// Abort: the processor ended it with an abort on purpose, so it can
	// never commit, whatever the answer.
	Abort   bool
	Outcome TxnOutcome
	Err     string // TxnUnknown: what ending it answered
}

// TxnRead is one output record a verifier read: Committed at
// read_committed, else read_uncommitted; Final in the read of the whole
// output at the end. Seq orders one reader's records.
type TxnRead struct {
	Reader    string
	Committed bool
	Final     bool
	Seq       int
	Partition uint32
	Offset    uint64
	Value     string
}

// Transactional anomalies (checktxn.go).
const (
	AbortedRead         = "aborted-read"
	TornRead            = "torn-read"
	LostCommit          = "lost-commit"
	TxnDuplicate        = "txn-duplicate"
	TxnNonmonotonicPoll = "txn-nonmonotonic-poll"
	Unprocessed         = "unprocessed"
)

// txnIndex is a transactional history's outputs and the committed output
// at the end.
type txnIndex struct {
	txns    []*Txn                // by processor, then sequence
	wrote   map[string]*Txn       // output value -> its transaction
	input   map[string]place      // output value -> the input it derives from
	final   map[string][]place    // output value -> where the final read_committed read had it
	visible map[uint32][]uint64   // output partition -> offsets of committed records, sorted
	inputs  []place               // every input record the validators hold, sorted
	outputs map[place][]place     // input -> places of its committed outputs
	reads   map[string][]*TxnRead // read_committed reader -> its reads
}

func newTxnIndex(h History) *txnIndex {
	x := &txnIndex{wrote: map[string]*Txn{}, input: map[string]place{}, final: map[string][]place{},
		visible: map[uint32][]uint64{}, outputs: map[place][]place{}, reads: map[string][]*TxnRead{}}
	for i := range h.Txns {
		t := &h.Txns[i]
		x.txns = append(x.txns, t)
		for _, rec := range t.Records {
			x.wrote[rec.Out], x.input[rec.Out] = t, place{rec.InPartition, rec.InOffset}
		}
	}
	slices.SortFunc(x.txns, func(a, b *Txn) int { return cmp.Or(cmp.Compare(a.Processor, b.Processor), cmp.Compare(a.Seq, b.Seq)) })
	committed := map[place]bool{}
	for i := range h.TxnReads {
		rd := &h.TxnReads[i]
		p := place{rd.Partition, rd.Offset}
		switch {
		case rd.Committed && rd.Final:
			x.final[rd.Value] = append(x.final[rd.Value], p)
			committed[p] = true
		case rd.Final: // read_uncommitted: committed if its transaction is
			if t := x.wrote[rd.Value]; t != nil && t.Outcome == TxnCommitted && !t.Abort {
				committed[p] = true
			}
		}
		if rd.Committed {
			x.reads[rd.Reader] = append(x.reads[rd.Reader], rd)
		}
	}
	for p := range committed {
		x.visible[p.partition] = append(x.visible[p.partition], p.offset)
	}
	for _, offs := range x.visible {
		slices.Sort(offs)
	}
	for v, ps := range x.final {
		if in, ok := x.input[v]; ok {
			x.outputs[in] = append(x.outputs[in], ps...)
		}
	}
	held := map[place]bool{}
	for _, o := range h.Observations {
		if !o.Poll && strings.HasPrefix(o.Observer, "node") {
			held[place{o.Partition, o.Offset}] = true
		}
	}
	x.inputs = sortedKeys(held, comparePlaces)
	return x
}

func comparePlaces(a, b place) int {
	return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
}

// never reports whether t can never be read committed.
func (t *Txn) never() bool { return t.Abort || t.Outcome == TxnAborted }

func (t *Txn) String() string {
	s := fmt.Sprintf("%s's transaction #%d (%s", t.Processor, t.Seq, t.Outcome)
	if t.Abort {
		s += ", aborted on purpose"
	}
	return s + ")"
}

// checkTxns finds the transactional anomalies of h's transactional
// workload, if it ran one.
func checkTxns(r *Report, h History) {
	if len(h.TxnProcessors) == 0 {
		return
	}
	x := newTxnIndex(h)
	checkAbortedReads(r, x)
	checkTxnVisibility(r, h, x)
	checkExactlyOnce(r, x)
	checkTxnPolls(r, x)
}

// checkAbortedReads finds records read committed whose transaction
// aborted, and records no transaction wrote.
func checkAbortedReads(r *Report, x *txnIndex) {
	for _, reader := range slices.Sorted(maps.Keys(x.reads)) {
		for _, rd := range x.reads[reader] {
			r.Of[AbortedRead]++
			r.Of[Forged]++
			t := x.wrote[rd.Value]
			switch {
			case t == nil:
				r.add(Forged, "%s read %q committed at output %d@%d: no transaction wrote it", reader, rd.Value, rd.Partition, rd.Offset)
			case t.never():
				r.add(AbortedRead, "%s read %q committed at output %d@%d, of %s", reader, rd.Value, rd.Partition, rd.Offset, t)
			}
		}
	}
}

// checkTxnVisibility finds transactions partly visible committed at the
// end (torn), and committed ones with nothing visible or their input
// offsets not committed (lost).
func checkTxnVisibility(r *Report, h History, x *txnIndex) {
	for _, t := range x.txns {
		r.Of[TornRead]++
		var seen, unseen []string
		for _, rec := range t.Records {
			if ps := x.final[rec.Out]; len(ps) > 0 {
				seen = append(seen, ps[0].String())
			} else {
				unseen = append(unseen, fmt.Sprintf("input %d@%d's", rec.InPartition, rec.InOffset))
			}
		}
		if len(seen) > 0 && len(unseen) > 0 {
			r.add(TornRead, "%s: %d of its %d records read committed at the end (at %s), not %s", t, len(seen), len(t.Records), short(seen), short(unseen))
		}
		if t.Outcome != TxnCommitted || t.Abort {
			continue
		}
		r.Of[LostCommit]++
		if len(seen) == 0 {
			r.add(LostCommit, "%s: none of its %d records read committed at the end", t, len(t.Records))
			continue
		}
		if h.TxnOffsets == nil {
			continue // not read: the run's error says so
		}
		for _, p := range slices.Sorted(maps.Keys(t.Offsets)) {
			if got := h.TxnOffsets[p]; got < t.Offsets[p] {
				r.add(LostCommit, "%s committed input offset %d of partition %d; the group's committed offset at the end is %d", t, t.Offsets[p], p, got)
				break
			}
		}
	}
}

// checkExactlyOnce finds input records with no committed output, or more
// than one, at the end.
func checkExactlyOnce(r *Report, x *txnIndex) {
	for _, in := range x.inputs {
		r.Of[Unprocessed]++
		if len(x.outputs[in]) == 0 {
			r.add(Unprocessed, "input %s has no committed output at the end", in)
		}
	}
	ins := sortedKeys(x.outputs, comparePlaces)
	r.Of[TxnDuplicate] = len(ins)
	for _, in := range ins {
		if outs := x.outputs[in]; len(outs) > 1 {
			var at []string
			for _, p := range outs {
				at = append(at, p.String())
			}
			slices.Sort(at)
			r.add(TxnDuplicate, "input %s has %d committed outputs, at %s", in, len(outs), strings.Join(at, ", "))
		}
	}
}

// checkTxnPolls finds read_committed readers going back within an output
// partition or passing over a committed record (one read committed at
// the end, or read uncommitted of a transaction that committed).
func checkTxnPolls(r *Report, x *txnIndex) {
	for _, reader := range slices.Sorted(maps.Keys(x.reads)) {
		byPartition := map[uint32][]*TxnRead{}
		for _, rd := range x.reads[reader] {
			byPartition[rd.Partition] = append(byPartition[rd.Partition], rd)
		}
		for _, p := range slices.Sorted(maps.Keys(byPartition)) {
			rds := byPartition[p]
			slices.SortStableFunc(rds, func(a, b *TxnRead) int { return cmp.Compare(a.Seq, b.Seq) })
			r.Of[TxnNonmonotonicPoll] += len(rds)
			vis := x.visible[p]
			if len(vis) > 0 && vis[0] < rds[0].Offset {
				r.add(TxnNonmonotonicPoll, "%s's first committed record of output partition %d is at %d, a committed record is at %d", reader, p, rds[0].Offset, vis[0])
			}
			for i := 1; i < len(rds); i++ {
				prev, cur := rds[i-1].Offset, rds[i].Offset
				if cur <= prev {
					r.add(TxnNonmonotonicPoll, "%s read output %d@%d after %d@%d", reader, p, cur, p, prev)
					continue
				}
				// The first committed offset past prev must be cur.
				if j, _ := slices.BinarySearch(vis, prev+1); j < len(vis) && vis[j] < cur {
					r.add(TxnNonmonotonicPoll, "%s read output %d@%d right after %d@%d, passing over the committed %d@%d", reader, p, cur, p, prev, p, vis[j])
				}
			}
		}
	}
}

// short lists up to four of ss, and how many more.
func short(ss []string) string {
	if len(ss) <= 4 {
		return strings.Join(ss, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ss[:4], ", "), len(ss)-4)
}
