package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// clean is a history with no anomaly: producer 0 writes a0..a3 to
// partition 0, producer 1 writes b0, b1 to partition 1 and one send of
// unknown outcome that made it (b2) and one that did not (b3). Two
// validators hold the log; one consumer read it all in order.
func clean() History {
	h := History{ProducerKeys: map[int]string{0: "aaaa", 1: "bbbb"}, Consumers: []string{"consumer0"}, AppHashes: map[int64]map[string]string{
		1: {"node0": "h1", "node1": "h1"}, 2: {"node0": "h2", "node1": "h2"},
	}}
	for i := 0; i < 4; i++ {
		h.Sends = append(h.Sends, Send{Producer: 0, Index: i, Value: fmt.Sprintf("a%d", i), Outcome: Acked, Partition: 0, Offset: uint64(i)})
	}
	h.Sends = append(h.Sends,
		Send{Producer: 1, Index: 0, Value: "b0", Outcome: Acked, Partition: 1, Offset: 0},
		Send{Producer: 1, Index: 1, Value: "b1", Outcome: Acked, Partition: 1, Offset: 1},
		Send{Producer: 1, Index: 2, Value: "b2", Outcome: Unknown, Err: "timeout"},
		Send{Producer: 1, Index: 3, Value: "b3", Outcome: Unknown, Err: "timeout"},
	)
	log := []struct {
		p    uint32
		o    uint64
		v, k string
	}{{0, 0, "a0", "aaaa"}, {0, 1, "a1", "aaaa"}, {0, 2, "a2", "aaaa"}, {0, 3, "a3", "aaaa"},
		{1, 0, "b0", "bbbb"}, {1, 1, "b1", "bbbb"}, {1, 2, "b2", "bbbb"}}
	for _, node := range []string{"node0", "node1"} {
		for _, r := range log {
			h.Observations = append(h.Observations, Observation{Observer: node, Partition: r.p, Offset: r.o, Value: r.v, Producer: r.k})
		}
	}
	for i, r := range log {
		h.Observations = append(h.Observations, Observation{Observer: "consumer0", Poll: true, Seq: i, Partition: r.p, Offset: r.o, Value: r.v, Producer: r.k})
	}
	return h
}

// drop removes the observations for which bad is true.
func drop(h History, bad func(Observation) bool) History {
	var keep []Observation
	for _, o := range h.Observations {
		if !bad(o) {
			keep = append(keep, o)
		}
	}
	h.Observations = keep
	return h
}

// plain makes producer 0 a plain Kafka producer, its sends named retried.
func plain(h History, retried ...string) History {
	for i, s := range h.Sends {
		if s.Producer == 0 {
			h.Sends[i].Plain = true
			h.Sends[i].Retried = strings.Contains(" "+strings.Join(retried, " ")+" ", " "+s.Value+" ")
		}
	}
	return h
}

// putAt puts value v at p@o in every validator's log (and, when polled, in
// consumer0's deliveries), in place of what was there.
func putAt(h History, p uint32, o uint64, v string, polled bool) History {
	found := map[string]bool{}
	for i, ob := range h.Observations {
		if ob.Partition == p && ob.Offset == o {
			h.Observations[i].Value = v
			found[ob.Observer] = true
		}
	}
	for _, node := range []string{"node0", "node1"} {
		if !found[node] {
			h.Observations = append(h.Observations, Observation{Observer: node, Partition: p, Offset: o, Value: v, Producer: "aaaa"})
		}
	}
	if polled && !found["consumer0"] {
		h.Observations = append(h.Observations, Observation{Observer: "consumer0", Poll: true, Seq: 100 + int(o), Partition: p, Offset: o, Value: v, Producer: "aaaa"})
	}
	return h
}

// reorder gives producer 0's sends (a0..a3) the offsets at, and moves
// their records there.
func reorder(h History, at ...uint64) History {
	for i, o := range at {
		h.Sends[i].Offset = o
		h = putAt(h, 0, o, fmt.Sprintf("a%d", i), true)
	}
	return h
}

