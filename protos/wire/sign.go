package wire

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Signing: a producer batch (with optional zstd compression), an admin
// request and an offset commit are each signed with ed25519 over exactly the
// body bytes they carry, for one chain. This file is the one place that
// knows how a signed body is made; Verify is the rule every validator, the
// gateway and every client checks it with. A Signer never holds a key
// longer than its caller does.

// Signer signs for one key on one chain.
type Signer struct {
	key     ed25519.PrivateKey
	chainID string
}

// NewSigner returns a Signer for key on the chain named chainID.
func NewSigner(key ed25519.PrivateKey, chainID string) *Signer {
	return &Signer{key: key, chainID: chainID}
}

// PublicKey is the signer's ed25519 public key.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

var (
	encoderOnce sync.Once
	encoder     *zstd.Encoder
)

// zstdEncoder writes single-segment frames: they always declare their
// content size, which validators require to bound decompression up front.
func zstdEncoder() *zstd.Encoder {
	encoderOnce.Do(func() { encoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithSingleSegment(true)) })
	return encoder
}

// skippableMagic starts a zstd skippable frame (RFC 8878 3.1.2), which
// decoders pass over; a little-endian 4-byte payload size follows it.
const skippableMagic = 0x184D2A50

// padToRatio appends a zstd skippable frame to frame, a zstd frame of raw
// bytes, when frame is smaller than the chain's ratio allows
// (InflateAllowance): records that compress better than 256:1, as zeros or
// repeated text do, are sent with 1/256 of their size in bytes and so stay
// within the chain's rule, which bounds what a validator inflates by what
// it was sent. The padding costs at most 1/256 of the batch.
func padToRatio(frame []byte, raw int) []byte {
	if raw <= InflateAllowance(len(frame)) {
		return frame
	}
	need := (raw+MaxCompressionRatio-1)/MaxCompressionRatio - len(frame)
	payload := max(need-8, 0)
	frame = binary.LittleEndian.AppendUint32(frame, skippableMagic)
	frame = binary.LittleEndian.AppendUint32(frame, uint32(payload))
	return append(frame, make([]byte, payload)...)
}

// Batch signs a batch of records for topic/partition with the producer
// sequence seq, compressing the records with codec.
func (s *Signer) Batch(topic string, partition uint32, seq uint64, codec byzlogv1.Codec, records []*byzlogv1.Record) (*byzlogv1.SignedBatch, error) {
	return s.batch(&byzlogv1.BatchBody{Topic: topic, Partition: partition, Sequence: seq}, codec, records)
}

// PlainKafkaBatch is Batch for the records of a Kafka record batch that
// its producer compressed with kafkaCodec (Kafka's numbering, 0 none to 4
// zstd; BatchBody.kafka_codec).
func (s *Signer) PlainKafkaBatch(topic string, partition uint32, seq uint64, codec byzlogv1.Codec, kafkaCodec uint32, records []*byzlogv1.Record) (*byzlogv1.SignedBatch, error) {
	return s.batch(&byzlogv1.BatchBody{Topic: topic, Partition: partition, Sequence: seq, KafkaCodec: kafkaCodec}, codec, records)
}

// KafkaBatch signs the batch of an idempotent Kafka producer (producer id
// and epoch) whose first record has Kafka sequence baseSeq, compressed by
// its producer with kafkaCodec. The body is a function of its arguments
// alone, so any gateway that signs the same Kafka batch with the same key
// signs the same bytes, and the chain answers a retry through another
// gateway as a duplicate.
func (s *Signer) KafkaBatch(topic string, partition uint32, producerID int64, epoch, baseSeq int32, codec byzlogv1.Codec, kafkaCodec uint32, records []*byzlogv1.Record) (*byzlogv1.SignedBatch, error) {
	if producerID < 1 || epoch < 0 || epoch > MaxKafkaEpoch || baseSeq < 0 {
		return nil, fmt.Errorf("kafka producer id %d epoch %d sequence %d: want an id of 1 or more, an epoch in 0..%d and a sequence of 0 or more", producerID, epoch, MaxKafkaEpoch, baseSeq)
	}
	return s.batch(&byzlogv1.BatchBody{Topic: topic, Partition: partition, Sequence: uint64(baseSeq), KafkaCodec: kafkaCodec,
		Kafka: &byzlogv1.KafkaProducer{ProducerId: producerID, Epoch: epoch, RecordCount: uint32(len(records))}}, codec, records)
}

// TransactionalBatch is KafkaBatch for a batch of the producer's open
// Kafka transaction (KafkaProducer.transactional; rules version 8 on):
// producerID and epoch are the ones the chain gave its transactional id.
func (s *Signer) TransactionalBatch(topic string, partition uint32, producerID int64, epoch, baseSeq int32, codec byzlogv1.Codec, kafkaCodec uint32, records []*byzlogv1.Record) (*byzlogv1.SignedBatch, error) {
	if producerID < 1 || epoch < 0 || epoch > MaxKafkaEpoch || baseSeq < 0 {
		return nil, fmt.Errorf("kafka producer id %d epoch %d sequence %d: want an id of 1 or more, an epoch in 0..%d and a sequence of 0 or more", producerID, epoch, MaxKafkaEpoch, baseSeq)
	}
	return s.batch(&byzlogv1.BatchBody{Topic: topic, Partition: partition, Sequence: uint64(baseSeq), KafkaCodec: kafkaCodec,
		Kafka: &byzlogv1.KafkaProducer{ProducerId: producerID, Epoch: epoch, RecordCount: uint32(len(records)), Transactional: true}}, codec, records)
}

