package attack

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"math/rand/v2"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// The attackers' transactions. Every builder is pure given its random
// source: the tests decode what each builds.

// CrashTopic is the topic name whose rejection message, cut at 256 bytes,
// once split the "…" that ends it: invalid UTF-8 in a protobuf string, and
// a panic in the app's marshalling.
var CrashTopic = strings.Repeat("\x01", 59) + strings.Repeat("a", 6)

// freshSigner is a new producer, consumer or would-be admin key: keys cost
// an attacker nothing.
func freshSigner(rng *rand.Rand, chainID string) *wire.Signer {
	return wire.NewSigner(freshKey(rng), chainID)
}

func freshKey(rng *rand.Rand) ed25519.PrivateKey {
	var seed [ed25519.SeedSize]byte
	for i := range seed {
		seed[i] = byte(rng.Uint32())
	}
	return ed25519.NewKeyFromSeed(seed[:])
}

func record(rng *rand.Rand, size int) *byzlogv1.Record {
	v := make([]byte, size)
	for i := range v {
		v[i] = 'a' + byte(rng.IntN(26))
	}
	return &byzlogv1.Record{Key: []byte("attack"), Value: v}
}

// crashBundle is a bundle of one correctly signed batch for CrashTopic.
func crashBundle(rng *rand.Rand, chainID string) ([]byte, error) {
	b, err := freshSigner(rng, chainID).Batch(CrashTopic, 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{record(rng, 8)})
	if err != nil {
		return nil, err
	}
	return wire.BundleTx(b)
}

// crashNames are topic names that put a multi-byte rune, or invalid
// UTF-8, where a message is cut or quoted.
func crashNames() []string {
	names := []string{CrashTopic, "\xff\xfe", strings.Repeat("é", 200), strings.Repeat("\x01", 300)}
	for n := 50; n < 70; n++ {
		names = append(names, strings.Repeat("\x01", n)+strings.Repeat("a", 80-n), strings.Repeat("é", n)+"\x02"+strings.Repeat("a", n%7))
	}
	return names
}

// fuzzTxs is the malformed corpus: random bytes, truncated and bit-flipped
// valid transactions, valid envelopes around garbage bodies, and signed
// batches for topic names made to break messages. The corpus is a
// function of rng's seed: the parts draw from it in this order.
func fuzzTxs(rng *rand.Rand, chainID, topic string) ([][]byte, error) {
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var txs [][]byte
	for _, n := range []int{0, 1, 2, 7, 64, 1000, 100_000} {
		txs = append(txs, garbage(n))
	}
	key := freshKey(rng)
	s := wire.NewSigner(key, chainID)
	b, err := s.Batch(topic, 0, 0, byzlogv1.Codec_CODEC_ZSTD, []*byzlogv1.Record{record(rng, 64), record(rng, 64)})
	if err != nil {
		return nil, err
	}
	valid, err := wire.BundleTx(b)
	if err != nil {
		return nil, err
	}
	off, err := s.CommitOffsets(0, "attack-fuzz", false, &byzlogv1.PartitionOffset{Topic: topic, Offset: 0})
	if err != nil {
		return nil, err
	}
	validOffsets, err := wire.OffsetsTx(off)
	if err != nil {
		return nil, err
	}
	txs = append(txs, mangled(rng, valid, validOffsets)...)
	bad, err := badEnvelopes(garbage, key, s.PublicKey(), b, chainID, topic)
	if err != nil {
		return nil, err
	}
	txs = append(txs, bad...)
	crash, err := crashTxs(rng, chainID)
	if err != nil {
		return nil, err
	}
	return append(txs, crash...), nil
}

// mangled is each valid transaction truncated at several points, then
// with one byte flipped, eight times over.
func mangled(rng *rand.Rand, valid ...[]byte) [][]byte {
	var txs [][]byte
	for _, v := range valid {
		for _, cut := range []int{1, 2, len(v) / 3, len(v) / 2, len(v) - 1} {
			txs = append(txs, v[:cut])
		}
		for i := 0; i < 8; i++ {
			f := append([]byte(nil), v...)
			f[rng.IntN(len(f))] ^= byte(1 + rng.IntN(255))
			txs = append(txs, f)
		}
	}
	return txs
}

