package publish

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/internal/natstest"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/reconcile"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

func TestTopicLimits(t *testing.T) {
	const dup = 10 * time.Minute
	unlimited := streamLimits{MaxAge: 0, MaxBytes: -1, Discard: jetstream.DiscardOld}
	for _, tc := range []struct {
		name string
		c    *byzlogv1.TopicConfig
		dup  time.Duration
		want streamLimits
	}{
		{"no config", nil, dup, unlimited},
		{"no retention", &byzlogv1.TopicConfig{Partitions: 3}, dup, unlimited},
		{"retention_ms", &byzlogv1.TopicConfig{Partitions: 3, RetentionMs: 3_600_000}, dup,
			streamLimits{MaxAge: time.Hour, MaxBytes: -1, Discard: jetstream.DiscardOld}},
		{"retention_ms below the duplicate window", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: 60_000}, dup,
			streamLimits{MaxAge: dup, MaxBytes: -1, Discard: jetstream.DiscardOld}},
		{"retention_ms below JetStream's least", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: 1}, 0,
			streamLimits{MaxAge: 100 * time.Millisecond, MaxBytes: -1, Discard: jetstream.DiscardOld}},
		{"retention_ms past int64 nanoseconds", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: math.MaxInt64/1_000_000 + 1}, dup, unlimited},
		{"retention_ms at the chain's most", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: math.MaxInt64 / 1_000_000}, dup,
			streamLimits{MaxAge: time.Duration(math.MaxInt64/1_000_000) * time.Millisecond, MaxBytes: -1, Discard: jetstream.DiscardOld}},
		{"retention_bytes", &byzlogv1.TopicConfig{Partitions: 3, RetentionBytes: 1000}, dup,
			streamLimits{MaxAge: 0, MaxBytes: 3 * 1000 * streamBytesFactor, Discard: jetstream.DiscardOld}},
		{"both", &byzlogv1.TopicConfig{Partitions: 2, RetentionMs: 86_400_000, RetentionBytes: 1 << 30}, dup,
			streamLimits{MaxAge: 24 * time.Hour, MaxBytes: 2 << 30 * streamBytesFactor, Discard: jetstream.DiscardOld}},
		{"retention_bytes at int64's most", &byzlogv1.TopicConfig{Partitions: 2, RetentionBytes: math.MaxInt64 / 8}, dup,
			streamLimits{MaxAge: 0, MaxBytes: math.MaxInt64 / 8 * 8, Discard: jetstream.DiscardOld}},
		{"retention_bytes past int64", &byzlogv1.TopicConfig{Partitions: 2, RetentionBytes: math.MaxInt64/8 + 1}, dup, unlimited},
		{"retention_bytes past int64 by partitions", &byzlogv1.TopicConfig{Partitions: math.MaxUint32, RetentionBytes: 1 << 40}, dup, unlimited},
		{"retention_bytes of int64's most", &byzlogv1.TopicConfig{Partitions: 1, RetentionBytes: math.MaxInt64}, dup, unlimited},
		{"negative retention (the chain refuses it)", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: -1, RetentionBytes: -1}, dup, unlimited},
		{"no partitions (the chain refuses it)", &byzlogv1.TopicConfig{RetentionBytes: 1000}, dup, unlimited},
	} {
		if got := topicLimits(tc.c, tc.dup); got != tc.want {
			t.Errorf("%s: topicLimits(%v, %s) = %+v, want %+v", tc.name, tc.c, tc.dup, got, tc.want)
		}
	}
}

// topicBlock is block h with the topic changes and records given.
func topicBlock(h int64, when time.Time, changes []core.TopicChange, parts ...core.AppendedPartition) *verify.Block {
	return &verify.Block{Height: h, Time: when, Hash: make([]byte, 32), AppHash: make([]byte, 32),
		Appended: core.Appended{Topics: changes, Partitions: parts}}
}

// records are n records of size-byte values on topic/p from offset first.
func records(topic string, p uint32, first uint64, n, size int, h int64, when time.Time) core.AppendedPartition {
	part := core.AppendedPartition{Root: core.PartitionRoot{Topic: topic, Partition: p, FirstOffset: first, Count: uint32(n)}}
	for i := range n {
		part.Records = append(part.Records, &byzlogv1.StoredRecord{Topic: topic, Partition: p, Offset: first + uint64(i), Height: h,
			Value: make([]byte, size), ProducerKey: make([]byte, 32), TimestampUnixNano: when.UnixNano()})
	}
	return part
}

