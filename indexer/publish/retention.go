package publish

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Retention on the streams. The chain deletes a topic's records by its
// retention (abciapp/core/retention.go); a topic's stream mirrors it with
// JetStream's own limits, so NATS does not grow without bound. The stream's
// MaxAge, MaxBytes and Discard are the indexer's, set from the topic's
// config in a verified block whenever a block creates or updates the topic
// and whenever the indexer makes the stream; every other field of an
// existing stream stays as an operator set it. The config is kept in the
// cursor bucket (topicKey), so a restarted indexer, which resumes after its
// cursor and does not see the topic's creation again, still knows it.

// streamBytesFactor is how many bytes a stream may hold per byte the chain
// keeps. JetStream counts what the chain's retention_bytes does not: each
// message's subject and headers (about 300 B of them: the expected last
// sequence, offset, height, producer key in hex, sequence and two RFC 3339
// times) and ~30 B of its own framing, while the chain counts the
// stored record's proto. A record with a 100 B value is ~470 B in the stream
// and ~190 B in the chain (2.5x); 10 B, 3.9x; 1 KiB, 1.3x. And the chain's
// limit is per partition while JetStream's is stream-wide, so MaxBytes is
// partitions x retention_bytes x 4: a balanced topic keeps at least what the
// chain keeps; in a skewed one the busy partitions' records take the room,
// and the quiet ones lose their oldest records from the stream before the
// chain deletes them (Discard old drops the stream's oldest messages,
// whatever their subject).
const streamBytesFactor = 4

// minMaxAge is the shortest MaxAge JetStream accepts.
const minMaxAge = 100 * time.Millisecond

// duplicateWindow is the duplicate window of the streams the indexer
// makes: the shortest JetStream accepts. The indexer sends no message ids
// (exactly once rests on expected sequences, publish.go), so the window
// remembers nothing; it is set only because JetStream would otherwise take
// two minutes, which MaxAge could not go below. Streams made before keep
// theirs, and MaxAge stays at least it.
const duplicateWindow = minMaxAge

// streamLimits is what a stream may hold: the fields of its config that
// mirror the topic's retention.
type streamLimits struct {
	MaxAge   time.Duration // 0: no limit
	MaxBytes int64         // -1: no limit
	Discard  jetstream.DiscardPolicy
}

// topicLimits maps a topic's retention onto the limits of a stream whose
// duplicate window is duplicates. MaxAge is retention_ms: JetStream counts
// a message's age from when it stored it, which is after the block's time
// the chain counts from, so by age the stream keeps a record at least as
// long as the chain does. But never below the stream's duplicate window,
// which JetStream refuses to exceed MaxAge.
// MaxBytes is partitions x retention_bytes x streamBytesFactor, with no
// limit when the product passes int64. A retention of 0 (or less, which
// the chain refuses) is no limit.
func topicLimits(c *byzlogv1.TopicConfig, duplicates time.Duration) streamLimits {
	l := streamLimits{MaxBytes: -1, Discard: jetstream.DiscardOld}
	if ms := c.GetRetentionMs(); ms > 0 {
		if ms > int64(math.MaxInt64/time.Millisecond) {
			l.MaxAge = 0 // past 292 years: none
		} else {
			l.MaxAge = max(time.Duration(ms)*time.Millisecond, duplicates, minMaxAge)
		}
	}
	per := int64(c.GetPartitions()) * streamBytesFactor
	if rb := c.GetRetentionBytes(); rb > 0 && per > 0 && rb <= math.MaxInt64/per {
		l.MaxBytes = rb * per
	}
	return l
}

// set writes l into sc. DiscardNewPerSubject goes with it: it means
// something only with Discard new, which JetStream refuses it without.
func (l streamLimits) set(sc *jetstream.StreamConfig) {
	sc.MaxAge, sc.MaxBytes, sc.Discard = l.MaxAge, l.MaxBytes, l.Discard
	if l.Discard != jetstream.DiscardNew {
		sc.DiscardNewPerSubject = false
	}
}

// of reports whether sc already has l (JetStream writes an unlimited
// MaxBytes as -1, as l does).
func (l streamLimits) of(sc jetstream.StreamConfig) bool {
	return sc.MaxAge == l.MaxAge && sc.MaxBytes == l.MaxBytes && sc.Discard == l.Discard &&
		(l.Discard == jetstream.DiscardNew || !sc.DiscardNewPerSubject)
}

