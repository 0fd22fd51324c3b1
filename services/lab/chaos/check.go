// Package chaos runs byzlog under faults and checks what it did. A workload
// of producers (the SDK and Kafka clients, through gateways) and consumers
// (the consumer SDK through NATS, a Kafka consumer group) records a history
// — every send with its outcome, every record a consumer polled, every
// offset the group committed and read back, every record each validator
// holds at the end — while a nemesis crashes, pauses and restarts the
// cluster's processes. Check then looks for the anomalies Jepsen reports
// for Kafka-like logs. The checker is pure: it reads a History and returns
// a Report.
package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Outcome is what a producer learned about one send.
type Outcome int

const (
	// Acked: a commit receipt, with the record's partition and offset.
	Acked Outcome = iota
	// Unknown: an error or a timeout; the record may or may not be in the
	// log, but at most once.
	Unknown
)

// Send is one record a producer tried to write. Values are unique across
// the history; Index orders one producer's sends.
type Send struct {
	Producer  int
	Index     int
	Value     string
	Outcome   Outcome
	Partition uint32 // Acked: from the receipt
	Offset    uint64 // Acked: from the receipt
	Err       string // Unknown: what the producer saw
	// Plain: a Kafka producer without idempotence (enable.idempotence
	// false), which Kafka lets write a batch it sent again twice, and out
	// of order with the batches it sent after it.
	Plain bool
	// Retried: the producer saw a failure (an answer carrying an error, a
	// connection broken with requests unanswered) while this send was
	// unresolved, so it may have sent it more than once. A send not
	// retried was written by its one attempt, if at all.
	Retried bool
}

// Commit is one partition's offset in an OffsetCommit request a Kafka
// consumer-group member sent (a request carries every partition the member
// commits; each is one Commit).
type Commit struct {
	Member string
	// Seq orders the member's requests as they went on its connection to
	// Broker, the group's coordinator then.
	Seq       int
	Broker    int32
	Partition uint32
	Offset    int64
	// Sent is when the request was issued, Done when its answer or error
	// came (zero: neither did).
	Sent, Done time.Time
	// Acked: answered without error for this partition.
	Acked bool
	// Failure: the member saw a failure (an error answer, a connection
	// that ended) while this commit was unresolved: its place in the
	// connection's order is not known.
	Failure bool
}

// OffsetRead is the group's committed offsets as an OffsetFetch answered
// them, issued at Start and answered at End: sampled during the run, and
// once at the end (Final) after every member stopped.
type OffsetRead struct {
	Start, End time.Time
	Offsets    map[uint32]int64 // partition -> committed offset; -1: none
	Final      bool
}

// Observation is one record someone read: a consumer's poll (Seq orders
// one consumer's polls) or a validator's read-back of its log.
type Observation struct {
	Observer  string // "consumer1", "node2"
	Poll      bool   // a consumer's delivery (order matters), not a read-back
	Seq       int
	Partition uint32
	Offset    uint64
	Value     string
	Producer  string // hex of the signing key
}

// History is everything one run recorded.
type History struct {
	Sends        []Send
	Observations []Observation
	// ProducerKeys maps producer index to the hex of its public key.
	ProducerKeys map[int]string
	// Consumers names the consumers that read every partition from its
	// start: each must get every record (one that got none counts too).
	Consumers []string
	// AppHashes holds, per height, each node's app hash ("" when a node
	// could not tell): headers agreed by consensus, and each app's own.
	AppHashes map[int64]map[string]string
	// Evidence lists the misbehaviour committed in the phase's blocks
	// (CometBFT's evidence of a validator signing two votes for one
	// height and round), one description each.
	Evidence []string
	// Heights is how many blocks the phase committed.
	Heights int
	// Commits and OffsetReads are the Kafka consumer group's offset
	// commits and the reads of its committed offsets.
	Commits     []Commit
	OffsetReads []OffsetRead
	// The transactional workload (txn.go, checked by checktxn.go): its
	// processors (none: it did not run), their transactions, the output
	// records the verifiers read, and the processors' group's committed
	// offsets of the input read at the end (nil: not read).
	TxnProcessors []string
	Txns          []Txn
	TxnReads      []TxnRead
	TxnOffsets    map[uint32]int64
	// The compaction workload (compact.go): its sends, every validator's
	// compacted log and, per validator and partition, how far compaction
	// had passed.
	TableSends []KeyedSend
	TableReads []TableRead
	TableClean map[string]map[uint32]uint64
}

