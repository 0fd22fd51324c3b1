package indexer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/verify"
)

// TestRewindToWhatTheStreamsHold: a stream that lost the tail of what
// JetStream acknowledged (as a NATS server that lost power loses what it
// had not synced) makes the indexer publish again from the block of the
// last record it holds, and publishing again restores it, each record
// once; a subject that lost everything goes back to its first block.
func TestRewindToWhatTheStreamsHold(t *testing.T) {
	nc := startNATS(t)
	ctx := context.Background()
	cfg := Default()
	cfg.RecordsPerMessage = 1 // a message per record, dropped one by one
	cfg.ChainID = "c"
	m := newMetrics()
	p, err := newPublisher(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	ends := map[string]partEnd{}
	for h := int64(1); h <= 3; h++ {
		b := testBlock(h, uint64(h-1)*5, 5, old)
		futs, err := p.publish(ctx, b, m)
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
		e, deleted := blockEnds(b)
		advance(ends, e, deleted)
	}
	if got := ends[partKey("t", 0)]; got.Next != 15 || got.FirstHeight != 1 {
		t.Fatalf("ends of t/0 after 3 blocks = %+v, want next 15 from height 1", got)
	}
	if from, why, err := p.rewind(ctx, ends, 3); err != nil || from != 4 {
		t.Fatalf("rewind with every record held = %d (%s) %v, want 4", from, why, err)
	}

	// t/0 loses offsets 8..14 (heights 2 and 3), t/1 keeps all.
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, layout.StreamName("t"))
	if err != nil {
		t.Fatal(err)
	}
	dropFrom(t, st, layout.Subject("t", 0), 8)
	from, why, err := p.rewind(ctx, ends, 3)
	if err != nil || from != 2 || !strings.Contains(why, "t/0 holds 8 of the 15 offsets acknowledged") {
		t.Fatalf("rewind after t/0 lost 8..14 = %d (%s) %v, want 2 (offset 7's block)", from, why, err)
	}
	p.reset()
	for h := from; h <= 3; h++ {
		futs, err := p.publish(ctx, testBlock(h, uint64(h-1)*5, 5, old), m)
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
	if from, _, err := p.rewind(ctx, ends, 3); err != nil || from != 1 {
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

func TestParseCursor(t *testing.T) {
	for in, want := range map[string]int64{"7": 7, `{"height":9,"ends":{"t\u00000":{"next":3,"first_height":2}}}`: 9} {
		c, err := parseCursor([]byte(in))
		if err != nil || c.Height != want {
			t.Errorf("parseCursor(%s) = %+v %v, want height %d", in, c, err, want)
		}
	}
	if c, _ := parseCursor([]byte(`{"height":9,"ends":{"t\u00000":{"next":3,"first_height":2}}}`)); c.Ends[partKey("t", 0)].Next != 3 {
		t.Errorf("parseCursor lost the ends: %+v", c)
	}
	for _, bad := range []string{"", "x", `{"height":-1}`} {
		if _, err := parseCursor([]byte(bad)); err == nil {
			t.Errorf("parseCursor(%q) = nil error", bad)
		}
	}
}

// TestLostCursorBucketIsMadeAgain: a NATS server that lost power before it
// synced the cursor bucket's stream comes back without it; before the
// indexer resumes, the bucket is made again and the cursor saved there.
func TestLostCursorBucketIsMadeAgain(t *testing.T) {
	nc := startNATS(t)
	ctx := context.Background()
	cfg := Default()
	cfg.ChainID = "c"
	p, err := newPublisher(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.saveCursor(ctx, savedCursor{Height: 7}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(ctx, layout.CursorBucket); err != nil {
		t.Fatal(err)
	}
	if err := p.saveCursor(ctx, savedCursor{Height: 8}); err == nil {
		t.Fatal("saving the cursor into a deleted bucket succeeded; the test cannot tell the bucket is made again")
	}
	p.reset()
	if err := p.ensureCursorBucket(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.saveCursor(ctx, savedCursor{Height: 9}); err != nil {
		t.Fatalf("save after the bucket was made again: %v", err)
	}
	if c, err := p.cursor(ctx); err != nil || c.Height != 9 {
		t.Fatalf("cursor = %+v, %v; want height 9", c, err)
	}
}

// TestNewRefusesAReconnectBuffer: a connection that sends, after a
// reconnect, what was published while it was down would put later records
// in a stream before the ones the server lost.
func TestNewRefusesAReconnectBuffer(t *testing.T) {
	s := startServer(t)
	cfg := Default()
	cfg.Nodes, cfg.ChainID, cfg.Trust = []string{"https://a:1", "https://b:1"}, "c", verify.Trust{Height: 1, Hash: make([]byte, 32)}
	for _, tc := range []struct {
		name string
		opts []nats.Option
		ok   bool
	}{
		{"nats.go's default buffer", nil, false},
		{"a buffer set", []nats.Option{nats.ReconnectBufSize(1 << 20)}, false},
		{"no buffer", []nats.Option{nats.ReconnectBufSize(-1)}, true},
	} {
		nc, err := nats.Connect(s.ClientURL(), tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(cfg, nc, zerolog.Nop())
		nc.Close()
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errNATSBuffers)) {
			t.Errorf("%s: New = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