// Txn signs a step of Kafka transaction id (rules version 8 on) with the
// key's next nonce, with no expiry: op is a *TxnInit, *TxnEnd or
// *TxnOffsets.
func (s *Signer) Txn(nonce uint64, id string, op proto.Message) (*byzlogv1.TxnRequest, error) {
	return s.TxnUntil(nonce, 0, id, op)
}

// TxnUntil is Txn valid up to height expiry (0: no expiry).
func (s *Signer) TxnUntil(nonce uint64, expiry int64, id string, op proto.Message) (*byzlogv1.TxnRequest, error) {
	body := &byzlogv1.TxnBody{ChainId: s.chainID, Nonce: nonce, ExpiryHeight: expiry, TransactionalId: id}
	switch o := op.(type) {
	case *byzlogv1.TxnInit:
		body.Op = &byzlogv1.TxnBody_Init{Init: o}
	case *byzlogv1.TxnEnd:
		body.Op = &byzlogv1.TxnBody_End{End: o}
	case *byzlogv1.TxnOffsets:
		body.Op = &byzlogv1.TxnBody_Offsets{Offsets: o}
	default:
		return nil, fmt.Errorf("transaction step %T: want TxnInit, TxnEnd or TxnOffsets", op)
	}
	b, err := proto.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode transaction step: %w", err)
	}
	return &byzlogv1.TxnRequest{Body: b, ProducerKey: s.PublicKey(), Signature: ed25519.Sign(s.key, b)}, nil
}

func (s *Signer) batch(body *byzlogv1.BatchBody, codec byzlogv1.Codec, records []*byzlogv1.Record) (*byzlogv1.SignedBatch, error) {
	raw, err := proto.Marshal(&byzlogv1.RecordSet{Records: records})
	if err != nil {
		return nil, fmt.Errorf("encode records: %w", err)
	}
	body.ChainId, body.Codec, body.UncompressedSize, body.Records = s.chainID, codec, uint32(len(raw)), raw
	switch codec {
	case byzlogv1.Codec_CODEC_NONE:
	case byzlogv1.Codec_CODEC_ZSTD:
		body.Records = padToRatio(zstdEncoder().EncodeAll(raw, make([]byte, 0, len(raw)/2+64)), len(raw))
	default:
		return nil, fmt.Errorf("codec %v: wire knows none and zstd", codec)
	}
	b, err := proto.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode batch body: %w", err)
	}
	return &byzlogv1.SignedBatch{Body: b, ProducerKey: s.PublicKey(), Signature: ed25519.Sign(s.key, b)}, nil
}

// Admin signs an admin request with the key's next nonce, with no expiry.
func (s *Signer) Admin(nonce uint64, op isAdminOp) (*byzlogv1.AdminRequest, error) {
	return s.AdminUntil(nonce, 0, op)
}

// AdminUntil signs an admin request that may commit up to height expiry
// (0: any height), so that a request kept back by a gateway, say for a
// future nonce, cannot be played long after it was signed.
func (s *Signer) AdminUntil(nonce uint64, expiry int64, op isAdminOp) (*byzlogv1.AdminRequest, error) {
	body := &byzlogv1.AdminBody{ChainId: s.chainID, Nonce: nonce, ExpiryHeight: expiry}
	switch o := op.(type) {
	case *byzlogv1.CreateTopic:
		body.Op = &byzlogv1.AdminBody_CreateTopic{CreateTopic: o}
	case *byzlogv1.UpdateTopic:
		body.Op = &byzlogv1.AdminBody_UpdateTopic{UpdateTopic: o}
	case *byzlogv1.DeleteTopic:
		body.Op = &byzlogv1.AdminBody_DeleteTopic{DeleteTopic: o}
	case *byzlogv1.SetValidator:
		body.Op = &byzlogv1.AdminBody_SetValidator{SetValidator: o}
	case *byzlogv1.SetAdmins:
		body.Op = &byzlogv1.AdminBody_SetAdmins{SetAdmins: o}
	case *byzlogv1.SetIndexer:
		body.Op = &byzlogv1.AdminBody_SetIndexer{SetIndexer: o}
	case *byzlogv1.ScheduleUpgrade:
		body.Op = &byzlogv1.AdminBody_ScheduleUpgrade{ScheduleUpgrade: o}
	case *byzlogv1.DeleteRecords:
		body.Op = &byzlogv1.AdminBody_DeleteRecords{DeleteRecords: o}
	case *byzlogv1.CreateTopics:
		body.Op = &byzlogv1.AdminBody_CreateTopics{CreateTopics: o}
	default:
		return nil, fmt.Errorf("admin operation %T: want CreateTopic, CreateTopics, UpdateTopic, DeleteTopic, DeleteRecords, SetValidator, SetAdmins, SetIndexer or ScheduleUpgrade", op)
	}
	b, err := proto.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode admin body: %w", err)
	}
	return &byzlogv1.AdminRequest{Body: b, AdminKey: s.PublicKey(), Signature: ed25519.Sign(s.key, b)}, nil
}