func create(name string, c *byzlogv1.TopicConfig) core.TopicChange {
	return core.TopicChange{Name: name, Config: c}
}

// publishAll publishes blocks through p and waits for their acks.
func publishAll(ctx context.Context, t *testing.T, p *Publisher, blocks ...*verify.Block) {
	t.Helper()
	for _, b := range blocks {
		futs, err := p.Publish(ctx, b, testMetrics())
		if err != nil {
			t.Fatalf("publish(block %d): %v", b.Height, err)
		}
		waitAll(t, futs)
	}
}

// streamConfig is the config of topic's stream, as NATS has it.
func streamConfig(ctx context.Context, t *testing.T, js jetstream.JetStream, topic string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(ctx, layout.StreamName(topic))
	if err != nil {
		t.Fatalf("stream of %s: %v", topic, err)
	}
	return st.CachedInfo().Config
}

func checkLimits(t *testing.T, what string, sc jetstream.StreamConfig, want streamLimits) {
	t.Helper()
	if got := (streamLimits{sc.MaxAge, sc.MaxBytes, sc.Discard}); got != want {
		t.Errorf("%s: stream %s has max_age %s, max_bytes %d, discard %s; want %s, %d, %s",
			what, sc.Name, got.MaxAge, got.MaxBytes, got.Discard, want.MaxAge, want.MaxBytes, want.Discard)
	}
}

// TestStreamsMirrorRetention: a topic created with retention gets it as its
// stream's limits, one without gets none; an update changes the limits and
// leaves what an operator set on the stream, and one that leaves them as
// they are does not update the stream.
func TestStreamsMirrorRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := natstest.Start(t)
	cfg := Default()
	cfg.ChainID = "c"
	p, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	updates, err := nc.SubscribeSync("$JS.API.STREAM.UPDATE." + layout.StreamName("t"))
	if err != nil {
		t.Fatal(err)
	}
	updated := func() int {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, _ := updates.Pending()
		return n
	}
	now := time.Now()
	retained := &byzlogv1.TopicConfig{Partitions: 2, RetentionMs: 3_600_000, RetentionBytes: 1 << 20}
	publishAll(ctx, t, p, topicBlock(1, now, []core.TopicChange{create("t", retained), create("open", &byzlogv1.TopicConfig{Partitions: 1})}))
	checkLimits(t, "created with retention", streamConfig(ctx, t, js, "t"), streamLimits{time.Hour, 2 << 20 * streamBytesFactor, jetstream.DiscardOld})
	checkLimits(t, "created without retention", streamConfig(ctx, t, js, "open"), streamLimits{0, -1, jetstream.DiscardOld})

	// An operator's own settings.
	sc := streamConfig(ctx, t, js, "t")
	sc.Description, sc.MaxMsgs = "ops: at most a million", 1_000_000
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	before := updated()
	changed := &byzlogv1.TopicConfig{Partitions: 3, RetentionMs: 7_200_000, RetentionBytes: 1 << 21}
	publishAll(ctx, t, p, topicBlock(2, now, []core.TopicChange{{Name: "t", Config: changed}}, records("t", 2, 0, 3, 10, 2, now)))
	sc = streamConfig(ctx, t, js, "t")
	checkLimits(t, "updated", sc, streamLimits{2 * time.Hour, 3 << 21 * streamBytesFactor, jetstream.DiscardOld})
	if sc.Description != "ops: at most a million" || sc.MaxMsgs != 1_000_000 {
		t.Errorf("after the topic's update the stream has description %q, max_msgs %d; want the operator's %q, 1000000", sc.Description, sc.MaxMsgs, "ops: at most a million")
	}
	if n := updated() - before; n != 1 {
		t.Errorf("the update changing the limits updated the stream %d times, want 1", n)
	}
	// An update of the readers alone leaves the limits as they are.
	before = updated()
	same := &byzlogv1.TopicConfig{Partitions: 3, RetentionMs: 7_200_000, RetentionBytes: 1 << 21, Readers: [][]byte{make([]byte, 32)}}
	publishAll(ctx, t, p, topicBlock(3, now, []core.TopicChange{{Name: "t", Config: same}}))
	if n := updated() - before; n != 0 {
		t.Errorf("an update keeping the limits updated the stream %d times, want 0", n)
	}
	if got := subjectCount(t, js, "t", 2); got != 3 {
		t.Errorf("t/2 holds %d records, want 3", got)
	}
}