// badEnvelopes are well-formed transactions around empty, garbage or
// half-valid contents (b is a valid batch to take parts from), and
// bodies that decode but hold nonsense, correctly signed with key.
func badEnvelopes(garbage func(int) []byte, key ed25519.PrivateKey, pub []byte, b *byzlogv1.SignedBatch, chainID, topic string) ([][]byte, error) {
	envelopes := []proto.Message{
		&byzlogv1.Tx{},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{}}},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{Batches: []*byzlogv1.SignedBatch{{}}}}},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{Batches: []*byzlogv1.SignedBatch{
			{Body: garbage(200), ProducerKey: garbage(32), Signature: garbage(64)}}}}},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{Batches: []*byzlogv1.SignedBatch{
			{Body: b.Body, ProducerKey: b.ProducerKey[:31], Signature: b.Signature}}}}},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_Admin{Admin: &byzlogv1.AdminRequest{Body: garbage(100), AdminKey: garbage(32), Signature: garbage(64)}}},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_CommitOffsets{CommitOffsets: &byzlogv1.CommitOffsets{Body: garbage(100), ConsumerKey: garbage(32), Signature: garbage(64)}}},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_Txn{Txn: &byzlogv1.TxnRequest{Body: garbage(100), ProducerKey: garbage(32), Signature: garbage(64)}}},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_TxnExpire{TxnExpire: &byzlogv1.TxnExpire{TransactionalId: strings.Repeat("\x01é", 100)}}},
		&byzlogv1.Tx{Kind: &byzlogv1.Tx_TxnExpire{TxnExpire: &byzlogv1.TxnExpire{}}},
	}
	// Transaction steps that decode but hold nonsense, correctly signed.
	for _, body := range []proto.Message{
		&byzlogv1.TxnBody{ChainId: chainID, TransactionalId: strings.Repeat("\x01é", 100), Op: &byzlogv1.TxnBody_Init{Init: &byzlogv1.TxnInit{TimeoutMs: 1 << 31}}},
		&byzlogv1.TxnBody{ChainId: chainID, TransactionalId: "t", Op: &byzlogv1.TxnBody_End{End: &byzlogv1.TxnEnd{ProducerId: -1, Epoch: -7, Commit: true}}},
		&byzlogv1.TxnBody{ChainId: chainID, TransactionalId: "t", Op: &byzlogv1.TxnBody_Offsets{Offsets: &byzlogv1.TxnOffsets{Group: strings.Repeat("\x00é", 100)}}},
		&byzlogv1.TxnBody{ChainId: chainID, TransactionalId: "t"},
	} {
		raw, err := proto.Marshal(body)
		if err != nil {
			return nil, err
		}
		envelopes = append(envelopes, &byzlogv1.Tx{Kind: &byzlogv1.Tx_Txn{Txn: &byzlogv1.TxnRequest{Body: raw, ProducerKey: pub, Signature: ed25519.Sign(key, raw)}}})
	}
	// Bodies that decode but hold nonsense, correctly signed.
	for _, body := range []proto.Message{
		&byzlogv1.BatchBody{ChainId: chainID, Topic: topic, Codec: byzlogv1.Codec_CODEC_ZSTD, UncompressedSize: 1 << 30, Records: garbage(100)},
		&byzlogv1.BatchBody{ChainId: chainID, Topic: topic, Codec: byzlogv1.Codec(77), Records: garbage(10)},
		&byzlogv1.BatchBody{ChainId: chainID, Topic: topic, Records: garbage(300)},
		&byzlogv1.BatchBody{ChainId: chainID, Topic: topic, Partition: 1 << 31},
	} {
		raw, err := proto.Marshal(body)
		if err != nil {
			return nil, err
		}
		envelopes = append(envelopes, &byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{Batches: []*byzlogv1.SignedBatch{
			{Body: raw, ProducerKey: pub, Signature: ed25519.Sign(key, raw)}}}}})
	}
	var txs [][]byte
	for _, m := range envelopes {
		raw, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		txs = append(txs, raw)
	}
	return txs, nil
}

