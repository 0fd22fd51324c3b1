// Package layout is the contract between byzlog's indexer and its
// consumers: which JetStream stream and subject a record goes to, and how
// stored records map to NATS messages: a run of a block's consecutive
// records of a partition as one message (a byzlog.v1.RecordRun payload,
// its count and first offset in headers), or one record as a message
// (value as the payload, everything else in headers). It is pure; the
// indexer encodes with it and the consumer SDK decodes with it, and any
// NATS client can read the same headers and protos.
//
// Streams hold committed data only, every offset of a partition in order,
// each once (Kafka's read_committed). A partition with an open Kafka
// transaction is held back at its last stable offset: the indexer
// publishes nothing of it from the transaction's first record on, its
// other producers' records included, until the transaction's marker is
// committed; then the held records go out in offset order, up to the next
// open transaction's first. A record of a committed transaction goes out
// whole (HeaderTransactional). A record of an aborted transaction goes out
// as its place (HeaderAborted: offset, height, producer and sequence, no
// key, value or headers), and a marker as itself (HeaderControl, no data),
// so every offset is in the stream and a consumer's gap check holds; the
// consumer SDK skips both (Placeholder).
//
// A compacted topic's stream (FormatKey) is a table instead: a subject a
// key (KeySubject), one record a message, and JetStream keeps the latest
// message of each subject. It holds a partition's records in offset order
// with holes, and no markers or aborted places.
package layout

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Subjects and streams.
const (
	// SubjectPrefix starts every subject byzlog publishes.
	SubjectPrefix = "byzlog"
	// BlocksSubject carries one BlockInfo (JSON) per committed height.
	BlocksSubject = "byzlog.$blocks"
	// BlocksStream holds BlocksSubject.
	BlocksStream = "byzlog-blocks"
	// CursorBucket is the JetStream key-value bucket of indexer cursors.
	CursorBucket = "byzlog-indexer"
)

// Headers of a record message. Binary values are base64 (standard, padded);
// times are RFC 3339 with nanoseconds, UTC.
const (
	// HeaderOffset is the record's offset in its partition (decimal).
	HeaderOffset = "Byzlog-Offset"
	// HeaderHeight is the height of the block that committed the record.
	HeaderHeight = "Byzlog-Height"
	// HeaderKey is the record's key (base64); absent for a nil key.
	HeaderKey = "Byzlog-Key"
	// HeaderProducer is the producer's ed25519 public key (hex).
	HeaderProducer = "Byzlog-Producer"
	// HeaderSequence is the producer's batch sequence (decimal).
	HeaderSequence = "Byzlog-Sequence"
	// HeaderTimestamp is the log-append time: the committing block's time.
	HeaderTimestamp = "Byzlog-Timestamp"
	// HeaderCreateTime is the producer's create time, as it signed it.
	HeaderCreateTime = "Byzlog-Create-Time"
	// HeaderRecordHeader carries one record header, "base64(key):base64(value)";
	// repeated, in the record's order.
	HeaderRecordHeader = "Byzlog-Header"
	// HeaderKafkaProducer and HeaderKafkaEpoch are a Kafka producer's
	// producer id and epoch (decimal), under which the sequence is the
	// batch's Kafka base sequence; absent on records of other producers.
	HeaderKafkaProducer = "Byzlog-Kafka-Producer-Id"
	HeaderKafkaEpoch    = "Byzlog-Kafka-Epoch"
	// HeaderEmpty names, one a value, what of a one-record message is
	// present and empty rather than null: "key", "value", or "header:I" for
	// the record's I-th header (from 0). Without it an empty value payload,
	// a missing key header and an empty header value are null, as every
	// record of a chain before rules version 5 is.
	HeaderEmpty = "Byzlog-Empty"
	// HeaderTransactional marks a record of a committed Kafka transaction
	// ("1"; StoredRecord.kafka_transactional).
	HeaderTransactional = "Byzlog-Kafka-Transactional"
	// HeaderControl marks a transaction's marker: "commit" or "abort"
	// (StoredRecord.kafka_control). A marker has no key, value or headers.
	HeaderControl = "Byzlog-Control"
	// HeaderAborted marks the place of a record of an aborted transaction
	// ("1"; StoredRecord.aborted): the record's offset, height, producer
	// and sequence, and none of its key, value or headers.
	HeaderAborted = "Byzlog-Aborted"
	// HeaderRecords marks a run message: its payload is a RecordRun of
	// this many records (decimal), the first at HeaderOffset. A message
	// without it carries one record, as above.
	HeaderRecords = "Byzlog-Records"
)