// TestLostStreamGetsTheKeptLimits: a restarted indexer does not see the
// block that created a topic again, yet a stream it makes again (NATS lost
// it) or finds without the limits gets them from the kept config; a
// deleted topic's config is forgotten.
func TestLostStreamGetsTheKeptLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := natstest.Start(t)
	cfg := Default()
	cfg.ChainID = "c"
	js, _ := jetstream.New(nc)
	newPub := func() *Publisher {
		t.Helper()
		p, err := New(ctx, nc, cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	c := &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: 86_400_000, RetentionBytes: 1 << 20}
	want := streamLimits{24 * time.Hour, 1 << 20 * streamBytesFactor, jetstream.DiscardOld}
	publishAll(ctx, t, newPub(), topicBlock(1, now, []core.TopicChange{create("t", c)}, records("t", 0, 0, 2, 10, 1, now)))

	if err := js.DeleteStream(ctx, layout.StreamName("t")); err != nil {
		t.Fatal(err)
	}
	restarted := newPub()
	publishAll(ctx, t, restarted, topicBlock(2, now, nil, records("t", 0, 2, 2, 10, 2, now)))
	checkLimits(t, "made again after a restart", streamConfig(ctx, t, js, "t"), want)
	if n := subjectCount(t, js, "t", 0); n != 2 {
		t.Errorf("the stream made again holds %d records, want block 2's 2", n)
	}

	// Someone took the limits off; the next indexer to make the stream
	// puts them back.
	sc := streamConfig(ctx, t, js, "t")
	sc.MaxAge, sc.MaxBytes = 0, -1
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	publishAll(ctx, t, newPub(), topicBlock(3, now, nil, records("t", 0, 4, 1, 10, 3, now)))
	checkLimits(t, "found without its limits after a restart", streamConfig(ctx, t, js, "t"), want)

	// Deleted, the topic's config goes; created again without retention,
	// its stream has no limits, also after a restart and a loss.
	publishAll(ctx, t, newPub(), topicBlock(4, now, []core.TopicChange{{Name: "t", Deleted: true}}))
	if kept, err := newPub().keptTopic(ctx, "t"); err != nil || kept != nil {
		t.Fatalf("kept config of a deleted topic = %v, %v; want none", kept, err)
	}
	publishAll(ctx, t, newPub(), topicBlock(5, now, []core.TopicChange{create("t", &byzlogv1.TopicConfig{Partitions: 1})}))
	if err := js.DeleteStream(ctx, layout.StreamName("t")); err != nil {
		t.Fatal(err)
	}
	publishAll(ctx, t, newPub(), topicBlock(6, now, nil, records("t", 0, 0, 1, 10, 6, now)))
	checkLimits(t, "created again without retention", streamConfig(ctx, t, js, "t"), streamLimits{0, -1, jetstream.DiscardOld})
}

// TestTopicConfigKeys: topic names hold what KV keys may not (a leading
// dot, two in a row); each keeps its own config.
func TestTopicConfigKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := Default()
	cfg.ChainID = "c"
	p, err := New(ctx, natstest.Start(t), cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"t", ".t", "t.", "a..b", "a.b", "a_b", "a-b", "a_d", "_x61", "-._", strings.Repeat("z", 249)}
	for i, name := range names {
		if err := p.keepTopic(ctx, name, &byzlogv1.TopicConfig{Partitions: uint32(i + 1)}); err != nil {
			t.Fatalf("keepTopic(%q) = %v (key %q)", name, err, p.topicKey(name))
		}
	}
	for i, name := range names {
		c, err := p.keptTopic(ctx, name)
		if err != nil || c.GetPartitions() != uint32(i+1) {
			t.Errorf("keptTopic(%q) = %v, %v; want %d partitions", name, c, err, i+1)
		}
	}
	if err := p.forgetTopic(ctx, "a.b"); err != nil {
		t.Fatal(err)
	}
	if c, err := p.keptTopic(ctx, "a.b"); err != nil || c != nil {
		t.Errorf("keptTopic(a.b) after forgetTopic = %v, %v; want none", c, err)
	}
	if c, err := p.keptTopic(ctx, "a_b"); err != nil || c.GetPartitions() != 6 {
		t.Errorf("keptTopic(a_b) after forgetting a.b = %v, %v; want its own 6 partitions", c, err)
	}
}

