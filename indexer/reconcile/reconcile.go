// Package reconcile squares what the indexer acknowledged with what the
// streams hold. JetStream acknowledges a message once it is written, not
// once it is on disk (a file store syncs every 2 minutes by default), so a
// NATS server that loses power comes back without the last records it
// acknowledged, and its cursor bucket may come back further along than a
// topic's stream. The indexer therefore keeps, with its cursor, where each
// partition's records end as far as JetStream acknowledged them, and before
// it resumes (after any error, a NATS restart among them, and at start) it
// asks each stream for its last record: a stream that holds less than it
// acknowledged gets the records again, from the block of the last record it
// holds.
//
// It reads streams and publishes nothing: the indexer keeps the ends
// (Advance) in its cursor, and publishes again from where Rewind says.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// End is how far one partition's records were acknowledged: the
// offset after the last, the height of the block with the first (to
// start again from when the stream holds none), and the height and time
// of the block with the last (to tell a stream's limits from a loss; an
// older indexer saved neither).
type End struct {
	Next        uint64 `json:"next"`
	FirstHeight int64  `json:"first_height"`
	LastHeight  int64  `json:"last_height,omitempty"`
	LastTime    int64  `json:"last_time_unix_nano,omitempty"`
}

// Cursor is the cursor's value: the last height whose records are all
// acknowledged, and each partition's end there. An older indexer saved the
// height alone, as a decimal.
type Cursor struct {
	Height int64          `json:"height"`
	Ends   map[string]End `json:"ends,omitempty"` // Key -> end
	// Followed is the last height whose records JetStream acknowledged
	// but those held back behind open Kafka transactions: Ends may be of
	// blocks up to it, past Height.
	Followed int64 `json:"followed,omitempty"`
}

// ParseCursor reads a saved cursor, either form.
func ParseCursor(b []byte) (Cursor, error) {
	if h, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		return Cursor{Height: h}, nil
	}
	var c Cursor
	if err := json.Unmarshal(b, &c); err != nil || c.Height < 0 {
		return Cursor{}, fmt.Errorf("not a height nor a cursor (%v)", err)
	}
	return c, nil
}

// Key names a partition in the cursor's ends and the publisher's maps.
func Key(topic string, partition uint32) string {
	return topic + "\x00" + strconv.FormatUint(uint64(partition), 10)
}

// SplitKey is Key undone; ok is false for what Key did not make.
func SplitKey(k string) (string, uint32, bool) {
	topic, p, ok := strings.Cut(k, "\x00")
	n, err := strconv.ParseUint(p, 10, 32)
	return topic, uint32(n), ok && err == nil
}

// BlockEnds is what block b moves: each partition's end after it, and the
// topics it deletes.
func BlockEnds(b *verify.Block) (map[string]End, []string) {
	ends := map[string]End{}
	for _, part := range b.Appended.Partitions {
		r := part.Root
		ends[Key(r.Topic, r.Partition)] = End{Next: r.FirstOffset + uint64(r.Count), FirstHeight: b.Height, LastHeight: b.Height, LastTime: b.Time.UnixNano()}
	}
	var deleted []string
	for _, c := range b.Appended.Topics {
		if c.Deleted {
			deleted = append(deleted, c.Name)
		}
	}
	return ends, deleted
}

// Advance records an acknowledged block's ends.
func Advance(into map[string]End, ends map[string]End, deleted []string) {
	for _, topic := range deleted {
		for k := range into {
			if t, _, _ := SplitKey(k); t == topic {
				delete(into, k)
			}
		}
	}
	for k, e := range ends {
		if old, ok := into[k]; ok {
			e.FirstHeight = old.FirstHeight
		}
		into[k] = e
	}
}

// Rewind returns the height to publish from again so that every stream
// holds what was acknowledged (ends), or after+1 when every stream does;
// seen (at least after) is the last height whose records the indexer
// published, held ones aside (Cursor.Followed).
// It says which partition made it go back. A partition whose records a
// stream's limits removed (removedByLimits) holds what it should.
func Rewind(ctx context.Context, js jetstream.JetStream, ends map[string]End, after, seen int64) (int64, string, error) {
	from, why := after+1, ""
	now := time.Now()
	for k, e := range ends {
		topic, partition, ok := SplitKey(k)
		if !ok || e.Next == 0 {
			continue
		}
		st, err := js.Stream(ctx, layout.StreamName(topic))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			st = nil
		} else if err != nil {
			return 0, "", fmt.Errorf("stream of topic %s: %w", topic, err)
		}
		held, height, err := lastHeld(ctx, st, topic, partition)
		if err != nil {
			return 0, "", err
		}
		if held >= e.Next {
			continue
		}
		if held == 0 && st != nil {
			gone, err := removedByLimits(ctx, st, topic, e, max(after, seen), now)
			if err != nil {
				return 0, "", err
			}
			if gone {
				continue
			}
		}
		at := e.FirstHeight
		if height > 0 {
			at = height
		}
		if at < from {
			from, why = at, fmt.Sprintf("%s/%d holds %d of the %d offsets acknowledged", topic, partition, held, e.Next)
		}
	}
	return from, why, nil
}

