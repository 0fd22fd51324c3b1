package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// maxProducePartitions bounds the partitions of one Produce request handled
// at once; the rest wait for a slot.
const maxProducePartitions = 16

// produce writes every partition's batches and answers each partition:
// acks=0 nothing, acks=1 once the batches passed CheckTx, acks=all
// (-1) once they are committed in a block.
func (c *conn) produce(ctx context.Context, r *kmsg.ProduceRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	ack, ackErr := produceAck(r.Acks)
	if ackErr == nil && r.TransactionID != nil {
		ackErr = fmt.Errorf("transactional id %q: byzlog has no Kafka transactions; produce without one", *r.TransactionID)
	}
	slots := make(chan struct{}, maxProducePartitions)
	var wg sync.WaitGroup
	for _, rt := range r.Topics {
		t := kmsg.NewProduceResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for i, rp := range rt.Partitions {
			out := &t.Partitions[i]
			*out = kmsg.NewProduceResponseTopicPartition()
			out.Partition = rp.Partition
			if ackErr != nil {
				setProduceError(out, kerr.InvalidRequiredAcks, ackErr)
				if r.TransactionID != nil {
					out.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
				}
				continue
			}
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				c.producePartition(ctx, rt.Topic, rp, ack, out)
			}()
		}
		resp.Topics = append(resp.Topics, t)
	}
	wg.Wait()
	if r.Acks == 0 {
		return nil
	}
	return resp
}

func produceAck(acks int16) (byzlogv1.Ack, error) {
	switch acks {
	case 0:
		return byzlogv1.Ack_ACK_NONE, nil
	case 1:
		return byzlogv1.Ack_ACK_MEMPOOL, nil
	case -1:
		return byzlogv1.Ack_ACK_COMMIT, nil
	}
	return 0, fmt.Errorf("acks %d: want 0, 1 or -1 (all)", acks)
}

func setProduceError(out *kmsg.ProduceResponseTopicPartition, code *kerr.Error, err error) {
	out.ErrorCode = code.Code
	out.ErrorMessage = message(err)
	out.BaseOffset = -1
}

// producePartition writes one partition's batches in order, each as one
// byzlog batch signed with the connection's key.
func (c *conn) producePartition(ctx context.Context, topic string, rp kmsg.ProduceRequestTopicPartition, ack byzlogv1.Ack, out *kmsg.ProduceResponseTopicPartition) {
	out.BaseOffset, out.LogAppendTime, out.LogStartOffset = -1, -1, -1
	fail := func(err error) { setProduceError(out, kafkaError(err), err) }
	n, err := c.s.topics.partitions(ctx, topic)
	if err != nil {
		fail(err)
		return
	}
	if rp.Partition < 0 || uint32(rp.Partition) >= n {
		setProduceError(out, kerr.UnknownTopicOrPartition, fmt.Errorf("topic %s has no partition %d (it has %d)", wire.Quote(topic), rp.Partition, n))
		return
	}
	batches, err := c.decode(ctx, rp.Records)
	if err != nil {
		fail(fmt.Errorf("topic %s partition %d: %w", wire.Quote(topic), rp.Partition, err))
		return
	}
	for i, b := range batches {
		rc, err := c.writeBatch(ctx, topic, uint32(rp.Partition), b, ack)
		if err != nil {
			fail(fmt.Errorf("topic %s partition %d batch %d: %w", wire.Quote(topic), rp.Partition, i, err))
			return
		}
		if i == 0 && ack == byzlogv1.Ack_ACK_COMMIT {
			out.BaseOffset = int64(rc.GetBaseOffset())
		}
	}
}

// decode reads a partition's record batches.
func (c *conn) decode(ctx context.Context, records []byte) (batches []batch.Batch, err error) {
	err = c.work(ctx, func() error {
		batches, err = batch.Decode(records, c.s.cfg.Batch)
		return err
	})
	return batches, err
}

// work runs f in one of MaxWorkers slots: decoding and signing cost CPU
// in proportion to what clients send.
func (c *conn) work(ctx context.Context, f func() error) error {
	select {
	case c.s.workers <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.s.workers }()
	return f()
}

