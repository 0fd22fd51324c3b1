package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// floor is where a subscription starts in each partition: at the first
// record that is at or past it. A group stores its floor in its JetStream
// consumer's metadata, so every member skips the same records.
type floor struct {
	// Offset applies to every partition not in Offsets.
	Offset  uint64            `json:"offset,omitempty"`
	Offsets map[uint32]uint64 `json:"offsets,omitempty"`
	// TimeNano, when positive, also skips records with an earlier timestamp.
	TimeNano int64 `json:"time_nano,omitempty"`
}

// floorMetadata is the consumer metadata key of a group's floor.
const floorMetadata = "byzlog_floor"

func (f floor) offset(p uint32) uint64 {
	if o, ok := f.Offsets[p]; ok {
		return o
	}
	return f.Offset
}

// admits says whether a record of partition p at offset with timestamp ts
// is at or past the floor. Both offsets and timestamps grow within a
// partition, so once one record of a partition is admitted all later ones are.
func (f floor) admits(p uint32, offset uint64, tsNano int64) bool {
	return offset >= f.offset(p) && tsNano >= f.TimeNano
}

func (f floor) encode() string {
	b, _ := json.Marshal(f) // a struct of integers always encodes
	return string(b)
}

// decodeFloor reads a floor from a consumer's metadata, which anyone with
// access to the NATS account can write.
func decodeFloor(s string) (floor, error) {
	var f floor
	if s == "" {
		return f, nil
	}
	if err := json.Unmarshal([]byte(s), &f); err != nil {
		return floor{}, fmt.Errorf("consumer metadata %s = %q is not a byzlog start position: %v", floorMetadata, s, err)
	}
	if f.TimeNano < 0 {
		return floor{}, fmt.Errorf("consumer metadata %s = %q: time_nano is negative", floorMetadata, s)
	}
	return f, nil
}

// newFloor turns a start option into a floor; committed is the group's
// committed offsets of this topic (FromCommitted only).
func newFloor(o subOptions, committed map[uint32]uint64) floor {
	switch o.start {
	case startOffset:
		return floor{Offset: o.startOffset}
	case startTime:
		if o.startTime.After(time.Unix(0, 0)) {
			return floor{TimeNano: o.startTime.UnixNano()}
		}
	case startCommitted:
		if len(committed) > 0 {
			return floor{Offsets: committed}
		}
	}
	return floor{}
}

// startSeq finds the stream sequence to start reading at: the smallest, over
// the partitions with messages, of the sequence of the partition's first
// message at or past the floor (by binary search over the stream); past the
// stream's end when no partition has one yet. Zero means from the start.
func startSeq(ctx context.Context, st jetstream.Stream, topic string, parts []uint32, f floor) (uint64, error) {
	if f.Offset == 0 && len(f.Offsets) == 0 && f.TimeNano == 0 {
		return 0, nil
	}
	keyed := streamKeyed(st)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(layout.TopicFilter(topic, keyed)))
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", st.CachedInfo().Config.Name, err)
	}
	state := info.State
	if state.Msgs == 0 {
		return 0, nil
	}
	want := map[uint32]bool{}
	for _, p := range parts {
		want[p] = true
	}
	// The partitions' filters: a partition's subject, or a keyed
	// stream's subjects of its keys (the stream answers each key's
	// subject; a search goes over all of them at once).
	filters := map[string]uint32{}
	for subj := range info.State.Subjects {
		_, p, err := layout.ParseSubject(subj)
		if err != nil || (len(parts) > 0 && !want[p]) {
			continue
		}
		filters[layout.PartitionFilter(topic, p, keyed)] = p
	}
	subjects := slices.Sorted(maps.Keys(filters))
	best := state.LastSeq + 1
	for _, subj := range subjects {
		p := filters[subj]
		at := func(r *byzlogv1.StoredRecord) bool { return f.admits(p, r.Offset, r.TimestampUnixNano) }
		seq, err := seek(ctx, st, subj, state.FirstSeq, state.LastSeq, at)
		if err != nil {
			return 0, err
		}
		best = min(best, seq)
	}
	return best, nil
}