// t0 is the commits' clock: at(s) is s seconds in.
var t0 = time.Unix(1_000_000, 0)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// commit is member m's request #seq committing partition 0 at offset,
// sent at sent and answered at done (acknowledged unless failed).
func commit(m string, seq int, offset int64, sent, done float64, failed bool) Commit {
	return Commit{Member: m, Seq: seq, Broker: 1, Partition: 0, Offset: offset, Sent: at(sent), Done: at(done), Acked: !failed, Failure: failed}
}

// group adds commits and one read of partition 0's committed offset over
// from..to (final: at the end).
func group(h History, read int64, from, to float64, final bool, cs ...Commit) History {
	h.Commits = cs
	h.OffsetReads = []OffsetRead{{Start: at(from), End: at(to), Offsets: map[uint32]int64{0: read, 1: -1}, Final: final}}
	return h
}

func TestCheckFindsExactlyEachAnomaly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(History) History
		want    map[string]int // every other category must be 0
		example string
	}{
		{"clean", func(h History) History { return h }, nil, ""},
		{"lost in the middle: an acknowledged record nobody holds, a later one is there", func(h History) History {
			return drop(h, func(o Observation) bool { return o.Value == "a1" })
		}, map[string]int{Lost: 1, LostMiddle: 1, PollSkip: 1}, `"a1" acknowledged at 0@1`},
		{"lost postfix: the last acknowledged record is missing everywhere", func(h History) History {
			return drop(h, func(o Observation) bool { return o.Value == "a3" })
		}, map[string]int{Lost: 1, LostPostfix: 1}, "lost-postfix"},
		{"lost prefix: the first acknowledged record is missing everywhere", func(h History) History {
			return drop(h, func(o Observation) bool { return o.Value == "a0" })
		}, map[string]int{Lost: 1, LostPrefix: 1}, "lost-prefix"},
		{"unseen: validators hold it, the consumer never got it", func(h History) History {
			return drop(h, func(o Observation) bool { return o.Poll && o.Value == "a3" })
		}, map[string]int{Unseen: 1}, `"a3" acknowledged at 0@3 never reached consumer0`},
		{"unseen: a consumer that got nothing misses every record", func(h History) History {
			h.Consumers = append(h.Consumers, "consumer1")
			return h
		}, map[string]int{Unseen: 6}, `never reached consumer1`},
		{"duplicate: a value at two offsets", func(h History) History {
			for _, node := range []string{"node0", "node1"} {
				h.Observations = append(h.Observations, Observation{Observer: node, Partition: 0, Offset: 4, Value: "a2", Producer: "aaaa"})
			}
			return h
		}, map[string]int{Duplicate: 1}, `"a2" at 0@2, 0@4`},
		{"duplicate: an unknown send appearing twice", func(h History) History {
			for _, node := range []string{"node0", "node1"} {
				h.Observations = append(h.Observations, Observation{Observer: node, Partition: 1, Offset: 3, Value: "b2", Producer: "bbbb"})
			}
			return h
		}, map[string]int{Duplicate: 1}, `"b2" at 1@2, 1@3`},
		{"inconsistent offsets: two validators disagree on one offset", func(h History) History {
			for i, o := range h.Observations {
				if o.Observer == "node1" && o.Value == "b2" {
					h.Observations[i].Value = "b3"
				}
			}
			return h
		}, map[string]int{InconsistentOffsets: 1}, `1@2 holds "b2" by node0,consumer0 and "b3" by node1`},
		{"inconsistent offsets: a receipt names another offset", func(h History) History {
			h.Sends[5].Offset = 7
			return h
		}, map[string]int{InconsistentOffsets: 1}, `"b1" acknowledged at 1@7, seen at 1@1`},
		{"inconsistent offsets: a consumer got a record no validator holds", func(h History) History {
			h.Observations = append(h.Observations, Observation{Observer: "consumer0", Poll: true, Seq: 99, Partition: 1, Offset: 3, Value: "b3", Producer: "bbbb"})
			return h
		}, map[string]int{InconsistentOffsets: 1}, `consumer0 delivered "b3" at 1@3, where no validator holds a record`},
		{"nonmonotonic poll: the consumer went back", func(h History) History {
			h.Observations = append(h.Observations, Observation{Observer: "consumer0", Poll: true, Seq: 99, Partition: 0, Offset: 1, Value: "a1", Producer: "aaaa"})
			return h
		}, map[string]int{NonmonotonicPoll: 1}, "consumer0 polled 0@1 after 0@3"},
		{"poll skip: the consumer started past the log start", func(h History) History {
			return drop(h, func(o Observation) bool { return o.Poll && o.Value == "b0" })
		}, map[string]int{PollSkip: 1, Unseen: 1}, "first record of partition 1 is at offset 1"},
		{"nonmonotonic send: a producer's later record at an earlier offset", func(h History) History {
			h.Sends[1].Offset, h.Sends[2].Offset = 2, 1
			for i, o := range h.Observations {
				switch o.Value {
				case "a1":
					h.Observations[i].Value = "a2"
				case "a2":
					h.Observations[i].Value = "a1"
				}
			}
			return h
		}, map[string]int{NonmonotonicSend: 1}, `producer 0 sent "a1" before "a2", but they are at 0@2 and 0@1`},
		{"forged: a record nobody sent", func(h History) History {
			for _, node := range []string{"node0", "node1"} {
				h.Observations = append(h.Observations, Observation{Observer: node, Partition: 0, Offset: 4, Value: "evil", Producer: "aaaa"})
			}
			return h
		}, map[string]int{Forged: 1}, `"evil" at 0@4 (seen by node0,node1) was never sent`},
		{"forged: a record under another producer's key", func(h History) History {
			for i, o := range h.Observations {
				if o.Value == "b0" && o.Observer == "node1" {
					h.Observations[i].Producer = "cccc"
				}
			}
			return h
		}, map[string]int{Forged: 1}, `"b0" at 1@0 is signed by cccc`},
		{"clean: a Kafka delivery carries no key, the read-back does", func(h History) History {
			for i, o := range h.Observations {
				if o.Poll {
					h.Observations[i].Producer = ""
				}
			}
			return h
		}, nil, ""},
		{"forged: a keyless delivery does not hide a read-back under another key", func(h History) History {
			for i, o := range h.Observations {
				switch {
				case o.Poll:
					h.Observations[i].Producer = ""
				case o.Value == "b0" && o.Observer == "node1":
					h.Observations[i].Producer = "cccc"
				}
			}
			return h
		}, map[string]int{Forged: 1}, `"b0" at 1@0 is signed by cccc`},
		{"replica divergence: one validator's log has a hole the other's has not", func(h History) History {
			return drop(h, func(o Observation) bool { return o.Observer == "node1" && o.Value == "a1" })
		}, map[string]int{ReplicaDivergence: 1}, "node1's partition 0: a hole: offset 1 missing (others hold it), 2 follows"},
		{"replica divergence: a validator serves a log starting late", func(h History) History {
			return drop(h, func(o Observation) bool { return o.Observer == "node0" && o.Value == "b0" })
		}, map[string]int{ReplicaDivergence: 1}, "node0's partition 1: starts at 1, the others at 0"},
		{"clean: a validator behind the other is not diverging", func(h History) History {
			return drop(h, func(o Observation) bool { return o.Observer == "node1" && (o.Value == "a3" || o.Value == "b2") })
		}, nil, ""},
		{"clean: a plain producer's retried send written twice", func(h History) History {
			return putAt(plain(h, "a2"), 0, 4, "a2", true)
		}, nil, ""},
		{"duplicate: a plain producer's send acknowledged on its one attempt, written twice", func(h History) History {
			return putAt(plain(h, "a1"), 0, 4, "a2", true)
		}, map[string]int{Duplicate: 1}, `"a2" at 0@2, 0@4`},
		{"clean: a plain producer's send of unknown outcome written twice", func(h History) History {
			h.Sends[6].Plain = true
			for _, node := range []string{"node0", "node1"} {
				h.Observations = append(h.Observations, Observation{Observer: node, Partition: 1, Offset: 3, Value: "b2", Producer: "bbbb"})
			}
			return h
		}, nil, ""},
		{"nonmonotonic send: a plain producer's sends on their one attempt, out of order", func(h History) History {
			return reorder(plain(h), 0, 2, 1, 3)
		}, map[string]int{NonmonotonicSend: 1}, `producer 0 sent "a1" before "a2", but they are at 0@2 and 0@1`},
		{"clean: a plain producer's retried send behind one sent after it", func(h History) History {
			return reorder(plain(h, "a1"), 0, 2, 1, 3)
		}, nil, ""},
		{"nonmonotonic send: the later send's retry does not excuse the earlier one's order", func(h History) History {
			return reorder(plain(h, "a2"), 0, 2, 1, 3)
		}, map[string]int{NonmonotonicSend: 1}, `producer 0 sent "a1" before "a2"`},
		{"nonmonotonic send: a send on its one attempt past a later one, a retried send between them", func(h History) History {
			return reorder(plain(h, "a2"), 0, 2, 3, 1)
		}, map[string]int{NonmonotonicSend: 1}, `producer 0 sent "a1" before "a3", but they are at 0@2 and 0@1`},
		{"clean: the committed offset read at the end is the highest acknowledged", func(h History) History {
			return group(h, 40, 5, 5.1, true, commit("member0", 1, 20, 0, 1, false), commit("member0", 2, 40, 0.1, 1.1, false))
		}, nil, ""},
		{"offset regression: two commits in flight on one connection applied out of order", func(h History) History {
			return group(h, 20, 5, 5.1, true, commit("member0", 1, 20, 0, 1, false), commit("member0", 2, 40, 0.1, 1.1, false))
		}, map[string]int{OffsetRegression: 1}, "partition 0: the group's committed offset read at the end is 20, below 40, which member0 committed (#2)"},
		{"clean: a failure while two commits were in flight leaves their order open", func(h History) History {
			c := commit("member0", 2, 40, 0.1, 1.1, false)
			c.Failure = true
			return group(h, 20, 5, 5.1, true, commit("member0", 1, 20, 0, 1, false), c)
		}, nil, ""},
		{"clean: a commit that failed may land after a later one", func(h History) History {
			c := commit("member0", 2, 40, 0.1, 1.1, false)
			c.Failure = true
			return group(h, 20, 5, 5.1, true, commit("member0", 1, 20, 0, 0.5, true), c)
		}, nil, ""},
		{"clean: another member's concurrent commit of a lower offset may land last", func(h History) History {
			return group(h, 20, 5, 5.1, true, commit("member0", 1, 40, 0, 1, false), commit("member1", 1, 20, 0.5, 1.5, false))
		}, nil, ""},
		{"clean: another member's later commit of a lower offset (after a rebalance)", func(h History) History {
			return group(h, 20, 5, 5.1, true, commit("member0", 1, 40, 0, 1, false), commit("member1", 1, 20, 2, 3, false))
		}, nil, ""},
		{"offset regression: another member's commit answered before the higher one was sent", func(h History) History {
			return group(h, 20, 5, 5.1, true, commit("member1", 1, 20, 0, 0.5, false), commit("member0", 1, 40, 1, 2, false))
		}, map[string]int{OffsetRegression: 1}, "member1 #1 before member0 #1"},
		{"offset regression: a sampled read below an acknowledged commit", func(h History) History {
			return group(h, 20, 2, 2.1, false, commit("member0", 1, 20, 0, 0.5, false), commit("member0", 2, 40, 0.6, 1, false))
		}, map[string]int{OffsetRegression: 1}, "read sampled is 20, below 40"},
		{"clean: a read issued before the higher commit was acknowledged", func(h History) History {
			return group(h, 20, 0.8, 1.2, false, commit("member0", 1, 20, 0, 0.5, false), commit("member0", 2, 40, 0.6, 1, false))
		}, nil, ""},
		{"offset regression: no committed offset read after an acknowledged commit", func(h History) History {
			return group(h, -1, 5, 5.1, true, commit("member0", 1, 40, 0, 1, false))
		}, map[string]int{OffsetRegression: 1}, "is -1, below 40, which member0 committed (#1) and saw acknowledged before the read; no commit of it was sent"},
		{"app-hash divergence at one height", func(h History) History {
			h.AppHashes[2] = map[string]string{"node0": "h2", "node1": "h2-evil"}
			return h
		}, map[string]int{AppHashDivergence: 1}, "height 2: node0: h2"},
		{"double sign: evidence committed in a block", func(h History) History {
			h.Evidence, h.Heights = []string{"block 7: DuplicateVoteEvidence{VoteA: ..., VoteB: ...}"}, 40
			return h
		}, map[string]int{DoubleSign: 1}, "double-sign: 1 of 40 (block 7: DuplicateVoteEvidence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.edit(clean()))
			for _, c := range append(Categories, LostPrefix, LostMiddle, LostPostfix) {
				if got := r.Counts[c]; got != tc.want[c] {
					t.Errorf("%s = %d, want %d\n%s", c, got, tc.want[c], r.Summary())
				}
			}
			if r.Safe() != (tc.want == nil) {
				t.Errorf("Safe() = %v, want %v", r.Safe(), tc.want == nil)
			}
			if tc.example != "" && !strings.Contains(r.Summary(), tc.example) {
				t.Errorf("summary lacks %q:\n%s", tc.example, r.Summary())
			}
			if r.Sends != 8 || r.Acked != 6 || r.Unknown != 2 {
				t.Errorf("sends/acked/unknown = %d/%d/%d, want 8/6/2", r.Sends, r.Acked, r.Unknown)
			}
		})
	}
}