// TestFullStreamDropsItsOldest: past MaxBytes the stream drops its oldest
// records and keeps taking new ones.
func TestFullStreamDropsItsOldest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := natstest.Start(t)
	cfg := Default()
	cfg.RecordsPerMessage = 1 // a message per record, dropped one by one
	cfg.ChainID = "c"
	p, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	// 4,000 bytes: ten or so records of 10 B (~370 B each in the stream).
	c := &byzlogv1.TopicConfig{Partitions: 1, RetentionBytes: 1000}
	blocks := []*verify.Block{topicBlock(1, now, []core.TopicChange{create("t", c)})}
	for h := int64(2); h <= 4; h++ {
		blocks = append(blocks, topicBlock(h, now, nil, records("t", 0, uint64(h-2)*10, 10, 10, h, now)))
	}
	publishAll(ctx, t, p, blocks...)
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, layout.StreamName("t"))
	if err != nil {
		t.Fatal(err)
	}
	s := st.CachedInfo().State
	if s.FirstSeq <= 1 || s.Bytes > 4000 || s.Msgs == 0 || s.Msgs >= 30 {
		t.Errorf("after 30 records into a stream of 4000 bytes: first sequence %d, %d messages, %d bytes; want the oldest dropped (first sequence past 1), at most 4000 bytes", s.FirstSeq, s.Msgs, s.Bytes)
	}
	_, last, err := reconcile.LastRecord(ctx, st, layout.Subject("t", 0))
	if err != nil || last == nil || last.Offset != 29 {
		t.Errorf("last record of t/0 = %v, %v; want offset 29", last, err)
	}
}

// TestGenesisTopicsGetTheirLimits: genesis's topics, which no block
// creates, get their streams and limits with the chain's first block.
func TestGenesisTopicsGetTheirLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := natstest.Start(t)
	cfg := Default()
	cfg.ChainID = "c"
	cfg.GenesisTopics = []core.TopicChange{create("g", &byzlogv1.TopicConfig{Partitions: 2, RetentionMs: 3_600_000})}
	p, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	publishAll(ctx, t, p, topicBlock(1, time.Now(), nil))
	js, _ := jetstream.New(nc)
	checkLimits(t, "genesis topic", streamConfig(ctx, t, js, "g"), streamLimits{time.Hour, -1, jetstream.DiscardOld})
	if c, err := p.keptTopic(ctx, "g"); err != nil || c.GetRetentionMs() != 3_600_000 {
		t.Errorf("kept config of genesis topic g = %v, %v; want retention_ms 3600000", c, err)
	}
}

// TestLimitsNATSCannotReserve: JetStream reserves a stream's MaxBytes from
// its storage; a topic whose byte limit does not fit gets a stream without
// one, a warning says what to raise, and the other topics go on.
func TestLimitsNATSCannotReserve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := natstest.Start(t, func(o *server.Options) { o.JetStreamMaxStore = 64 << 20 })
	cfg := Default()
	cfg.ChainID = "c"
	p, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	p.log = zerolog.New(&logged)
	// One topic's limits NATS cannot reserve must not stop the others: its
	// stream goes without a byte limit, and the log says what to do.
	b := topicBlock(1, time.Now(), []core.TopicChange{
		create("big", &byzlogv1.TopicConfig{Partitions: 4, RetentionBytes: 1 << 30, RetentionMs: 86_400_000}),
		create("small", &byzlogv1.TopicConfig{Partitions: 1, RetentionBytes: 1000}),
	})
	if _, err := p.Publish(ctx, b, testMetrics()); err != nil {
		t.Fatalf("publish(a topic of 16 GiB max_bytes on 64 MiB of NATS storage, and a small one) = %v, want both streams made", err)
	}
	big := streamConfig(ctx, t, p.js, "big")
	if big.MaxBytes != -1 || big.MaxAge != 24*time.Hour || big.Discard != jetstream.DiscardOld {
		t.Errorf("big's stream: max_bytes %d, max_age %s, discard %v; want -1 (unreservable), 24h, old", big.MaxBytes, big.MaxAge, big.Discard)
	}
	if small := streamConfig(ctx, t, p.js, "small"); small.MaxBytes != 1000*streamBytesFactor {
		t.Errorf("small's stream: max_bytes %d, want %d", small.MaxBytes, 1000*streamBytesFactor)
	}
	for _, w := range []string{"byzlog-big", fmt.Sprint(int64(16) << 30), "max_file_store"} {
		if !strings.Contains(logged.String(), w) {
			t.Errorf("log %q does not name %q", logged.String(), w)
		}
	}
	// Updated to what NATS can reserve, the topic's stream gets the limit.
	up := topicBlock(2, time.Now(), []core.TopicChange{create("big", &byzlogv1.TopicConfig{Partitions: 4, RetentionBytes: 1 << 20, RetentionMs: 86_400_000})})
	if _, err := p.Publish(ctx, up, testMetrics()); err != nil {
		t.Fatal(err)
	}
	if got := streamConfig(ctx, t, p.js, "big").MaxBytes; got != 4<<20*streamBytesFactor {
		t.Errorf("big's stream after the update: max_bytes %d, want %d", got, 4<<20*streamBytesFactor)
	}
}

