package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// TestKafkaFaceReadsACompactedTopic: franz-go at its defaults writes 10
// keys × 5 versions and tombstones for 2 keys to a compacted topic;
// once compaction has passed them (and the tombstones' retention), a
// consumer from the beginning reads exactly the latest record of each
// live key, in increasing offsets, and its position reaches the log end
// over the holes; a record without a key is refused with INVALID_RECORD.
func TestKafkaFaceReadsACompactedTopic(t *testing.T) {
	zero := int64(0)
	g := pipeline.StartTestGateway(t, &byzlogv1.TopicState{Name: "table", Config: &byzlogv1.TopicConfig{
		Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, DeleteRetentionMs: &zero}})
	addr := serveKafkaFace(t, g, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("table"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for v := range 5 {
		var recs []*kgo.Record
		for k := range 10 {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "k%d-v%d", k, v)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce version %d: %v", v, err)
		}
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte("k0")}, &kgo.Record{Key: []byte("k1")}).FirstErr(); err != nil {
		t.Fatalf("produce tombstones: %v", err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("no key")}).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Errorf("a record without a key = %v, want INVALID_RECORD", err)
	}
	const end = 52 // 50 records and 2 tombstones

	// Compaction runs at each block's start: wait until a consumer from
	// the beginning reads one record a live key.
	var got map[string]string
	var offsets []int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, offsets = readAllKafka(ctx, t, addr, "table")
		if len(offsets) == 8 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(offsets) != 8 || len(got) != 8 {
		t.Fatalf("read %d records of %d keys (%v), want one record of each of the 8 live keys", len(offsets), len(got), got)
	}
	if next, hwm := fetchedTo(ctx, t, prod, "table"); hwm != end || next != end {
		t.Errorf("a consumer from 0 is left at %d, the high watermark is %d; want both at %d (the holes passed)", next, hwm, end)
	}
	for k := 2; k < 10; k++ {
		if v := got[fmt.Sprintf("k%d", k)]; v != fmt.Sprintf("k%d-v4", k) {
			t.Errorf("k%d = %q, want its latest, k%d-v4", k, v, k)
		}
	}
	for i := 1; i < len(offsets); i++ {
		if offsets[i] <= offsets[i-1] {
			t.Fatalf("offsets %v do not increase", offsets)
		}
	}
}

// readAllKafka consumes topic from the beginning with franz-go until a
// poll brings nothing for a second, and returns each key's last value and
// every record's offset.
func readAllKafka(ctx context.Context, t *testing.T, addr, topic string) (map[string]string, []int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]string{}
	var offsets []int64
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			return got, offsets
		}
		fs.EachRecord(func(r *kgo.Record) {
			offsets = append(offsets, r.Offset)
			if r.Value == nil {
				delete(got, string(r.Key))
			} else {
				got[string(r.Key)] = string(r.Value)
			}
		})
	}
}

// fetchedTo fetches topic/0 from offset 0 as a Kafka consumer does, going
// on from each batch's last offset (empty batches included), and returns
// where that leaves the consumer and the high watermark.
func fetchedTo(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) (int64, int64) {
	t.Helper()
	next, hwm := int64(0), int64(-1)
	for range 100 {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MaxBytes = 100, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = topic
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.FetchOffset, fp.PartitionMaxBytes = next, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			t.Fatalf("fetch from %d: %v", next, err)
		}
		hwm = p.HighWatermark
		moved := false
		for b := p.RecordBatches; len(b) > 0; {
			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(b); err != nil {
				t.Fatal(err)
			}
			if last := rb.FirstOffset + int64(rb.LastOffsetDelta) + 1; last > next {
				next, moved = last, true
			}
			b = b[12+rb.Length:]
		}
		if next >= hwm || !moved {
			break
		}
	}
	return next, hwm
}
