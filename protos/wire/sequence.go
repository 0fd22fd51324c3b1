package wire

import byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"

// Sequences: a byzlog producer numbers its batches in (producer key, topic,
// partition) 0, 1, 2, ...; an idempotent Kafka producer's batches, written
// through a gateway's Kafka face, carry Kafka's sequences instead, which
// count records, in a space of their own per producer id and epoch. These
// are the rules the chain applies and the gateway admits by.

// MaxKafkaEpoch is the largest Kafka producer epoch (an int16).
const MaxKafkaEpoch = 1<<15 - 1

// MaxKafkaLookahead bounds, in records, how far past a Kafka producer's
// next sequence CheckTx lets a batch wait for the ones before it (Kafka's
// sequences count records; the mempool's per-signer bounds still hold).
const MaxKafkaLookahead = 1 << 20

// Span is how far a batch moves its producer's next sequence: 1 for a
// byzlog batch, its record count for a Kafka producer's.
func Span(b *byzlogv1.BatchBody) uint64 {
	if b.Kafka != nil {
		return uint64(b.Kafka.RecordCount)
	}
	return 1
}

// Lookahead is how far past the next sequence CheckTx lets b's sequence run.
func Lookahead(b *byzlogv1.BatchBody) uint64 {
	if b.Kafka != nil {
		return MaxKafkaLookahead
	}
	return MaxLookahead
}

// NextSequence is the next sequence of b's sequence space, given its
// producer's stored state. A Kafka producer's newer epoch starts at 0;
// fenced is true when the state has seen a newer epoch than b's, which
// the chain refuses (CodeProducerFenced).
func NextSequence(ps *byzlogv1.ProducerState, b *byzlogv1.BatchBody) (next uint64, fenced bool) {
	if b.Kafka == nil {
		return ps.GetNextSequence(), false
	}
	switch epoch := ps.GetKafkaEpoch(); {
	case b.Kafka.Epoch < epoch:
		return ps.GetNextSequence(), true
	case b.Kafka.Epoch > epoch:
		return 0, false
	}
	return ps.GetNextSequence(), false
}