// TestRewindLeavesWhatLimitsRemoved: a partition whose records the
// stream's limits removed (the busy partition filled MaxBytes; or older than
// MaxAge) is not published again; a tail lost still is (see
// TestRewindToWhatTheStreamsHold).
func TestRewindLeavesWhatLimitsRemoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc := natstest.Start(t)
	cfg := Default()
	cfg.RecordsPerMessage = 1 // a message per record, dropped one by one
	cfg.ChainID = "c"
	p, err := New(ctx, nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ends := map[string]reconcile.End{}
	publish := func(b *verify.Block) {
		t.Helper()
		publishAll(ctx, t, p, b)
		e, deleted := reconcile.BlockEnds(b)
		reconcile.Advance(ends, e, deleted)
	}
	now := time.Now()
	// t holds 2 x 500 x 4 bytes: t/1's 30 records push out t/0's 3.
	publish(topicBlock(1, now, []core.TopicChange{create("t", &byzlogv1.TopicConfig{Partitions: 2, RetentionBytes: 500})}, records("t", 0, 0, 3, 10, 1, now)))
	for h := int64(2); h <= 4; h++ {
		publish(topicBlock(h, now, nil, records("t", 1, uint64(h-2)*10, 10, 10, h, now)))
	}
	if n := subjectCount(t, js, "t", 0); n != 0 {
		t.Fatalf("t/0 holds %d records after t/1 filled the stream, want 0 (MaxBytes drops the oldest)", n)
	}
	if from, why, err := reconcile.Rewind(ctx, p.js, ends, 4, 4); err != nil || from != 5 {
		t.Errorf("rewind after MaxBytes removed t/0's records = %d (%s) %v, want 5: nothing to publish again", from, why, err)
	}
	// A cursor held at 1 behind an open transaction, with blocks up to 4
	// followed (Cursor.Followed): the stream's first message, of height
	// 2..4, is one this indexer published, so t/0's records were removed by
	// the limits, not lost.
	if from, why, err := reconcile.Rewind(ctx, p.js, ends, 1, 4); err != nil || from != 2 {
		t.Errorf("rewind from a cursor held at 1, followed to 4, after MaxBytes removed t/0's records = %d (%s) %v, want 2: nothing to publish again", from, why, err)
	}

	// a keeps records 300 ms (JetStream's least MaxAge is 100 ms).
	publish(topicBlock(5, time.Now(), []core.TopicChange{create("a", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: 300})}, records("a", 0, 0, 2, 10, 5, time.Now())))
	deadline := time.Now().Add(5 * time.Second)
	for subjectCount(t, js, "a", 0) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a/0 still holds its records 5 s after they were stored with retention_ms 300")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if from, why, err := reconcile.Rewind(ctx, p.js, ends, 5, 5); err != nil || from != 6 {
		t.Errorf("rewind after MaxAge removed a/0's records = %d (%s) %v, want 6: nothing to publish again", from, why, err)
	}

	// In a stream with limits, a partition that lost its records while
	// older ones stay (a power loss) is still published again.
	publish(topicBlock(6, now, []core.TopicChange{create("k", &byzlogv1.TopicConfig{Partitions: 2, RetentionMs: 3_600_000, RetentionBytes: 1 << 20})}, records("k", 0, 0, 2, 10, 6, now)))
	publish(topicBlock(7, now, nil, records("k", 1, 0, 2, 10, 7, now)))
	st, err := js.Stream(ctx, layout.StreamName("k"))
	if err != nil {
		t.Fatal(err)
	}
	dropFrom(t, st, layout.Subject("k", 1), 0)
	if from, why, err := reconcile.Rewind(ctx, p.js, ends, 7, 7); err != nil || from != 7 || !strings.Contains(why, "k/1 holds 0 of the 2") {
		t.Errorf("rewind after k/1 lost its newest records = %d (%s) %v, want 7 (its block)", from, why, err)
	}
}