// TestCheckRetryDuplicates: the duplicates Kafka allows a plain producer
// are counted apart, as no anomaly.
func TestCheckRetryDuplicates(t *testing.T) {
	r := Check(putAt(plain(clean(), "a2", "a3"), 0, 4, "a2", true))
	if r.RetryDuplicates != 1 || !r.Safe() {
		t.Errorf("Check(a plain a2 retried, written twice) = %d retry duplicates, Safe() %v; want 1, true\n%s", r.RetryDuplicates, r.Safe(), r.Summary())
	}
}

func TestReportSafe(t *testing.T) {
	if r := Check(clean()); !r.Safe() || r.Summary() != "" {
		t.Fatalf("clean history: Safe() = %v, summary %q", r.Safe(), r.Summary())
	}
	h := clean()
	h.AppHashes[1]["node1"] = "other"
	if Check(h).Safe() {
		t.Fatal("a divergent app hash is reported safe")
	}
}

// txnClean is clean() with a clean transactional pipeline over its input
// log (0@0..0@3, 1@0..1@2) into two output partitions: proc0's
// transaction #1 writes input 0@0 and 0@1's outputs and is aborted on
// purpose (its records at output 0@0 and 1@0, its markers at 0@1, 1@1);
// #2 writes them again (0@2, 1@2) and commits; #3 writes the other five
// (0@4, 1@4, 0@5, 1@5, 0@6) and commits. A reader at read_committed (rc)
// and one at read_uncommitted (ru) read during the run, and both read the
// whole output at the end.
func txnClean() History {
	h := clean()
	h.TxnProcessors = []string{"proc0"}
	type out struct {
		in  place
		out place
	}
	txns := []struct {
		abort   bool
		outcome TxnOutcome
		outs    []out
		offsets map[uint32]int64
	}{
		{true, TxnAborted, []out{{place{0, 0}, place{0, 0}}, {place{0, 1}, place{1, 0}}}, map[uint32]int64{0: 2}},
		{false, TxnCommitted, []out{{place{0, 0}, place{0, 2}}, {place{0, 1}, place{1, 2}}}, map[uint32]int64{0: 2}},
		{false, TxnCommitted, []out{{place{0, 2}, place{0, 4}}, {place{0, 3}, place{1, 4}}, {place{1, 0}, place{0, 5}}, {place{1, 1}, place{1, 5}}, {place{1, 2}, place{0, 6}}},
			map[uint32]int64{0: 4, 1: 3}},
	}
	seq := map[string]int{}
	read := func(reader string, committed, final bool, at place, v string) {
		seq[reader]++
		h.TxnReads = append(h.TxnReads, TxnRead{Reader: reader, Committed: committed, Final: final, Seq: seq[reader], Partition: at.partition, Offset: at.offset, Value: v})
	}
	for i, tx := range txns {
		t := Txn{Processor: "proc0", Seq: i + 1, Abort: tx.abort, Outcome: tx.outcome, Offsets: tx.offsets}
		for _, o := range tx.outs {
			v := fmt.Sprintf("out:%d:%s", i+1, o.in)
			t.Records = append(t.Records, TxnRecord{InPartition: o.in.partition, InOffset: o.in.offset, Out: v})
			read("ru", false, false, o.out, v)
			read("ru-final", false, true, o.out, v)
			if tx.outcome == TxnCommitted {
				read("rc", true, false, o.out, v)
				read("rc-final", true, true, o.out, v)
			}
		}
		h.Txns = append(h.Txns, t)
	}
	h.TxnOffsets = map[uint32]int64{0: 4, 1: 3}
	return h
}