// zstdFrom is the size of a Kafka batch's records above which the face
// signs them zstd-compressed even if the client did not compress: a byzlog
// record set is a little larger than Kafka's (a nanosecond create time, a
// tag a field), so a full 1 MB batch of small records would pass the
// gateway's 1 MiB bundle bound uncompressed. A constant, not a setting:
// every gateway must sign the same Kafka batch the same way.
const zstdFrom = 256 << 10

// signedCodec is how the face signs b's records: zstd when the client
// compressed them or they are large, as records alone decide.
func signedCodec(b batch.Batch) byzlogv1.Codec {
	if b.Codec != batch.CodecNone {
		return byzlogv1.Codec_CODEC_ZSTD
	}
	n := 0
	for _, r := range b.Records {
		n += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
	}
	return signedCodecOf(n)
}

// signedCodecOf is the codec of n uncompressed bytes: zstd past zstdFrom.
func signedCodecOf(n int) byzlogv1.Codec {
	if n > zstdFrom {
		return byzlogv1.Codec_CODEC_ZSTD
	}
	return byzlogv1.Codec_CODEC_NONE
}

// writeBatch signs one Kafka batch as a byzlog batch under the next
// sequence of the connection's key, and submits it.
func (c *conn) writeBatch(ctx context.Context, topic string, partition uint32, b batch.Batch, ack byzlogv1.Ack) (*byzlogv1.Receipt, error) {
	signer := wire.NewSigner(c.principal.Key, c.s.b.ChainID())
	if err := c.chunkLarge(ctx, signer, topic, partition, &b); err != nil {
		return nil, err
	}
	records := make([]*byzlogv1.Record, len(b.Records))
	for i, r := range b.Records {
		rec := &byzlogv1.Record{Key: r.Key, Value: r.Value, CreateTimeUnixNano: r.TimestampMs * 1e6}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, &byzlogv1.RecordHeader{Key: h.Key, Value: h.Value})
		}
		records[i] = rec
	}
	codec := signedCodec(b)
	if b.ProducerID != -1 {
		return c.writeIdempotent(ctx, signer, topic, partition, b, codec, records, ack)
	}
	pub := signer.PublicKey()
	seq, release, err := c.s.seqs.take(ctx, pub, topic, partition)
	if err != nil {
		return nil, err
	}
	var sb *byzlogv1.SignedBatch
	if err = c.work(ctx, func() error {
		sb, err = signer.Batch(topic, partition, seq, codec, records)
		return err
	}); err != nil {
		release(false)
		return nil, fmt.Errorf("sign batch: %w", err)
	}
	release(true)
	rc, err := c.s.b.Produce(ctx, sb, ack)
	if err != nil {
		c.s.seqs.failed(pub, topic, partition)
		return nil, err
	}
	return rc, nil
}

// writeIdempotent signs an idempotent producer's batch under its Kafka
// producer id, epoch and sequence, which the chain checks: no sequence of
// this gateway's is involved, so a retry through any gateway is the same.
func (c *conn) writeIdempotent(ctx context.Context, signer *wire.Signer, topic string, partition uint32, b batch.Batch, codec byzlogv1.Codec, records []*byzlogv1.Record, ack byzlogv1.Ack) (*byzlogv1.Receipt, error) {
	if b.ProducerID < 1 || b.ProducerEpoch < 0 || b.BaseSequence < 0 {
		return nil, fmt.Errorf("%w: producer id %d epoch %d sequence %d: byzlog's producer ids are 1 or more (from InitProducerId), with an epoch and a sequence of 0 or more",
			errUnknownProducer, b.ProducerID, b.ProducerEpoch, b.BaseSequence)
	}
	var sb *byzlogv1.SignedBatch
	err := c.work(ctx, func() (err error) {
		sb, err = signer.KafkaBatch(topic, partition, b.ProducerID, int32(b.ProducerEpoch), b.BaseSequence, codec, records)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sign batch: %w", err)
	}
	return c.s.b.Produce(ctx, sb, ack)
}
