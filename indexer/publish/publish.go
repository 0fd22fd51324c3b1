package publish

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/reconcile"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/prometheus/client_golang/prometheus"
)

// Publisher writes verified blocks to JetStream: each record on its
// partition's subject, then the block's BlockInfo. Exactly once rests on
// JetStream's expected last sequence, not on message ids: every message
// names the stream sequence it must follow (Nats-Expected-Last-Sequence),
// so a stream stores it only if the stream holds exactly what the publisher
// believed when it chose the message, and the publisher believes only what
// it read back from the stream at one sequence (sync) and what it has
// published since. A replay after a restart, a second indexer, or a
// publish that timed out but was stored can then add nothing twice and
// skip nothing, however long ago the stream was written, and JetStream
// keeps no message ids in memory. What a stream answers is checked against
// the block's own records before anything is skipped for it (recordsIn,
// blocksIn).
type Publisher struct {
	cfg     Config
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	streams map[string]jetstream.Stream
	held    map[string]*held // topic -> what its stream holds
	formats map[string]int   // topic stream -> records a message, as its metadata says
	keyed   map[string]bool  // topic stream -> a table of keys (layout.FormatKey)
	// ttls: per keyed topic stream, how long a tombstone stays in it
	// (the topic's delete_retention_ms, in whole seconds, at least 1).
	ttls    map[string]int64
	blocks  jetstream.Stream
	blockAt *held // what the blocks stream holds
	// blockNext is the first height whose BlockInfo to publish, as of
	// blockAt.
	blockNext int64
	// AckAllThrough is the last height whose messages each ask an
	// acknowledgement (send): after a refusal that read as another
	// indexer's, so that one JetStream refused for its own reason says it.
	AckAllThrough int64
	enc           layout.Encoder
	log           zerolog.Logger
	// holds are the partitions held back behind open transactions, by
	// reconcile.Key; out what the last Publish sent or skipped of each.
	holds   map[string]*hold
	out     map[string]outRange
	decided map[txnKey]outcome // outcomes learned while a hold was lean (hold)
}

// held is what the publisher knows a stream holds: its last sequence once
// every message published to it so far is stored, and where each
// partition it read or published goes on.
type held struct {
	last uint64
	// sent: the publisher has published to the stream since it read last,
	// so last counts its own messages, and the stream must be at last
	// whenever it reads it again. Until then every block reads the stream
	// again: someone else may be publishing it.
	sent bool
	next map[uint32]uint64 // partition -> first offset the stream lacks
	// unacked counts the messages sent since the last that asked an
	// acknowledgement (send).
	unacked int
	// ahead are partitions whose stream holds records past the block
	// read for them (recordsIn): where they go on is known only for that
	// block.
	ahead map[uint32]bool
}

// New is a publisher through nc, logging to log; it makes the cursor
// bucket and the blocks stream if they are not there.
func New(ctx context.Context, nc *nats.Conn, cfg Config, log zerolog.Logger) (*Publisher, error) {
	// MaxPending counts records; an acknowledgement vouches for up to
	// ackEvery of them.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(1, cfg.MaxPending/ackEvery)), jetstream.WithPublishAsyncTimeout(cfg.PublishAckTimeout))
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, js: js, streams: map[string]jetstream.Stream{}, held: map[string]*held{}, formats: map[string]int{}, keyed: map[string]bool{}, ttls: map[string]int64{}, log: log,
		holds: map[string]*hold{}, out: map[string]outRange{}, decided: map[txnKey]outcome{}}
	if err := p.EnsureCursorBucket(ctx); err != nil {
		return nil, err
	}
	if err := p.ensureBlocks(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// EnsureCursorBucket makes the cursor bucket, or finds it made. It runs
// again before every resume: a NATS server that lost power before it
// synced the bucket's stream comes back without it, and the cursor would
// never be saved again.
func (p *Publisher) EnsureCursorBucket(ctx context.Context) error {
	kv, err := p.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: layout.CursorBucket, Description: "byzlog indexer cursors: the last height whose records are all stored",
		Storage: jetstream.FileStorage, Replicas: p.cfg.Replicas, History: 1,
	})
	if err != nil {
		return fmt.Errorf("cursor bucket %s: %w", layout.CursorBucket, err)
	}
	p.kv = kv
	return nil
}

func (p *Publisher) cursorKey() string { return "cursor." + p.cfg.ChainID + "." + p.cfg.ID }