// Anomaly names, as Jepsen's Kafka checker calls them (plus app-hash
// divergence, which a BFT log adds).
const (
	Lost                = "lost"
	LostPrefix          = "lost-prefix"
	LostMiddle          = "lost-middle"
	LostPostfix         = "lost-postfix"
	Unseen              = "unseen"
	Duplicate           = "duplicate"
	InconsistentOffsets = "inconsistent-offsets"
	NonmonotonicPoll    = "nonmonotonic-poll"
	PollSkip            = "poll-skip"
	NonmonotonicSend    = "nonmonotonic-send"
	OffsetRegression    = "offset-regression"
	Forged              = "forged"
	AppHashDivergence   = "app-hash-divergence"
	ReplicaDivergence   = "replica-divergence"
	DoubleSign          = "double-sign"
)

// Categories lists every anomaly, in report order, the transactional
// workload's (checktxn.go) and the compaction workload's (compact.go) last. lost is the sum of its three parts.
var Categories = []string{Lost, Unseen, Duplicate, InconsistentOffsets, NonmonotonicPoll, PollSkip, NonmonotonicSend, OffsetRegression, Forged, AppHashDivergence, ReplicaDivergence, DoubleSign,
	AbortedRead, TornRead, LostCommit, TxnDuplicate, TxnNonmonotonicPoll, Unprocessed, CompactionLost, CompactionStale}

// Report is the checker's verdict.
type Report struct {
	Sends, Acked, Unknown int
	// Counts holds each anomaly's count ("x" of "x of N"); Of holds N.
	Counts map[string]int
	Of     map[string]int
	// Examples holds up to three descriptions per anomaly.
	Examples map[string][]string
	// RetryDuplicates counts the values at more than one offset that Kafka
	// allows: a plain producer's sends that were retried.
	RetryDuplicates int
}

// Safe reports whether no anomaly was found.
func (r Report) Safe() bool {
	for _, c := range Categories {
		if r.Counts[c] > 0 {
			return false
		}
	}
	return true
}

