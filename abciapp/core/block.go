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
// it has checked against headers verified by the light client.
func BlockRecords(height, timeUnixNano int64, txs [][]byte, results []TxResult) (Appended, error) {
	if len(txs) != len(results) {
		return Appended{}, fmt.Errorf("block %d has %d transactions and %d results", height, len(txs), len(results))
	}
	runs := map[string]*AppendedPartition{}
	var changes []TopicChange
	for i, tx := range txs {
		if results[i].Code != uint32(wire.CodeOK) {
			continue // rejected as a whole: nothing appended
		}
		var env byzlogv1.Tx
		if err := proto.Unmarshal(tx, &env); err != nil {
			return Appended{}, fmt.Errorf("block %d tx %d: committed but not a byzlog.v1.Tx: %w", height, i, err)
		}
		if adm := env.GetAdmin(); adm != nil {
			var body byzlogv1.AdminBody
			if err := proto.Unmarshal(adm.Body, &body); err != nil {
				return Appended{}, fmt.Errorf("block %d tx %d: committed admin body is not a byzlog.v1.AdminBody: %w", height, i, err)
			}
			switch {
			case body.GetCreateTopic() != nil:
				changes = append(changes, TopicChange{Name: body.GetCreateTopic().Name, Config: body.GetCreateTopic().Config})
			case body.GetUpdateTopic() != nil:
				changes = append(changes, TopicChange{Name: body.GetUpdateTopic().Name, Config: body.GetUpdateTopic().Config})
			case body.GetDeleteTopic() != nil:
				changes = append(changes, TopicChange{Name: body.GetDeleteTopic().Name, Deleted: true})
			}
			continue
		}
		bundle := env.GetProduceBundle()
		if bundle == nil {
			continue
		}
		var out byzlogv1.TxOutcome
		if err := proto.Unmarshal(results[i].Data, &out); err != nil {
			return Appended{}, fmt.Errorf("block %d tx %d: result data is not a byzlog.v1.TxOutcome: %w", height, i, err)
		}
		if len(out.Batches) != len(bundle.Batches) {
			return Appended{}, fmt.Errorf("block %d tx %d: %d batches, %d batch results", height, i, len(bundle.Batches), len(out.Batches))
		}
		for j, sb := range bundle.Batches {
			br := out.Batches[j]
			if br.Code != uint32(wire.CodeOK) || br.Duplicate || br.RecordCount == 0 {
				continue
			}
			recs, err := batchRecords(sb, br)
			if err != nil {
				return Appended{}, fmt.Errorf("block %d tx %d batch %d: %w", height, i, j, err)
			}
			key := string(cat([]byte(br.Topic), []byte{0}, be32(br.Partition)))
			run := runs[key]
			if run == nil {
				run = &AppendedPartition{Root: PartitionRoot{Topic: br.Topic, Partition: br.Partition, FirstOffset: br.BaseOffset}}
				runs[key] = run
			}
			if next := run.Root.FirstOffset + uint64(len(run.Records)); br.BaseOffset != next {
				return Appended{}, fmt.Errorf("block %d tx %d batch %d: %s/%d base offset %d, the block's previous batch ended before %d",
					height, i, j, br.Topic, br.Partition, br.BaseOffset, next)
			}
			for k, r := range recs {
				run.Records = append(run.Records, &byzlogv1.StoredRecord{
					Topic: br.Topic, Partition: br.Partition, Offset: br.BaseOffset + uint64(k),
					TimestampUnixNano: timeUnixNano, CreateTimeUnixNano: r.CreateTimeUnixNano,
					Key: r.Key, Value: r.Value, Headers: copyHeaders(r.Headers),
					ProducerKey: sb.ProducerKey, Sequence: br.Sequence, Height: height,
				})
			}
		}
	}
	keys := make([]string, 0, len(runs))
	for k := range runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	a := Appended{Topics: changes}
	for _, k := range keys {
		run := runs[k]
		leaves := make([][]byte, len(run.Records))
		for i, r := range run.Records {
			leaves[i] = marshal(r)
		}
		run.Root.Count, run.Root.Root = uint32(len(run.Records)), merkle.HashFromByteSlices(leaves)
		a.Partitions = append(a.Partitions, *run)
	}
	return a, nil
}

// batchRecords decodes a committed batch's records and checks them against
// its result.
func batchRecords(sb *byzlogv1.SignedBatch, br *byzlogv1.BatchResult) ([]*byzlogv1.Record, error) {
	var body byzlogv1.BatchBody
	if err := proto.Unmarshal(sb.Body, &body); err != nil {
		return nil, fmt.Errorf("body is not a byzlog.v1.BatchBody: %w", err)
	}
	if body.Topic != br.Topic || body.Partition != br.Partition || body.Sequence != br.Sequence {
		return nil, fmt.Errorf("body is %s/%d sequence %d, its result says %s/%d sequence %d",
			wire.Quote(body.Topic), body.Partition, body.Sequence, wire.Quote(br.Topic), br.Partition, br.Sequence)
	}
	if body.UncompressedSize > wire.MaxTxBytes*wire.MaxCompressionRatio {
		return nil, fmt.Errorf("declares %d bytes uncompressed", body.UncompressedSize)
	}
	raw, err := decompress(body.Codec, body.Records, int(body.UncompressedSize))
	if err != nil {
		return nil, err
	}
	var set byzlogv1.RecordSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("records are not a byzlog.v1.RecordSet: %w", err)
	}
	if len(set.Records) != int(br.RecordCount) {
		return nil, fmt.Errorf("holds %d records, its result says %d", len(set.Records), br.RecordCount)
	}
	return set.Records, nil
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