// Cursor is the last height this indexer knows fully published (0: none)
// and each partition's end there.
func (p *Publisher) Cursor(ctx context.Context) (reconcile.Cursor, error) {
	e, err := p.kv.Get(ctx, p.cursorKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return reconcile.Cursor{}, nil
	}
	if err != nil {
		return reconcile.Cursor{}, fmt.Errorf("read cursor %s: %w", p.cursorKey(), err)
	}
	c, err := reconcile.ParseCursor(e.Value())
	if err != nil {
		return reconcile.Cursor{}, fmt.Errorf("cursor %s holds %.64q: %v; delete it to start from start_height", p.cursorKey(), e.Value(), err)
	}
	return c, nil
}

// KV is the cursor bucket: the cursor, topic configs, topic access and
// the indexer's progress reports live there.
func (p *Publisher) KV() jetstream.KeyValue { return p.kv }

// JetStream is the JetStream the publisher writes through.
func (p *Publisher) JetStream() jetstream.JetStream { return p.js }

// SaveCursor saves c as this indexer's cursor.
func (p *Publisher) SaveCursor(ctx context.Context, c reconcile.Cursor) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = p.kv.Put(ctx, p.cursorKey(), b)
	return err
}

// Reset forgets what it knows of the streams: after a failed publish the
// stream, not memory, says what is stored, and a stream someone deleted
// is made again (empty: consumers see the records it held as a gap).
func (p *Publisher) Reset() {
	clear(p.held)
	clear(p.streams)
	clear(p.formats)
	clear(p.keyed)
	clear(p.holds) // the indexer publishes again from before the first held
	p.blocks, p.blockAt = nil, nil
	p.blockNext = 0
}

// ensureBlocks makes the blocks stream, unless it is known to exist.
func (p *Publisher) ensureBlocks(ctx context.Context) error {
	if p.blocks != nil {
		return nil
	}
	st, err := p.ensureStream(ctx, layout.BlocksStream, layout.BlocksSubject, "byzlog committed blocks", nil)
	if err != nil {
		return err
	}
	p.blocks = st
	return nil
}

// ensureStream makes a stream, or finds it made. With a topic's config c
// it makes it with c's limits (retention.go), or sets them on the stream
// found; without, it makes it with none and leaves one found alone.
func (p *Publisher) ensureStream(ctx context.Context, name, subject, desc string, c *byzlogv1.TopicConfig) (jetstream.Stream, error) {
	sc := jetstream.StreamConfig{
		Name: name, Description: desc, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Replicas: p.cfg.Replicas, Duplicates: duplicateWindow,
	}
	if name != layout.BlocksStream {
		sc.Metadata = map[string]string{layout.FormatMetadata: p.format(c)}
	}
	if compacted(c) {
		// A table: JetStream keeps each key's latest message, and a
		// tombstone goes after its Nats-TTL (publish.go, message).
		sc.MaxMsgsPerSubject, sc.AllowMsgTTL = 1, true
	}
	if c != nil {
		l := topicLimits(c, sc.Duplicates)
		l.set(&sc)
		st, err := p.js.CreateStream(ctx, sc)
		if cannotReserve(err) {
			p.warnUnreserved(name, c, l, err)
			sc.MaxBytes = -1
			st, err = p.js.CreateStream(ctx, sc)
		}
		if err == nil || !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			if err != nil {
				return nil, fmt.Errorf("stream %s for %s: %w", name, subject, limitErr("create", c, l, err))
			}
			return st, nil
		}
	}
	st, err := p.js.CreateStream(ctx, sc)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Created before (perhaps by another indexer, perhaps re-configured
		// by an operator): its limits are the topic's, the rest is as it is.
		st, err = p.js.Stream(ctx, name)
		if err == nil && c != nil {
			st, err = p.limit(ctx, st, c)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s for %s: %w", name, subject, err)
	}
	return st, nil
}

// stream is topic's stream. Made here, the stream was not seen made by
// the block creating the topic (this indexer restarted since, or the
// stream was lost): it gets the limits of the topic's kept config.
func (p *Publisher) stream(ctx context.Context, topic string) (jetstream.Stream, error) {
	if st, ok := p.streams[topic]; ok {
		return st, nil
	}
	c, err := p.keptTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	return p.topicStream(ctx, topic, c)
}

