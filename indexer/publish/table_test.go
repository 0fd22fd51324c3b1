package publish

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// keyedBlocks are blocks of topic kv (2 partitions, compact, tombstones
// kept deleteMs), created by the first; one string a height of words
// "p:key=value", "p:key~" (a tombstone) or "p:!" (a commit marker).
func keyedBlocks(deleteMs int64, heights ...string) []*verify.Block {
	when := time.Now().Add(-time.Minute)
	next := map[uint32]uint64{}
	var out []*verify.Block
	for i, words := range heights {
		h := int64(i + 1)
		b := &verify.Block{Height: h, Time: when, Hash: make([]byte, 32), AppHash: make([]byte, 32)}
		if h == 1 {
			b.Appended.Topics = []core.TopicChange{create("kv", &byzlogv1.TopicConfig{Partitions: 2,
				CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, DeleteRetentionMs: &deleteMs})}
		}
		parts := map[uint32]int{}
		for _, pw := range strings.Fields(words) {
			var p uint32
			fmt.Sscanf(pw, "%d:", &p)
			w := pw[strings.IndexByte(pw, ':')+1:]
			r := &byzlogv1.StoredRecord{Topic: "kv", Partition: p, Offset: next[p], Height: h, TimestampUnixNano: when.UnixNano(), ProducerKey: make([]byte, 32)}
			switch k, v, ok := strings.Cut(w, "="); {
			case w == "!":
				r.KafkaControl = &byzlogv1.KafkaControl{Commit: true}
			case ok:
				r.Key, r.Value = []byte(k), []byte(v)
			default:
				r.Key = []byte(strings.TrimSuffix(w, "~"))
			}
			next[p]++
			i, ok := parts[p]
			if !ok {
				i = len(b.Appended.Partitions)
				parts[p] = i
				b.Appended.Partitions = append(b.Appended.Partitions, core.AppendedPartition{Root: core.PartitionRoot{Topic: "kv", Partition: p, FirstOffset: r.Offset}})
			}
			b.Appended.Partitions[i].Records = append(b.Appended.Partitions[i].Records, r)
			b.Appended.Partitions[i].Root.Count++
		}
		out = append(out, b)
	}
	return out
}

// kvBlocks write several versions of several keys, markers and a tombstone:
// the live table is 0:a=3 0:c=1 1:x=2 1:y=1, and 0:b a tombstone.
var kvBlocks = []string{
	"0:a=1 0:b=1 1:x=1",
	"0:a=2 0:! 1:x=2 0:c=1",
	"0:b~ 0:a=3 1:y=1",
}

const kvTable = "0:a=3@6 0:b~@5 0:c=1@4 1:x=2@1 1:y=1@2"

// table is what the stream of kv holds, in stream order, as kvTable
// writes it; each message is checked to be on its key's subject.
func table(ctx context.Context, t *testing.T, js jetstream.JetStream) (string, jetstream.StreamInfo) {
	t.Helper()
	st, err := js.Stream(ctx, layout.StreamName("kv"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for seq := uint64(1); ; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(layout.KeyTopicSubjects("kv")))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		rs, err := layout.Records(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatalf("sequence %d: %v", m.Sequence, err)
		}
		r := rs[0]
		row := fmt.Sprintf("%d:%s=%s@%d", r.Partition, r.Key, r.Value, r.Offset)
		if r.Value == nil {
			row = fmt.Sprintf("%d:%s~@%d", r.Partition, r.Key, r.Offset)
			if got := m.Header.Get(jetstream.MsgTTLHeader); got != "3600" {
				t.Errorf("tombstone %s: %s = %q, want 3600", row, jetstream.MsgTTLHeader, got)
			}
		}
		rows = append(rows, row)
		seq = m.Sequence + 1
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Stream order is offset order per partition; sort across partitions.
	sortRows(rows)
	return strings.Join(rows, " "), *info
}

func sortRows(rows []string) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && rows[j] < rows[j-1]; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

// TestCompactedTopicIsATable: a compacted topic's stream keeps one message
// a key, its latest (a tombstone too, with the topic's delete retention as
// its TTL), and no markers.
func TestCompactedTopicIsATable(t *testing.T) {
	ctx := context.Background()
	p := startPublisher(ctx, t)
	publishAll(ctx, t, p, keyedBlocks(3_600_000, kvBlocks...)...)
	got, info := table(ctx, t, p.JetStream())
	if got != kvTable {
		t.Errorf("stream holds %s, want %s", got, kvTable)
	}
	sc := info.Config
	if sc.MaxMsgsPerSubject != 1 || !sc.AllowMsgTTL || len(sc.Subjects) != 1 || sc.Subjects[0] != layout.KeyTopicSubjects("kv") || sc.Metadata[layout.FormatMetadata] != layout.FormatKey {
		t.Errorf("stream config: max msgs per subject %d, allow msg TTL %v, subjects %v, format %q; want 1, true, [%s], %q",
			sc.MaxMsgsPerSubject, sc.AllowMsgTTL, sc.Subjects, sc.Metadata[layout.FormatMetadata], layout.KeyTopicSubjects("kv"), layout.FormatKey)
	}
	if info.State.Msgs != 5 || info.State.LastSeq != 9 {
		t.Errorf("stream holds %d messages to sequence %d, want 5 to 9 (9 keyed records published, 4 replaced)", info.State.Msgs, info.State.LastSeq)
	}
}

// TestCompactedTopicReplay: a restarted indexer, and a second one, publish
// the same blocks again: nothing is stored twice, and no key gets an older
// value back, block by block.
func TestCompactedTopicReplay(t *testing.T) {
	ctx := context.Background()
	p := startPublisher(ctx, t)
	blocks := keyedBlocks(3_600_000, kvBlocks...)
	publishAll(ctx, t, p, blocks...)
	second, err := New(ctx, p.js.Conn(), p.cfg, p.log)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		publishAll(ctx, t, second, b)
		if got, info := table(ctx, t, p.JetStream()); got != kvTable || info.State.LastSeq != 9 {
			t.Fatalf("after replaying block %d: stream holds %s to sequence %d, want %s to 9", b.Height, got, info.State.LastSeq, kvTable)
		}
	}
	// The first publisher, which believed it was at the end, publishes
	// the next block after the second did: refused (it expects a sequence
	// the stream is past), and
	// once it reads the stream again, stored once.
	more := keyedBlocks(3_600_000, append(append([]string{}, kvBlocks...), "0:a=4")...)[3]
	publishAll(ctx, t, second, more)
	futs, err := p.Publish(ctx, more, testMetrics())
	if err == nil {
		errs := failures(ctx, t, futs)
		if len(errs) == 0 || !WrongLastSequence(errs[0]) {
			t.Fatalf("stale publisher's acknowledgements: %v, want a wrong last sequence", errs)
		}
	} else if !errors.Is(err, ErrOtherWriter) {
		t.Fatalf("stale publisher: %v, want ErrOtherWriter", err)
	}
	p.Reset()
	publishAll(ctx, t, p, blocks[2], more)
	want := strings.Replace(kvTable, "0:a=3@6", "0:a=4@7", 1)
	if got, info := table(ctx, t, p.JetStream()); got != want || info.State.LastSeq != 10 {
		t.Fatalf("after the next block: stream holds %s to sequence %d, want %s to 10", got, info.State.LastSeq, want)
	}
}

