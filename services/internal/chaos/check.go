// Package chaos runs byzlog under faults and checks what it did. A workload
// of producers (the SDK, through gateways) and consumers (the consumer SDK,
// through NATS) records a history — every send with its outcome, every
// record a consumer polled, every record each validator holds at the end —
// while a nemesis crashes, pauses and restarts the cluster's processes.
// Check then looks for the anomalies Jepsen reports for Kafka-like logs.
// The checker is pure: it reads a History and returns a Report.
package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
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
	Forged              = "forged"
	AppHashDivergence   = "app-hash-divergence"
)

// Categories lists every anomaly, in report order. lost is the sum of its
// three parts.
var Categories = []string{Lost, Unseen, Duplicate, InconsistentOffsets, NonmonotonicPoll, PollSkip, NonmonotonicSend, Forged, AppHashDivergence}

// Report is the checker's verdict.
type Report struct {
	Sends, Acked, Unknown int
	// Counts holds each anomaly's count ("x" of "x of N"); Of holds N.
	Counts map[string]int
	Of     map[string]int
	// Examples holds up to three descriptions per anomaly.
	Examples map[string][]string
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

// Check finds every anomaly in h.
func Check(h History) Report {
	r := Report{Counts: map[string]int{}, Of: map[string]int{}, Examples: map[string][]string{}}
	sent := map[string]*Send{}
	for i := range h.Sends {
		s := &h.Sends[i]
		sent[s.Value] = s
		r.Sends++
		if s.Outcome == Acked {
			r.Acked++
		} else {
			r.Unknown++
		}
	}

	// What sits where: every value seen at each place, and every place
	// each value was seen at, over all observers.
	at := map[place]map[string][]string{}    // place -> value -> observers
	where := map[string]map[place][]string{} // value -> place -> observers
	type copyOf struct {
		value string
		at    place
	}
	signers := map[copyOf]map[string]bool{} // producer keys each copy carried
	heldBack := map[place]bool{}            // a validator's read-back holds the place
	readers := false
	for _, o := range h.Observations {
		p := place{o.Partition, o.Offset}
		if !o.Poll {
			heldBack[p], readers = true, true
		}
		if at[p] == nil {
			at[p] = map[string][]string{}
		}
		at[p][o.Value] = append(at[p][o.Value], o.Observer)
		if where[o.Value] == nil {
			where[o.Value] = map[place][]string{}
		}
		where[o.Value][p] = append(where[o.Value][p], o.Observer)
		c := copyOf{o.Value, p}
		if signers[c] == nil {
			signers[c] = map[string]bool{}
		}
		signers[c][o.Producer] = true
	}
	places := sortedKeys(at, func(a, b place) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
	})
	values := slices.Sorted(maps.Keys(where))

	// inconsistent-offsets: one place, several values; or an acknowledged
	// record seen somewhere its receipt did not name.
	r.Of[InconsistentOffsets] = len(places) + r.Acked
	for _, p := range places {
		if len(at[p]) > 1 {
			var vs []string
			for v, obs := range at[p] {
				vs = append(vs, fmt.Sprintf("%q by %s", v, strings.Join(obs, ",")))
			}
			sort.Strings(vs)
			r.add(InconsistentOffsets, "%s holds %s", p, strings.Join(vs, " and "))
		} else if readers && !heldBack[p] {
			for v, obs := range at[p] {
				r.add(InconsistentOffsets, "%s delivered %q at %s, where no validator holds a record", strings.Join(obs, ","), v, p)
			}
		}
	}
	// duplicate: one value at several places (an unknown send too: it
	// may appear, but once).
	r.Of[Duplicate] = len(values)
	for _, v := range values {
		if len(where[v]) > 1 {
			var ps []string
			for p := range where[v] {
				ps = append(ps, p.String())
			}
			sort.Strings(ps)
			r.add(Duplicate, "%q at %s", v, strings.Join(ps, ", "))
		}
	}
	// forged: a record no producer of the run sent, or signed by a key
	// other than its sender's.
	r.Of[Forged] = len(values)
	for _, v := range values {
		s, ok := sent[v]
		ps := make([]place, 0, len(where[v]))
		for p := range where[v] {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].String() < ps[j].String() })
		for _, p := range ps {
			if !ok {
				r.add(Forged, "%q at %s (seen by %s) was never sent", v, p, strings.Join(where[v][p], ","))
				continue
			}
			want := h.ProducerKeys[s.Producer]
			for key := range signers[copyOf{v, p}] {
				if key != want {
					r.add(Forged, "%q at %s is signed by %.8s…, its producer's key is %.8s…", v, p, key, want)
					break
				}
			}
		}
	}

	// lost and unseen; receipts that name another place.
	r.Of[Lost], r.Of[Unseen] = r.Acked, r.Acked
	for _, k := range []string{LostPrefix, LostMiddle, LostPostfix} {
		r.Of[k] = r.Acked
	}
	held := map[uint32][2]uint64{}         // partition -> [lowest, highest] offset a validator holds
	polled := map[string]map[string]bool{} // value -> consumers it was delivered to
	consumers := map[string]bool{}
	for _, o := range h.Observations {
		if o.Poll {
			if polled[o.Value] == nil {
				polled[o.Value] = map[string]bool{}
			}
			polled[o.Value][o.Observer] = true
			consumers[o.Observer] = true
			continue
		}
		b, ok := held[o.Partition]
		if !ok {
			b = [2]uint64{o.Offset, o.Offset}
		}
		held[o.Partition] = [2]uint64{min(b[0], o.Offset), max(b[1], o.Offset)}
	}
	for _, c := range h.Consumers {
		consumers[c] = true
	}
	consumerNames := slices.Sorted(maps.Keys(consumers))
	for i := range h.Sends {
		s := &h.Sends[i]
		if s.Outcome != Acked {
			continue
		}
		seenAt, seen := where[s.Value]
		if !seen {
			r.Counts[Lost]++
			kind := LostMiddle
			if b, ok := held[s.Partition]; !ok || s.Offset > b[1] {
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
		for _, c := range consumerNames {
			if !polled[s.Value][c] {
				r.add(Unseen, "%q acknowledged at %d@%d never reached %s", s.Value, s.Partition, s.Offset, c)
				break
			}
		}
	}

	// nonmonotonic-send: a producer's acknowledged records, in the order it
	// sent them, at decreasing offsets of one partition.
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
		for i := 1; i < len(ss); i++ {
			if ss[i].Offset <= ss[i-1].Offset {
				r.add(NonmonotonicSend, "producer %d sent %q before %q, but they are at %d@%d and %d@%d",
					k.producer, ss[i-1].Value, ss[i].Value, k.partition, ss[i-1].Offset, k.partition, ss[i].Offset)
			}
		}
	}

	// nonmonotonic-poll and poll-skip: each consumer reads each partition
	// from its start, in offset order, without gaps.
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
		if b, ok := held[k.partition]; ok {
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

	// app-hash divergence: heights at which nodes report different hashes.
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
	return r
}

// sortedKeys returns m's keys in the order compare gives.
func sortedKeys[K comparable, V any](m map[K]V, compare func(a, b K) int) []K {
	return slices.SortedFunc(maps.Keys(m), compare)
}