// topicStream makes topic's stream with c's limits (nil: none), or sets
// them on it, and remembers it.
func (p *Publisher) topicStream(ctx context.Context, topic string, c *byzlogv1.TopicConfig) (jetstream.Stream, error) {
	st, err := p.ensureStream(ctx, layout.StreamName(topic), layout.TopicFilter(topic, compacted(c)), "byzlog topic "+topic, c)
	if err != nil {
		return nil, err
	}
	st, n, err := p.ensureFormat(ctx, st)
	if err != nil {
		return nil, err
	}
	name := st.CachedInfo().Config.Name
	p.streams[topic] = st
	p.formats[name] = n
	p.keyed[name] = layout.Keyed(st.CachedInfo().Config.Metadata[layout.FormatMetadata])
	p.ttls[name] = tombstoneTTL(c)
	return st, nil
}

// Message formats. Exactly once needs every indexer of a stream to cut its
// records into messages alike: a message expects the stream sequence
// before it, and that sequence stands for the same records only if every
// indexer's messages hold the same records. Otherwise a message refused
// for another indexer's, followed by one accepted because the other's
// messages happened to end at the sequence it expects, would store
// records twice or skip some. So the stream says how its records are cut
// (its metadata layout.FormatMetadata), and every indexer cuts as it says:
// runs are cut greedily from where the stream ends, so given the format,
// the stream's state and the chain decide every message.

// format is the format this indexer gives the streams it makes, for a
// topic of config c (nil: not known): a compacted topic's is a table of
// keys.
func (p *Publisher) format(c *byzlogv1.TopicConfig) string {
	if compacted(c) {
		return layout.FormatKey
	}
	if p.cfg.RecordsPerMessage == 1 {
		return layout.FormatRecord
	}
	return layout.RunFormat(p.cfg.RecordsPerMessage)
}

// ensureFormat returns the records a message of st carries at most, as
// its metadata says. A stream without one is given one: FormatRecord when
// it holds messages (an indexer older than runs wrote them), else this
// indexer's. What the stream says after that is what counts (another
// indexer may have written it at the same time).
func (p *Publisher) ensureFormat(ctx context.Context, st jetstream.Stream) (jetstream.Stream, int, error) {
	info := st.CachedInfo()
	if _, ok := info.Config.Metadata[layout.FormatMetadata]; !ok {
		sc := info.Config
		sc.Metadata = maps.Clone(sc.Metadata)
		if sc.Metadata == nil {
			sc.Metadata = map[string]string{}
		}
		sc.Metadata[layout.FormatMetadata] = p.format(nil) // its subjects are a partition's: no table
		if info.State.Msgs > 0 {
			sc.Metadata[layout.FormatMetadata] = layout.FormatRecord
		}
		if _, err := p.js.UpdateStream(ctx, sc); err != nil {
			return nil, 0, fmt.Errorf("write %s %q into the metadata of stream %s: %w", layout.FormatMetadata, sc.Metadata[layout.FormatMetadata], sc.Name, err)
		}
		var err error
		if st, err = p.js.Stream(ctx, sc.Name); err != nil {
			return nil, 0, fmt.Errorf("stream %s: %w", sc.Name, err)
		}
		info = st.CachedInfo()
	}
	n, err := layout.ParseFormat(info.Config.Metadata[layout.FormatMetadata])
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s's metadata %s: %w; set it to one, or remove it to have the indexer choose", info.Config.Name, layout.FormatMetadata, err)
	}
	return st, n, nil
}

// checkFormat refuses a topic's stream whose format is no longer the one
// the publisher cuts by: someone changed it since the publisher read it.
func (p *Publisher) checkFormat(sc jetstream.StreamConfig) error {
	f := sc.Metadata[layout.FormatMetadata]
	if n, err := layout.ParseFormat(f); err != nil || n != p.formats[sc.Name] || layout.Keyed(f) != p.keyed[sc.Name] {
		return fmt.Errorf("stream %s's message format (metadata %s) is now %q, and this indexer cut %d records a message (a table of keys: %v) until now: it reads the streams again", sc.Name, layout.FormatMetadata, f, p.formats[sc.Name], p.keyed[sc.Name])
	}
	return nil
}

// dropStream deletes topic's stream and forgets what was published to it.
func (p *Publisher) dropStream(ctx context.Context, topic string) error {
	err := p.js.DeleteStream(ctx, layout.StreamName(topic))
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream %s of deleted topic %s: %w", layout.StreamName(topic), topic, err)
	}
	delete(p.streams, topic)
	delete(p.held, topic)
	delete(p.formats, layout.StreamName(topic))
	delete(p.keyed, layout.StreamName(topic))
	delete(p.ttls, layout.StreamName(topic))
	return nil
}

