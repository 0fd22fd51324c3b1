package kafka

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/gateway/kafka/batch"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// maxProducePartitions bounds the partitions of one Produce request handled
// at once; the rest wait for a slot.
const maxProducePartitions = 16

// Ordering. A connection's Produce requests are submitted in request order
// (conn.read runs produce's ordered part before it reads the next
// request): every batch of a request is admitted by the gateway, its place
// in its partition fixed, before any batch of the next request is signed.
// So batches of one connection for one partition reach the chain in the
// order the client sent them, however many requests it has in flight, as
// on a Kafka broker. Waiting for the answers is not ordered: the requests
// in flight wait for their blocks together, and their answers are written
// in request order (conn.write).

// produce submits every partition's batches, in order, and returns what
// waits for their answers: acks=0 nothing, acks=1 once the batches passed
// CheckTx, acks=all (-1) once they are committed in a block.
func (c *conn) produce(ctx context.Context, r *kmsg.ProduceRequest) answerer {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	ack, ackErr := produceAck(r.Acks)
	if ackErr == nil && r.TransactionID != nil && ack != byzlogv1.Ack_ACK_COMMIT {
		// A transaction's batches are answered once committed: its end
		// must not commit a batch a block refused after an earlier answer.
		ackErr = fmt.Errorf("transactional id %q: a transactional producer must use acks=all (-1)", *r.TransactionID)
	}
	slots := make(chan struct{}, maxProducePartitions)
	var wg sync.WaitGroup
	var writes []*partitionWrite
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
				continue
			}
			w := &partitionWrite{out: out}
			writes = append(writes, w)
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				c.submitPartition(ctx, rt.Topic, rp, ack, w)
			})
		}
		resp.Topics = append(resp.Topics, t)
	}
	wg.Wait() // every batch of this request is placed before the next request's
	return func(ctx context.Context) (kmsg.Response, error) {
		for _, w := range writes {
			wg.Go(func() { w.wait(ctx, ack) })
		}
		wg.Wait()
		if r.Acks == 0 {
			return nil, nil
		}
		return resp, nil
	}
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

// partitionWrite is one partition's part of a Produce request: its
// batches as submitted, in order, and the answer it builds.
type partitionWrite struct {
	out        *kmsg.ProduceResponseTopicPartition
	where      string // "topic T partition P", for messages
	idempotent bool
	submitted  []submittedBatch
	// err is the failure that stopped the submitting: the batches before
	// it were submitted, none after it.
	err error
}

// submittedBatch is one batch the gateway admitted, and what to do once
// its answer is known.
type submittedBatch struct {
	s        *pipeline.Submitted
	answered func(ok bool) // nil: nothing to do
}

// submitPartition decodes one partition's batches and submits each, in
// order, as a byzlog batch signed with the connection's key.
func (c *conn) submitPartition(ctx context.Context, topic string, rp kmsg.ProduceRequestTopicPartition, ack byzlogv1.Ack, w *partitionWrite) {
	w.out.BaseOffset, w.out.LogAppendTime, w.out.LogStartOffset = -1, -1, -1
	w.where = fmt.Sprintf("topic %s partition %d", wire.Quote(topic), rp.Partition)
	if err := wire.CheckTopicName(topic); err != nil {
		w.err = fmt.Errorf("%w: %w", errInvalidTopic, err)
		return
	}
	n, err := c.s.topics.partitions(ctx, topic)
	if err != nil {
		w.err = err
		return
	}
	if rp.Partition < 0 || uint32(rp.Partition) >= n {
		w.err = fmt.Errorf("%w: topic %s has no partition %d (it has %d)", errUnknownPartition, wire.Quote(topic), rp.Partition, n)
		return
	}
	batches, err := c.decode(ctx, rp.Records)
	if err != nil {
		w.err = fmt.Errorf("%s: %w", w.where, err)
		return
	}
	for i, b := range batches {
		w.idempotent = w.idempotent || b.ProducerID != -1
		sb, err := c.submitBatch(ctx, topic, uint32(rp.Partition), b, ack)
		if err != nil {
			w.err = fmt.Errorf("%s batch %d: %w", w.where, i, err)
			return
		}
		w.submitted = append(w.submitted, sb)
	}
}

