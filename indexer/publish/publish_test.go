package publish

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/internal/natstest"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/reconcile"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/prometheus/client_golang/prometheus"
)

// testBlock appends n records to t/0 and t/1 starting at offset first.
func testBlock(h int64, first uint64, n int, when time.Time) *verify.Block {
	var a core.Appended
	for p := uint32(0); p < 2; p++ {
		part := core.AppendedPartition{Root: core.PartitionRoot{Topic: "t", Partition: p, FirstOffset: first, Count: uint32(n)}}
		for i := 0; i < n; i++ {
			part.Records = append(part.Records, &byzlogv1.StoredRecord{Topic: "t", Partition: p, Offset: first + uint64(i), Height: h,
				Value: []byte(fmt.Sprintf("%d-%d", p, first+uint64(i))), ProducerKey: make([]byte, 32), TimestampUnixNano: when.UnixNano()})
		}
		a.Partitions = append(a.Partitions, part)
	}
	return &verify.Block{Height: h, Time: when, Hash: make([]byte, 32), AppHash: make([]byte, 32), Appended: a}
}

func waitAll(t *testing.T, futs []jetstream.PubAckFuture) {
	t.Helper()
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("no publish ack")
		}
	}
}

// checkDense checks that topic's partition holds offsets 0..n-1, each
// once, in order, with the values testBlock and TestPublishersRacing give
// them.
func checkDense(t *testing.T, js jetstream.JetStream, topic string, p uint32, n uint64) {
	t.Helper()
	cons, err := js.OrderedConsumer(context.Background(), layout.StreamName(topic), jetstream.OrderedConsumerConfig{FilterSubjects: []string{layout.Subject(topic, p)}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := subjectMessages(t, js, topic, p)
	batch, err := cons.Fetch(int(msgs), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(0)
	for msg := range batch.Messages() {
		rs, err := layout.Records(msg.Subject(), msg.Headers(), msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Offset != want || string(r.Value) != fmt.Sprintf("%d-%d", p, want) {
				t.Fatalf("partition %d: record %d is offset %d %q", p, want, r.Offset, r.Value)
			}
			want++
		}
	}
	if got := subjectCount(t, js, topic, p); want != n || got != n {
		t.Fatalf("partition %d: read %d of %d records, want %d", p, want, got, n)
	}
}

// subjectMessages is how many messages the topic's stream holds on the
// partition's subject.
func subjectMessages(t *testing.T, js jetstream.JetStream, topic string, p uint32) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), layout.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(layout.Subject(topic, p)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[layout.Subject(topic, p)]
}

// subjectCount is how many records the topic's stream holds on the
// partition's subject, in one-record and run messages.
func subjectCount(t *testing.T, js jetstream.JetStream, topic string, p uint32) uint64 {
	t.Helper()
	return uint64(len(subjectRecords(t, js, topic, p)))
}

// subjectRecords are the records the topic's stream holds on the
// partition's subject, in stream order.
func subjectRecords(t *testing.T, js jetstream.JetStream, topic string, p uint32) []*byzlogv1.StoredRecord {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, layout.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	subject := layout.Subject(topic, p)
	var out []*byzlogv1.StoredRecord
	for seq := uint64(1); ; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		rs, err := layout.Records(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("%s sequence %d: %v", subject, m.Sequence, err)
		}
		out = append(out, rs...)
		seq = m.Sequence + 1
	}
}

// TestPublishExactlyOnce replays blocks the way a restarted or second
// indexer does and checks each record is stored once, in offset order.
func TestPublishExactlyOnce(t *testing.T) {
	nc := natstest.Start(t)
	ctx := context.Background()
	cfg := Default()
	cfg.ChainID = "c"
	m := testMetrics()
	newPub := func() *Publisher {
		p, err := New(ctx, nc, cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := time.Now().Add(-time.Minute)
	a := newPub()
	for h := int64(1); h <= 3; h++ {
		futs, err := a.Publish(ctx, testBlock(h, uint64(h-1)*5, 5, old), m)
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
	}
	if err := a.SaveCursor(ctx, reconcile.Cursor{Height: 2}); err != nil {
		t.Fatal(err)
	}
	// A restart from cursor 2 replays block 3; a second indexer without a
	// cursor replays everything.
	b := newPub()
	if c, err := b.Cursor(ctx); err != nil || c.Height != 2 {
		t.Fatalf("cursor = %+v %v, want height 2", c, err)
	}
	futs, err := b.Publish(ctx, testBlock(3, 10, 5, old), m)
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, futs)
	cfg2 := cfg
	cfg2.ID = "second"
	c, err := New(ctx, nc, cfg2, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for h := int64(1); h <= 4; h++ {
		futs, err := c.Publish(ctx, testBlock(h, uint64(h-1)*5, 5, old), m)
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
	}
	js, _ := jetstream.New(nc)
	for p := uint32(0); p < 2; p++ {
		if n := subjectCount(t, js, "t", p); n != 20 {
			t.Errorf("partition %d holds %d messages, want 20 (4 blocks of 5, once each)", p, n)
		}
	}
	// In offset order, dense.
	checkDense(t, js, "t", 1, 20)
	bs, err := js.Stream(ctx, layout.BlocksStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := bs.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 4 {
		t.Errorf("blocks stream holds %d messages, want 4", info.State.Msgs)
	}
}

// TestPublishAfterAnotherIndexer: b publishes block 1 and so knows where
// both partitions go on; a publishes blocks 2 and 3; then b, which has not
// restarted, publishes them too, as a second indexer that stalled does.
// Nothing b believes lets it store a record twice: its messages expect the
// sequence b's own publishes ended at, JetStream refuses them, and b, after
// reading the streams again, skips what a stored. (With message ids, this
// held only while JetStream remembered a's: a stall past the duplicate
// window stored them twice.)
func TestPublishAfterAnotherIndexer(t *testing.T) {
	nc := natstest.Start(t)
	ctx := context.Background()
	cfg := Default()
	cfg.ChainID = "c"
	m := testMetrics()
	a, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ID = "b"
	b, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	pub := func(p *Publisher, h int64) {
		t.Helper()
		futs, err := p.Publish(ctx, testBlock(h, uint64(h-1)*5, 5, now), m)
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
	}
	pub(b, 1)
	pub(a, 2)
	pub(a, 3)
	futs, err := b.Publish(ctx, testBlock(2, 5, 5, now), m)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if !WrongLastSequence(err) {
				t.Fatalf("b's publish of block 2 failed with %v, want a wrong last sequence", err)
			}
			refused++
		case <-time.After(10 * time.Second):
			t.Fatal("no publish ack")
		}
	}
	if refused != len(futs) {
		t.Errorf("JetStream refused %d of b's %d messages, want all", refused, len(futs))
	}
	b.Reset() // as the indexer does after any error
	pub(b, 2)
	pub(b, 3)
	pub(b, 4)
	js, _ := jetstream.New(nc)
	for p := uint32(0); p < 2; p++ {
		if n := subjectCount(t, js, "t", p); n != 20 {
			t.Errorf("partition %d holds %d messages, want 20", p, n)
		}
	}
}

// TestPublishersRacing runs three publishers over the same 60 blocks at
// once, each pipelining a few blocks ahead of its acknowledgements and
// going back to its last acknowledged block on any refusal, as the
// indexer does. Blocks touch different partitions, so what a publisher
// read of one partition can be old when it next publishes there. Every
// partition must hold each offset once, in order, and the blocks stream
// each height once, in order.
func TestPublishersRacing(t *testing.T) {
	nc := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const blocks, per, parts = 60, 7, 3
	now := time.Now()
	chain := make([]*verify.Block, blocks+1)
	var ends [parts]uint64
	for h := int64(1); h <= blocks; h++ {
		b := &verify.Block{Height: h, Time: now, Hash: make([]byte, 32), AppHash: make([]byte, 32)}
		for p := uint32(0); p < parts; p++ {
			if (h+int64(p))%3 == 0 && h > 1 {
				continue // p has no records in this block
			}
			part := core.AppendedPartition{Root: core.PartitionRoot{Topic: "t", Partition: p, FirstOffset: ends[p], Count: per}}
			for i := uint64(0); i < per; i++ {
				part.Records = append(part.Records, &byzlogv1.StoredRecord{Topic: "t", Partition: p, Offset: ends[p] + i, Height: h,
					Value: []byte(fmt.Sprintf("%d-%d", p, ends[p]+i)), ProducerKey: make([]byte, 32), TimestampUnixNano: now.UnixNano()})
			}
			ends[p] += per
			b.Appended.Partitions = append(b.Appended.Partitions, part)
		}
		chain[h] = b
	}
	errs := make(chan error, 3)
	conflicts := make(chan int, 3)
	for w := 0; w < 3; w++ {
		cfg := Default()
		cfg.ChainID, cfg.ID = "c", fmt.Sprintf("w%d", w)
		p, err := New(ctx, nc, cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			m := testMetrics()
			acked, n := int64(0), 0
			for acked < blocks {
				if ctx.Err() != nil {
					errs <- ctx.Err()
					return
				}
				p.Reset()
				var futs [][]jetstream.PubAckFuture
				ok := true
				for h := acked + 1; h <= min(acked+4, blocks) && ok; h++ {
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // publishers at about the same pace
					f, err := p.Publish(ctx, chain[h], m)
					if errors.Is(err, ErrOtherWriter) {
						ok = false
						break
					}
					if err != nil {
						errs <- err
						return
					}
					futs = append(futs, f)
				}
				for _, block := range futs {
					for _, f := range block {
						select {
						case <-f.Ok():
						case err := <-f.Err():
							if !WrongLastSequence(err) {
								errs <- err
								return
							}
							ok = false
						case <-ctx.Done():
							errs <- ctx.Err()
							return
						}
					}
					if ok {
						acked++
					}
				}
				if !ok {
					n++
				}
			}
			conflicts <- n
			errs <- nil
		}()
	}
	total := 0
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		total += <-conflicts
	}
	t.Logf("%d conflicts among 3 publishers", total)
	js, _ := jetstream.New(nc)
	for p := uint32(0); p < parts; p++ {
		checkDense(t, js, "t", p, ends[p])
	}
	bs, err := js.Stream(ctx, layout.BlocksStream)
	if err != nil {
		t.Fatal(err)
	}
	for h := uint64(1); h <= blocks; h++ {
		msg, err := bs.GetMsg(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := blockInfo(msg); err != nil || got.Height != int64(h) {
			t.Fatalf("blocks stream sequence %d: %+v %v, want height %d", h, got, err, h)
		}
	}
	if info, err := bs.Info(ctx); err != nil || info.State.Msgs != blocks {
		t.Errorf("blocks stream holds %v messages (%v), want %d", info.State.Msgs, err, blocks)
	}
}

// TestTopicStreamsFollowCreateAndDelete: a created topic has its stream
// before any record; a deleted one loses it, so the topic created again
// under the same name publishes from offset 0 instead of being taken for
// already published.
func TestTopicStreamsFollowCreateAndDelete(t *testing.T) {
	nc := natstest.Start(t)
	ctx := context.Background()
	cfg := Default()
	cfg.ChainID = "c"
	m := testMetrics()
	p, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	now := time.Now()
	publish := func(b *verify.Block) {
		t.Helper()
		futs, err := p.Publish(ctx, b, m)
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
	}
	empty := &verify.Block{Height: 1, Time: now, Hash: make([]byte, 32), AppHash: make([]byte, 32),
		Appended: core.Appended{Topics: []core.TopicChange{{Name: "t"}}}}
	publish(empty)
	if _, err := js.Stream(ctx, layout.StreamName("t")); err != nil {
		t.Fatalf("no stream for a topic just created: %v", err)
	}
	publish(testBlock(2, 0, 5, now))
	recreate := &verify.Block{Height: 3, Time: now, Hash: make([]byte, 32), AppHash: make([]byte, 32),
		Appended: core.Appended{Topics: []core.TopicChange{{Name: "t", Deleted: true}, {Name: "t"}}}}
	publish(recreate)
	publish(testBlock(4, 0, 3, now)) // offsets 0..2 of the new topic
	for part := uint32(0); part < 2; part++ {
		if n := subjectCount(t, js, "t", part); n != 3 {
			t.Errorf("partition %d of the re-created topic holds %d messages, want 3", part, n)
		}
	}
}

// TestPublishChecksWhatTheStreamHolds: the publisher skips what a stream
// says it already holds, so a message someone else with publish rights
// wrote there (a huge offset or height) must stop it with an error naming
// the message, not make it skip the chain's records; once the message is
// removed, publishing goes on.
func TestPublishChecksWhatTheStreamHolds(t *testing.T) {
	const huge = uint64(1) << 60
	record := func(offset uint64, value string) *nats.Msg {
		return layout.Message(&byzlogv1.StoredRecord{Topic: "t", Partition: 0, Offset: offset, Height: 1, Value: []byte(value), ProducerKey: make([]byte, 32)})
	}
	offsetOnly := nats.NewMsg(layout.Subject("t", 0))
	offsetOnly.Header.Set(layout.HeaderOffset, "18446744073709551000")
	block := func(height uint64, hash string) *nats.Msg {
		m := nats.NewMsg(layout.BlocksSubject)
		m.Header.Set(layout.HeaderHeight, fmt.Sprint(height))
		m.Data = []byte(fmt.Sprintf(`{"height":%d,"block_hash":%q}`, height, hash))
		return m
	}
	heightOnly := nats.NewMsg(layout.BlocksSubject)
	heightOnly.Header.Set(layout.HeaderHeight, fmt.Sprint(huge))
	var enc layout.Encoder
	run := func(offset uint64, n int) *nats.Msg {
		var rs []*byzlogv1.StoredRecord
		for i := range n {
			rs = append(rs, &byzlogv1.StoredRecord{Topic: "t", Partition: 0, Offset: offset + uint64(i), Height: 1, Value: []byte("x"), ProducerKey: make([]byte, 32)})
		}
		m, err := enc.Run(rs)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	runCount := nats.NewMsg(layout.Subject("t", 0))
	runCount.Header.Set(layout.HeaderOffset, "3")
	runCount.Header.Set(layout.HeaderRecords, "18446744073709551000")
	for _, per := range []int{1, layout.DefaultRunRecords} {
		// A block's 5 records of t/0 take 5 messages one by one, 1 in a run.
		afterBlock := 1 + 5/per + 5 // and t/1's
		if per > 1 {
			afterBlock = 3
		}
		for _, tc := range []struct {
			name   string
			before int64 // blocks published before the message is forged
			forged *nats.Msg
			wants  []string // what the error publishing the next block names
		}{
			{"huge offset", 0, record(huge, "x"),
				[]string{"stream byzlog-t lacks record 4", "byzlog.t.0", "sequence 1 holds offset 1152921504606846976", "nats stream rmm byzlog-t 1"}},
			{"huge offset header alone", 0, offsetOnly,
				[]string{"stream byzlog-t holds on byzlog.t.0 at sequence 1", "not a byzlog record", "nats stream rmm byzlog-t 1"}},
			{"huge offset after a block", 1, record(huge, "x"),
				[]string{"stream byzlog-t lacks record 9", "byzlog.t.0", fmt.Sprintf("sequence %d holds offset 1152921504606846976", afterBlock)}},
			{"a run at huge offsets", 0, run(huge, 3),
				[]string{"stream byzlog-t lacks record 4", "sequence 1 holds offsets 1152921504606846976 to 1152921504606846978"}},
			{"a run past the block's records", 0, run(3, 4),
				[]string{"stream byzlog-t holds on byzlog.t.0 at sequence 1", "a record at offset 4", "not the one the chain committed"}},
			{"a run with a huge count", 0, runCount,
				[]string{"stream byzlog-t holds on byzlog.t.0 at sequence 1", "Byzlog-Records = \"18446744073709551000\""}},
			{"a run holding another record at an offset of the block", 0, run(2, 1),
				[]string{"stream byzlog-t holds on byzlog.t.0 at sequence 1", "offset 2", "not the one the chain committed"}},
			{"another record at an offset of the block", 0, record(2, "x"),
				[]string{"stream byzlog-t holds on byzlog.t.0 at sequence 1", "offset 2", "not the one the chain committed"}},
			{"huge height", 0, block(huge, "00"),
				[]string{"stream byzlog-blocks lacks block 1", "byzlog.$blocks", "sequence 1 holds height 1152921504606846976"}},
			{"huge height after a block", 1, block(huge, "00"),
				[]string{"stream byzlog-blocks lacks block 2", "sequence 2 holds height 1152921504606846976"}},
			{"huge height header alone", 0, heightOnly,
				[]string{"stream byzlog-blocks holds on byzlog.$blocks at sequence 1", "not a byzlog BlockInfo", "1152921504606846976"}},
			{"another block at the height", 0, block(1, "ff"),
				[]string{"stream byzlog-blocks holds on byzlog.$blocks at sequence 1", "block hash ff"}},
		} {
			t.Run(fmt.Sprintf("%s/%d a message", tc.name, per), func(t *testing.T) {
				nc := natstest.Start(t)
				ctx := context.Background()
				cfg := Default()
				cfg.ChainID = "c"
				cfg.RecordsPerMessage = per
				m := testMetrics()
				p, err := New(ctx, nc, cfg, zerolog.Nop())
				if err != nil {
					t.Fatal(err)
				}
				st, err := p.stream(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				now := time.Now()
				for h := int64(1); h <= tc.before; h++ {
					futs, err := p.Publish(ctx, testBlock(h, uint64(h-1)*5, 5, now), m)
					if err != nil {
						t.Fatal(err)
					}
					waitAll(t, futs)
				}
				js, _ := jetstream.New(nc)
				ack, err := js.PublishMsg(ctx, tc.forged)
				if err != nil {
					t.Fatal(err)
				}
				// A restarted indexer asks the streams what they hold.
				p.Reset()
				next := testBlock(tc.before+1, uint64(tc.before)*5, 5, now)
				futs, err := p.Publish(ctx, next, m)
				waitAll(t, futs)
				if err == nil {
					t.Fatalf("publish(block %d) after the forged message = nil, want an error naming it", next.Height)
				}
				for _, w := range tc.wants {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("publish(block %d) = %q, want it to name %q", next.Height, err, w)
					}
				}
				// Removed, the message is no longer in the way.
				if tc.forged.Subject == layout.BlocksSubject {
					st = p.blocks
				}
				if err := st.DeleteMsg(ctx, ack.Sequence); err != nil {
					t.Fatal(err)
				}
				p.Reset()
				futs, err = p.Publish(ctx, next, m)
				if err != nil {
					t.Fatalf("publish(block %d) once the message is gone = %v", next.Height, err)
				}
				waitAll(t, futs)
				if n := subjectCount(t, js, "t", 0); n != uint64(next.Height)*5 {
					t.Errorf("partition 0 holds %d records, want %d", n, next.Height*5)
				}
				info, err := p.blocks.Info(ctx)
				if err != nil || info.State.Msgs != uint64(next.Height) {
					t.Errorf("blocks stream holds %v messages (%v), want %d", info.State.Msgs, err, next.Height)
				}
			})
		}
	}
}

func FuzzBlockInfo(f *testing.F) {
	for _, s := range []struct {
		height string
		data   string
	}{{"1", `{"height":1,"block_hash":"00"}`}, {"2", `{"height":1}`}, {"18446744073709551000", `{}`}, {"", "x"}, {"0", `{"height":0}`}, {"-1", `{"height":-1}`}} {
		f.Add(s.height, []byte(s.data))
	}
	f.Fuzz(func(t *testing.T, height string, data []byte) {
		m := &jetstream.RawStreamMsg{Subject: layout.BlocksSubject, Header: nats.Header{}, Data: data}
		m.Header.Set(layout.HeaderHeight, height)
		info, err := blockInfo(m)
		if err != nil {
			return
		}
		if h, _ := strconv.ParseInt(height, 10, 64); info.Height < 1 || info.Height != h {
			t.Fatalf("blockInfo(%s %q, %q) = height %d, want the header's, at least 1", layout.HeaderHeight, height, data, info.Height)
		}
	})
}

// TestDeletedStreamIsMadeAgain: someone deletes a topic's stream and the
// blocks stream under a running indexer; its publish fails, and after the
// reset every retry starts with, the next block is published into streams
// made again.
func TestDeletedStreamIsMadeAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startPublisher(ctx, t)
	m := testMetrics()
	futs, err := p.Publish(ctx, testBlock(1, 0, 2, time.Now()), m)
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, futs)
	for _, s := range []string{layout.StreamName("t"), layout.BlocksStream} {
		if err := p.js.DeleteStream(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	p.Reset()
	futs, err = p.Publish(ctx, testBlock(2, 2, 2, time.Now()), m)
	if err != nil {
		t.Fatalf("publish after the streams were deleted: %v", err)
	}
	waitAll(t, futs)
	st, err := p.js.Stream(ctx, layout.StreamName("t"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Info(ctx); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(p.js.Conn())
	if n := subjectCount(t, js, "t", 0) + subjectCount(t, js, "t", 1); n != 4 {
		t.Fatalf("topic stream made again holds %d records, want block 2's 4", n)
	}
}

// startPublisher is a publisher of chain "c" on a NATS of its own.
func startPublisher(ctx context.Context, t *testing.T) *Publisher {
	t.Helper()
	return startPublisherWith(ctx, t, layout.DefaultRunRecords)
}

// startPublisherWith is startPublisher putting up to perMessage records
// in a message.
func startPublisherWith(ctx context.Context, t *testing.T, perMessage int) *Publisher {
	t.Helper()
	cfg := Default()
	cfg.ChainID = "c"
	cfg.RecordsPerMessage = perMessage
	p, err := New(ctx, natstest.Start(t), cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOneAckVouchesForAll: most messages go without asking an
// acknowledgement, so one JetStream refuses in the middle of a block (here
// too large for the stream's max_msg_size, as an operator may set it) must
// make the acknowledged message after it fail too; and the stream holds
// none of the messages after the refused one.
func TestOneAckVouchesForAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, b := refusingStream(ctx, t)
	futs, err := p.Publish(ctx, b, testMetrics())
	if err != nil {
		t.Fatal(err)
	}
	if len(futs) >= 600 {
		t.Fatalf("%d acknowledgements asked for 600 records and a BlockInfo, want far fewer", len(futs))
	}
	failed := failures(ctx, t, futs)
	if len(failed) == 0 || !WrongLastSequence(failed[0]) {
		t.Fatalf("acknowledgements failed: %v, want the one after the refused record to fail its expected sequence", failed)
	}
	js, _ := jetstream.New(p.js.Conn())
	if n := subjectCount(t, js, "t", 0); n != 200 {
		t.Errorf("partition 0 holds %d records, want the 200 before the refused one", n)
	}
	if n := subjectCount(t, js, "t", 1); n != 0 {
		t.Errorf("partition 1 holds %d records, want none: they follow the refused one", n)
	}
}

// refusingStream is a publisher whose topic "t" stream refuses messages
// over 2 KiB (max_msg_size, as an operator may set it), and block 1 of
// 300 records in each of two partitions, the 201st of which is 4 KiB.
func refusingStream(ctx context.Context, t *testing.T) (*Publisher, *verify.Block) {
	t.Helper()
	p := startPublisherWith(ctx, t, 1) // the 201st record's own message is refused

	st, err := p.stream(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.MaxMsgSize = 2048
	if _, err := p.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	b := testBlock(1, 0, 300, time.Now())
	b.Appended.Partitions[0].Records[200].Value = make([]byte, 4096)
	return p, b
}

// failures waits for every acknowledgement of futs and returns the errors.
func failures(ctx context.Context, t *testing.T, futs []jetstream.PubAckFuture) []error {
	t.Helper()
	var failed []error
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			failed = append(failed, err)
		case <-ctx.Done():
			t.Fatal("no publish ack")
		}
	}
	return failed
}

// TestRefusalSurfacesWithAnAckPerMessage: a message JetStream refuses
// without an acknowledgement reads as another indexer's conflict (the
// stream's last sequence is not the one the next message expects); with an
// acknowledgement asked of every message (AckAllThrough, which the indexer
// sets after a conflict that acknowledged nothing: TestRefusalSurfaces-
// AfterAConflict), JetStream's own reason surfaces, every time.
func TestRefusalSurfacesWithAnAckPerMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, b := refusingStream(ctx, t)
	attempt := func() error {
		t.Helper()
		p.Reset()
		futs, err := p.Publish(ctx, b, testMetrics())
		if err != nil {
			t.Fatal(err)
		}
		failed := failures(ctx, t, futs)
		if len(failed) == 0 {
			t.Fatal("JetStream stored a record over the stream's max_msg_size")
		}
		return failed[0]
	}
	if err := attempt(); !WrongLastSequence(err) {
		t.Fatalf("first attempt, acknowledgements sparse: %v, want it to read as a conflict", err)
	}
	p.AckAllThrough = b.Height
	for n := range 3 {
		err := attempt()
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.ErrorCode != 10054 { // JSStreamMessageExceedsMaximumErr
			t.Fatalf("attempt %d with an acknowledgement per message failed with %v, want JetStream's own reason (message size exceeds maximum)", n+2, err)
		}
	}
}

// TestRunsCarryABlocksRecords: a block's records of a partition go out in
// runs of up to RecordsPerMessage, or one by one with 1, and read back the
// same either way.
func TestRunsCarryABlocksRecords(t *testing.T) {
	for _, c := range []struct {
		per  int
		msgs uint64
	}{{1, 600}, {256, 3}, {layout.DefaultRunRecords, 3}, {1000, 1}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p := startPublisherWith(ctx, t, c.per)
		futs, err := p.Publish(ctx, testBlock(1, 0, 600, time.Now()), testMetrics())
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
		js, _ := jetstream.New(p.js.Conn())
		for part := uint32(0); part < 2; part++ {
			if n := subjectMessages(t, js, "t", part); n != c.msgs {
				t.Errorf("%d records a message: t/%d took %d messages for 600 records, want %d", c.per, part, n, c.msgs)
			}
			checkDense(t, js, "t", part, 600)
		}
		cancel()
	}
}

// TestTheStreamSaysHowToCut: a message's expected sequence stands for the
// same records only if every indexer of a stream cuts records into
// messages alike, so the stream says how (its metadata), and every indexer
// cuts as it says, whatever its own --records-per-message.
func TestTheStreamSaysHowToCut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := natstest.Start(t)
	js, _ := jetstream.New(nc)
	publisherOf := func(per int) *Publisher {
		cfg := Default()
		cfg.ChainID, cfg.RecordsPerMessage = "c", per
		p, err := New(ctx, nc, cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	publish := func(p *Publisher, b *verify.Block) {
		t.Helper()
		p.Reset()
		futs, err := p.Publish(ctx, b, testMetrics())
		if err != nil {
			t.Fatal(err)
		}
		waitAll(t, futs)
	}
	format := func(topic string) string {
		st, err := js.Stream(ctx, layout.StreamName(topic))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.Metadata[layout.FormatMetadata]
	}
	runs, ones := publisherOf(layout.DefaultRunRecords), publisherOf(1)

	// Made by the one that cuts runs: the other cuts runs there too.
	publish(runs, testBlock(1, 0, 5, time.Now()))
	if got := format("t"); got != "run/v1 256 65536" {
		t.Fatalf("format of a stream made with runs: %q", got)
	}
	publish(ones, testBlock(2, 5, 5, time.Now()))
	publish(runs, testBlock(3, 10, 5, time.Now()))
	checkDense(t, js, "t", 0, 15)
	if n := subjectMessages(t, js, "t", 0); n != 3 {
		t.Errorf("t/0 holds 3 blocks' records in %d messages, want 3 runs", n)
	}

	// Made by an older indexer, with a message per record and no format:
	// it is given "record", and runs are not cut there.
	old := testBlock(4, 0, 5, time.Now())
	for _, part := range old.Appended.Partitions {
		for _, r := range part.Records {
			r.Topic = "u"
		}
	}
	for i := range old.Appended.Partitions {
		old.Appended.Partitions[i].Root.Topic = "u"
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: layout.StreamName("u"), Subjects: []string{layout.TopicSubjects("u")}}); err != nil {
		t.Fatal(err)
	}
	var enc layout.Encoder
	for _, r := range old.Appended.Partitions[0].Records[:2] {
		if _, err := js.PublishMsg(ctx, enc.Message(r)); err != nil {
			t.Fatal(err)
		}
	}
	publish(runs, old)
	if got := format("u"); got != layout.FormatRecord {
		t.Fatalf("format given a stream an older indexer wrote: %q, want %q", got, layout.FormatRecord)
	}
	checkDense(t, js, "u", 0, 5)
	if n := subjectMessages(t, js, "u", 0); n != 5 {
		t.Errorf("u/0 holds 5 records in %d messages, want one each", n)
	}

	// A format changed under a publisher stops it until it reads the
	// streams again; one it does not know stops it with an error naming it.
	publish(runs, testBlock(5, 15, 5, time.Now()))
	st, err := js.Stream(ctx, layout.StreamName("t"))
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.Metadata[layout.FormatMetadata] = layout.FormatRecord
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	runs.held["t"].sent = false // as after a conflict: it reads the stream again
	if _, err := runs.Publish(ctx, testBlock(6, 20, 5, time.Now()), testMetrics()); err == nil || !strings.Contains(err.Error(), `is now "record", and this indexer cut 256 records a message`) {
		t.Fatalf("publish after the format changed: %v, want it refused", err)
	}
	sc.Metadata[layout.FormatMetadata] = "run/v9 3 3"
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	runs.Reset()
	if _, err := runs.Publish(ctx, testBlock(6, 20, 5, time.Now()), testMetrics()); err == nil || !strings.Contains(err.Error(), `message format "run/v9 3 3" is none this byzlog writes`) {
		t.Fatalf("publish to a stream of an unknown format: %v, want an error naming it", err)
	}
}

// testMetrics are counters nobody reads.
func testMetrics() Metrics {
	return Metrics{Records: prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}), Skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})}
}
