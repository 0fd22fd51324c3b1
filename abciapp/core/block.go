package core

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/cometbft/cometbft/crypto/merkle"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// TxResult is what a committed block's results say of one transaction: its
// ExecTxResult code and data.
type TxResult struct {
	Code uint32
	Data []byte
}

// Appended is one committed block's records, as the state machine stored
// them, grouped per partition in (topic, partition) order.
type Appended struct {
	Partitions []AppendedPartition
	// Topics are the topics the block created or deleted, in block order.
	Topics []TopicChange
}

// TopicChange is a topic created, updated or deleted by a committed admin
// request; Config is the topic's config after a create or an update.
type TopicChange struct {
	Name    string
	Deleted bool
	Config  *byzlogv1.TopicConfig
}

// AppendedPartition is the records one block appended to one partition, in
// offset order, with the root the block's app hash commits to.
type AppendedPartition struct {
	Root    PartitionRoot
	Records []*byzlogv1.StoredRecord
}

// Count is the number of records appended.
func (a Appended) Count() int {
	n := 0
	for _, p := range a.Partitions {
		n += len(p.Records)
	}
	return n
}

// RecordsRoot is the records_root of the block's digest.
func (a Appended) RecordsRoot() []byte {
	items := make([][]byte, len(a.Partitions))
	for i, p := range a.Partitions {
		items[i] = p.Root.Item()
	}
	return merkle.HashFromByteSlices(items)
}

// BlockRecords rebuilds the records a committed block appended from its
// transactions and their results, byte for byte as Execute stored them. It
// trusts neither: a result that does not match its transaction is an error.
// It is pure; the indexer runs it on a block whose transactions and results
// it has checked against headers verified by the light client. rules is the
// rules version the block executed under, as far as it changes the stored
// bytes: before KafkaRulesVersion an empty key, value or header value is
// stored null (a reader that does not know the version builds both and
// keeps the one the app hash confirms: CheckDigest).
func BlockRecords(height, timeUnixNano int64, txs [][]byte, results []TxResult, rules uint64) (Appended, error) {
	if len(txs) != len(results) {
		return Appended{}, fmt.Errorf("block %d has %d transactions and %d results", height, len(txs), len(results))
	}
	b := blockAppends{height: height, timeUnixNano: timeUnixNano, rules: rules, runs: map[string]*AppendedPartition{}}
	for i, tx := range txs {
		if results[i].Code != uint32(wire.CodeOK) {
			continue // rejected as a whole: nothing appended
		}
		var env byzlogv1.Tx
		if err := proto.Unmarshal(tx, &env); err != nil {
			return Appended{}, fmt.Errorf("block %d tx %d: committed but not a byzlog.v1.Tx: %w", height, i, err)
		}
		if err := b.tx(i, &env, results[i]); err != nil {
			return Appended{}, err
		}
	}
	return b.appended(), nil
}

// blockAppends gathers what a block's committed transactions appended.
type blockAppends struct {
	height, timeUnixNano int64
	rules                uint64
	runs                 map[string]*AppendedPartition // by topic, NUL, partition
	changes              []TopicChange
}

// tx adds what committed transaction i appended or changed.
func (b *blockAppends) tx(i int, env *byzlogv1.Tx, result TxResult) error {
	if adm := env.GetAdmin(); adm != nil {
		var body byzlogv1.AdminBody
		if err := proto.Unmarshal(adm.Body, &body); err != nil {
			return fmt.Errorf("block %d tx %d: committed admin body is not a byzlog.v1.AdminBody: %w", b.height, i, err)
		}
		switch {
		case body.GetCreateTopic() != nil:
			b.changes = append(b.changes, TopicChange{Name: body.GetCreateTopic().Name, Config: body.GetCreateTopic().Config})
		case body.GetCreateTopics() != nil:
			for _, c := range body.GetCreateTopics().Topics {
				b.changes = append(b.changes, TopicChange{Name: c.Name, Config: c.Config})
			}
		case body.GetUpdateTopic() != nil:
			b.changes = append(b.changes, TopicChange{Name: body.GetUpdateTopic().Name, Config: body.GetUpdateTopic().Config})
		case body.GetDeleteTopic() != nil:
			b.changes = append(b.changes, TopicChange{Name: body.GetDeleteTopic().Name, Deleted: true})
		}
		return nil
	}
	if env.GetTxn() != nil || env.GetTxnExpire() != nil {
		return b.markers(i, result)
	}
	bundle := env.GetProduceBundle()
	if bundle == nil {
		return nil
	}
	var out byzlogv1.TxOutcome
	if err := proto.Unmarshal(result.Data, &out); err != nil {
		return fmt.Errorf("block %d tx %d: result data is not a byzlog.v1.TxOutcome: %w", b.height, i, err)
	}
	if len(out.Batches) != len(bundle.Batches) {
		return fmt.Errorf("block %d tx %d: %d batches, %d batch results", b.height, i, len(bundle.Batches), len(out.Batches))
	}
	for j, sb := range bundle.Batches {
		if err := b.batch(sb, out.Batches[j]); err != nil {
			return fmt.Errorf("block %d tx %d batch %d: %w", b.height, i, j, err)
		}
	}
	return nil
}