// MaxRunBytes bounds the payload of a run message the Encoder makes: the
// records of a run stop before the one that would pass it (a run holds at
// least one record, however large).
const MaxRunBytes = 64 << 10

// MaxRunRecords bounds the records of a run, as the Encoder is given them
// and as a Decoder takes them.
const MaxRunRecords = 4096

// FormatMetadata is the metadata key of a topic's stream that says how its
// records are cut into messages: FormatRecord, or a run format (RunFormat).
// Every indexer of a stream cuts as it says.
const FormatMetadata = "byzlog_message_format"

// FormatRecord is the format of a stream with a message per record.
const FormatRecord = "record"

// RunFormat is the format of a stream whose messages are runs of up to
// perMessage records cut by Split (version 1 of the cut, MaxRunBytes).
func RunFormat(perMessage int) string {
	return fmt.Sprintf("run/v1 %d %d", perMessage, MaxRunBytes)
}

// ParseFormat is the records a message of format f carries at most: 1 for
// FormatRecord, a run format's count for one this package cuts.
func ParseFormat(f string) (int, error) {
	if f == FormatRecord || f == FormatKey {
		return 1, nil
	}
	var n, size int
	if _, err := fmt.Sscanf(f, "run/v1 %d %d", &n, &size); err != nil || f != RunFormat(n) || n < 2 || n > MaxRunRecords || size != MaxRunBytes {
		return 0, fmt.Errorf("message format %q is none this byzlog writes (%q, %q, or %q with 2 to %d records)", f, FormatRecord, FormatKey, RunFormat(DefaultRunRecords), MaxRunRecords)
	}
	return n, nil
}

// FormatKey is the format of a compacted topic's stream: one record a
// message, as FormatRecord, each on its key's subject (KeySubject), and
// the stream keeps the latest message of each subject. Records without a
// key, transaction markers and aborted places are not in it.
const FormatKey = "key/v1"

// Keyed reports whether a stream of format f is a table of keys (FormatKey).
func Keyed(f string) bool { return f == FormatKey }

// DefaultRunRecords is how many records a run carries at most unless the
// indexer is told otherwise.
const DefaultRunRecords = 256

// Subject is the subject of topic's partition: byzlog.<topic>.<partition>.
// A topic name's dots stay dots, so byzlog.orders.eu.* reads as expected.
// A name that would make an empty token (a leading, trailing or doubled
// dot), or that starts with "_x", is written as "_x" and its hex instead.
func Subject(topic string, partition uint32) string {
	return SubjectPrefix + "." + TopicToken(topic) + "." + strconv.FormatUint(uint64(partition), 10)
}

// TopicSubjects is the subject filter of every partition of topic.
func TopicSubjects(topic string) string {
	return SubjectPrefix + "." + TopicToken(topic) + ".*"
}

// KeyToken is the subject token before a compacted topic's subjects: it
// cannot start a topic's token (a topic name has no '$'), so no subject of
// a compacted topic's stream is also another topic's. Without it,
// byzlog.orders.*.* (a compacted orders) would take in byzlog.orders.eu.0
// (partition 0 of a topic orders.eu), and JetStream refuses streams whose
// subjects overlap.
const KeyToken = "$key"

// MaxKeyTokenBytes is the longest key that is its own subject token: a
// longer one is named by its hash (KeySubjectToken), keeping subjects well
// inside NATS's 4 KiB control line.
const MaxKeyTokenBytes = 1024