// wait waits for every batch of the partition, in order (each must
// settle its sequence), and writes the answer: the first batch's base
// offset, or the first failure.
func (w *partitionWrite) wait(ctx context.Context, ack byzlogv1.Ack) {
	var first error
	for i, sb := range w.submitted {
		rc, err := sb.s.Wait(ctx)
		if sb.answered != nil {
			sb.answered(err == nil)
		}
		switch {
		case err != nil && first == nil:
			first = fmt.Errorf("%s batch %d: %w", w.where, i, err)
		case err == nil && i == 0 && ack == byzlogv1.Ack_ACK_COMMIT:
			w.out.BaseOffset = int64(rc.GetBaseOffset())
		}
	}
	if first == nil {
		// An earlier batch of the partition may have been written and a
		// later one not: the partition's answer is the failure, as one
		// batch a partition is what clients send.
		first = w.err
	}
	if first != nil {
		setProduceError(w.out, writeError(first, w.idempotent), first)
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

// submitBatch signs one Kafka batch as a byzlog batch and submits it:
// under the producer's own id, epoch and sequence for an idempotent
// producer, else under the next sequence the face keeps for the
// connection's key in the partition.
func (c *conn) submitBatch(ctx context.Context, topic string, partition uint32, b batch.Batch, ack byzlogv1.Ack) (submittedBatch, error) {
	signer := wire.NewSigner(c.principal.Key, c.s.b.ChainID())
	if err := c.chunkLarge(ctx, signer, topic, partition, &b); err != nil {
		return submittedBatch{}, err
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
	if b.ProducerID != -1 || b.Transactional {
		return c.submitIdempotent(ctx, signer, topic, partition, b, codec, records, ack)
	}
	pub := signer.PublicKey()
	seq, release, answered, err := c.s.seqs.take(ctx, pub, topic, partition)
	if err != nil {
		return submittedBatch{}, err
	}
	var sb *byzlogv1.SignedBatch
	if err = c.work(ctx, func() error {
		sb, err = signer.PlainKafkaBatch(topic, partition, seq, codec, uint32(b.Codec), records)
		return err
	}); err != nil {
		release(false, false)
		return submittedBatch{}, fmt.Errorf("sign batch: %w", err)
	}
	s, err := c.s.b.Log.Submit(ctx, sb, ack)
	if err != nil {
		release(false, true)
		return submittedBatch{}, err
	}
	release(true, false)
	return submittedBatch{s: s, answered: answered}, nil
}

// submitIdempotent signs an idempotent producer's batch under its Kafka
// producer id, epoch and sequence, which the chain checks: no sequence of
// this gateway's is involved, so a retry through any gateway is the same.
func (c *conn) submitIdempotent(ctx context.Context, signer *wire.Signer, topic string, partition uint32, b batch.Batch, codec byzlogv1.Codec, records []*byzlogv1.Record, ack byzlogv1.Ack) (submittedBatch, error) {
	if b.ProducerID < 1 || b.ProducerEpoch < 0 || b.BaseSequence < 0 {
		return submittedBatch{}, fmt.Errorf("%w: producer id %d epoch %d sequence %d: byzlog's producer ids are 1 or more (from InitProducerId), with an epoch and a sequence of 0 or more",
			errUnknownProducer, b.ProducerID, b.ProducerEpoch, b.BaseSequence)
	}
	var sb *byzlogv1.SignedBatch
	err := c.work(ctx, func() (err error) {
		if b.Transactional {
			sb, err = signer.TransactionalBatch(topic, partition, b.ProducerID, int32(b.ProducerEpoch), b.BaseSequence, codec, uint32(b.Codec), records)
		} else {
			sb, err = signer.KafkaBatch(topic, partition, b.ProducerID, int32(b.ProducerEpoch), b.BaseSequence, codec, uint32(b.Codec), records)
		}
		return err
	})
	if err != nil {
		return submittedBatch{}, fmt.Errorf("sign batch: %w", err)
	}
	s, err := c.s.b.Log.Submit(ctx, sb, ack)
	if err != nil {
		return submittedBatch{}, err
	}
	return submittedBatch{s: s}, nil
}
