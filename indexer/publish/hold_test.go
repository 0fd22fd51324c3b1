package publish

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/internal/natstest"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/reconcile"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// TestHold: a partition's records go out in offset order, committed data
// only, held back from an open transaction's first record until its
// marker. Records are written "p" (plain), "tN" (transactional, producer
// N), "cN"/"aN" (N's commit or abort marker); what goes out as "offset",
// with "x" for an aborted record's place and "m" for a marker.
func TestHold(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []string // after each record
	}{
		{"plain", "p p", []string{"0", "1"}},
		{"commit", "t1 t1 c1 p", []string{"", "", "0 1 2m", "3"}},
		{"abort", "t1 t1 a1 p", []string{"", "", "0x 1x 2m", "3"}},
		{"plain records wait behind an open transaction", "p t1 p p c1", []string{"0", "", "", "", "1 2 3 4m"}},
		{"interleaved: the first to end waits for the first to begin", "t1 t2 t1 c2 p a1 p",
			[]string{"", "", "", "", "", "0x 1 2x 3m 4 5m", "6"}},
		{"the second ends first, the first's records go", "t1 t2 c1 t2 c2", []string{"", "", "0", "", "1 2m 3 4m"}},
		{"a producer's next transaction is not its last's", "t1 c1 t1 t2 a1 c2", []string{"", "0 1m", "", "", "2x", "3 4m 5m"}},
		{"a marker with nothing held", "c1 p", []string{"0m", "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := hold{key: "t/0"}
			decided := map[txnKey]outcome{}
			for i, w := range strings.Fields(c.in) {
				r := &byzlogv1.StoredRecord{Offset: uint64(i), Value: []byte("v")}
				setWord(r, w)
				var got []string
				for _, o := range h.add(r, decided) {
					s := fmt.Sprint(o.Offset)
					switch {
					case o.Aborted:
						if o.Value != nil {
							t.Errorf("aborted %d keeps its value", o.Offset)
						}
						s += "x"
					case o.KafkaControl != nil:
						s += "m"
					}
					got = append(got, s)
				}
				if g := strings.Join(got, " "); g != c.want[i] {
					t.Fatalf("after %s at %d: out %q, want %q", w, i, g, c.want[i])
				}
			}
			if h.first() != nil {
				t.Errorf("still held: %v", h.first())
			}
		})
	}
}

// setWord makes r what word w says (TestHold): "p" plain, "tN" producer
// N's transactional record, "cN"/"aN" its commit or abort marker.
func setWord(r *byzlogv1.StoredRecord, w string) {
	switch w[0] {
	case 't':
		r.KafkaTransactional = true
	case 'c', 'a':
		r.KafkaControl, r.Value = &byzlogv1.KafkaControl{Commit: w[0] == 'c'}, nil
	}
	if len(w) > 1 {
		fmt.Sscan(w[1:], &r.KafkaProducerId)
	}
}

// txnBlocks are blocks of topic t, partitions 0 and 1, from words as in
// TestHold, one string a height, "p:word" each.
func txnBlocks(heights ...string) []*verify.Block {
	when := time.Now().Add(-time.Minute)
	next := map[uint32]uint64{}
	var out []*verify.Block
	for i, words := range heights {
		h := int64(i + 1)
		parts := map[uint32]*core.AppendedPartition{}
		var order []uint32
		for _, pw := range strings.Fields(words) {
			var p uint32
			fmt.Sscanf(pw, "%d:", &p)
			w := pw[strings.IndexByte(pw, ':')+1:]
			r := &byzlogv1.StoredRecord{Topic: "t", Partition: p, Offset: next[p], Height: h, TimestampUnixNano: when.UnixNano(),
				ProducerKey: make([]byte, 32), Value: []byte(fmt.Sprintf("%d-%d", p, next[p]))}
			setWord(r, w)
			next[p]++
			if parts[p] == nil {
				parts[p] = &core.AppendedPartition{Root: core.PartitionRoot{Topic: "t", Partition: p, FirstOffset: r.Offset}}
				order = append(order, p)
			}
			parts[p].Records = append(parts[p].Records, r)
			parts[p].Root.Count++
		}
		b := &verify.Block{Height: h, Time: when, Hash: make([]byte, 32), AppHash: make([]byte, 32)}
		for _, p := range order {
			b.Appended.Partitions = append(b.Appended.Partitions, *parts[p])
		}
		out = append(out, b)
	}
	return out
}