// KeySubjectToken is key as the last token of its subject: base64url
// without padding (no '.', '*', '>' or white space, as a token must be);
// "~" for the empty key, and "~" and the base64url SHA-256 of a key longer
// than MaxKeyTokenBytes ('~' is no base64url character).
func KeySubjectToken(key []byte) string {
	switch {
	case len(key) == 0:
		return "~"
	case len(key) > MaxKeyTokenBytes:
		sum := sha256.Sum256(key)
		return "~" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return base64.RawURLEncoding.EncodeToString(key)
}

// KeySubject is the subject of key in a compacted topic's partition:
// byzlog.$key.<topic>.<partition>.<key> (KeySubjectToken).
func KeySubject(topic string, partition uint32, key []byte) string {
	return keyPartition(topic, partition) + "." + KeySubjectToken(key)
}

func keyPartition(topic string, partition uint32) string {
	return SubjectPrefix + "." + KeyToken + "." + TopicToken(topic) + "." + strconv.FormatUint(uint64(partition), 10)
}

// KeyPartitionSubjects is the subject filter of every key of a compacted
// topic's partition.
func KeyPartitionSubjects(topic string, partition uint32) string {
	return keyPartition(topic, partition) + ".*"
}

// KeyTopicSubjects is the subject filter of a compacted topic's stream.
func KeyTopicSubjects(topic string) string {
	return SubjectPrefix + "." + KeyToken + "." + TopicToken(topic) + ".*.*"
}

// PartitionFilter is the subject filter of a partition's records in a
// stream that is keyed (Keyed) or not.
func PartitionFilter(topic string, partition uint32, keyed bool) string {
	if keyed {
		return KeyPartitionSubjects(topic, partition)
	}
	return Subject(topic, partition)
}

// TopicFilter is the subject filter of a topic's stream, keyed or not.
func TopicFilter(topic string, keyed bool) string {
	if keyed {
		return KeyTopicSubjects(topic)
	}
	return TopicSubjects(topic)
}

// InFilter reports whether subject is filter, or matches it when filter
// ends in the single-token wildcard ".*" (the filters this package makes).
func InFilter(filter, subject string) bool {
	prefix, ok := strings.CutSuffix(filter, ".*")
	if !ok {
		return subject == filter
	}
	if prefix, ok = strings.CutSuffix(prefix, ".*"); ok { // a topic's keys: partition.key
		rest, ok := strings.CutPrefix(subject, prefix+".")
		p, key, two := strings.Cut(rest, ".")
		return ok && two && p != "" && key != "" && !strings.Contains(key, ".")
	}
	rest, ok := strings.CutPrefix(subject, prefix+".")
	return ok && rest != "" && !strings.Contains(rest, ".")
}

// TopicToken is topic as it appears in subjects (see Subject).
func TopicToken(topic string) string {
	if topic == "" || strings.HasPrefix(topic, "_x") || strings.HasPrefix(topic, ".") ||
		strings.HasSuffix(topic, ".") || strings.Contains(topic, "..") {
		return "_x" + hex.EncodeToString([]byte(topic))
	}
	return topic
}

// StreamName is the JetStream stream of topic: "byzlog-" and the topic,
// with '_' written "__" and '.' written "_d" (stream names cannot hold
// dots; the escape keeps distinct topics distinct). A name whose escaped
// form would pass JetStream's 255-byte limit becomes "byzlog-_h" and the
// hex of the first 20 bytes of its SHA-256 (escaping never makes "_h").
func StreamName(topic string) string {
	var b strings.Builder
	b.WriteString("byzlog-")
	for _, c := range []byte(topic) {
		switch c {
		case '_':
			b.WriteString("__")
		case '.':
			b.WriteString("_d")
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() > maxStreamName {
		sum := sha256.Sum256([]byte(topic))
		return "byzlog-_h" + hex.EncodeToString(sum[:20])
	}
	return b.String()
}

const maxStreamName = 255

// Message is a stored record as a NATS message on its partition's subject.
func Message(r *byzlogv1.StoredRecord) *nats.Msg {
	var e Encoder
	return e.Message(r)
}

// Encoder makes messages of records as Message does, remembering the
// header values records in a row share: a block's records share its
// height and time, a batch's its producer, sequence and create time, a
// partition's its subject. Formatting them once per batch rather than
// once per record is what the indexer saves by it. The zero value is
// ready; an Encoder is not safe for concurrent use.
type Encoder struct {
	topic     string
	partition uint32
	subject   string
	producer  []byte
	// One-element header values, shared by the messages that carry them
	// (nats.go only reads them).
	producerHex                   []string
	sequence                      formatted[uint64]
	height, timestamp, createTime formatted[int64]
}

// formatted is the header value last formatted from a value, and the value.
type formatted[T comparable] struct {
	v    T
	text []string
}

// get is v formatted: the remembered header value if v is the last value,
// else format's (remembered).
func (f *formatted[T]) get(v T, format func(T) string) []string {
	if f.text == nil || v != f.v {
		f.v, f.text = v, []string{format(v)}
	}
	return f.text
}

func formatInt64(v int64) string   { return strconv.FormatInt(v, 10) }
func formatUint64(v uint64) string { return strconv.FormatUint(v, 10) }

// Message is r as a NATS message, as the package's Message makes it.
func (e *Encoder) Message(r *byzlogv1.StoredRecord) *nats.Msg {
	if e.subject == "" || r.Topic != e.topic || r.Partition != e.partition {
		e.topic, e.partition, e.subject = r.Topic, r.Partition, Subject(r.Topic, r.Partition)
	}
	m := &nats.Msg{Subject: e.subject, Header: make(nats.Header), Data: r.Value}
	h := m.Header
	h.Set(HeaderOffset, strconv.FormatUint(r.Offset, 10))
	h[HeaderHeight] = e.height.get(r.Height, formatInt64)
	switch {
	case len(r.Key) > 0:
		h.Set(HeaderKey, base64.StdEncoding.EncodeToString(r.Key))
	case r.Key != nil:
		h.Add(HeaderEmpty, "key")
	}
	if r.Value != nil && len(r.Value) == 0 {
		h.Add(HeaderEmpty, "value")
	}
	if e.producerHex == nil || !bytes.Equal(r.ProducerKey, e.producer) {
		e.producer, e.producerHex = bytes.Clone(r.ProducerKey), []string{hex.EncodeToString(r.ProducerKey)}
	}
	h[HeaderProducer] = e.producerHex
	h[HeaderSequence] = e.sequence.get(r.Sequence, formatUint64)
	h[HeaderTimestamp] = e.timestamp.get(r.TimestampUnixNano, formatTime)
	h[HeaderCreateTime] = e.createTime.get(r.CreateTimeUnixNano, formatTime)
	if r.KafkaProducerId != 0 || r.KafkaEpoch != 0 {
		h.Set(HeaderKafkaProducer, strconv.FormatInt(r.KafkaProducerId, 10))
		h.Set(HeaderKafkaEpoch, strconv.FormatInt(int64(r.KafkaEpoch), 10))
	}
	if r.KafkaTransactional {
		h.Set(HeaderTransactional, "1")
	}
	if c := r.KafkaControl; c != nil {
		h.Set(HeaderControl, controlName(c))
	}
	if r.Aborted {
		h.Set(HeaderAborted, "1")
	}
	for i, rh := range r.Headers {
		h.Add(HeaderRecordHeader, base64.StdEncoding.EncodeToString([]byte(rh.Key))+":"+base64.StdEncoding.EncodeToString(rh.Value))
		if rh.Value != nil && len(rh.Value) == 0 {
			h.Add(HeaderEmpty, "header:"+strconv.Itoa(i))
		}
	}
	return m
}

// KeyMessage is r as a message of a compacted topic's stream: as Message
// makes it, on its key's subject (KeySubject).
func (e *Encoder) KeyMessage(r *byzlogv1.StoredRecord) *nats.Msg {
	m := e.Message(r)
	m.Subject = KeySubject(r.Topic, r.Partition, r.Key)
	return m
}

// Run makes one run message of records, which must be consecutive records
// of one partition committed by one block, in offset order: a RecordRun
// payload with HeaderRecords, HeaderOffset and HeaderHeight. Split chooses
// runs that fit MaxRunBytes.
func (e *Encoder) Run(records []*byzlogv1.StoredRecord) (*nats.Msg, error) {
	first := records[0]
	if e.subject == "" || first.Topic != e.topic || first.Partition != e.partition {
		e.topic, e.partition, e.subject = first.Topic, first.Partition, Subject(first.Topic, first.Partition)
	}
	size := 0
	for _, r := range records {
		size += runEntrySize(r)
	}
	data := make([]byte, 0, size)
	for _, r := range records {
		data = protowire.AppendTag(data, runRecordsField, protowire.BytesType)
		data = protowire.AppendVarint(data, uint64(proto.Size(r)))
		var err error
		if data, err = marshalOpts.MarshalAppend(data, r); err != nil {
			return nil, fmt.Errorf("encode record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
	}
	m := &nats.Msg{Subject: e.subject, Header: make(nats.Header, 4), Data: data}
	m.Header[HeaderRecords] = []string{strconv.Itoa(len(records))}
	m.Header[HeaderOffset] = []string{strconv.FormatUint(first.Offset, 10)}
	m.Header[HeaderHeight] = e.height.get(first.Height, formatInt64)
	return m, nil
}

// Split is how many of records, from the first, the next run message
// takes: at most max records (at least 1), all of the first's block, and
// no more than fit MaxRunBytes, but always one.
func Split(records []*byzlogv1.StoredRecord, max int) int {
	size := 0
	for i, r := range records {
		if i == max || r.Height != records[0].Height {
			return i
		}
		size += runEntrySize(r)
		if i > 0 && size > MaxRunBytes {
			return i
		}
	}
	return len(records)
}

// runRecordsField is RecordRun's field number of records.
const runRecordsField = 1

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// runEntrySize is r's size in a RecordRun: the field's tag, length and
// the record.
func runEntrySize(r *byzlogv1.StoredRecord) int {
	n := proto.Size(r)
	return protowire.SizeTag(runRecordsField) + protowire.SizeBytes(n)
}

func formatTime(unixNano int64) string {
	return time.Unix(0, unixNano).UTC().Format(time.RFC3339Nano)
}

// Record decodes a record message (subject, headers, payload) back into the
// stored record, as far as a message carries it. A message that is not a
// byzlog record gets an error naming what is wrong. It reads one-record
// messages; Records reads runs too.
func Record(subject string, h nats.Header, data []byte) (*byzlogv1.StoredRecord, error) {
	var d Decoder
	return d.Record(subject, h, data)
}

// Records decodes a message into the records it carries: one for a
// one-record message, a run's for a run message. A message that is not a
// byzlog record or run gets an error naming what is wrong.
func Records(subject string, h nats.Header, data []byte) ([]*byzlogv1.StoredRecord, error) {
	var d Decoder
	return d.Records(subject, h, data)
}

// Records decodes one message, as the package's Records does.
func (d *Decoder) Records(subject string, h nats.Header, data []byte) ([]*byzlogv1.StoredRecord, error) {
	n := h.Values(HeaderRecords)
	if len(n) == 0 {
		r, err := d.Record(subject, h, data)
		if err != nil {
			return nil, err
		}
		return []*byzlogv1.StoredRecord{r}, nil
	}
	if err := d.setSubject(subject); err != nil {
		return nil, err
	}
	if d.keyToken != "" {
		return nil, fmt.Errorf("message on %s: a run of %s records on a key's subject, which carries one record", subject, n[0])
	}
	count, err := strconv.ParseUint(n[0], 10, 32)
	if err != nil || count == 0 {
		return nil, fmt.Errorf("message on %s: header %s = %q: want a positive count", subject, HeaderRecords, n[0])
	}
	first, err := strconv.ParseUint(h.Get(HeaderOffset), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("message on %s: header %s = %q: %v", subject, HeaderOffset, h.Get(HeaderOffset), err)
	}
	if count > MaxRunRecords || count > uint64(len(data)) { // every record takes at least a byte
		return nil, fmt.Errorf("message on %s: header %s says %d records in a %d-byte payload (at most %d a run)", subject, HeaderRecords, count, len(data), MaxRunRecords)
	}
	height, err := strconv.ParseInt(h.Get(HeaderHeight), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("message on %s: header %s = %q: %v", subject, HeaderHeight, h.Get(HeaderHeight), err)
	}
	// The payload is walked field by field and each record decoded alone,
	// up to the count, so a payload of many tiny entries costs no more than
	// the count says.
	records := make([]*byzlogv1.StoredRecord, 0, count)
	for rest := data; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num != runRecordsField || typ != protowire.BytesType {
			return nil, fmt.Errorf("message on %s: payload is not a RecordRun: a field other than records at byte %d", subject, len(data)-len(rest))
		}
		rest = rest[n:]
		b, n := protowire.ConsumeBytes(rest)
		if n < 0 {
			return nil, fmt.Errorf("message on %s: payload is not a RecordRun: a truncated record at byte %d", subject, len(data)-len(rest))
		}
		rest = rest[n:]
		i := len(records)
		if uint64(i) == count {
			return nil, fmt.Errorf("message on %s: header %s says %d records, the payload holds more", subject, HeaderRecords, count)
		}
		want := first + uint64(i)
		if want < first {
			return nil, fmt.Errorf("message on %s: offsets from %d pass 2^64", subject, first)
		}
		r := &byzlogv1.StoredRecord{}
		if err := proto.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("message on %s: record %d of the run is not a StoredRecord: %v", subject, i, err)
		}
		if r.Topic != d.topic || r.Partition != d.partition || r.Offset != want {
			return nil, fmt.Errorf("message on %s: record %d of the run is %q/%d@%d, want %q/%d@%d", subject, i, r.Topic, r.Partition, r.Offset, d.topic, d.partition, want)
		}
		if r.Height != height {
			return nil, fmt.Errorf("message on %s: record %d of the run has height %d, header %s says %d (a run is one block's)", subject, i, r.Height, HeaderHeight, height)
		}
		records = append(records, r)
	}
	if uint64(len(records)) != count {
		return nil, fmt.Errorf("message on %s: header %s says %d records, the payload holds %d", subject, HeaderRecords, count, len(records))
	}
	return records, nil
}

// setSubject parses subject into d's topic and partition, unless it is the
// subject parsed last.
func (d *Decoder) setSubject(subject string) error {
	if d.subject != "" && subject == d.subject {
		return nil
	}
	topic, partition, keyToken, err := ParseKeySubject(subject)
	if err != nil {
		return err
	}
	d.subject, d.topic, d.partition, d.keyToken = subject, topic, partition, keyToken
	return nil
}

// Decoder decodes messages as Record does, remembering the values that
// messages in a row share (a batch's producer, sequence and create time, a
// block's height and time, a partition's subject), so that each is parsed
// once per batch rather than once per record. The zero value is ready; a
// Decoder is not safe for concurrent use.
type Decoder struct {
	subject, topic string
	partition      uint32
	keyToken       string // of a key's subject (KeySubject), else ""
	producer       memo[[]byte]
	height         memo[int64]
	sequence       memo[uint64]
	timestamp      memo[int64]
	createTime     memo[int64]
}

// memo is the value last parsed from a header and the text it came from.
type memo[T any] struct {
	text string
	v    T
	ok   bool
}

// get is text parsed: the remembered value if text is the last one parsed,
// else parse's (remembered if it succeeds).
func (m *memo[T]) get(text string, parse func(string) (T, error)) (T, error) {
	if m.ok && text == m.text {
		return m.v, nil
	}
	v, err := parse(text)
	if err == nil {
		m.text, m.v, m.ok = text, v, true
	}
	return v, err
}

func parseInt64(s string) (int64, error)   { return strconv.ParseInt(s, 10, 64) }
func parseUint64(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

func parseTime(s string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t.UnixNano(), err
}

// Record decodes one message, as the package's Record does.
func (d *Decoder) Record(subject string, h nats.Header, data []byte) (*byzlogv1.StoredRecord, error) {
	if err := d.setSubject(subject); err != nil {
		return nil, err
	}
	if n := h.Values(HeaderRecords); len(n) > 0 {
		return nil, fmt.Errorf("message on %s: a run of %s records, not one record", subject, n[0])
	}
	empty := map[string]bool{}
	for _, v := range h.Values(HeaderEmpty) {
		empty[v] = true
	}
	r := &byzlogv1.StoredRecord{Topic: d.topic, Partition: d.partition, Value: emptyOrNull(data, empty["value"])}
	var err error
	if r.Offset, err = strconv.ParseUint(h.Get(HeaderOffset), 10, 64); err != nil {
		return nil, fmt.Errorf("message on %s: header %s = %q: %v", subject, HeaderOffset, h.Get(HeaderOffset), err)
	}
	if r.Height, err = d.height.get(h.Get(HeaderHeight), parseInt64); err != nil {
		return nil, fmt.Errorf("message on %s: header %s = %q: %v", subject, HeaderHeight, h.Get(HeaderHeight), err)
	}
	if k := h.Values(HeaderKey); len(k) > 0 {
		if r.Key, err = base64.StdEncoding.DecodeString(k[0]); err != nil {
			return nil, fmt.Errorf("message on %s: header %s is not base64: %v", subject, HeaderKey, err)
		}
	}
	r.Key = emptyOrNull(r.Key, empty["key"])
	if d.keyToken != "" && (r.Key == nil || KeySubjectToken(r.Key) != d.keyToken) {
		return nil, fmt.Errorf("message on %s: its record's key (header %s %q) is not the subject's", subject, HeaderKey, h.Get(HeaderKey))
	}
	key, err := d.producer.get(h.Get(HeaderProducer), hex.DecodeString)
	if err != nil {
		return nil, fmt.Errorf("message on %s: header %s is not hex: %v", subject, HeaderProducer, err)
	}
	r.ProducerKey = bytes.Clone(key) // each record owns its bytes
	if r.Sequence, err = d.sequence.get(h.Get(HeaderSequence), parseUint64); err != nil {
		return nil, fmt.Errorf("message on %s: header %s = %q: %v", subject, HeaderSequence, h.Get(HeaderSequence), err)
	}
	for _, f := range []struct {
		name string
		memo *memo[int64]
		dst  *int64
	}{{HeaderTimestamp, &d.timestamp, &r.TimestampUnixNano}, {HeaderCreateTime, &d.createTime, &r.CreateTimeUnixNano}} {
		if *f.dst, err = f.memo.get(h.Get(f.name), parseTime); err != nil {
			return nil, fmt.Errorf("message on %s: header %s = %q: %v", subject, f.name, h.Get(f.name), err)
		}
	}
	if err := kafkaFields(subject, h, r); err != nil {
		return nil, err
	}
	if r.Headers, err = recordHeaders(subject, h, empty); err != nil {
		return nil, err
	}
	return r, nil
}

// kafkaFields sets the fields of r that a Kafka producer's record carries
// (its producer id and epoch, whether it is transactional or aborted, a
// transaction marker's outcome) from the message's headers.
func kafkaFields(subject string, h nats.Header, r *byzlogv1.StoredRecord) error {
	var err error
	if v := h.Values(HeaderKafkaProducer); len(v) > 0 {
		if r.KafkaProducerId, err = strconv.ParseInt(v[0], 10, 64); err != nil {
			return fmt.Errorf("message on %s: header %s = %q: %v", subject, HeaderKafkaProducer, v[0], err)
		}
		e, err := strconv.ParseInt(h.Get(HeaderKafkaEpoch), 10, 32)
		if err != nil {
			return fmt.Errorf("message on %s: header %s = %q (with %s): %v", subject, HeaderKafkaEpoch, h.Get(HeaderKafkaEpoch), HeaderKafkaProducer, err)
		}
		r.KafkaEpoch = int32(e)
	}
	for _, f := range []struct {
		name string
		dst  *bool
	}{{HeaderTransactional, &r.KafkaTransactional}, {HeaderAborted, &r.Aborted}} {
		switch v := h.Values(f.name); {
		case len(v) == 0:
		case v[0] == "1":
			*f.dst = true
		default:
			return fmt.Errorf("message on %s: header %s = %q: want 1 or no header", subject, f.name, v[0])
		}
	}
	if v := h.Values(HeaderControl); len(v) > 0 {
		switch v[0] {
		case "commit", "abort":
			r.KafkaControl = &byzlogv1.KafkaControl{Commit: v[0] == "commit"}
		default:
			return fmt.Errorf("message on %s: header %s = %q: want commit or abort", subject, HeaderControl, v[0])
		}
	}
	return nil
}

// recordHeaders decodes a message's record headers, each
// base64(key):base64(value); empty says which were empty rather than null.
func recordHeaders(subject string, h nats.Header, empty map[string]bool) ([]*byzlogv1.RecordHeader, error) {
	var headers []*byzlogv1.RecordHeader
	for i, v := range h.Values(HeaderRecordHeader) {
		k, val, ok := strings.Cut(v, ":")
		kb, err1 := base64.StdEncoding.DecodeString(k)
		vb, err2 := base64.StdEncoding.DecodeString(val)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("message on %s: header %s = %q: want base64(key):base64(value)", subject, HeaderRecordHeader, v)
		}
		headers = append(headers, &byzlogv1.RecordHeader{Key: string(kb), Value: emptyOrNull(vb, empty["header:"+strconv.Itoa(i)])})
	}
	return headers, nil
}

// emptyOrNull is b, with nothing in it read as empty (non-nil) if the
// message says so (HeaderEmpty), else as null.
func emptyOrNull(b []byte, empty bool) []byte {
	switch {
	case len(b) > 0:
		return b
	case empty:
		return []byte{}
	}
	return nil
}

// ParseSubject splits a record subject into topic and partition: a
// partition's subject (Subject) or a key's (KeySubject).
func ParseSubject(subject string) (string, uint32, error) {
	topic, partition, _, err := ParseKeySubject(subject)
	return topic, partition, err
}

// ParseKeySubject splits a record subject into topic, partition and, for
// a key's subject (KeySubject), the key's token ("" for a partition's).
func ParseKeySubject(subject string) (topic string, partition uint32, keyToken string, err error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if keyed, isKey := strings.CutPrefix(rest, KeyToken+"."); ok && isKey {
		i := strings.LastIndexByte(keyed, '.')
		if i <= 0 || i == len(keyed)-1 {
			return "", 0, "", fmt.Errorf("subject %q is not byzlog.%s.<topic>.<partition>.<key>", subject, KeyToken)
		}
		rest, keyToken = keyed[:i], keyed[i+1:]
	}
	i := strings.LastIndexByte(rest, '.')
	if !ok || i <= 0 {
		return "", 0, "", fmt.Errorf("subject %q is not byzlog.<topic>.<partition>", subject)
	}
	token, ps := rest[:i], rest[i+1:]
	p, err := strconv.ParseUint(ps, 10, 32)
	if err != nil {
		return "", 0, "", fmt.Errorf("subject %q: partition %q is not a number", subject, ps)
	}
	topic = token
	if h, ok := strings.CutPrefix(token, "_x"); ok {
		b, err := hex.DecodeString(h)
		if err != nil {
			return "", 0, "", fmt.Errorf("subject %q: escaped topic %q is not hex", subject, token)
		}
		topic = string(b)
	}
	return topic, uint32(p), keyToken, nil
}

// BlockInfo is the message on BlocksSubject for each committed height, so
// consumers can follow progress and check what they read.
type BlockInfo struct {
	Height    int64  `json:"height"`
	Time      string `json:"time"`       // block time, RFC 3339
	BlockHash string `json:"block_hash"` // hex, of the verified header
	// AppHash is the app hash after this block (hex), from the next header.
	AppHash string `json:"app_hash"`
	// Records counts the records the block appended, per partition.
	Records []PartitionCount `json:"records,omitempty"`
}

// PartitionCount is one partition's records in a block.
type PartitionCount struct {
	Topic       string `json:"topic"`
	Partition   uint32 `json:"partition"`
	FirstOffset uint64 `json:"first_offset"`
	Count       uint32 `json:"count"`
}

// SameRecord compares two records as NATS carries them: everything, null
// against empty included (the layout keeps the difference).
func SameRecord(a, b *byzlogv1.StoredRecord) bool { return proto.Equal(a, b) }

// controlName is a marker's HeaderControl value.
func controlName(c *byzlogv1.KafkaControl) string {
	if c.Commit {
		return "commit"
	}
	return "abort"
}

// Aborted is what the indexer publishes in the place of r, a record of an
// aborted transaction: r without its key, value and headers, marked
// aborted.
func Aborted(r *byzlogv1.StoredRecord) *byzlogv1.StoredRecord {
	a := proto.Clone(r).(*byzlogv1.StoredRecord)
	a.Key, a.Value, a.Headers, a.Aborted = nil, nil, nil, true
	return a
}

// Placeholder reports whether r holds an offset and no data for a reader
// of committed records: a transaction's marker, or the place of an aborted
// transaction's record. Consumers skip it; it tells them the offset is
// not missing.
func Placeholder(r *byzlogv1.StoredRecord) bool { return r.Aborted || r.KafkaControl != nil }

// SamePublished reports whether a, a record as a stream holds it, is b,
// the chain's record at its offset, as the indexer publishes it: b itself,
// or, for an aborted transaction's, its place (Aborted).
func SamePublished(a, b *byzlogv1.StoredRecord) bool {
	if a.Aborted && !b.Aborted {
		return b.KafkaTransactional && SameRecord(a, Aborted(b)) // only a transaction's record can be aborted
	}
	return SameRecord(a, b)
}