// removedByLimits reports whether st, holding none of a partition's
// records (ended by e), removed them for its limits rather than lost them.
// A server that loses power loses a stream's newest messages; limits remove
// its oldest. So the records count as removed if their block is older than
// the stream's MaxAge (the chain's retention_ms, at most that, deleted them
// too), or older than the first message the stream holds (of a height this
// indexer has published, at most after): a partition quiet for longer than
// MaxAge, or a skewed topic's quiet partition once the busy ones filled
// MaxBytes. Publishing them again would store them anew, to be removed
// again, after consumers had them.
func removedByLimits(ctx context.Context, st jetstream.Stream, topic string, e End, after int64, now time.Time) (bool, error) {
	if e.LastHeight == 0 {
		return false, nil // saved by an older indexer: unknown
	}
	info := st.CachedInfo()
	if age := info.Config.MaxAge; age > 0 && now.Sub(time.Unix(0, e.LastTime)) > age {
		return true, nil
	}
	if info.State.Msgs == 0 {
		return false, nil
	}
	first, err := st.GetMsg(ctx, info.State.FirstSeq, jetstream.WithGetMsgSubject(layout.TopicFilter(topic, keyed(st))))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("first message of stream %s: %w", info.Config.Name, err)
	}
	// What it says counts only as far as this indexer saw the chain: a
	// message no byzlog indexer wrote could claim a later height.
	rs, err := layout.Records(first.Subject, first.Header, first.Data)
	return err == nil && rs[0].Height > e.LastHeight && rs[0].Height <= after, nil
}

// lastHeld is the offset after the last record the stream holds on the
// partition's subject, and that record's height (0, 0 when it holds none).
func lastHeld(ctx context.Context, st jetstream.Stream, topic string, partition uint32) (uint64, int64, error) {
	if st == nil {
		return 0, 0, nil
	}
	// A keyed stream keeps the last record of a partition (the latest of
	// its key) unless it is a tombstone whose TTL passed, or a marker,
	// which it does not hold: going back for those publishes again only
	// what the stream lacks.
	_, r, err := LastRecord(ctx, st, layout.PartitionFilter(topic, partition, keyed(st)))
	if err != nil || r == nil {
		return 0, 0, err
	}
	return r.Offset + 1, r.Height, nil
}

// keyed reports whether st is a compacted topic's table (layout.FormatKey).
func keyed(st jetstream.Stream) bool {
	return layout.Keyed(st.CachedInfo().Config.Metadata[layout.FormatMetadata])
}

// LastRecord is the stream's last message on subject and the last record
// it carries (nil, nil when it holds none); a message that is no byzlog
// record of the subject is an error naming it.
func LastRecord(ctx context.Context, st jetstream.Stream, subject string) (*jetstream.RawStreamMsg, *byzlogv1.StoredRecord, error) {
	last, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	rs, err := StreamRecords(last, subject)
	if err != nil {
		return nil, nil, Foreign(st.CachedInfo().Config.Name, subject, last.Sequence, err.Error())
	}
	return last, rs[len(rs)-1], nil
}

// StreamRecords decodes a record or run message read from subject (or a
// filter of a keyed stream's partition, layout.KeyPartitionSubjects).
func StreamRecords(m *jetstream.RawStreamMsg, subject string) ([]*byzlogv1.StoredRecord, error) {
	rs, err := layout.Records(m.Subject, m.Header, m.Data)
	if err != nil || !layout.InFilter(subject, m.Subject) {
		return nil, fmt.Errorf("a message that is not a byzlog record of it (%s: %v)", m.Subject, err)
	}
	return rs, nil
}

// Foreign reports a message no byzlog indexer writes.
func Foreign(stream, subject string, seq uint64, what string) error {
	return fmt.Errorf("stream %s holds on %s at sequence %d %s, which no byzlog indexer writes: someone with publish rights wrote what nobody should have, "+
		"and publishing stops rather than skip records for it; find who may publish to %s, and remove the message (nats stream rmm %s %d)",
		stream, subject, seq, what, subject, stream, seq)
}