// Reading back what a stream holds. What the stream says it holds decides
// what the publisher skips, and anyone else allowed to publish on its
// subjects could have written its last message; so a value read back counts
// only as far as the chain's data confirms it, and a message that does not
// fit stops publishing with an error naming it, rather than records being
// skipped for it.

// recordsIn returns the first offset of part's records the stream lacks:
// the offset after the last record on the partition's subject, which must be
// a byzlog record of the subject. If it is one of part's offsets, it must be
// the chain's record; if it is past them (another indexer, or this one
// before a restart, published later blocks), the stream must hold part's
// last record too, as the chain has it, and ahead is true: the offset
// returned is then part's end, and the stream must be asked again for the
// next block, whose records this one did not check.
func recordsIn(ctx context.Context, st jetstream.Stream, part core.AppendedPartition, keyed bool) (next uint64, ahead bool, err error) {
	if keyed {
		return keyedRecordsIn(ctx, st, part)
	}
	root := part.Root
	subject := layout.Subject(root.Topic, root.Partition)
	name := st.CachedInfo().Config.Name
	last, r, err := reconcile.LastRecord(ctx, st, subject)
	if err != nil || r == nil {
		return 0, false, err
	}
	end := root.FirstOffset + uint64(len(part.Records))
	if r.Offset < root.FirstOffset {
		return r.Offset + 1, false, nil // none of part's records yet
	}
	m := last
	if r.Offset >= end {
		ahead = true
		if m, err = firstAtLeast(ctx, st, subject, lastOffset, end-1, last); err != nil {
			return 0, false, err
		}
		rs, err := reconcile.StreamRecords(m, subject)
		if err != nil {
			return 0, false, reconcile.Foreign(name, subject, m.Sequence, err.Error())
		}
		first := rs[0].Offset
		if first > end-1 || end-1-first >= uint64(len(rs)) {
			return 0, false, lacks(name, subject, fmt.Sprintf("record %d, which block %d committed", end-1, part.Records[len(part.Records)-1].Height), m.Sequence, offsets(rs))
		}
		r = rs[end-1-first]
	}
	if want := part.Records[r.Offset-root.FirstOffset]; !layout.SamePublished(r, want) {
		return 0, false, reconcile.Foreign(name, subject, m.Sequence, fmt.Sprintf("a record at offset %d (height %d) that is not the one the chain committed at that offset (height %d)", r.Offset, r.Height, want.Height))
	}
	return r.Offset + 1, ahead, nil
}

// offsets names the offsets of rs, a message's records.
func offsets(rs []*byzlogv1.StoredRecord) string {
	if len(rs) == 1 {
		return fmt.Sprintf("offset %d", rs[0].Offset)
	}
	return fmt.Sprintf("offsets %d to %d", rs[0].Offset, rs[len(rs)-1].Offset)
}

// lastOffset is the offset of the last record m says it carries, from its
// headers (HeaderOffset, and HeaderRecords for a run).
func lastOffset(m *jetstream.RawStreamMsg) (uint64, error) {
	first, err := strconv.ParseUint(m.Header.Get(layout.HeaderOffset), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("a message with %s %q", layout.HeaderOffset, m.Header.Get(layout.HeaderOffset))
	}
	n := uint64(1)
	if v := m.Header.Values(layout.HeaderRecords); len(v) > 0 {
		if n, err = strconv.ParseUint(v[0], 10, 32); err != nil || n == 0 || first+n-1 < first {
			return 0, fmt.Errorf("a message with %s %q from %s %d", layout.HeaderRecords, v[0], layout.HeaderOffset, first)
		}
	}
	return first + n - 1, nil
}

// heightOf is the height a message of the blocks stream says it holds.
func heightOf(m *jetstream.RawStreamMsg) (uint64, error) {
	v, err := strconv.ParseUint(m.Header.Get(layout.HeaderHeight), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("a message with %s %q", layout.HeaderHeight, m.Header.Get(layout.HeaderHeight))
	}
	return v, nil
}