// placesOf writes a stream's records as TestHold does.
func placesOf(rs []*byzlogv1.StoredRecord) string {
	var out []string
	for _, r := range rs {
		s := fmt.Sprint(r.Offset)
		switch {
		case r.Aborted:
			s += "x"
		case r.KafkaControl != nil:
			s += "m"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// TestPublishHoldsOpenTransactions: a stream gets a partition's records up
// to its last stable offset, committed data only, every offset once; the
// publisher says from which height it holds records back (the indexer
// acknowledges none from there) and where each partition's stream ends;
// and a restart that publishes again from before the first held record
// (after Reset, as the indexer's follow does) holds the same records again
// and stores nothing twice. In one-record messages and in runs.
func TestPublishHoldsOpenTransactions(t *testing.T) {
	for _, perMessage := range []int{1, layout.DefaultRunRecords} {
		t.Run(fmt.Sprint(perMessage), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p := startPublisherWith(ctx, t, perMessage)
			m := testMetrics()
			blocks := txnBlocks(
				"0:p 0:t7 1:t7 1:p",
				"0:p 1:p",
				"0:c7 1:c7",
				"0:t8 1:p 1:t8",
				"0:a8 1:a8 1:p",
			)
			publish := func(b *verify.Block) {
				t.Helper()
				futs, err := p.Publish(ctx, b, m)
				if err != nil {
					t.Fatal(err)
				}
				waitAll(t, futs)
			}
			for i, c := range []struct {
				holdFrom int64
				p0, p1   string
				next0    int64 // partition 0's end, -1 if the block leaves it out
			}{
				{1, "0", "", 1},
				{1, "0", "", -1},
				{0, "0 1 2 3m", "0 1 2 3m", 4},
				{4, "0 1 2 3m", "0 1 2 3m 4", -1},
				{0, "0 1 2 3m 4x 5m", "0 1 2 3m 4 5x 6m 7", 6},
			} {
				b := blocks[i]
				publish(b)
				if got := p.HoldFrom(); got != c.holdFrom {
					t.Errorf("after height %d: holds from %d, want %d", b.Height, got, c.holdFrom)
				}
				js := p.JetStream()
				if got0, got1 := placesOf(subjectRecords(t, js, "t", 0)), placesOf(subjectRecords(t, js, "t", 1)); got0 != c.p0 || got1 != c.p1 {
					t.Fatalf("after height %d: streams hold %q and %q, want %q and %q", b.Height, got0, got1, c.p0, c.p1)
				}
				ends, _ := p.Ends(b)
				e, ok := ends[reconcile.Key("t", 0)]
				switch {
				case c.next0 < 0 && ok:
					t.Errorf("after height %d: partition 0 ends at %d, want it left out", b.Height, e.Next)
				case c.next0 >= 0 && (!ok || e.Next != uint64(c.next0)):
					t.Errorf("after height %d: partition 0 ends at %+v (%v), want next %d", b.Height, e, ok, c.next0)
				}
				if i == 3 {
					// A restart: everything from the held record's height
					// is published again; partition 1's record before the
					// held one is in the stream, the rest held again.
					p.Reset()
					publish(blocks[3])
					if ends, _ := p.Ends(blocks[3]); ends[reconcile.Key("t", 1)].Next != 5 {
						t.Errorf("after the replay of height 4: partition 1 ends at %+v, want next 5", ends[reconcile.Key("t", 1)])
					}
				}
			}
			// A restart after it all: the streams hold what the blocks
			// make, an aborted record's place as the chain's record.
			p.Reset()
			publish(blocks[3])
			publish(blocks[4])
			if got := placesOf(subjectRecords(t, p.JetStream(), "t", 1)); got != "0 1 2 3m 4 5x 6m 7" {
				t.Fatalf("after a replay of heights 4 and 5, partition 1 holds %q", got)
			}
			for _, r := range subjectRecords(t, p.JetStream(), "t", 1) {
				if r.Aborted && (r.Value != nil || !r.KafkaTransactional) {
					t.Errorf("aborted place %d: %v", r.Offset, r)
				}
				if !r.Aborted && r.KafkaControl == nil && string(r.Value) != fmt.Sprintf("1-%d", r.Offset) {
					t.Errorf("record %d: value %q", r.Offset, r.Value)
				}
			}
		})
	}
}

// follow publishes blocks as the indexer's follow does: in height order,
// acknowledging a height only below HoldFrom, and on Replay resetting and
// going on after the acknowledged height. It returns how many replays
// there were.
func follow(ctx context.Context, t *testing.T, p *Publisher, blocks []*verify.Block) int {
	t.Helper()
	acked, replays := int64(0), 0
	for h := int64(1); h <= int64(len(blocks)); h++ {
		futs, err := p.Publish(ctx, blocks[h-1], testMetrics())
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
		next := h
		if from := p.HoldFrom(); from > 0 {
			next = max(acked, min(h, from-1))
		}
		acked = next
		if p.Replay() > 0 {
			if replays++; replays > 10 {
				t.Fatal("replaying without end")
			}
			p.Reset()
			h = acked
		}
	}
	return replays
}

// TestHeldPastTheBound: with room for almost nothing held, the partitions
// behind open transactions go lean and are published again once the
// transaction ends, and the streams end as they do with room for all.
func TestHeldPastTheBound(t *testing.T) {
	blocks := txnBlocks(
		"0:p 0:t7 1:t7 1:p 0:t9",
		"0:p 1:p 0:p",
		"0:c7 1:c7 0:p",
		"0:t8 1:p 1:t8 0:a9",
		"0:a8 1:a8 1:p",
		"0:p",
	)
	want := map[uint32]string{0: "0 1 2x 3 4 5m 6 7x 8m 9m 10", 1: "0 1 2 3m 4 5x 6m 7"}
	// Nested transactions, each past the bound, over several blocks: a
	// replay publishes the outcomes it noted as their records come, block
	// after block, so each transaction costs one replay, not one a block.
	nested := txnBlocks(
		"0:t1 1:t2",
		"0:t1 1:t2",
		"0:t1 1:t2",
		"1:c2 0:t1",
		"0:t1 1:p",
		"0:c1 1:p",
	)
	for _, bound := range []int{256 << 20, 1} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cfg := Default()
		cfg.ChainID, cfg.MaxHeldBytes = "c", bound
		p, err := New(ctx, natstest.Start(t), cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		replays := follow(ctx, t, p, nested)
		got0, got1 := placesOf(subjectRecords(t, p.JetStream(), "t", 0)), placesOf(subjectRecords(t, p.JetStream(), "t", 1))
		if got0 != "0 1 2 3 4 5m" || got1 != "0 1 2 3m 4 5" || replays > 2 {
			t.Errorf("nested, bound %d: %q and %q after %d replays, want 0 1 2 3 4 5m, 0 1 2 3m 4 5 and at most 2", bound, got0, got1, replays)
		}
		cancel()
	}
	for _, bound := range []int{256 << 20, 1} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := Default()
			cfg.ChainID = "c"
			cfg.MaxHeldBytes = bound
			p, err := New(ctx, natstest.Start(t), cfg, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			replays := follow(ctx, t, p, blocks)
			if bound == 1 && replays == 0 {
				t.Error("no replay with a bound of 1 byte")
			}
			for part, w := range want {
				if got := placesOf(subjectRecords(t, p.JetStream(), "t", part)); got != w {
					t.Errorf("partition %d holds %q, want %q (%d replays)", part, got, w, replays)
				}
			}
			if len(p.decided) != 0 || p.HoldFrom() != 0 {
				t.Errorf("left: %d outcomes, held from %d", len(p.decided), p.HoldFrom())
			}
		})
	}
}