// isAdminOp is one of *CreateTopic, *CreateTopics, *UpdateTopic,
// *DeleteTopic, *SetValidator, *SetAdmins, *SetIndexer, *ScheduleUpgrade,
// *DeleteRecords.
type isAdminOp = proto.Message

// MaxCosignatures bounds an AdminRequest's cosignatures: each costs every
// validator a signature check.
const MaxCosignatures = 16

// Cosign adds the key's signature of req's body to req, for an operation
// that needs the admin set's threshold. The body is signed as it is, nonce
// and expiry included, so every admin signs exactly what will commit.
func (s *Signer) Cosign(req *byzlogv1.AdminRequest) {
	req.Cosignatures = append(req.Cosignatures, &byzlogv1.AdminSignature{AdminKey: s.PublicKey(), Signature: ed25519.Sign(s.key, req.Body)})
}

// CommitOffsets signs a consumer group's offset commit with the key's next
// nonce, with no expiry.
func (s *Signer) CommitOffsets(nonce uint64, group string, rewind bool, offsets ...*byzlogv1.PartitionOffset) (*byzlogv1.CommitOffsets, error) {
	return s.CommitOffsetsUntil(nonce, 0, group, rewind, offsets...)
}

// CommitOffsetsUntil signs an offset commit that may commit up to height
// expiry (0: any height), as AdminUntil.
func (s *Signer) CommitOffsetsUntil(nonce uint64, expiry int64, group string, rewind bool, offsets ...*byzlogv1.PartitionOffset) (*byzlogv1.CommitOffsets, error) {
	return s.offsets(&byzlogv1.CommitOffsetsBody{ChainId: s.chainID, Group: group, Offsets: offsets, Nonce: nonce, Rewind: rewind, ExpiryHeight: expiry})
}

// DeleteOffsets signs the deletion of a group's offsets in the listed
// partitions (their offsets are ignored) or, with none, of the group
// (CommitOffsetsBody.delete; rules version 6 on).
func (s *Signer) DeleteOffsets(nonce uint64, group string, partitions ...*byzlogv1.PartitionOffset) (*byzlogv1.CommitOffsets, error) {
	return s.offsets(&byzlogv1.CommitOffsetsBody{ChainId: s.chainID, Group: group, Offsets: partitions, Nonce: nonce, Delete: true})
}

func (s *Signer) offsets(body *byzlogv1.CommitOffsetsBody) (*byzlogv1.CommitOffsets, error) {
	b, err := proto.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode offsets body: %w", err)
	}
	return &byzlogv1.CommitOffsets{Body: b, ConsumerKey: s.PublicKey(), Signature: ed25519.Sign(s.key, b)}, nil
}

// ProgressTx is the transaction of an indexer's signed report that it has
// published every block up to height.
func (s *Signer) ProgressTx(height int64) ([]byte, error) {
	b, err := proto.Marshal(&byzlogv1.IndexerProgressBody{ChainId: s.chainID, PublishedHeight: height})
	if err != nil {
		return nil, fmt.Errorf("encode progress body: %w", err)
	}
	return proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_IndexerProgress{IndexerProgress: &byzlogv1.IndexerProgress{
		Body: b, IndexerKey: s.PublicKey(), Signature: ed25519.Sign(s.key, b)}}})
}

// Verify reports whether sig is key's ed25519 signature over body: the one
// signature rule of every signed body.
func Verify(key, body, sig []byte) bool {
	return len(key) == ed25519.PublicKeySize && len(sig) == ed25519.SignatureSize && ed25519.Verify(ed25519.PublicKey(key), body, sig)
}

// BundleTx is the transaction of a bundle of signed batches.
func BundleTx(batches ...*byzlogv1.SignedBatch) ([]byte, error) {
	return proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{Batches: batches}}})
}

// AdminTx is the transaction of an admin request.
func AdminTx(req *byzlogv1.AdminRequest) ([]byte, error) {
	return proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_Admin{Admin: req}})
}

// TxnTx is the transaction of a Kafka transaction step.
func TxnTx(req *byzlogv1.TxnRequest) ([]byte, error) {
	return proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_Txn{Txn: req}})
}

// TxnExpireTx is the transaction that aborts transactional id's
// transaction once it has timed out.
func TxnExpireTx(id string) ([]byte, error) {
	return proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_TxnExpire{TxnExpire: &byzlogv1.TxnExpire{TransactionalId: id}}})
}

// OffsetsTx is the transaction of an offset commit.
func OffsetsTx(c *byzlogv1.CommitOffsets) ([]byte, error) {
	return proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_CommitOffsets{CommitOffsets: c}})
}
