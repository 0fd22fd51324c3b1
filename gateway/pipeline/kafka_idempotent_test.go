package pipeline_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// producerBatch is a client's v2 batch of values from an idempotent
// producer: batch.Encode's bytes with the producer fields set and the CRC
// computed again.
func producerBatch(pid int64, epoch int16, seq int32, values ...string) []byte {
	recs := make([]batch.Record, len(values))
	for i, v := range values {
		recs[i] = batch.Record{Value: []byte(v)}
	}
	b := batch.Encode(nil, 0, time.Now().UnixMilli(), recs)
	binary.BigEndian.PutUint16(b[21:], 0) // create time, uncompressed
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint32(b[53:], uint32(seq))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// kafkaClient is a franz-go client of the broker at addr that sends raw
// requests to it.
type kafkaClient struct {
	t  *testing.T
	cl *kgo.Client
}

func newKafkaClient(t *testing.T, addr string) *kafkaClient {
	// A produce's read deadline is its timeout plus this overhead (10 s by
	// default): a 2.5 MiB record under -race on a busy 2-core machine took
	// longer than 20 s once in clean-clone CI.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestTimeoutOverhead(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &kafkaClient{t, cl}
}

func (k *kafkaClient) request(ctx context.Context, req kmsg.Request) kmsg.Response {
	k.t.Helper()
	resp, err := k.cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		k.t.Fatalf("%T: %v", req, err)
	}
	return resp
}

func (k *kafkaClient) initProducerID(ctx context.Context, version, pid int64, epoch int16, txn *string) *kmsg.InitProducerIDResponse {
	k.t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = int16(version)
	req.ProducerID, req.ProducerEpoch, req.TransactionalID = pid, epoch, txn
	return k.request(ctx, req).(*kmsg.InitProducerIDResponse)
}