// Summary is one line per anomaly found, "x of N" with examples.
func (r Report) Summary() string {
	var b strings.Builder
	for _, c := range append(slices.Clone(Categories), LostPrefix, LostMiddle, LostPostfix) {
		if r.Counts[c] == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s: %d of %d", c, r.Counts[c], r.Of[c])
		if len(r.Examples[c]) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(r.Examples[c], "; "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (r *Report) add(kind, format string, args ...any) {
	r.Counts[kind]++
	if len(r.Examples[kind]) < 3 {
		r.Examples[kind] = append(r.Examples[kind], fmt.Sprintf(format, args...))
	}
}

type place struct {
	partition uint32
	offset    uint64
}

func (p place) String() string { return fmt.Sprintf("%d@%d", p.partition, p.offset) }

// Check finds every anomaly in h. The families run in report order, so
// each anomaly's examples are the first ones found.
func Check(h History) Report {
	r := Report{Counts: map[string]int{}, Of: map[string]int{}, Examples: map[string][]string{}}
	for _, s := range h.Sends {
		r.Sends++
		if s.Outcome == Acked {
			r.Acked++
		} else {
			r.Unknown++
		}
	}
	x := newIndex(h)
	checkPlaces(&r, x)
	checkDuplicates(&r, x)
	checkForged(&r, h, x)
	checkAcked(&r, h, x)
	checkSendOrder(&r, h)
	checkPolls(&r, h, x)
	checkOffsets(&r, h)
	checkAppHashes(&r, h)
	checkReplicas(&r, h)
	r.Of[DoubleSign] = h.Heights
	for _, e := range h.Evidence {
		r.add(DoubleSign, "%s", e)
	}
	checkTxns(&r, h)
	checkCompaction(&r, h)
	return r
}

// copyOf is one value at one place: a record someone saw.
type copyOf struct {
	value string
	at    place
}

// index is what sits where in a history, over all observers.
type index struct {
	sent     map[string]*Send              // value -> its send
	at       map[place]map[string][]string // place -> value -> observers
	where    map[string]map[place][]string // value -> place -> observers
	signers  map[copyOf]map[string]bool    // producer keys each copy carried
	heldBack map[place]bool                // a validator's read-back holds the place
	readers  bool                          // some validator read its log back
	held     map[uint32][2]uint64          // partition -> [lowest, highest] offset a validator holds
	polled   map[string]map[string]bool    // value -> consumers it was delivered to
	places   []place                       // keys of at, by partition then offset
	values   []string                      // keys of where, sorted
	// consumers names every consumer: those that polled and those that
	// should have.
	consumers []string
}

func newIndex(h History) *index {
	x := &index{
		sent:     map[string]*Send{},
		at:       map[place]map[string][]string{},
		where:    map[string]map[place][]string{},
		signers:  map[copyOf]map[string]bool{},
		heldBack: map[place]bool{},
		held:     map[uint32][2]uint64{},
		polled:   map[string]map[string]bool{},
	}
	for i := range h.Sends {
		x.sent[h.Sends[i].Value] = &h.Sends[i]
	}
	consumers := map[string]bool{}
	for _, c := range h.Consumers {
		consumers[c] = true
	}
	for _, o := range h.Observations {
		p := place{o.Partition, o.Offset}
		if o.Poll {
			if x.polled[o.Value] == nil {
				x.polled[o.Value] = map[string]bool{}
			}
			x.polled[o.Value][o.Observer] = true
			consumers[o.Observer] = true
		} else {
			x.heldBack[p], x.readers = true, true
			b, ok := x.held[o.Partition]
			if !ok {
				b = [2]uint64{o.Offset, o.Offset}
			}
			x.held[o.Partition] = [2]uint64{min(b[0], o.Offset), max(b[1], o.Offset)}
		}
		if x.at[p] == nil {
			x.at[p] = map[string][]string{}
		}
		x.at[p][o.Value] = append(x.at[p][o.Value], o.Observer)
		if x.where[o.Value] == nil {
			x.where[o.Value] = map[place][]string{}
		}
		x.where[o.Value][p] = append(x.where[o.Value][p], o.Observer)
		c := copyOf{o.Value, p}
		if x.signers[c] == nil {
			x.signers[c] = map[string]bool{}
		}
		x.signers[c][o.Producer] = true
	}
	x.places = sortedKeys(x.at, func(a, b place) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
	})
	x.values = slices.Sorted(maps.Keys(x.where))
	x.consumers = slices.Sorted(maps.Keys(consumers))
	return x
}

// checkPlaces finds inconsistent offsets by place: one place, several
// values; or a consumer delivered a record at a place no validator holds.
// (checkAcked counts the third kind: a receipt that names another place.)
func checkPlaces(r *Report, x *index) {
	r.Of[InconsistentOffsets] = len(x.places) + r.Acked
	for _, p := range x.places {
		if len(x.at[p]) > 1 {
			var vs []string
			for v, obs := range x.at[p] {
				vs = append(vs, fmt.Sprintf("%q by %s", v, strings.Join(obs, ",")))
			}
			sort.Strings(vs)
			r.add(InconsistentOffsets, "%s holds %s", p, strings.Join(vs, " and "))
		} else if x.readers && !x.heldBack[p] {
			for v, obs := range x.at[p] {
				r.add(InconsistentOffsets, "%s delivered %q at %s, where no validator holds a record", strings.Join(obs, ","), v, p)
			}
		}
	}
}

// checkDuplicates finds one value at several places (an unknown send
// too: it may appear, but once). A plain Kafka producer's send that was
// retried, or whose outcome is unknown, may appear more than once: Kafka
// writes a batch again when the answer to its first attempt was lost.
func checkDuplicates(r *Report, x *index) {
	r.Of[Duplicate] = len(x.values)
	for _, v := range x.values {
		if s := x.sent[v]; s != nil && s.Plain && (s.Retried || s.Outcome == Unknown) {
			if len(x.where[v]) > 1 {
				r.RetryDuplicates++
			}
			continue
		}
		if len(x.where[v]) > 1 {
			var ps []string
			for p := range x.where[v] {
				ps = append(ps, p.String())
			}
			sort.Strings(ps)
			r.add(Duplicate, "%q at %s", v, strings.Join(ps, ", "))
		}
	}
}

// checkForged finds records no producer of the run sent, or signed by a
// key other than their sender's.
func checkForged(r *Report, h History, x *index) {
	r.Of[Forged] = len(x.values)
	for _, v := range x.values {
		s, ok := x.sent[v]
		ps := make([]place, 0, len(x.where[v]))
		for p := range x.where[v] {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].String() < ps[j].String() })
		for _, p := range ps {
			if !ok {
				r.add(Forged, "%q at %s (seen by %s) was never sent", v, p, strings.Join(x.where[v][p], ","))
				continue
			}
			want := h.ProducerKeys[s.Producer]
			for key := range x.signers[copyOf{v, p}] {
				// A Kafka delivery carries no key (""): the validators'
				// read-back of the same place does.
				if key != want && key != "" {
					r.add(Forged, "%q at %s is signed by %.8s…, its producer's key is %.8s…", v, p, key, want)
					break
				}
			}
		}
	}
}