// blocksIn returns the first height the blocks stream lacks: the height
// after its last BlockInfo, checked as recordsIn checks records against
// info, the BlockInfo of the block being published. At info's height it
// must be info; past it, the stream must hold info too.
func (p *Publisher) blocksIn(ctx context.Context, info layout.BlockInfo) (int64, error) {
	last, err := p.blocks.GetLastMsgForSubject(ctx, layout.BlocksSubject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last message on %s: %w", layout.BlocksSubject, err)
	}
	got, err := blockInfo(last)
	if err != nil {
		return 0, reconcile.Foreign(layout.BlocksStream, layout.BlocksSubject, last.Sequence, err.Error())
	}
	m := last
	if got.Height > info.Height {
		if m, err = firstAtLeast(ctx, p.blocks, layout.BlocksSubject, heightOf, uint64(info.Height), last); err != nil {
			return 0, err
		}
		if got, err = blockInfo(m); err != nil {
			return 0, reconcile.Foreign(layout.BlocksStream, layout.BlocksSubject, m.Sequence, err.Error())
		}
		if got.Height != info.Height {
			return 0, lacks(layout.BlocksStream, layout.BlocksSubject, fmt.Sprintf("block %d", info.Height), m.Sequence, fmt.Sprintf("height %d", got.Height))
		}
	}
	if got.Height == info.Height && !reflect.DeepEqual(got, info) {
		return 0, reconcile.Foreign(layout.BlocksStream, layout.BlocksSubject, m.Sequence, fmt.Sprintf("a BlockInfo of height %d that is not the block the chain committed (block hash %s, the chain's %s)", got.Height, got.BlockHash, info.BlockHash))
	}
	return got.Height + 1, nil
}

// firstAtLeast returns the first message on subject (a filter: a keyed
// stream's partition) whose key is at least want; last, the subject's last
// message, is. The key (read from a message's headers) grows along the
// subject, as the publisher writes it; messages between may be gone (a
// keyed stream keeps each key's latest). It reads O(log n) messages, n
// last's stream sequence.
func firstAtLeast(ctx context.Context, st jetstream.Stream, subject string, key func(*jetstream.RawStreamMsg) (uint64, error), want uint64, last *jetstream.RawStreamMsg) (*jetstream.RawStreamMsg, error) {
	name := st.CachedInfo().Config.Name
	found := last
	// Messages of subject before lo are below want; found is at least want,
	// and the first message of subject from hi on.
	lo, hi := uint64(1), last.Sequence
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := st.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(subject))
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, fmt.Errorf("read the message on %s at or after sequence %d: %w", subject, mid, err)
		}
		if err != nil || m.Sequence >= hi {
			hi = mid
			continue
		}
		if !layout.InFilter(subject, m.Subject) || m.Sequence < mid {
			return nil, fmt.Errorf("stream %s answered sequence %d on %s for the message on %s at or after sequence %d", name, m.Sequence, m.Subject, subject, mid)
		}
		v, err := key(m)
		if err != nil {
			return nil, reconcile.Foreign(name, subject, m.Sequence, err.Error())
		}
		if v >= want {
			found, hi = m, mid
		} else {
			lo = m.Sequence + 1
		}
	}
	return found, nil
}

// blockInfo decodes a message of the blocks stream.
func blockInfo(m *jetstream.RawStreamMsg) (layout.BlockInfo, error) {
	var info layout.BlockInfo
	h, err := strconv.ParseInt(m.Header.Get(layout.HeaderHeight), 10, 64)
	if err == nil {
		err = json.Unmarshal(m.Data, &info)
	}
	if err != nil || m.Subject != layout.BlocksSubject || info.Height != h || h < 1 {
		return layout.BlockInfo{}, fmt.Errorf("a message that is not a byzlog BlockInfo (%s %q, height %d in the payload: %v)", layout.HeaderHeight, m.Header.Get(layout.HeaderHeight), info.Height, err)
	}
	return info, nil
}

// lacks reports a stream that holds messages past one it lacks.
func lacks(stream, subject, missing string, seq uint64, found string) error {
	return fmt.Errorf("stream %s lacks %s on %s, though it holds later ones (sequence %d holds %s): "+
		"retention removed it before this indexer replayed it (start it at a later height), or the later message is one nobody with publish rights should have written (remove it: nats stream rmm %s %d)",
		stream, missing, subject, seq, found, stream, seq)
}

// topicChanges are the topics block b creates, updates or deletes. The
// chain's first block also brings genesis's topics, which no block
// creates: an indexer that publishes it keeps their configs as it keeps
// those of topics a block creates.
func (p *Publisher) topicChanges(b *verify.Block) []core.TopicChange {
	if b.Height != 1 || len(p.cfg.GenesisTopics) == 0 {
		return b.Appended.Topics
	}
	return append(slices.Clip(p.cfg.GenesisTopics), b.Appended.Topics...)
}