// streamKeyed reports whether st is a compacted topic's table of keys
// (layout.FormatKey): its partitions have holes, each key's older records.
func streamKeyed(st jetstream.Stream) bool {
	return layout.Keyed(st.CachedInfo().Config.Metadata[layout.FormatMetadata])
}

// seek returns the stream sequence of the first message on subject (a
// partition's filter), within
// [first, last], for which at is true of its last record, or last+1 when there is none. at must
// be monotonic along the subject's records (false, then true). It costs
// O(log(last-first)) message reads: a read at sequence s returns the first
// message on subject at or after s. A message that is not a byzlog record
// has no place in that order to trust, so the search takes it as at: it may
// start there, earlier than it had to (Next reports it as ErrMalformed and
// skips what the floor does not admit), but never later.
func seek(ctx context.Context, st jetstream.Stream, subject string, first, last uint64, at func(*byzlogv1.StoredRecord) bool) (uint64, error) {
	// next reads the first message on subject at or after seq; ok false
	// when there is none.
	next := func(seq uint64) (uint64, bool, bool, error) {
		m, err := nextMsg(ctx, st, subject, seq)
		if err != nil || m == nil {
			return 0, false, false, err
		}
		rs, err := layout.Records(m.Subject, m.Header, m.Data)
		return m.Sequence, true, err != nil || at(rs[len(rs)-1]), nil
	}
	// Invariant: the answer's search position lies in (lo, hi]; pred(s) =
	// "no message at or after s, or the next one is at" is false at lo
	// (or lo is before first) and true at hi.
	seq, ok, yes, err := next(first)
	if err != nil || !ok {
		return last + 1, err
	}
	if yes {
		return seq, nil
	}
	lo, hi := seq, last+1 // pred(lo) false: the message at lo is not at
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		s, ok, yes, err := next(mid)
		if err != nil {
			return 0, err
		}
		switch {
		case !ok || yes:
			hi = mid
		default:
			lo = s // every message before s is not at either
		}
	}
	s, ok, _, err := next(hi)
	if err != nil || !ok {
		return last + 1, err
	}
	return s, nil
}

// nextMsg reads the first message on subject at or after stream sequence
// seq, or nil when there is none. An answer on another subject or before
// seq is not what was asked for, and is reported as ErrMalformed.
func nextMsg(ctx context.Context, st jetstream.Stream, subject string, seq uint64) (*jetstream.RawStreamMsg, error) {
	m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the message on %s at or after sequence %d: %w", subject, seq, err)
	}
	if !layout.InFilter(subject, m.Subject) || m.Sequence < seq {
		return nil, fmt.Errorf("%w: asked for the message on %s at or after sequence %d, the stream answered sequence %d on %s", ErrMalformed, subject, seq, m.Sequence, m.Subject)
	}
	return m, nil
}

// before returns the last message on subject with a stream sequence in
// [from, seq), or nil when there is none. It reads O(log(seq-p)) messages,
// p the answer's sequence: it looks back 1, 2, 4... sequences until one
// reaches a message of subject, then halves the range between.
func before(ctx context.Context, st jetstream.Stream, subject string, from, seq uint64) (*jetstream.RawStreamMsg, error) {
	var found *jetstream.RawStreamMsg
	hi := seq // no message of subject in [hi, seq)
	for back := uint64(1); found == nil; back *= 2 {
		if hi <= from {
			return nil, nil
		}
		lo := from
		if seq-from > back {
			lo = seq - back
		}
		m, err := nextMsg(ctx, st, subject, lo)
		if err != nil {
			return nil, err
		}
		if m != nil && m.Sequence < hi {
			found = m
		} else {
			hi = lo
		}
	}
	// found lies before hi; the answer is the last message in [found, hi).
	for found.Sequence+1 < hi {
		mid := found.Sequence + 1 + (hi-found.Sequence-1)/2
		m, err := nextMsg(ctx, st, subject, mid)
		if err != nil {
			return nil, err
		}
		if m != nil && m.Sequence < hi {
			found = m
		} else {
			hi = mid
		}
	}
	return found, nil
}