// checkAcked follows every acknowledged record: lost (and where in its
// partition), unseen by some consumer, or seen where its receipt did not
// name.
func checkAcked(r *Report, h History, x *index) {
	r.Of[Lost], r.Of[Unseen] = r.Acked, r.Acked
	for _, k := range []string{LostPrefix, LostMiddle, LostPostfix} {
		r.Of[k] = r.Acked
	}
	for i := range h.Sends {
		s := &h.Sends[i]
		if s.Outcome != Acked {
			continue
		}
		seenAt, seen := x.where[s.Value]
		if !seen {
			r.Counts[Lost]++
			kind := LostMiddle
			if b, ok := x.held[s.Partition]; !ok || s.Offset > b[1] {
				kind = LostPostfix
			} else if s.Offset < b[0] {
				kind = LostPrefix
			}
			r.add(kind, "%q acknowledged at %d@%d", s.Value, s.Partition, s.Offset)
			if len(r.Examples[Lost]) < 3 {
				r.Examples[Lost] = append(r.Examples[Lost], fmt.Sprintf("%q acknowledged at %d@%d (%s)", s.Value, s.Partition, s.Offset, kind))
			}
			continue
		}
		if _, ok := seenAt[place{s.Partition, s.Offset}]; !ok { // seen at several places: a duplicate
			var ps []string
			for p := range seenAt {
				ps = append(ps, p.String())
			}
			sort.Strings(ps)
			r.add(InconsistentOffsets, "%q acknowledged at %d@%d, seen at %s", s.Value, s.Partition, s.Offset, strings.Join(ps, ", "))
		}
		// unseen: in the log, but some consumer never got it.
		for _, c := range x.consumers {
			if !x.polled[s.Value][c] {
				r.add(Unseen, "%q acknowledged at %d@%d never reached %s", s.Value, s.Partition, s.Offset, c)
				break
			}
		}
	}
}

// checkSendOrder finds a producer's acknowledged record at an offset of a
// partition at or past that of a record it sent later (nonmonotonic-send):
// each record is compared with the lowest acknowledged offset of the
// producer's later records in the partition. A plain Kafka producer's
// retried send is not held to it: with several requests in flight, Kafka
// writes a batch retried after a failure behind the batches sent after it.
// Its sends that were not retried are: each went in its one request, after
// the requests of the sends before it on the same connection, and a broker
// writes a connection's requests in order.
func checkSendOrder(r *Report, h History) {
	type stream struct {
		producer  int
		partition uint32
	}
	bySender := map[stream][]*Send{}
	for i := range h.Sends {
		s := &h.Sends[i]
		if s.Outcome == Acked {
			k := stream{s.Producer, s.Partition}
			bySender[k] = append(bySender[k], s)
		}
	}
	r.Of[NonmonotonicSend] = r.Acked
	streams := sortedKeys(bySender, func(a, b stream) int {
		return cmp.Or(cmp.Compare(a.producer, b.producer), cmp.Compare(a.partition, b.partition))
	})
	for _, k := range streams {
		ss := bySender[k]
		sort.Slice(ss, func(i, j int) bool { return ss[i].Index < ss[j].Index })
		var lowest *Send // of the sends after i, the one at the lowest offset
		for i := len(ss) - 1; i >= 0; i-- {
			s := ss[i]
			if lowest != nil && s.Offset >= lowest.Offset && !(s.Plain && s.Retried) {
				r.add(NonmonotonicSend, "producer %d sent %q before %q, but they are at %d@%d and %d@%d",
					k.producer, s.Value, lowest.Value, k.partition, s.Offset, k.partition, lowest.Offset)
			}
			if lowest == nil || s.Offset < lowest.Offset {
				lowest = s
			}
		}
	}
}