// Publish sends block b's records and BlockInfo asynchronously and returns
// the futures of their acknowledgements. It counts what it published.
func (p *Publisher) Publish(ctx context.Context, b *verify.Block, m Metrics) ([]jetstream.PubAckFuture, error) {
	if err := p.ensureBlocks(ctx); err != nil {
		return nil, err
	}
	var outs []outMsg
	info := layout.BlockInfo{Height: b.Height, Time: b.Time.UTC().Format(time.RFC3339Nano), BlockHash: hex.EncodeToString(b.Hash), AppHash: hex.EncodeToString(b.AppHash)}
	if err := p.applyTopicChanges(ctx, b); err != nil {
		return nil, err
	}
	if err := p.syncTopics(ctx, b.Appended.Partitions); err != nil {
		return nil, err
	}
	clear(p.out)
	for _, part := range b.Appended.Partitions {
		root := part.Root
		info.Records = append(info.Records, layout.PartitionCount{Topic: root.Topic, Partition: root.Partition, FirstOffset: root.FirstOffset, Count: root.Count})
		if len(part.Records) == 0 {
			continue
		}
		var err error
		if outs, err = p.partitionMessages(part, m, outs); err != nil {
			return nil, err
		}
	}
	p.pruneDecided()
	msg, err := p.blockMessage(ctx, b.Height, info)
	if err != nil {
		return nil, err
	}
	if msg != nil {
		outs = append(outs, outMsg{p.blockAt, msg})
	}
	return p.send(ctx, outs, b.Height <= p.AckAllThrough)
}

