package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/chain/stateproof"
)

// Table reads a compacted topic as a key-value table: each key's latest
// record, proven against a header the client's light client verified
// (the chain's rules version 10 on), so neither the gateway nor the node
// that answered need be trusted.
//
// A proof of an older height is a true statement about the past, so a
// lying node or gateway could answer with one: Get refuses an answer whose
// verified header is older than MaxAge by the local clock, and
// GetPartition one whose compaction has not passed the offsets a caller
// asks for (minClean: a producer that wrote the key at offset o passes
// o+1 to read its own write, which compaction passes at the start of the
// block after the write's, min.compaction.lag.ms permitting).
type Table struct {
	conn   *grpc.ClientConn
	gw     byzlogv1.GatewayClient
	verify *receipt.Verifier
	// MaxAge bounds how old the verified header after an answer's height
	// may be (DefaultMaxAge; 0: no bound).
	MaxAge time.Duration
}

// DefaultMaxAge is a Table's MaxAge: blocks come every few hundred
// milliseconds, so an answer proven by a header a minute old is stale.
const DefaultMaxAge = time.Minute

// ErrStale means an answer was proven, but for a height older than the
// reader accepts: a node or gateway may be hiding later writes.
var ErrStale = errors.New("the proven answer is older than asked for")

// Latest is what a proven answer says of a key (stateproof.Latest): as of block
// Height, compaction has passed the partition's records below CleanOffset
// (of NextOffset written), and among them the key's latest is Record, or
// there is none (Tombstone: deleted; Removed: retention removed it). A
// record written after CleanOffset is not yet in the answer: compaction
// passes each block's records at the start of the next.
type Latest = stateproof.Latest

// NewTable connects to one gateway. trust must verify (TrustGenesis or
// TrustHeader): a table read is worth only its proof. Of opts, only the
// transport options (WithTLS, WithInsecure) apply.
func NewTable(gateway string, trust Trust, opts ...Option) (*Table, error) {
	if trust.Validate("byzlog table") == nil && !trust.Verifies() {
		return nil, errors.New("byzlog table: a table read is checked against a verified header: trust a genesis file or a header, not the gateway")
	}
	c, err := dialOne("byzlog table", gateway, trust, opts)
	if err != nil {
		return nil, err
	}
	return &Table{conn: c.conn, gw: c.gw, verify: c.verify, MaxAge: DefaultMaxAge}, nil
}

// Close closes the connection.
func (t *Table) Close() error { return t.conn.Close() }

// Get is key's latest record in topic, in the partition Kafka's default
// partitioner puts the key in (KafkaPartition over the topic's partition
// count, which the proof itself confirms).
func (t *Table) Get(ctx context.Context, topic string, key []byte) (*Latest, error) {
	d, err := t.gw.DescribeTopic(ctx, &byzlogv1.DescribeTopicRequest{Name: topic})
	if err != nil {
		return nil, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	n := d.GetTopic().GetConfig().GetPartitions()
	if n == 0 {
		return nil, fmt.Errorf("topic %s: the gateway says it has no partitions", topic)
	}
	// The gateway's partition count may not be the chain's (or the
	// topic's partitions may grow meanwhile): ask again in the partition
	// the proven count gives, until the two agree.
	for range 3 {
		l, err := t.GetPartition(ctx, topic, KafkaPartition(key, n), key, 0)
		if err != nil || l.Partitions == n {
			return l, err
		}
		n = l.Partitions
	}
	return nil, fmt.Errorf("%w: topic %s: the proven partition count kept changing", ErrUnverified, topic)
}

// GetPartition is key's latest record in topic/partition, from an answer
// whose compaction had passed at least minClean records (0: any).
func (t *Table) GetPartition(ctx context.Context, topic string, partition uint32, key []byte, minClean uint64) (*Latest, error) {
	lp, err := t.gw.GetLatest(ctx, &byzlogv1.LatestRequest{Topic: topic, Partition: partition, Key: bytes.Clone(key)})
	if err != nil {
		return nil, fmt.Errorf("latest of key %x in %s/%d: %w", key, topic, partition, err)
	}
	h := lp.GetState().GetHeight()
	if h <= 0 {
		return nil, fmt.Errorf("%w: latest of key %x in %s/%d: the answer names no height", ErrUnverified, key, topic, partition)
	}
	lb, err := t.verify.Header(ctx, h+1)
	if err != nil {
		return nil, fmt.Errorf("latest of key %x in %s/%d: %w", key, topic, partition, err)
	}
	if age := time.Since(lb.Time); t.MaxAge > 0 && age > t.MaxAge {
		return nil, fmt.Errorf("%w: latest of key %x in %s/%d: proven by header %d of %s, %s ago (at most %s)", ErrStale, key, topic, partition, h+1, lb.Time.UTC().Format(time.RFC3339), age.Round(time.Second), t.MaxAge)
	}
	l, err := stateproof.VerifyLatest(lp, lb.AppHash, topic, partition, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	if l.CleanOffset < minClean {
		return nil, fmt.Errorf("%w: latest of key %x in %s/%d: at height %d compaction had passed %d records, asked for %d", ErrStale, key, topic, partition, l.Height, l.CleanOffset, minClean)
	}
	return l, nil
}