// crashTxs are signed batches, each under a fresh key, for the topic
// names of crashNames.
func crashTxs(rng *rand.Rand, chainID string) ([][]byte, error) {
	var txs [][]byte
	for _, name := range crashNames() {
		b, err := rawTopicBatch(freshKey(rng), chainID, name)
		if err != nil {
			return nil, err
		}
		tx, err := wire.BundleTx(b)
		if err != nil {
			return nil, err
		}
		txs = append(txs, tx)
	}
	return txs, nil
}

// rawTopicBatch is a correctly signed batch of one record for a topic name
// that may be invalid UTF-8, which protobuf refuses to marshal: the body is
// marshalled with a placeholder of the name's length, then the name's
// bytes are put in its place.
func rawTopicBatch(key ed25519.PrivateKey, chainID, name string) (*byzlogv1.SignedBatch, error) {
	placeholder := strings.Repeat("\x7f", len(name))
	raw, err := proto.Marshal(&byzlogv1.RecordSet{Records: []*byzlogv1.Record{{Value: []byte("v")}}})
	if err != nil {
		return nil, err
	}
	body, err := proto.Marshal(&byzlogv1.BatchBody{ChainId: chainID, Topic: placeholder, UncompressedSize: uint32(len(raw)), Records: raw})
	if err != nil {
		return nil, fmt.Errorf("encode batch body: %w", err)
	}
	if bytes.Count(body, []byte(placeholder)) != 1 {
		return nil, fmt.Errorf("topic placeholder of %d bytes is not unique in the body", len(name))
	}
	body = bytes.Replace(body, []byte(placeholder), []byte(name), 1)
	return &byzlogv1.SignedBatch{Body: body, ProducerKey: key.Public().(ed25519.PublicKey), Signature: ed25519.Sign(key, body)}, nil
}

// futureBundle is a bundle of n batches from n fresh producers, each with
// a sequence 1..64 ahead of the next one (0): never valid, admitted by a
// mempool that lets producers queue ahead.
func futureBundle(rng *rand.Rand, chainID, topic string, partitions uint32, n int) ([]byte, error) {
	batches := make([]*byzlogv1.SignedBatch, n)
	for i := range batches {
		b, err := freshSigner(rng, chainID).Batch(topic, rng.Uint32N(partitions), 1+rng.Uint64N(64), byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{record(rng, 32)})
		if err != nil {
			return nil, err
		}
		batches[i] = b
	}
	return wire.BundleTx(batches...)
}

// futureAdmin is a topic creation from a fresh key with a nonce 1..64
// ahead: no admin signed it.
func futureAdmin(rng *rand.Rand, chainID string) ([]byte, error) {
	req, err := freshSigner(rng, chainID).Admin(1+rng.Uint64N(64), &byzlogv1.CreateTopic{
		Name: fmt.Sprintf("attack-admin-%d", rng.Uint32()), Config: &byzlogv1.TopicConfig{Partitions: 1}})
	if err != nil {
		return nil, err
	}
	return wire.AdminTx(req)
}

// paddedOffsets is an offset commit from a fresh key for a fresh group:
// offsets for partitions 0..n-1 of topic, each with metadata of
// metadataBytes, at nonce (0 is the key's next; more is ahead).
func paddedOffsets(rng *rand.Rand, chainID, topic string, n, metadataBytes int, nonce uint64) ([]byte, error) {
	pad := strings.Repeat("m", metadataBytes)
	offsets := make([]*byzlogv1.PartitionOffset, n)
	for i := range offsets {
		offsets[i] = &byzlogv1.PartitionOffset{Topic: topic, Partition: uint32(i), Offset: 0, Metadata: pad}
	}
	c, err := freshSigner(rng, chainID).CommitOffsets(nonce, fmt.Sprintf("attack-%x", rng.Uint64()), false, offsets...)
	if err != nil {
		return nil, err
	}
	return wire.OffsetsTx(c)
}

