package pipeline_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// consumeAll reads topic k's partition p from the start through the face
// at addr with opts until it has n records.
func consumeAll(ctx context.Context, t *testing.T, addr string, p int32, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"k": {p: kgo.NewOffset().AtStart()}})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("after %d of %d records: %v", len(out), n, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// TestKafkaFaceLargeRecords: a 2.5 MiB record, past the chain's 1 MiB
// record bound, is written in chunks and read whole, between two small
// records of its batch; an idempotent retry through another gateway is
// answered with the same offset and writes nothing; the chunks stay hidden
// from Kafka consumers, also from one whose fetches hold a chunk at a time;
// a manifest another key wrote over the chunks is not reassembled; and a
// record with the face's reserved header is INVALID_RECORD.
func TestKafkaFaceLargeRecords(t *testing.T) {
	gs := pipeline.StartTestGateways(t, 2, &byzlogv1.TopicState{Name: "k", Config: &byzlogv1.TopicConfig{Partitions: 3}})
	addrA, addrB := serveKafkaFace(t, gs[0], nil), serveKafkaFace(t, gs[1], nil)
	a, b := newKafkaClient(t, addrA), newKafkaClient(t, addrB)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	big := make([]byte, 5<<19)
	_, _ = rand.Read(big)
	pid := a.initProducerID(ctx, 1, -1, -1, nil).ProducerID
	first := producerBatch(pid, 0, 0, "a", string(big), "b")
	err, offset := a.produce(ctx, first)
	if err != nil || offset != 3 {
		t.Fatalf("a batch with a 2.5 MiB record = %v at %d, want offset 3 (after its 3 chunks)", err, offset)
	}
	if err, retried := b.produce(ctx, first); err != nil || retried != offset {
		t.Fatalf("its retry through the other gateway = %v at %d, want offset %d", err, retried, offset)
	}
	if resp, err := gs[1].Records(ctx, &byzlogv1.RecordsRequest{Topic: "k", Partition: 0, Offset: 5, MaxRecords: 10}); err != nil || resp.NextOffset != 6 {
		t.Fatalf("partition 0 after the retry: next offset %d, %v; want 6 (3 chunks and 3 records, once)", resp.GetNextOffset(), err)
	}

	for _, opts := range [][]kgo.Opt{nil, {kgo.FetchMaxPartitionBytes(64 << 10), kgo.FetchMaxBytes(64 << 10)}} {
		recs := consumeAll(ctx, t, addrB, 0, 3, opts...)
		if len(recs) != 3 || string(recs[0].Value) != "a" || !bytes.Equal(recs[1].Value, big) || string(recs[2].Value) != "b" {
			t.Fatalf("consumed %d records, want a, the 2.5 MiB record and b", len(recs))
		}
		if recs[1].Offset != 4 || len(recs[1].Headers) != 0 {
			t.Errorf("the large record is at offset %d with %d headers, want 4 and none", recs[1].Offset, len(recs[1].Headers))
		}
	}

	// Another key writes a manifest naming the chunks, with their hashes.
	chunks := make([]*byzlogv1.ChunkedValue_Chunk, 3)
	for i := range chunks {
		resp, err := gs[0].Records(ctx, &byzlogv1.RecordsRequest{Topic: "k", Partition: 0, Offset: uint64(i), MaxRecords: 1})
		if err != nil || len(resp.Records) != 1 {
			t.Fatalf("chunk at offset %d: %d records, %v", i, len(resp.GetRecords()), err)
		}
		var sr byzlogv1.StoredRecord
		if err := proto.Unmarshal(resp.Records[0], &sr); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(sr.Value)
		chunks[i] = &byzlogv1.ChunkedValue_Chunk{Offset: sr.Offset, Size: uint32(len(sr.Value)), Sha256: sum[:]}
	}
	manifest, err := proto.Marshal(&byzlogv1.ChunkedValue{Size: uint64(len(big)), Chunks: chunks})
	if err != nil {
		t.Fatal(err)
	}
	seed := sha256.Sum256([]byte("mallory"))
	sb, err := wire.NewSigner(ed25519.NewKeyFromSeed(seed[:]), gs[0].ChainID()).Batch("k", 0, 0, byzlogv1.Codec_CODEC_NONE,
		[]*byzlogv1.Record{{Headers: []*byzlogv1.RecordHeader{{Key: "byzlog.chunks", Value: manifest}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs[0].Produce(ctx, sb, byzlogv1.Ack_ACK_COMMIT); err != nil {
		t.Fatal(err)
	}
	recs := consumeAll(ctx, t, addrA, 0, 4)
	if forged := recs[3]; len(forged.Value) != 0 || len(forged.Headers) != 1 || forged.Headers[0].Key != "byzlog.chunks" {
		t.Errorf("another key's manifest over the chunks reads as %d bytes with %d headers, want it as stored (no value, the manifest header)", len(forged.Value), len(forged.Headers))
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrA), kgo.DefaultProduceTopic("k"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: "byzlog.chunk"}}}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Errorf("a record with the header byzlog.chunk = %v, want INVALID_RECORD", err)
	}
}
