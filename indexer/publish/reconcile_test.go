package publish

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/indexer/internal/natstest"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/reconcile"
)

// TestRewindToWhatTheStreamsHold: a stream that lost the tail of what
// JetStream acknowledged (as a NATS server that lost power loses what it
// had not synced) makes the indexer publish again from the block of the
// last record it holds, and publishing again restores it, each record
// once; a subject that lost everything goes back to its first block.
func TestRewindToWhatTheStreamsHold(t *testing.T) {
	nc := natstest.Start(t)
	ctx := context.Background()
	cfg := Default()
	cfg.RecordsPerMessage = 1 // a message per record, dropped one by one
	cfg.ChainID = "c"
	m := testMetrics()
	p, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	ends := map[string]reconcile.End{}
	for h := int64(1); h <= 3; h++ {
		b := testBlock(h, uint64(h-1)*5, 5, old)
		futs, err := p.Publish(ctx, b, m)
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
		e, deleted := reconcile.BlockEnds(b)
		reconcile.Advance(ends, e, deleted)
	}
	if got := ends[reconcile.Key("t", 0)]; got.Next != 15 || got.FirstHeight != 1 {
		t.Fatalf("ends of t/0 after 3 blocks = %+v, want next 15 from height 1", got)
	}
	if from, why, err := reconcile.Rewind(ctx, p.js, ends, 3, 3); err != nil || from != 4 {
		t.Fatalf("rewind with every record held = %d (%s) %v, want 4", from, why, err)
	}

	// t/0 loses offsets 8..14 (heights 2 and 3), t/1 keeps all.
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, layout.StreamName("t"))
	if err != nil {
		t.Fatal(err)
	}
	dropFrom(t, st, layout.Subject("t", 0), 8)
	from, why, err := reconcile.Rewind(ctx, p.js, ends, 3, 3)
	if err != nil || from != 2 || !strings.Contains(why, "t/0 holds 8 of the 15 offsets acknowledged") {
		t.Fatalf("rewind after t/0 lost 8..14 = %d (%s) %v, want 2 (offset 7's block)", from, why, err)
	}
	p.Reset()
	for h := from; h <= 3; h++ {
		futs, err := p.Publish(ctx, testBlock(h, uint64(h-1)*5, 5, old), m)
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
	}
	for part := uint32(0); part < 2; part++ {
		if n := subjectCount(t, js, "t", part); n != 15 {
			t.Errorf("t/%d holds %d records after publishing again, want 15 (each once)", part, n)
		}
	}

	dropFrom(t, st, layout.Subject("t", 1), 0)
	if from, _, err := reconcile.Rewind(ctx, p.js, ends, 3, 3); err != nil || from != 1 {
		t.Fatalf("rewind after t/1 lost every record = %d %v, want 1 (its first block)", from, err)
	}
}

// dropFrom deletes subject's messages from offset on.
func dropFrom(t *testing.T, st jetstream.Stream, subject string, offset uint64) {
	t.Helper()
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			continue
		}
		r, err := layout.Record(m.Subject, m.Header, m.Data)
		if err == nil && m.Subject == subject && r.Offset >= offset {
			if err := st.DeleteMsg(context.Background(), seq); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestLostCursorBucketIsMadeAgain: a NATS server that lost power before it
// synced the cursor bucket's stream comes back without it; before the
// indexer resumes, the bucket is made again and the cursor saved there.
func TestLostCursorBucketIsMadeAgain(t *testing.T) {
	nc := natstest.Start(t)
	ctx := context.Background()
	cfg := Default()
	cfg.ChainID = "c"
	p, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SaveCursor(ctx, reconcile.Cursor{Height: 7}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(ctx, layout.CursorBucket); err != nil {
		t.Fatal(err)
	}
	if err := p.SaveCursor(ctx, reconcile.Cursor{Height: 8}); err == nil {
		t.Fatal("saving the cursor into a deleted bucket succeeded; the test cannot tell the bucket is made again")
	}
	p.Reset()
	if err := p.EnsureCursorBucket(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.SaveCursor(ctx, reconcile.Cursor{Height: 9}); err != nil {
		t.Fatalf("save after the bucket was made again: %v", err)
	}
	if c, err := p.Cursor(ctx); err != nil || c.Height != 9 {
		t.Fatalf("cursor = %+v, %v; want height 9", c, err)
	}
}