// offsetsFitting is how many offsets of metadataBytes each fit in a
// transaction of txBytes, at most max.
func offsetsFitting(txBytes, metadataBytes, topicLen, max int) int {
	per := metadataBytes + topicLen + 24 // field tags, lengths, partition and offset varints
	return min(max, (txBytes-256)/per)
}

// bombBatch is a batch from a fresh producer (sequence 0, so valid) of
// records records that carry headers empty headers each, zstd-compressed:
// small on the wire, large once decoded. Each record's one random value
// byte keeps the frame within the chain's compression ratio.
func bombBatch(rng *rand.Rand, chainID, topic string, records, headers int) (*byzlogv1.SignedBatch, error) {
	hs := make([]*byzlogv1.RecordHeader, headers)
	for i := range hs {
		hs[i] = &byzlogv1.RecordHeader{}
	}
	recs := make([]*byzlogv1.Record, records)
	for i := range recs {
		recs[i] = &byzlogv1.Record{Value: []byte{byte(rng.Uint32())}, Headers: hs}
	}
	return freshSigner(rng, chainID).Batch(topic, 0, 0, byzlogv1.Codec_CODEC_ZSTD, recs)
}

// bombShape is the records a bomb batch holds and the headers each
// carries: max_headers empty headers a record (2 bytes each encoded), and
// as many records as the chain takes in one batch: within
// max_batch_records, max_batch_bytes, and the inflated bytes of a
// transaction, where each header counts core.HeaderHeap. So a bomb is the
// most the chain's byte bounds let through and commit, and building one
// costs the attacker no more than max_batch_bytes.
func bombShape(l *byzlogv1.Limits) (records, headers int) {
	headers = int(l.MaxHeaders)
	encoded := 2*headers + 3 + 4 // headers, a 1-byte value, the record's tag and length
	inflated := encoded + headers*core.HeaderHeap
	return max(1, min(int(l.MaxBatchRecords), int(l.MaxBatchBytes)/encoded, int(l.MaxTxUncompressedBytes)/inflated-1)), headers
}

// resign is b signed by a fresh producer: the same records at sequence 0,
// a batch the chain has not seen, without encoding them again.
func resign(rng *rand.Rand, b *byzlogv1.SignedBatch) *byzlogv1.SignedBatch {
	key := freshKey(rng)
	return &byzlogv1.SignedBatch{Body: b.Body, ProducerKey: key.Public().(ed25519.PublicKey), Signature: ed25519.Sign(key, b.Body)}
}

// headerBombTx is a bundle of batches bomb batches, each of its own
// producer.
func headerBombTx(rng *rand.Rand, chainID, topic string, batches, records, headers int) ([]byte, error) {
	bomb, err := bombBatch(rng, chainID, topic, records, headers)
	if err != nil {
		return nil, err
	}
	out := make([]*byzlogv1.SignedBatch, batches)
	for i := range out {
		out[i] = resign(rng, bomb)
	}
	return wire.BundleTx(out...)
}

// validBatches are n batches from fresh producers at sequence 0, each of
// one small record: the body of a bad-last-signature bundle.
func validBatches(rng *rand.Rand, chainID, topic string, partitions uint32, n int) ([]*byzlogv1.SignedBatch, error) {
	out := make([]*byzlogv1.SignedBatch, n)
	for i := range out {
		b, err := freshSigner(rng, chainID).Batch(topic, rng.Uint32N(partitions), 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{record(rng, 16)})
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// badLastSignature is a bundle of valid followed by one more batch whose
// signature is random: every signature but the last checks out, so a
// validator that verifies them all before rejecting pays for every one.
func badLastSignature(rng *rand.Rand, chainID, topic string, valid []*byzlogv1.SignedBatch) ([]byte, error) {
	last, err := freshSigner(rng, chainID).Batch(topic, 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{record(rng, 16)})
	if err != nil {
		return nil, err
	}
	for i := range last.Signature {
		last.Signature[i] = byte(rng.Uint32())
	}
	return wire.BundleTx(append(append([]*byzlogv1.SignedBatch(nil), valid...), last)...)
}
