package indexer

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
)

// publisher writes verified blocks to JetStream: each record on its
// partition's subject, then the block's BlockInfo. It remembers, per
// partition, the next offset the stream lacks, so a replayed block after a
// restart publishes nothing twice; for blocks older than half the duplicate
// window it asks the stream first, since another indexer may have published
// them longer ago than de-duplication remembers.
type publisher struct {
	cfg       Config
	js        jetstream.JetStream
	kv        jetstream.KeyValue
	streams   map[string]jetstream.Stream
	next      map[string]uint64 // topic \x00 partition -> first offset to publish
	blockNext int64             // first height whose BlockInfo to publish; 0 = ask
	blocks    jetstream.Stream
}

func newPublisher(ctx context.Context, nc *nats.Conn, cfg Config) (*publisher, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending), jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	p := &publisher{cfg: cfg, js: js, streams: map[string]jetstream.Stream{}, next: map[string]uint64{}}
	p.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: layout.CursorBucket, Description: "byzlog indexer cursors: the last height whose records are all stored",
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, History: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("cursor bucket %s: %w", layout.CursorBucket, err)
	}
	if p.blocks, err = p.ensureStream(ctx, layout.BlocksStream, layout.BlocksSubject, "byzlog committed blocks"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *publisher) cursorKey() string { return "cursor." + p.cfg.ChainID + "." + p.cfg.ID }

// cursor is the last height this indexer knows fully published, or 0.
func (p *publisher) cursor(ctx context.Context) (int64, error) {
	e, err := p.kv.Get(ctx, p.cursorKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read cursor %s: %w", p.cursorKey(), err)
	}
	h, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cursor %s holds %q, not a height; delete it to start from --start-height", p.cursorKey(), e.Value())
	}
	return h, nil
}

func (p *publisher) saveCursor(ctx context.Context, h int64) error {
	_, err := p.kv.Put(ctx, p.cursorKey(), []byte(strconv.FormatInt(h, 10)))
	return err
}

// reset forgets what it knows of the streams: after a failed publish the
// stream, not memory, says what is stored.
func (p *publisher) reset() {
	clear(p.next)
	p.blockNext = 0
}

func (p *publisher) ensureStream(ctx context.Context, name, subject, desc string) (jetstream.Stream, error) {
	st, err := p.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Description: desc, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Replicas: p.cfg.Replicas, Duplicates: p.cfg.DuplicateWindow,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Created before (perhaps by another indexer, perhaps re-configured
		// by an operator): use it as it is.
		st, err = p.js.Stream(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s for %s: %w", name, subject, err)
	}
	return st, nil
}

func (p *publisher) stream(ctx context.Context, topic string) (jetstream.Stream, error) {
	if st, ok := p.streams[topic]; ok {
		return st, nil
	}
	st, err := p.ensureStream(ctx, layout.StreamName(topic), layout.TopicSubjects(topic), "byzlog topic "+topic)
	if err != nil {
		return nil, err
	}
	p.streams[topic] = st
	return st, nil
}

// dropStream deletes topic's stream and forgets what was published to it.
func (p *publisher) dropStream(ctx context.Context, topic string) error {
	err := p.js.DeleteStream(ctx, layout.StreamName(topic))
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream %s of deleted topic %s: %w", layout.StreamName(topic), topic, err)
	}
	delete(p.streams, topic)
	prefix := topic + "\x00"
	for k := range p.next {
		if strings.HasPrefix(k, prefix) {
			delete(p.next, k)
		}
	}
	return nil
}

// lastIn returns 1 + the header value of the last message on subject, or 0.
func lastIn(ctx context.Context, st jetstream.Stream, subject, header string) (uint64, error) {
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last message on %s: %w", subject, err)
	}
	v, err := strconv.ParseUint(m.Header.Get(header), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("last message on %s has %s %q: not a byzlog message", subject, header, m.Header.Get(header))
	}
	return v + 1, nil
}

// publish sends block b's records and BlockInfo asynchronously and returns
// the futures of their acknowledgements. It counts what it published.
func (p *publisher) publish(ctx context.Context, b *Block, m *Metrics) ([]jetstream.PubAckFuture, error) {
	old := time.Since(b.Time) > p.cfg.DuplicateWindow/2
	var futs []jetstream.PubAckFuture
	info := layout.BlockInfo{Height: b.Height, Time: b.Time.UTC().Format(time.RFC3339Nano), BlockHash: hex.EncodeToString(b.Hash), AppHash: hex.EncodeToString(b.AppHash)}
	// A topic's stream exists from its creation, so consumers can
	// subscribe before its first record, and goes with its deletion, so a
	// topic created again under the name starts clean (its offsets start
	// at 0 again; the old stream would take them for published).
	for _, c := range b.Appended.Topics {
		if c.Deleted {
			if err := p.dropStream(ctx, c.Name); err != nil {
				return nil, err
			}
			continue
		}
		if _, err := p.stream(ctx, c.Name); err != nil {
			return nil, err
		}
	}
	for _, part := range b.Appended.Partitions {
		root := part.Root
		info.Records = append(info.Records, layout.PartitionCount{Topic: root.Topic, Partition: root.Partition, FirstOffset: root.FirstOffset, Count: root.Count})
		st, err := p.stream(ctx, root.Topic)
		if err != nil {
			return futs, err
		}
		key := root.Topic + "\x00" + strconv.FormatUint(uint64(root.Partition), 10)
		next, known := p.next[key]
		if !known || old {
			inStream, err := lastIn(ctx, st, layout.Subject(root.Topic, root.Partition), layout.HeaderOffset)
			if err != nil {
				return futs, err
			}
			next = max(next, inStream)
		}
		for _, r := range part.Records {
			if r.Offset < next {
				m.skipped.Inc()
				continue
			}
			f, err := p.publishAsync(ctx, layout.Message(r))
			if err != nil {
				return futs, err
			}
			futs = append(futs, f)
			next = r.Offset + 1
			m.records.Inc()
		}
		p.next[key] = next
	}
	if p.blockNext == 0 || old {
		inStream, err := lastIn(ctx, p.blocks, layout.BlocksSubject, "Byzlog-Height")
		if err != nil {
			return futs, err
		}
		p.blockNext = max(p.blockNext, int64(inStream))
	}
	if b.Height >= p.blockNext {
		data, err := json.Marshal(info)
		if err != nil {
			return futs, err
		}
		msg := nats.NewMsg(layout.BlocksSubject)
		msg.Data = data
		msg.Header.Set(layout.HeaderMsgID, layout.BlockMsgID(b.Height))
		msg.Header.Set("Byzlog-Height", strconv.FormatInt(b.Height, 10))
		f, err := p.publishAsync(ctx, msg)
		if err != nil {
			return futs, err
		}
		futs = append(futs, f)
		p.blockNext = b.Height + 1
	}
	return futs, nil
}

// publishAsync publishes msg, waiting for room when MaxPending publishes
// are unacknowledged.
func (p *publisher) publishAsync(ctx context.Context, msg *nats.Msg) (jetstream.PubAckFuture, error) {
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