// applyTopicChanges brings the streams and kept configs in line with the
// topics block b creates, updates or deletes.
//
// A topic's stream exists from its creation, so consumers can
// subscribe before its first record, and goes with its deletion, so a
// topic created again under the name starts clean (its offsets start
// at 0 again; the old stream would take them for published).
// A created or updated topic's config is kept, and its limits set on
// the stream, before the block's records are published there.
func (p *Publisher) applyTopicChanges(ctx context.Context, b *verify.Block) error {
	for _, c := range p.topicChanges(b) {
		var err error
		switch {
		case c.Deleted:
			if err = p.dropStream(ctx, c.Name); err == nil {
				err = p.forgetTopic(ctx, c.Name)
			}
			p.dropHolds(c.Name)
		case c.Config != nil:
			if err = p.keepTopic(ctx, c.Name, c.Config); err == nil {
				_, err = p.topicStream(ctx, c.Name, c.Config)
			}
		default:
			_, err = p.stream(ctx, c.Name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// partitionMessages appends to outs the messages of one partition's
// records in a block: it skips those the stream already holds, holds back
// those of transactions not yet decided, and releases those that are. It
// advances the partition's next offset to publish and counts what it
// skipped and published.
func (p *Publisher) partitionMessages(part core.AppendedPartition, m Metrics, outs []outMsg) ([]outMsg, error) {
	root := part.Root
	h := p.held[root.Topic]
	name := layout.StreamName(root.Topic)
	perMessage := p.formats[name]
	next := h.next[root.Partition]
	k := reconcile.Key(root.Topic, root.Partition)
	out := p.out[k]
	rest := part.Records
	for len(rest) > 0 && rest[0].Offset < next {
		m.Skipped.Inc()
		out.last = rest[0]
		rest = rest[1:]
	}
	ho := p.holds[k]
	if f := ho.first(); ho == nil || (f != nil && f.Offset < next) {
		// Another indexer published past what this one held: the
		// stream has those records, with their transactions' outcomes.
		ho = &hold{key: k}
		p.holds[k] = ho
	}
	var ready []*byzlogv1.StoredRecord
	for _, r := range rest {
		ready = append(ready, ho.add(r, p.decided)...)
	}
	p.bound(ho)
	if ho.done() {
		delete(p.holds, k)
	}
	if len(ready) > 0 {
		out.first = cmp.Or(out.first, ready[0])
		out.last = ready[len(ready)-1]
	}
	p.out[k] = out
	if p.keyed[name] && len(ready) > 0 {
		next = ready[len(ready)-1].Offset + 1
		ready = slices.DeleteFunc(ready, notInTable)
	}
	for len(ready) > 0 {
		msg, n, err := p.message(name, ready, perMessage)
		if err != nil {
			return nil, err
		}
		outs = append(outs, outMsg{h, msg})
		next = max(next, ready[n-1].Offset+1)
		m.Records.Add(float64(n))
		ready = ready[n:]
	}
	h.next[root.Partition] = next
	if h.ahead[root.Partition] {
		delete(h.next, root.Partition)
	}
	return outs, nil
}

// blockMessage is the blocks stream's message of the block at height, with
// info, or nil when the stream already holds it. Until the publisher has
// published to the blocks stream since it last read it, it first reads the
// stream again for the first height it lacks: someone else may be
// publishing it.
func (p *Publisher) blockMessage(ctx context.Context, height int64, info layout.BlockInfo) (*nats.Msg, error) {
	if p.blockAt == nil || !p.blockAt.sent {
		var in int64
		if err := p.sync(ctx, p.blocks, p.blockAt, func() (err error) { in, err = p.blocksIn(ctx, info); return err }, func(h *held) { p.blockAt = h }); err != nil {
			return nil, err
		}
		p.blockNext = max(p.blockNext, in)
	}
	if height < p.blockNext {
		return nil, nil
	}
	data, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(layout.BlocksSubject)
	msg.Data = data
	msg.Header.Set(layout.HeaderHeight, strconv.FormatInt(height, 10))
	p.blockNext = height + 1
	return msg, nil
}

// message is the next message of records, consecutive records of one
// partition in one block, to stream, and how many of them it carries: a
// run of up to perMessage (its stream's format), or the first alone when
// that is 1 or the stream is keyed.
func (p *Publisher) message(stream string, records []*byzlogv1.StoredRecord, perMessage int) (*nats.Msg, int, error) {
	if p.keyed[stream] {
		return p.keyMessage(stream, records[0]), 1, nil
	}
	if perMessage <= 1 {
		return p.enc.Message(records[0]), 1, nil
	}
	n := layout.Split(records, perMessage)
	msg, err := p.enc.Run(records[:n])
	return msg, n, err
}

// outMsg is a message to publish to the stream h describes.
type outMsg struct {
	h   *held
	msg *nats.Msg
}

// ackEvery is how many messages to a stream go with one acknowledgement:
// each message expects the sequence its predecessor got, so JetStream
// stores one only if every message before it to the stream is stored,
// and one acknowledgement vouches for them all. The rest are published
// without a reply subject, and JetStream answers nothing for them.
const ackEvery = 128

// send publishes outs in order, asking an acknowledgement for every
// ackEvery-th message to a stream and for the last to each (for every one
// if all), and returns the acknowledgements' futures: once they have all
// come, every message is stored.
//
// JetStream answers nothing for a message it refuses without a reply
// subject (too large for the stream's max_msg_size, an account limit): the
// next acknowledged one then fails its expected sequence, as when another
// indexer stored first. all makes the refusal itself answer.
func (p *Publisher) send(ctx context.Context, outs []outMsg, all bool) ([]jetstream.PubAckFuture, error) {
	last := map[*held]int{}
	for i, o := range outs {
		last[o.h] = i
	}
	var futs []jetstream.PubAckFuture
	for i, o := range outs {
		o.msg.Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(o.h.last, 10))
		if all || i == last[o.h] || o.h.unacked+1 >= ackEvery {
			f, err := p.publishAsync(ctx, o.msg)
			if err != nil {
				return futs, err
			}
			futs = append(futs, f)
			o.h.unacked = 0
		} else {
			if err := p.js.Conn().PublishMsg(o.msg); err != nil {
				return futs, fmt.Errorf("publish %s: %w", o.msg.Subject, err)
			}
			o.h.unacked++
		}
		o.h.last++
		o.h.sent = true
	}
	return futs, nil
}

// syncTopics reads, for the topics of parts, where the partitions with
// records go on in their streams, where the publisher does not know it:
// every partition of a stream it has not published to since it last read
// it, and partitions it has not read or published since, of the others.
// One sync reads them all for a stream, so that they are as of one
// sequence.
func (p *Publisher) syncTopics(ctx context.Context, parts []core.AppendedPartition) error {
	var topics []string
	read := map[string][]core.AppendedPartition{}
	for _, part := range parts {
		t := part.Root.Topic
		if len(part.Records) == 0 {
			continue
		}
		if _, seen := read[t]; !seen {
			topics = append(topics, t)
			read[t] = nil
		}
		if h := p.held[t]; h == nil || !h.sent || !h.knows(part.Root.Partition) {
			read[t] = append(read[t], part)
		}
	}
	for _, t := range topics {
		if len(read[t]) == 0 {
			continue
		}
		st, err := p.stream(ctx, t)
		if err != nil {
			return err
		}
		next := make(map[uint32]uint64, len(read[t]))
		ahead := map[uint32]bool{}
		err = p.sync(ctx, st, p.held[t], func() error {
			for _, part := range read[t] {
				in, past, err := recordsIn(ctx, st, part, p.keyed[st.CachedInfo().Config.Name])
				if err != nil {
					return err
				}
				next[part.Root.Partition], ahead[part.Root.Partition] = in, past
			}
			return nil
		}, func(h *held) {
			for k, v := range next {
				h.next[k] = max(h.next[k], v)
			}
			h.ahead = ahead
			p.held[t] = h
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// knows reports whether h knows where partition goes on.
func (h *held) knows(partition uint32) bool {
	_, ok := h.next[partition]
	return ok
}

// Metrics are the publisher's counters, registered by its owner.
type Metrics struct {
	// Records counts records published; Skipped those of replayed blocks
	// not published because their stream already held them.
	Records, Skipped prometheus.Counter
}

// ErrOtherWriter is a stream holding messages this indexer did not
// publish, where it expected its own: another indexer publishes it too
// (or someone with publish rights wrote to it). The indexer reads the
// streams again and goes on from its last acknowledged height.
var ErrOtherWriter = errors.New("another indexer is publishing the same stream")

// sync runs read, which reads what st holds, at one sequence of st: the
// stream's last sequence is the same before and after it. h is what the
// publisher knows of st (nil: nothing). If it has published to st since
// it last read it, the stream must be at h.last, once those publishes are
// acknowledged; then h is kept, and keep is given it for what read learnt.
// Otherwise keep gets a new held as of the sequence read, since anything
// known before may be stale.
func (p *Publisher) sync(ctx context.Context, st jetstream.Stream, h *held, read func() error, keep func(*held)) error {
	name := st.CachedInfo().Config.Name
	sent := h != nil && h.sent
	if sent {
		if err := p.settle(ctx); err != nil {
			return err
		}
	}
	const tries = 3
	for try := 1; ; try++ {
		before, err := lastSeq(ctx, st)
		if err != nil {
			return err
		}
		if name != layout.BlocksStream {
			// Read with the sequence, so that the messages this indexer
			// publishes as of it follow messages cut alike.
			if err := p.checkFormat(st.CachedInfo().Config); err != nil { // lastSeq read it
				return err
			}
		}
		if sent && before != h.last {
			return fmt.Errorf("%w: stream %s is at sequence %d, and this indexer's own publishes end at %d", ErrOtherWriter, name, before, h.last)
		}
		if err := read(); err != nil {
			return err
		}
		after, err := lastSeq(ctx, st)
		if err != nil {
			return err
		}
		if after == before {
			if !sent {
				h = &held{last: before, next: map[uint32]uint64{}}
			}
			keep(h)
			return nil
		}
		if sent || try == tries {
			return fmt.Errorf("%w: stream %s moved from sequence %d to %d while this indexer read it", ErrOtherWriter, name, before, after)
		}
	}
}

// lastSeq is st's last sequence, as its leader has it now.
func lastSeq(ctx context.Context, st jetstream.Stream) (uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", st.CachedInfo().Config.Name, err)
	}
	return info.State.LastSeq, nil
}

// settle waits until every publish made so far is acknowledged (or has
// failed, which the acknowledging side reports).
func (p *Publisher) settle(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-time.After(2 * p.cfg.PublishAckTimeout):
		return fmt.Errorf("publishes not acknowledged within %s", 2*p.cfg.PublishAckTimeout)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// publishAsync publishes msg asking an acknowledgement, and waits for
// room when as many are outstanding as MaxPending allows.
func (p *Publisher) publishAsync(ctx context.Context, msg *nats.Msg) (jetstream.PubAckFuture, error) {
	for {
		f, err := p.js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Second))
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			if err != nil {
				return nil, fmt.Errorf("publish %s: %w", msg.Subject, err)
			}
			return f, nil
		}
		select {
		case <-p.js.PublishAsyncComplete():
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// WrongLastSequence reports whether err is JetStream refusing a message
// whose expected last sequence the stream was not at.
func WrongLastSequence(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