// markers appends the transaction markers committed transaction step i
// wrote, as its outcome lists them.
func (b *blockAppends) markers(i int, result TxResult) error {
	var out byzlogv1.TxnOutcome
	if err := proto.Unmarshal(result.Data, &out); err != nil {
		return fmt.Errorf("block %d tx %d: result data is not a byzlog.v1.TxnOutcome: %w", b.height, i, err)
	}
	m := out.Markers
	for _, p := range m.GetPartitions() {
		run := b.run(p.Topic, p.Partition, p.Offset)
		if next := run.Root.FirstOffset + uint64(len(run.Records)); p.Offset != next {
			return fmt.Errorf("block %d tx %d: %s/%d marker at %d, the block's previous record ended before %d", b.height, i, p.Topic, p.Partition, p.Offset, next)
		}
		run.Records = append(run.Records, storedMarker(m, p.Topic, p.Partition, p.Offset, b.height, b.timeUnixNano))
	}
	return nil
}

// run is the partition's run of the block, started at first if it has
// none yet.
func (b *blockAppends) run(topic string, partition uint32, first uint64) *AppendedPartition {
	key := string(cat([]byte(topic), []byte{0}, be32(partition)))
	run := b.runs[key]
	if run == nil {
		run = &AppendedPartition{Root: PartitionRoot{Topic: topic, Partition: partition, FirstOffset: first}}
		b.runs[key] = run
	}
	return run
}

// batch appends a committed batch's records to its partition's run.
func (b *blockAppends) batch(sb *byzlogv1.SignedBatch, br *byzlogv1.BatchResult) error {
	if br.Code != uint32(wire.CodeOK) || br.Duplicate || br.RecordCount == 0 {
		return nil
	}
	body, recs, err := batchRecords(sb, br)
	if err != nil {
		return err
	}
	run := b.run(br.Topic, br.Partition, br.BaseOffset)
	if next := run.Root.FirstOffset + uint64(len(run.Records)); br.BaseOffset != next {
		return fmt.Errorf("%s/%d base offset %d, the block's previous batch ended before %d", br.Topic, br.Partition, br.BaseOffset, next)
	}
	for k, r := range recs {
		run.Records = append(run.Records, storedRecord(body, br.BaseOffset+uint64(k), r, sb.ProducerKey, b.height, b.timeUnixNano, b.rules))
	}
	return nil
}

// appended is the block's topic changes and its runs in key order, each
// with its Merkle root.
func (b *blockAppends) appended() Appended {
	keys := make([]string, 0, len(b.runs))
	for k := range b.runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	a := Appended{Topics: b.changes}
	for _, k := range keys {
		run := b.runs[k]
		leaves := make([][]byte, len(run.Records))
		for i, r := range run.Records {
			leaves[i] = marshal(r)
		}
		run.Root.Count, run.Root.Root = uint32(len(run.Records)), merkle.HashFromByteSlices(leaves)
		a.Partitions = append(a.Partitions, *run)
	}
	return a
}