// limit updates st's MaxAge, MaxBytes and Discard to c's limits, leaving
// every other field of its config as it is, and does nothing when they
// already are.
func (p *Publisher) limit(ctx context.Context, st jetstream.Stream, c *byzlogv1.TopicConfig) (jetstream.Stream, error) {
	sc := st.CachedInfo().Config
	l := topicLimits(c, sc.Duplicates)
	if l.of(sc) {
		return st, nil
	}
	l.set(&sc)
	up, err := p.js.UpdateStream(ctx, sc)
	if cannotReserve(err) {
		p.warnUnreserved(sc.Name, c, l, err)
		l.MaxBytes = -1
		if l.of(st.CachedInfo().Config) {
			return st, nil
		}
		l.set(&sc)
		up, err = p.js.UpdateStream(ctx, sc)
	}
	if err != nil {
		return nil, limitErr("update", c, l, err)
	}
	return up, nil
}

// JetStream's codes for a stream whose MaxBytes it cannot reserve: a
// stream's MaxBytes is reserved from the server's (or the account's)
// storage when it is made or updated.
const (
	errCodeStorageExceeded       jetstream.ErrorCode = 10047 // JSStorageResourcesExceededErr
	errCodeInsufficientResources jetstream.ErrorCode = 10023 // JSInsufficientResourcesErr
)

// cannotReserve reports whether err is JetStream refusing a stream's
// MaxBytes for want of storage to reserve it from.
func cannotReserve(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == errCodeStorageExceeded || api.ErrorCode == errCodeInsufficientResources)
}

// warnUnreserved logs that stream gets no byte limit: JetStream cannot
// reserve it. One topic's config must not stop the indexer publishing
// every topic, so the stream is made (or kept) without MaxBytes, bounded by
// MaxAge and by the server's own storage limit, until the topic is updated
// or NATS is given the room.
func (p *Publisher) warnUnreserved(stream string, c *byzlogv1.TopicConfig, l streamLimits, err error) {
	p.log.Warn().Err(err).Str("stream", stream).Int64("max_bytes", l.MaxBytes).Uint32("partitions", c.GetPartitions()).
		Int64("retention_bytes", c.GetRetentionBytes()).Int("factor", streamBytesFactor).
		Msg("JetStream cannot reserve the stream's max_bytes from its storage: the stream gets no byte limit; raise the NATS servers' jetstream max_file_store (or the account's max_store), then update the topic")
}

// limitErr says what failed setting a stream's limits (op: create or
// update), and what to do when NATS has not the storage they reserve.
func limitErr(op string, c *byzlogv1.TopicConfig, l streamLimits, err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == errCodeStorageExceeded || api.ErrorCode == errCodeInsufficientResources) {
		return fmt.Errorf("%s it with max_bytes %d (%d partitions x retention_bytes %d x %d): %w; JetStream reserves a stream's max_bytes from its storage, "+
			"and the indexer publishes nothing past this block until it can: raise the NATS servers' jetstream max_file_store (or the account's max_store)",
			op, l.MaxBytes, c.GetPartitions(), c.GetRetentionBytes(), streamBytesFactor, err)
	}
	return fmt.Errorf("%s it with max_age %s, max_bytes %d, discard old: %w", op, l.MaxAge, l.MaxBytes, err)
}

// topicKey is where topic's config is kept in the cursor bucket. Topic
// names may hold what keys may not (a leading dot, two dots in a row), so
// the name is in base64url, without padding.
func (p *Publisher) topicKey(topic string) string {
	return "topic." + p.cfg.ChainID + "." + p.cfg.ID + "." + base64.RawURLEncoding.EncodeToString([]byte(topic))
}

// keepTopic keeps topic's config, as a verified block gave it.
func (p *Publisher) keepTopic(ctx context.Context, topic string, c *byzlogv1.TopicConfig) error {
	b, err := proto.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := p.kv.Put(ctx, p.topicKey(topic), b); err != nil {
		return fmt.Errorf("keep the config of topic %s in %s: %w", topic, p.topicKey(topic), err)
	}
	return nil
}

// forgetTopic removes a deleted topic's config.
func (p *Publisher) forgetTopic(ctx context.Context, topic string) error {
	if err := p.kv.Delete(ctx, p.topicKey(topic)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("forget the config of deleted topic %s (%s): %w", topic, p.topicKey(topic), err)
	}
	return nil
}

// keptTopic is topic's kept config; nil when none is (the indexer started
// after the block that created the topic, or the topic is gone).
func (p *Publisher) keptTopic(ctx context.Context, topic string) (*byzlogv1.TopicConfig, error) {
	e, err := p.kv.Get(ctx, p.topicKey(topic))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the config of topic %s (%s): %w", topic, p.topicKey(topic), err)
	}
	var c byzlogv1.TopicConfig
	if err := proto.Unmarshal(e.Value(), &c); err != nil {
		return nil, fmt.Errorf("the config of topic %s (%s) is not a byzlog.v1.TopicConfig: %v; delete the key, and the stream keeps its limits until the topic is updated", topic, p.topicKey(topic), err)
	}
	return &c, nil
}