// dropReads removes the transactional reads for which bad is true.
func dropReads(h History, bad func(TxnRead) bool) History {
	var keep []TxnRead
	for _, rd := range h.TxnReads {
		if !bad(rd) {
			keep = append(keep, rd)
		}
	}
	h.TxnReads = keep
	return h
}

// rcReads replaces what reader rc read with values at output places.
func rcReads(h History, reads ...TxnRead) History {
	h = dropReads(h, func(rd TxnRead) bool { return rd.Reader == "rc" })
	for i, rd := range reads {
		rd.Reader, rd.Committed, rd.Seq = "rc", true, i+1
		h.TxnReads = append(h.TxnReads, rd)
	}
	return h
}

func TestCheckFindsEachTxnAnomaly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(History) History
		want    map[string]int // every other category must be 0
		example string
	}{
		{"clean", func(h History) History { return h }, nil, ""},
		{"clean: a transaction of unknown outcome, all of it visible", func(h History) History {
			h.Txns[2].Outcome, h.Txns[2].Err = TxnUnknown, "timeout"
			return h
		}, nil, ""},
		{"clean: a transaction of unknown outcome, none of it visible, its input written again", func(h History) History {
			h.Txns[0].Abort, h.Txns[0].Outcome = false, TxnUnknown
			return h
		}, nil, ""},
		{"aborted read: read committed, a record of a transaction aborted on purpose", func(h History) History {
			return rcReads(h, TxnRead{Partition: 0, Offset: 0, Value: "out:1:0@0"}, TxnRead{Partition: 0, Offset: 2, Value: "out:2:0@0"})
		}, map[string]int{AbortedRead: 1}, `rc read "out:1:0@0" committed at output 0@0, of proc0's transaction #1 (aborted, aborted on purpose)`},
		{"aborted read: asked to abort, the abort unanswered, read at the end", func(h History) History {
			h.Txns[0].Outcome = TxnUnknown
			h.TxnReads = append(h.TxnReads, TxnRead{Reader: "rc-final", Committed: true, Final: true, Seq: 0, Partition: 1, Offset: 0, Value: "out:1:0@1"})
			return h
			// rc, which did not read it, passed over it too.
		}, map[string]int{AbortedRead: 1, TornRead: 1, TxnDuplicate: 1, TxnNonmonotonicPoll: 1}, "of proc0's transaction #1 (of unknown outcome, aborted on purpose)"},
		{"torn read: one record of a committed transaction missing at the end", func(h History) History {
			return dropReads(h, func(rd TxnRead) bool { return rd.Reader == "rc-final" && rd.Value == "out:3:1@1" })
		}, map[string]int{TornRead: 1, Unprocessed: 1}, "proc0's transaction #3 (committed): 4 of its 5 records read committed at the end (at 0@4, 1@4, 0@5, 0@6), not input 1@1's"},
		{"torn read: half a transaction of unknown outcome", func(h History) History {
			h.Txns[2].Outcome = TxnUnknown
			return dropReads(h, func(rd TxnRead) bool {
				return rd.Committed && (rd.Value == "out:3:1@1" || rd.Value == "out:3:1@2")
			})
		}, map[string]int{TornRead: 1, Unprocessed: 2}, "transaction #3 (of unknown outcome): 3 of its 5 records"},
		{"lost commit: an acknowledged commit with nothing visible at the end", func(h History) History {
			return dropReads(h, func(rd TxnRead) bool { return rd.Reader == "rc-final" && strings.HasPrefix(rd.Value, "out:2:") })
			// The final read passed over both records, which the read
			// uncommitted holds.
		}, map[string]int{LostCommit: 1, Unprocessed: 2, TxnNonmonotonicPoll: 2}, "proc0's transaction #2 (committed): none of its 2 records read committed at the end"},
		{"lost commit: the group's input offset at the end below a committed transaction's", func(h History) History {
			h.TxnOffsets[0] = 2
			return h
		}, map[string]int{LostCommit: 1}, "transaction #3 (committed) committed input offset 4 of partition 0; the group's committed offset at the end is 2"},
		{"txn duplicate: an input written by two committed transactions", func(h History) History {
			h.Txns = append(h.Txns, Txn{Processor: "proc0", Seq: 4, Outcome: TxnCommitted, Offsets: map[uint32]int64{1: 3},
				Records: []TxnRecord{{InPartition: 1, InOffset: 2, Out: "out:4:1@2"}}})
			h.TxnReads = append(h.TxnReads, TxnRead{Reader: "rc-final", Committed: true, Final: true, Seq: 99, Partition: 1, Offset: 7, Value: "out:4:1@2"})
			return h
		}, map[string]int{TxnDuplicate: 1}, "input 1@2 has 2 committed outputs, at 0@6, 1@7"},
		{"txn nonmonotonic poll: a read committed reader going back", func(h History) History {
			return rcReads(h, TxnRead{Partition: 0, Offset: 4, Value: "out:3:0@2"}, TxnRead{Partition: 0, Offset: 2, Value: "out:2:0@0"})
		}, map[string]int{TxnNonmonotonicPoll: 2}, "rc read output 0@2 after 0@4"},
		{"txn nonmonotonic poll: a read committed reader passing over a committed record", func(h History) History {
			return rcReads(h, TxnRead{Partition: 0, Offset: 2, Value: "out:2:0@0"}, TxnRead{Partition: 0, Offset: 5, Value: "out:3:1@0"})
		}, map[string]int{TxnNonmonotonicPoll: 1}, "rc read output 0@5 right after 0@2, passing over the committed 0@4"},
		{"txn nonmonotonic poll: the final read misses a committed record the uncommitted read holds", func(h History) History {
			return dropReads(h, func(rd TxnRead) bool { return rd.Reader == "rc-final" && rd.Value == "out:3:1@0" })
		}, map[string]int{TxnNonmonotonicPoll: 1, TornRead: 1, Unprocessed: 1}, "rc-final read output 0@6 right after 0@4, passing over the committed 0@5"},
		{"unprocessed: an input record with no output", func(h History) History {
			for _, node := range []string{"node0", "node1"} {
				h.Observations = append(h.Observations, Observation{Observer: node, Partition: 1, Offset: 3, Value: "b3", Producer: "bbbb"})
			}
			return h
		}, map[string]int{Unprocessed: 1}, "input 1@3 has no committed output at the end"},
		{"forged: read committed, a record no transaction wrote", func(h History) History {
			h.TxnReads = append(h.TxnReads, TxnRead{Reader: "rc-final", Committed: true, Final: true, Seq: 99, Partition: 0, Offset: 7, Value: "evil"})
			return h
		}, map[string]int{Forged: 1}, `rc-final read "evil" committed at output 0@7: no transaction wrote it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.edit(txnClean()))
			for _, c := range append(Categories, LostPrefix, LostMiddle, LostPostfix) {
				if got := r.Counts[c]; got != tc.want[c] {
					t.Errorf("%s = %d, want %d\n%s", c, got, tc.want[c], r.Summary())
				}
			}
			if r.Safe() != (tc.want == nil) {
				t.Errorf("Safe() = %v, want %v", r.Safe(), tc.want == nil)
			}
			if tc.example != "" && !strings.Contains(r.Summary(), tc.example) {
				t.Errorf("summary lacks %q:\n%s", tc.example, r.Summary())
			}
		})
	}
}

// TestCheckTxnsNeedTheirWorkload: without processors the transactional
// checks find nothing, though the input has no output.
func TestCheckTxnsNeedTheirWorkload(t *testing.T) {
	h := txnClean()
	h.TxnProcessors, h.TxnReads = nil, nil
	if r := Check(h); !r.Safe() {
		t.Errorf("Check(no processors, no output read) found anomalies:\n%s", r.Summary())
	}
	h.TxnProcessors = []string{"proc0"}
	if r := Check(h); r.Counts[Unprocessed] != 7 || r.Counts[LostCommit] != 2 {
		t.Errorf("Check(processors, no output read) = %d unprocessed, %d lost commits; want 7, 2\n%s", r.Counts[Unprocessed], r.Counts[LostCommit], r.Summary())
	}
}

// TestCheckCompaction: the compaction anomalies, each from a history that
// has it and none from one that does not.
func TestCheckCompaction(t *testing.T) {
	sent := func(key, value string, offset uint64, tomb bool) KeyedSend {
		return KeyedSend{Send: Send{Value: value, Outcome: Acked, Offset: offset}, Key: key, Tombstone: tomb}
	}
	read := func(node, key, value string, offset uint64) TableRead {
		return TableRead{Node: node, Offset: offset, Key: key, Value: value, Tombstone: value == ""}
	}
	sends := []KeyedSend{sent("a", "a1", 0, false), sent("b", "b1", 1, false), sent("a", "a2", 2, false), sent("b", "", 3, true)}
	both := func(rs ...TableRead) []TableRead {
		var out []TableRead
		for _, n := range []string{"node0", "node1"} {
			for _, r := range rs {
				r.Node = n
				out = append(out, r)
			}
		}
		return out
	}
	clean := map[string]map[uint32]uint64{"node0": {0: 4}, "node1": {0: 4}}
	for _, tc := range []struct {
		name  string
		reads []TableRead
		want  map[string]int
	}{
		{"compacted", both(read("", "a", "a2", 2), read("", "b", "", 3)), nil},
		{"the latest of a lost", both(read("", "b", "", 3)), map[string]int{CompactionLost: 2}},
		{"a newer unacknowledged record", both(read("", "a", "a3", 5), read("", "b", "", 3)), nil},
		{"another value at the latest", both(read("", "a", "x", 2), read("", "b", "", 3)), map[string]int{CompactionLost: 2}},
		{"an older a kept", both(read("", "a", "a1", 0), read("", "a", "a2", 2), read("", "b", "", 3)), map[string]int{CompactionStale: 2}},
		{"one node differs", append(both(read("", "a", "a2", 2)), read("node0", "b", "", 3), read("node1", "b", "", 3), read("node1", "c", "c", 4)),
			map[string]int{ReplicaDivergence: 1}},
	} {
		r := Check(History{TableSends: sends, TableReads: tc.reads, TableClean: clean})
		for _, c := range []string{CompactionLost, CompactionStale, ReplicaDivergence} {
			if r.Counts[c] != tc.want[c] {
				t.Errorf("%s: %s = %d, want %d (%v)", tc.name, c, r.Counts[c], tc.want[c], r.Examples[c])
			}
		}
	}
}