// storedRecord is a record as the log stores it at offset, written by
// Execute and rebuilt by BlockRecords: the one place its fields are set, so
// the two stay byte-identical.
func storedRecord(body *byzlogv1.BatchBody, offset uint64, r *byzlogv1.Record, producer []byte, height, timeUnixNano int64, rules uint64) *byzlogv1.StoredRecord {
	var codec uint32
	if rules >= KafkaTopicsRulesVersion {
		codec = body.KafkaCodec
	}
	return &byzlogv1.StoredRecord{
		Topic: body.Topic, Partition: body.Partition, Offset: offset,
		TimestampUnixNano: timeUnixNano, CreateTimeUnixNano: r.CreateTimeUnixNano,
		Key: stored(r.Key, rules), Value: stored(r.Value, rules), Headers: copyHeaders(r.Headers, rules),
		ProducerKey: producer, Sequence: body.Sequence, Height: height,
		KafkaProducerId: body.Kafka.GetProducerId(), KafkaEpoch: body.Kafka.GetEpoch(), KafkaCodec: codec,
		KafkaTransactional: rules >= TxnRulesVersion && body.Kafka.GetTransactional(),
	}
}

// batchRecords decodes a committed batch's records and checks them against
// its result.
func batchRecords(sb *byzlogv1.SignedBatch, br *byzlogv1.BatchResult) (*byzlogv1.BatchBody, []*byzlogv1.Record, error) {
	var body byzlogv1.BatchBody
	if err := proto.Unmarshal(sb.Body, &body); err != nil {
		return nil, nil, fmt.Errorf("body is not a byzlog.v1.BatchBody: %w", err)
	}
	if body.Topic != br.Topic || body.Partition != br.Partition || body.Sequence != br.Sequence {
		return nil, nil, fmt.Errorf("body is %s/%d sequence %d, its result says %s/%d sequence %d",
			wire.Quote(body.Topic), body.Partition, body.Sequence, wire.Quote(br.Topic), br.Partition, br.Sequence)
	}
	if body.UncompressedSize > wire.MaxTxBytes*wire.MaxCompressionRatio {
		return nil, nil, fmt.Errorf("declares %d bytes uncompressed", body.UncompressedSize)
	}
	raw, err := decompress(body.Codec, body.Records, int(body.UncompressedSize))
	if err != nil {
		return nil, nil, err
	}
	var set byzlogv1.RecordSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		return nil, nil, fmt.Errorf("records are not a byzlog.v1.RecordSet: %w", err)
	}
	if len(set.Records) != int(br.RecordCount) {
		return nil, nil, fmt.Errorf("holds %d records, its result says %d", len(set.Records), br.RecordCount)
	}
	return &body, set.Records, nil
}

// CheckDigest checks a block's rebuilt records against the digest a node
// reports for the block and against the app hashes of verified headers:
// prevAppHash is the app hash before the block (in its own header),
// appHash the one after it (in the next header). A node can lie about the
// digest, but not so that both hashes still match.
func CheckDigest(a Appended, d *byzlogv1.BlockDigest, height int64, prevAppHash, appHash []byte) error {
	if d.Height != height {
		return fmt.Errorf("digest is of height %d, want %d", d.Height, height)
	}
	if !bytes.Equal(d.PrevAppHash, prevAppHash) {
		return fmt.Errorf("height %d: digest's previous app hash %X, the verified header's %X", height, d.PrevAppHash, prevAppHash)
	}
	if len(d.Partitions) != len(a.Partitions) {
		return fmt.Errorf("height %d: digest lists %d partitions, the block's transactions append to %d", height, len(d.Partitions), len(a.Partitions))
	}
	for i, p := range a.Partitions {
		if !bytes.Equal(partitionItem(d.Partitions[i]), p.Root.Item()) {
			return fmt.Errorf("height %d: %s/%d: records rebuilt from the block (offsets %d..+%d) differ from the digest's",
				height, p.Root.Topic, p.Root.Partition, p.Root.FirstOffset, p.Root.Count)
		}
	}
	if got := chainStep(prevAppHash, height, a.RecordsRoot(), d.MetaRoot); !bytes.Equal(got, appHash) {
		return fmt.Errorf("height %d: records and digest yield app hash %X, the verified header says %X", height, got, appHash)
	}
	return nil
}