// checkPolls finds nonmonotonic polls and poll skips: each consumer reads
// each partition from its start, in offset order, without gaps.
func checkPolls(r *Report, h History, x *index) {
	type cursor struct {
		consumer  string
		partition uint32
	}
	polls := map[cursor][]Observation{}
	for _, o := range h.Observations {
		if o.Poll {
			k := cursor{o.Observer, o.Partition}
			polls[k] = append(polls[k], o)
		}
	}
	cursors := sortedKeys(polls, func(a, b cursor) int {
		return cmp.Or(cmp.Compare(a.consumer, b.consumer), cmp.Compare(a.partition, b.partition))
	})
	npolls := 0
	for _, k := range cursors {
		ps := polls[k]
		npolls += len(ps)
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].Seq < ps[j].Seq })
		start := uint64(0)
		if b, ok := x.held[k.partition]; ok {
			start = b[0]
		}
		if ps[0].Offset > start {
			r.add(PollSkip, "%s's first record of partition %d is at offset %d, the log starts at %d", k.consumer, k.partition, ps[0].Offset, start)
		}
		for i := 1; i < len(ps); i++ {
			switch prev, cur := ps[i-1].Offset, ps[i].Offset; {
			case cur <= prev:
				r.add(NonmonotonicPoll, "%s polled %d@%d after %d@%d", k.consumer, k.partition, cur, k.partition, prev)
			case cur > prev+1:
				r.add(PollSkip, "%s polled %d@%d right after %d@%d", k.consumer, k.partition, cur, k.partition, prev)
			}
		}
	}
	r.Of[NonmonotonicPoll], r.Of[PollSkip] = npolls, npolls
}

// checkOffsets finds offset regressions: a read of the group's committed
// offset of a partition below the offset of a commit acknowledged before
// the read began, when no commit of the offset read may have been applied
// after that one. The committed offset is the last commit applied, and a
// commit is applied between its sending and its answer; of two commits, d
// may be applied after c unless d was answered before c was sent, or both
// went, in that order, on one member's connection to one coordinator with
// no failure while either was unresolved (a broker applies a connection's
// requests in order). So a lower offset read is Kafka's only when some
// commit of exactly that offset may have followed every higher one
// acknowledged before the read: a later commit (another member's after a
// rebalance), a concurrent one, or one whose order a failure left open.
// A read of none (-1) after an acknowledged commit is a regression too.
func checkOffsets(r *Report, h History) {
	byPartition := map[uint32][]*Commit{}
	for i := range h.Commits {
		c := &h.Commits[i]
		byPartition[c.Partition] = append(byPartition[c.Partition], c)
	}
	for _, rd := range h.OffsetReads {
		when := "sampled"
		if rd.Final {
			when = "at the end"
		}
		for _, p := range slices.Sorted(maps.Keys(rd.Offsets)) {
			r.Of[OffsetRegression]++
			v := rd.Offsets[p]
			var above []*Commit // acknowledged before the read, above v
			var sources []*Commit
			for _, c := range byPartition[p] {
				if c.Acked && c.Offset > v && !c.Done.IsZero() && c.Done.Before(rd.Start) {
					above = append(above, c)
				}
				if c.Offset == v && c.Sent.Before(rd.End) {
					sources = append(sources, c)
				}
			}
			if len(above) == 0 {
				continue
			}
			if slices.ContainsFunc(sources, func(d *Commit) bool {
				return !slices.ContainsFunc(above, func(c *Commit) bool { return !mayFollow(d, c) })
			}) {
				continue
			}
			top := slices.MaxFunc(above, func(a, b *Commit) int { return cmp.Compare(a.Offset, b.Offset) })
			why := "no commit of it was sent before the read ended"
			if len(sources) > 0 {
				d := sources[0]
				c := above[slices.IndexFunc(above, func(c *Commit) bool { return !mayFollow(d, c) })]
				why = fmt.Sprintf("each of its %d commits was applied before one of those (%s #%d before %s #%d)", len(sources), d.Member, d.Seq, c.Member, c.Seq)
			}
			r.add(OffsetRegression, "partition %d: the group's committed offset read %s is %d, below %d, which %s committed (#%d) and saw acknowledged before the read; %s",
				p, when, v, top.Offset, top.Member, top.Seq, why)
		}
	}
}

