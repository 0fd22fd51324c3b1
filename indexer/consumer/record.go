package consumer

import (
	"crypto/ed25519"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Record is one record of the log, as the indexer published it.
type Record struct {
	Topic     string
	Partition uint32
	Offset    uint64
	// Height is the block that committed the record.
	Height int64
	// Key, Value and a header's Value are nil when null (Kafka's -1, a
	// tombstone's value) and empty, not nil, when the producer sent them
	// empty (from rules version 5; a chain before stored empty as null).
	Key     []byte
	Value   []byte
	Headers []Header
	// Timestamp is the log-append time: the committing block's time.
	Timestamp time.Time
	// CreateTime is the producer's create time, as it signed it.
	CreateTime time.Time
	// Producer is the key that signed the record's batch, and Sequence the
	// batch's producer sequence.
	Producer ed25519.PublicKey
	Sequence uint64

	seq    uint64                 // its message's stream sequence
	first  bool                   // the first record of its message
	run    *run                   // group mode: its message, acknowledged once all its records are
	stored *byzlogv1.StoredRecord // verify mode: the record as decoded, to verify
	acked  atomic.Bool
	// placeholder: a transaction's marker or an aborted transaction's
	// record's place (layout.Placeholder): its offset is taken, and it is
	// not delivered.
	placeholder bool
}

// run is a group member's message and how many of its records are not
// yet acknowledged: the message is acknowledged with its last record.
type run struct {
	msg  jetstream.Msg
	left atomic.Int64
	// touched is when the group last heard of it from this member: it
	// was read, or reported in progress (Next's goroutine only).
	touched time.Time
}

// Header is one application header of a record.
type Header struct {
	Key   string
	Value []byte
}

// Ack tells the group this record is done, so no member gets it again. Next
// and Close ack the record Next returned before, so call Ack only to finish
// a record earlier (or from another goroutine). Outside a group it does
// nothing. It does not wait for the server; Close flushes.
//
// The group acknowledges messages, and a message of an indexer that puts
// several records in one (its --records-per-message) is acknowledged with
// the last of its records: until then the group counts all of them as
// not done.
func (r *Record) Ack() error {
	if r.run == nil || !r.acked.CompareAndSwap(false, true) || r.run.left.Add(-1) > 0 {
		return nil
	}
	if err := r.run.msg.Ack(); err != nil {
		return fmt.Errorf("ack %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return nil
}

// decode turns a record or run message into its Records with d (one
// Decoder per subscription, as messages in a row share most headers),
// acknowledged through one run in a group; an error names the message and
// what is wrong with it, wrapped in ErrMalformed.
func decode(d *layout.Decoder, stream string, m jetstream.Msg, group, keep bool) ([]*Record, error) {
	srs, err := d.Records(m.Subject(), m.Headers(), m.Data())
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s sequence %d: %v", ErrMalformed, stream, streamSeq(m), err)
	}
	seq := streamSeq(m)
	var rn *run
	if group {
		rn = &run{msg: m, touched: time.Now()}
		rn.left.Store(int64(len(srs)))
	}
	out := make([]*Record, len(srs))
	for i, sr := range srs {
		r := &Record{
			Topic: sr.Topic, Partition: sr.Partition, Offset: sr.Offset, Height: sr.Height,
			Key: sr.Key, Value: sr.Value,
			Timestamp: time.Unix(0, sr.TimestampUnixNano).UTC(), CreateTime: time.Unix(0, sr.CreateTimeUnixNano).UTC(),
			Producer: ed25519.PublicKey(sr.ProducerKey), Sequence: sr.Sequence,
			seq: seq, first: i == 0, run: rn, placeholder: layout.Placeholder(sr),
		}
		if keep {
			r.stored = sr
		}
		for _, h := range sr.Headers {
			r.Headers = append(r.Headers, Header{Key: h.Key, Value: h.Value})
		}
		out[i] = r
	}
	return out, nil
}

func streamSeq(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}
