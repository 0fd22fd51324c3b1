package chaos

import (
	"fmt"
	"strings"
	"testing"
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