// mayFollow reports whether commit d may have been applied after commit c.
func mayFollow(d, c *Commit) bool {
	switch {
	case d == c:
		return false
	case d.Acked && !d.Done.IsZero() && d.Done.Before(c.Sent):
		return false // answered before c was sent
	case d.Member == c.Member && d.Broker == c.Broker && d.Seq < c.Seq && !d.Failure && !c.Failure:
		return false // before c on one connection
	}
	return true
}

// checkAppHashes finds heights at which nodes report different app hashes.
func checkAppHashes(r *Report, h History) {
	heights := slices.Sorted(maps.Keys(h.AppHashes))
	r.Of[AppHashDivergence] = len(heights)
	for _, height := range heights {
		byNode := h.AppHashes[height]
		distinct := map[string][]string{}
		for _, node := range slices.Sorted(maps.Keys(byNode)) {
			if hash := byNode[node]; hash != "" {
				distinct[hash] = append(distinct[hash], node)
			}
		}
		if len(distinct) > 1 {
			var parts []string
			for hash, ns := range distinct {
				parts = append(parts, fmt.Sprintf("%s: %.12s…", strings.Join(ns, ","), hash))
			}
			sort.Strings(parts)
			r.add(AppHashDivergence, "height %d: %s", height, strings.Join(parts, "; "))
		}
	}
}

// checkReplicas finds validators whose own log of a partition (their
// read-back, each node asked alone) differs from the others': a hole in it
// (an offset another node holds missing between its first and last, or a
// start past the others'), or a record at an offset where more nodes hold
// another. A node that is only behind (its log a prefix of the others') is
// not one, nor a hole every node shares (that is a lost record).
func checkReplicas(r *Report, h History) {
	logs := map[uint32]map[string]map[uint64]string{} // partition -> node -> offset -> value
	for _, o := range h.Observations {
		if o.Poll || !strings.HasPrefix(o.Observer, "node") {
			continue
		}
		if logs[o.Partition] == nil {
			logs[o.Partition] = map[string]map[uint64]string{}
		}
		if logs[o.Partition][o.Observer] == nil {
			logs[o.Partition][o.Observer] = map[uint64]string{}
		}
		logs[o.Partition][o.Observer][o.Offset] = o.Value
	}
	for _, p := range slices.Sorted(maps.Keys(logs)) {
		nodes := logs[p]
		start := uint64(math.MaxUint64)
		votes := map[uint64]map[string]int{}
		for _, log := range nodes {
			for off, v := range log {
				start = min(start, off)
				if votes[off] == nil {
					votes[off] = map[string]int{}
				}
				votes[off][v]++
			}
		}
		for _, node := range slices.Sorted(maps.Keys(nodes)) {
			r.Of[ReplicaDivergence]++
			if why := replicaFault(nodes[node], start, votes); why != "" {
				r.add(ReplicaDivergence, "%s's partition %d: %s", node, p, why)
			}
		}
	}
}

// replicaFault says how one node's log differs from the others, or "".
func replicaFault(log map[uint64]string, start uint64, votes map[uint64]map[string]int) string {
	offsets := slices.Sorted(maps.Keys(log))
	if len(offsets) == 0 {
		return ""
	}
	if offsets[0] != start {
		return fmt.Sprintf("starts at %d, the others at %d", offsets[0], start)
	}
	for i, off := range offsets {
		if want := start + uint64(i); off != want {
			if len(votes[want]) > 0 {
				return fmt.Sprintf("a hole: offset %d missing (others hold it), %d follows", want, off)
			}
			// No node holds it: a lost record, which lost counts.
			start += off - want
		}
		best, bestN := "", 0
		for v, n := range votes[off] {
			if n > bestN || (n == bestN && v < best) {
				best, bestN = v, n
			}
		}
		if v := log[off]; votes[off][v] < bestN {
			return fmt.Sprintf("%q at %d, where %d nodes hold %q", v, off, bestN, best)
		}
	}
	return ""
}

// sortedKeys returns m's keys in the order compare gives.
func sortedKeys[K comparable, V any](m map[K]V, compare func(a, b K) int) []K {
	return slices.SortedFunc(maps.Keys(m), compare)
}