// TestPlainClientReadsTheTable reads a compacted topic's stream with
// nats.go alone, as any NATS client would: a key's latest record with one
// get, and the table with an ordered consumer.
func TestPlainClientReadsTheTable(t *testing.T) {
	ctx := context.Background()
	p := startPublisher(ctx, t)
	publishAll(ctx, t, p, keyedBlocks(3_600_000, kvBlocks...)...)
	js, err := jetstream.New(p.js.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "byzlog-kv")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "byzlog.$key.kv.0."+base64.RawURLEncoding.EncodeToString([]byte("a")))
	if err != nil || string(m.Data) != "3" || m.Header.Get("Byzlog-Offset") != "6" {
		t.Fatalf("GetLastMsgForSubject(a) = %v, %v; want value 3 at offset 6", m, err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for m := range batch.Messages() {
		if m.Headers().Get("Nats-TTL") != "" {
			continue // a tombstone: the key is deleted
		}
		key, err := base64.StdEncoding.DecodeString(m.Headers().Get("Byzlog-Key"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(m.Subject(), "."+base64.RawURLEncoding.EncodeToString(key)) {
			t.Errorf("message of key %q on %s", key, m.Subject())
		}
		rows = append(rows, string(key)+"="+string(m.Data()))
	}
	sortRows(rows)
	if got, want := strings.Join(rows, " "), "a=3 c=1 x=2 y=1"; got != want {
		t.Errorf("ordered consumer read %s, want %s", got, want)
	}
}

// TestTombstoneExpires: a tombstone goes after its TTL, by NATS's clock;
// an indexer replaying from before it then publishes the key's older
// records again, and the tombstone after them, so the table ends as it was.
func TestTombstoneExpires(t *testing.T) {
	ctx := context.Background()
	p := startPublisher(ctx, t)
	blocks := keyedBlocks(1000, "0:a=1 0:b=1", "0:b~")
	publishAll(ctx, t, p, blocks...)
	st, err := p.JetStream().Stream(ctx, layout.StreamName("kv"))
	if err != nil {
		t.Fatal(err)
	}
	b := layout.KeySubject("kv", 0, []byte("b"))
	if m, err := st.GetLastMsgForSubject(ctx, b); err != nil || m.Data != nil && len(m.Data) > 0 {
		t.Fatalf("b before its TTL: %v, %v; want its tombstone", m, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := st.GetLastMsgForSubject(ctx, b)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's tombstone still there 10 s after its 1 s TTL: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	second, err := New(ctx, p.js.Conn(), p.cfg, p.log)
	if err != nil {
		t.Fatal(err)
	}
	publishAll(ctx, t, second, blocks...)
	if m, err := st.GetLastMsgForSubject(ctx, b); err != nil || len(m.Data) != 0 || m.Header.Get(layout.HeaderOffset) != "2" {
		t.Fatalf("b after the replay: %v, %v; want its tombstone again", m, err)
	}
}