// produce sends one batch to topic k partition 0 with acks=all and returns
// the partition's answer: its error (nil for none) and base offset.
func (k *kafkaClient) produce(ctx context.Context, records []byte) (error, int64) {
	k.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 8, -1, 10_000
	tp := kmsg.NewProduceRequestTopicPartition()
	tp.Records = records
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.Partitions = "k", []kmsg.ProduceRequestTopicPartition{tp}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	p := k.request(ctx, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	return kerr.ErrorForCode(p.ErrorCode), p.BaseOffset
}

// TestKafkaFaceIdempotentProducer: an idempotent producer's retry is
// answered with the original offsets, also when sent to another gateway
// (a failover), and written once; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER,
// a new batch of an epoch fenced by a newer one INVALID_PRODUCER_EPOCH
// (a committed one still gets its offsets), and a transactional producer
// gets its producer id from the chain.
func TestKafkaFaceIdempotentProducer(t *testing.T) {
	gs := pipeline.StartTestGateways(t, 2, &byzlogv1.TopicState{Name: "k", Config: &byzlogv1.TopicConfig{Partitions: 3}})
	a, b := newKafkaClient(t, serveKafkaFace(t, gs[0], nil)), newKafkaClient(t, serveKafkaFace(t, gs[1], nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	id := a.initProducerID(ctx, 1, -1, -1, nil)
	if id.ErrorCode != 0 || id.ProducerID < 1 || id.ProducerEpoch != 0 {
		t.Fatalf("InitProducerId = error %d id %d epoch %d, want an id of 1 or more at epoch 0", id.ErrorCode, id.ProducerID, id.ProducerEpoch)
	}
	pid := id.ProducerID
	first := producerBatch(pid, 0, 0, "a", "b")
	steps := []struct {
		name   string
		via    *kafkaClient
		batch  []byte
		err    error
		offset int64
	}{
		{"the first batch", a, first, nil, 0},
		{"its retry through the other gateway", b, first, nil, 0},
		{"its retry through the first again", a, first, nil, 0},
		{"a gap (sequence 5, the next is 2)", a, producerBatch(pid, 0, 5, "x"), kerr.OutOfOrderSequenceNumber, -1},
		{"a batch inside the first", b, producerBatch(pid, 0, 1, "y"), kerr.OutOfOrderSequenceNumber, -1},
		{"the next batch, through the other gateway", b, producerBatch(pid, 0, 2, "c"), nil, 2},
		{"an unknown producer id", a, producerBatch(0, 0, 0, "z"), kerr.UnknownProducerID, -1},
	}
	run := func(steps []struct {
		name   string
		via    *kafkaClient
		batch  []byte
		err    error
		offset int64
	}) {
		for _, s := range steps {
			err, offset := s.via.produce(ctx, s.batch)
			if !errors.Is(err, s.err) || offset != s.offset {
				t.Fatalf("%s: error %v offset %d, want error %v offset %d", s.name, err, offset, s.err, s.offset)
			}
		}
	}
	run(steps)

	bumped := b.initProducerID(ctx, 3, pid, 0, nil)
	if bumped.ErrorCode != 0 || bumped.ProducerID != pid || bumped.ProducerEpoch != 1 {
		t.Fatalf("InitProducerId(bump id %d epoch 0) = error %d id %d epoch %d, want the id at epoch 1", pid, bumped.ErrorCode, bumped.ProducerID, bumped.ProducerEpoch)
	}
	run([]struct {
		name   string
		via    *kafkaClient
		batch  []byte
		err    error
		offset int64
	}{
		{"epoch 1 from sequence 0", a, producerBatch(pid, 1, 0, "d"), nil, 3},
		{"epoch 0 after epoch 1", b, producerBatch(pid, 0, 3, "e"), kerr.InvalidProducerEpoch, -1},
		{"a retry of epoch 0's first batch (committed: its offsets)", a, first, nil, 0},
	})
	// A transactional producer: no timeout is INVALID_TRANSACTION_TIMEOUT;
	// with one, the chain hands out the producer id (TestKafkaFaceTransactions
	// runs whole transactions).
	txn := "t1"
	if r := a.initProducerID(ctx, 1, -1, -1, &txn); r.ErrorCode != kerr.InvalidTransactionTimeout.Code {
		t.Errorf("InitProducerId(transactional id, no timeout) = error %d, want %d (INVALID_TRANSACTION_TIMEOUT)", r.ErrorCode, kerr.InvalidTransactionTimeout.Code)
	}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = 1, &txn, 60_000, -1, -1
	if r := a.request(ctx, req).(*kmsg.InitProducerIDResponse); r.ErrorCode != 0 || r.ProducerID < 1<<62 || r.ProducerEpoch != 0 {
		t.Errorf("InitProducerId(transactional id) = error %d id %d epoch %d, want a chain-given id at epoch 0", r.ErrorCode, r.ProducerID, r.ProducerEpoch)
	}
	if got := readPartition(ctx, t, gs[1], 0); got != "a,b,c,d" {
		t.Errorf("partition 0 = %s, want a,b,c,d (each record once)", got)
	}
}

// readPartition is topic k's partition p, as the chain holds it.
func readPartition(ctx context.Context, t *testing.T, g *pipeline.Gateway, p uint32) string {
	t.Helper()
	resp, err := g.Records(ctx, &byzlogv1.RecordsRequest{Topic: "k", Partition: p, MaxRecords: 100})
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for i, raw := range resp.Records {
		var r byzlogv1.StoredRecord
		if err := proto.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			out += ","
		}
		out += string(r.Value)
	}
	return out
}

// TestKafkaFaceIdempotentClient: franz-go's idempotent producer (its
// default) writes through the face, and every record is read once, in
// order.
func TestKafkaFaceIdempotentClient(t *testing.T) {
	addr, g := startKafkaFace(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("k"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := ""
	for i := range 100 {
		r := &kgo.Record{Value: []byte(fmt.Sprint(i)), Partition: 1}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce %s: %v", r.Value, err)
			}
		})
		if i > 0 {
			want += ","
		}
		want += fmt.Sprint(i)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readPartition(ctx, t, g, 1); got != want {
		t.Errorf("partition 1 = %s, want 0..99 once each, in order", got)
	}
}

// TestKafkaFaceLargeBatches: uncompressed batches of ~1 MB of small
// records are written (signed as byzlog records they are ~7% larger and
// passed the gateway's 1 MiB bundle bound, refused MESSAGE_TOO_LARGE,
// until the face signed large batches with zstd), 3 MiB of zeros are
// written (the signer pads their zstd frame to the chain's ratio), and a
// batch too large even so is MESSAGE_TOO_LARGE.
func TestKafkaFaceLargeBatches(t *testing.T) {
	addr, g := startKafkaFace(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("k"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Second), kgo.ProducerBatchMaxBytes(1_300_000), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// 100 B records with a header: ~113 B a record in a Kafka batch, ~8%
	// more in a byzlog record set.
	const n = 18_000
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := make([]byte, 100)
		_, _ = rand.Read(v)
		recs[i] = &kgo.Record{Value: v, Partition: 2, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("18,000 records of 100 B in uncompressed batches of up to 1.3 MB: %v", err)
	}
	resp, err := g.Records(ctx, &byzlogv1.RecordsRequest{Topic: "k", Partition: 2, Offset: n - 1})
	if err != nil || len(resp.Records) != 1 || resp.NextOffset != n {
		t.Fatalf("partition 2 after 18,000 records: next offset %d, %v", resp.GetNextOffset(), err)
	}

	// 3 MiB of zeros gzipped to a few KB: zstd would inflate more than
	// the chain lets a batch (256 times) and uncompressed they pass the
	// gateway's 1 MiB bound; the signer pads the frame to 12 KiB. Before
	// it did, this was MESSAGE_TOO_LARGE.
	zeros, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("k"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Second), kgo.ProducerBatchMaxBytes(4<<20), kgo.ProducerBatchCompression(kgo.GzipCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer zeros.Close()
	big := make([]byte, 1<<20)
	if err := zeros.ProduceSync(ctx, &kgo.Record{Value: big, Partition: 1}, &kgo.Record{Value: big, Partition: 1}, &kgo.Record{Value: big, Partition: 1}).FirstErr(); err != nil {
		t.Fatalf("3 records of 1 MiB of zeros, gzipped: %v", err)
	}
	if err := zeros.ProduceSync(ctx, &kgo.Record{Value: big[:300<<10], Partition: 1}).FirstErr(); err != nil {
		t.Fatalf("300 KiB of zeros, gzipped: %v", err)
	}
	if resp, err := g.Records(ctx, &byzlogv1.RecordsRequest{Topic: "k", Partition: 1, Offset: 3}); err != nil || len(resp.Records) != 1 || resp.NextOffset != 4 {
		t.Fatalf("partition 1 after 3 MiB and 300 KiB of zeros: next offset %d, %v; want 4", resp.GetNextOffset(), err)
	}

	raw := newKafkaClient(t, addr)
	big = make([]byte, 1200<<10)
	_, _ = rand.Read(big)
	err, offset := raw.produce(ctx, producerBatch(-1, -1, -1, string(big[:600<<10]), string(big[600<<10:])))
	if !errors.Is(err, kerr.MessageTooLarge) || offset != -1 {
		t.Fatalf("a 1.2 MB incompressible batch = %v at %d, want MESSAGE_TOO_LARGE", err, offset)
	}
}
