package layout_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

func TestSubjects(t *testing.T) {
	for _, tc := range []struct {
		topic   string
		subject string
		stream  string
	}{
		{"orders", "byzlog.orders.3", "byzlog-orders"},
		{"orders.eu", "byzlog.orders.eu.3", "byzlog-orders_deu"},
		{"my_topic-1", "byzlog.my_topic-1.3", "byzlog-my__topic-1"},
		{".hidden", "byzlog._x2e68696464656e.3", "byzlog-_dhidden"},
		{"a..b", "byzlog._x612e2e62.3", "byzlog-a_d_db"},
		{"_x41", "byzlog._x5f783431.3", "byzlog-__x41"},
		{strings.Repeat("a.", 124) + "a", "", "byzlog-_h"},
	} {
		if tc.subject != "" {
			if got := layout.Subject(tc.topic, 3); got != tc.subject {
				t.Errorf("Subject(%q) = %q, want %q", tc.topic, got, tc.subject)
			}
		}
		topic, part, err := layout.ParseSubject(layout.Subject(tc.topic, 3))
		if err != nil || topic != tc.topic || part != 3 {
			t.Errorf("ParseSubject(Subject(%q)) = %q %d %v", tc.topic, topic, part, err)
		}
		if got := layout.StreamName(tc.topic); !strings.HasPrefix(got, tc.stream) || len(got) > 255 || strings.Contains(got, ".") {
			t.Errorf("StreamName(%q) = %q, want %q", tc.topic, got, tc.stream)
		}
	}
	// Distinct topics, distinct streams and subjects.
	names := []string{"a.b", "a_b", "a_db", "a__b", "a-b", "a_.b", "a._b", "_x", "_x0", "x"}
	streams, subjects := map[string]string{}, map[string]string{}
	for _, n := range names {
		if o, ok := streams[layout.StreamName(n)]; ok {
			t.Errorf("topics %q and %q share stream %q", o, n, layout.StreamName(n))
		}
		streams[layout.StreamName(n)] = n
		if o, ok := subjects[layout.Subject(n, 0)]; ok {
			t.Errorf("topics %q and %q share subject %q", o, n, layout.Subject(n, 0))
		}
		subjects[layout.Subject(n, 0)] = n
	}
	for _, bad := range []string{"byzlog", "byzlog.t", "byzlog.t.x", "other.t.1", "byzlog._xZZ.1", "byzlog..1"} {
		if _, _, err := layout.ParseSubject(bad); err == nil {
			t.Errorf("ParseSubject(%q) accepted it", bad)
		}
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, r := range []*byzlogv1.StoredRecord{
		{Topic: "t.x", Partition: 7, Offset: 42, Height: 9, TimestampUnixNano: 1_700_000_000_123_456_789, CreateTimeUnixNano: 1_699_999_999_000_000_001,
			Key: []byte("k\x00\n"), Value: []byte("value"), ProducerKey: make([]byte, 32), Sequence: 5,
			Headers: []*byzlogv1.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}, {Key: "é:x", Value: []byte{0, 0xff}}}},
		{Topic: "t", Offset: 0, Height: 1, ProducerKey: make([]byte, 32), Key: []byte{}},
		{Topic: "t", Offset: 1, Height: 1, ProducerKey: make([]byte, 32)},
		// A Kafka producer's record: its producer id and epoch are part of
		// what the chain committed, so the message carries them.
		{Topic: "t", Offset: 2, Height: 1, ProducerKey: make([]byte, 32), Sequence: 7, KafkaProducerId: 1 << 40, KafkaEpoch: 3},
		{Topic: "t", Offset: 3, Height: 1, ProducerKey: make([]byte, 32), KafkaProducerId: 0, KafkaEpoch: -1},
		// A Kafka transaction's: a committed record, a marker of each
		// kind, an aborted record's place.
		{Topic: "t", Offset: 4, Height: 2, ProducerKey: make([]byte, 32), Value: []byte("v"), KafkaProducerId: 1 << 62, KafkaEpoch: 1, KafkaTransactional: true},
		{Topic: "t", Offset: 5, Height: 2, ProducerKey: make([]byte, 32), KafkaProducerId: 1 << 62, KafkaEpoch: 1, KafkaControl: &byzlogv1.KafkaControl{Commit: true}},
		{Topic: "t", Offset: 6, Height: 2, ProducerKey: make([]byte, 32), KafkaProducerId: 1 << 62, KafkaEpoch: 1, KafkaControl: &byzlogv1.KafkaControl{}},
		layout.Aborted(&byzlogv1.StoredRecord{Topic: "t", Offset: 7, Height: 2, ProducerKey: make([]byte, 32), Key: []byte("k"), Value: []byte("secret"),
			Headers: []*byzlogv1.RecordHeader{{Key: "h"}}, KafkaProducerId: 1 << 62, KafkaEpoch: 1, KafkaTransactional: true}),
	} {
		m := layout.Message(r)
		if got := m.Header.Get(nats.MsgIdHdr); got != "" {
			t.Errorf("msg id %q: exactly once rests on expected sequences, and JetStream would keep every id in memory", got)
		}
		back, err := layout.Record(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		// Empty and nil headers values are the same on the wire.
		for _, h := range r.Headers {
			if h.Value == nil {
				h.Value = []byte{}
			}
		}
		for _, h := range back.Headers {
			if h.Value == nil {
				h.Value = []byte{}
			}
		}
		if !proto.Equal(back, r) {
			t.Errorf("round trip of %v gave %v", r, back)
		}
	}
}

// FuzzRecord decodes arbitrary subjects and headers: an error or a record,
// never a panic.
func FuzzRecord(f *testing.F) {
	msg := func() *nats.Msg {
		return layout.Message(&byzlogv1.StoredRecord{Topic: "t", Partition: 1, Offset: 2, Height: 3, Key: []byte("k"), ProducerKey: make([]byte, 32),
			Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte("v")}}})
	}
	m := msg()
	f.Add(m.Subject, m.Header.Get(layout.HeaderOffset), m.Header.Get(layout.HeaderKey), m.Header.Get(layout.HeaderTimestamp), m.Header.Values(layout.HeaderRecordHeader)[0], "header:0")
	f.Fuzz(func(t *testing.T, subject, offset, key, ts, rh, empty string) {
		h := msg().Header
		h.Set(layout.HeaderEmpty, empty)
		h.Set(layout.HeaderOffset, offset)
		h.Set(layout.HeaderKey, key)
		h.Set(layout.HeaderTimestamp, ts)
		h.Set(layout.HeaderRecordHeader, rh)
		r, err := layout.Record(subject, h, nil)
		if err == nil && layout.Subject(r.Topic, r.Partition) != subject && !strings.Contains(subject, "_x") {
			t.Fatalf("subject %q decoded to %s/%d", subject, r.Topic, r.Partition)
		}
		// A Decoder that decoded a good message first decodes it the same.
		var d layout.Decoder
		if _, err := d.Record(m.Subject, m.Header, nil); err != nil {
			t.Fatal(err)
		}
		got, gotErr := d.Record(subject, h, nil)
		if fmt.Sprint(gotErr) != fmt.Sprint(err) || !proto.Equal(got, r) {
			t.Fatalf("Decoder gave %v (%v), Record %v (%v)", got, gotErr, r, err)
		}
	})
}

// BenchmarkMessage: a 100 B record as the indexer publishes it, headers
// encoded as nats.go puts them on the wire.
func BenchmarkMessage(b *testing.B) {
	r := &byzlogv1.StoredRecord{Topic: "bench", Partition: 17, Offset: 123_456_789, Height: 4_321, TimestampUnixNano: 1_700_000_000_123_456_789,
		CreateTimeUnixNano: 1_699_999_999_000_000_001, Value: make([]byte, 100), ProducerKey: make([]byte, 32), Sequence: 99_999}
	b.ReportAllocs()
	for b.Loop() {
		if m := layout.Message(r); m.Size() < 300 {
			b.Fatalf("a message of %d bytes", m.Size())
		}
	}
}

// TestEncoderMatchesMessage: an Encoder, remembering what records in a
// row share, makes each message exactly as Message does, whatever changes
// from one record to the next.
func TestEncoderMatchesMessage(t *testing.T) {
	base := &byzlogv1.StoredRecord{Topic: "t", Partition: 1, Offset: 10, Height: 7, TimestampUnixNano: 1_700_000_000_000_000_001,
		CreateTimeUnixNano: 1_699_999_999_000_000_000, Value: []byte("v"), Key: []byte("k"), ProducerKey: bytes.Repeat([]byte{1}, 32), Sequence: 3}
	with := func(f func(r *byzlogv1.StoredRecord)) *byzlogv1.StoredRecord {
		r := proto.Clone(base).(*byzlogv1.StoredRecord)
		f(r)
		return r
	}
	records := []*byzlogv1.StoredRecord{
		base,
		with(func(r *byzlogv1.StoredRecord) { r.Offset = 11 }),
		with(func(r *byzlogv1.StoredRecord) { r.Offset, r.Key = 12, nil }),
		with(func(r *byzlogv1.StoredRecord) { r.Sequence, r.CreateTimeUnixNano = 4, 1 }),
		with(func(r *byzlogv1.StoredRecord) { r.ProducerKey = bytes.Repeat([]byte{2}, 32) }),
		with(func(r *byzlogv1.StoredRecord) { r.Partition = 2 }),
		with(func(r *byzlogv1.StoredRecord) { r.Topic = "u.v" }),
		with(func(r *byzlogv1.StoredRecord) { r.Height, r.TimestampUnixNano = 8, 5 }),
		with(func(r *byzlogv1.StoredRecord) { r.KafkaProducerId, r.KafkaEpoch = 9, 1 }),
		with(func(r *byzlogv1.StoredRecord) {
			r.Headers = []*byzlogv1.RecordHeader{{Key: "a", Value: []byte("b")}, {Key: "a", Value: nil}}
		}),
		base,
	}
	var e layout.Encoder
	for i, r := range records {
		got, want := e.Message(r), layout.Message(r)
		if got.Subject != want.Subject || !bytes.Equal(got.Data, want.Data) || !reflect.DeepEqual(got.Header, want.Header) {
			t.Errorf("record %d: Encoder made %s %v, Message %s %v", i, got.Subject, got.Header, want.Subject, want.Header)
		}
	}
}

// BenchmarkEncoder is BenchmarkMessage for the records of one batch in a
// row, through one Encoder, as the indexer publishes them.
func BenchmarkEncoder(b *testing.B) {
	r := &byzlogv1.StoredRecord{Topic: "bench", Partition: 17, Offset: 123_456_789, Height: 4_321, TimestampUnixNano: 1_700_000_000_123_456_789,
		CreateTimeUnixNano: 1_699_999_999_000_000_001, Value: make([]byte, 100), ProducerKey: make([]byte, 32), Sequence: 99_999}
	var e layout.Encoder
	b.ReportAllocs()
	for b.Loop() {
		r.Offset++
		if m := e.Message(r); m.Size() < 300 {
			b.Fatalf("a message of %d bytes", m.Size())
		}
	}
}

// TestDecoderMatchesRecord: a Decoder, remembering what messages in a row
// share, decodes each exactly as Record does, and refuses each malformed
// one as Record does, whatever came before it.
func TestDecoderMatchesRecord(t *testing.T) {
	base := &byzlogv1.StoredRecord{Topic: "t", Partition: 1, Offset: 10, Height: 7, TimestampUnixNano: 1_700_000_000_000_000_001,
		CreateTimeUnixNano: 1_699_999_999_000_000_000, Value: []byte("v"), Key: []byte("k"), ProducerKey: bytes.Repeat([]byte{1}, 32), Sequence: 3}
	msg := func(f func(r *byzlogv1.StoredRecord), g func(h nats.Header)) *nats.Msg {
		r := proto.Clone(base).(*byzlogv1.StoredRecord)
		f(r)
		m := layout.Message(r)
		g(m.Header)
		return m
	}
	keep := func(*byzlogv1.StoredRecord) {}
	same := func(nats.Header) {}
	msgs := []*nats.Msg{
		msg(keep, same),
		msg(func(r *byzlogv1.StoredRecord) { r.Offset = 11 }, same),
		msg(keep, func(h nats.Header) { h.Set(layout.HeaderProducer, "zz") }),
		msg(keep, func(h nats.Header) { h.Set(layout.HeaderHeight, "x") }),
		msg(keep, func(h nats.Header) { h.Set(layout.HeaderTimestamp, "yesterday") }),
		msg(keep, func(h nats.Header) { h.Set(layout.HeaderSequence, "-1") }),
		msg(keep, func(h nats.Header) { h.Set(layout.HeaderProducer, "") }),
		msg(func(r *byzlogv1.StoredRecord) { r.Sequence, r.CreateTimeUnixNano = 4, 1 }, same),
		msg(func(r *byzlogv1.StoredRecord) { r.ProducerKey = bytes.Repeat([]byte{2}, 32) }, same),
		msg(func(r *byzlogv1.StoredRecord) { r.Partition, r.Key = 2, nil }, same),
		msg(func(r *byzlogv1.StoredRecord) { r.Height, r.TimestampUnixNano = 8, 5 }, same),
		msg(keep, same),
	}
	bad := nats.NewMsg("not.byzlog")
	msgs = append(msgs, bad, msgs[0])
	var d layout.Decoder
	var keys [][]byte
	for i, m := range msgs {
		got, gotErr := d.Record(m.Subject, m.Header, m.Data)
		want, wantErr := layout.Record(m.Subject, m.Header, m.Data)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !proto.Equal(got, want) {
			t.Errorf("message %d: Decoder gave %v (%v), Record %v (%v)", i, got, gotErr, want, wantErr)
		}
		if got != nil {
			keys = append(keys, got.ProducerKey)
		}
	}
	keys[0][0] ^= 0xff // a caller that changes one record's key
	if keys[1][0] == keys[0][0] {
		t.Error("two records share their producer key's bytes")
	}
}

// BenchmarkRecord and BenchmarkDecoder decode the messages of one batch in
// a row, with Record and with one Decoder, as a subscription reads them.
func BenchmarkRecord(b *testing.B)  { benchmarkDecode(b, layout.Record) }
func BenchmarkDecoder(b *testing.B) { var d layout.Decoder; benchmarkDecode(b, d.Record) }

func benchmarkDecode(b *testing.B, decode func(string, nats.Header, []byte) (*byzlogv1.StoredRecord, error)) {
	r := &byzlogv1.StoredRecord{Topic: "bench", Partition: 17, Offset: 123_456_789, Height: 4_321, TimestampUnixNano: 1_700_000_000_123_456_789,
		CreateTimeUnixNano: 1_699_999_999_000_000_001, Value: make([]byte, 100), ProducerKey: make([]byte, 32), Sequence: 99_999}
	msgs := make([]*nats.Msg, 64)
	for i := range msgs {
		r.Offset++
		msgs[i] = layout.Message(r)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m := msgs[i%len(msgs)]
		i++
		if _, err := decode(m.Subject, m.Header, m.Data); err != nil {
			b.Fatal(err)
		}
	}
}

// runOf is n consecutive records of t/3 from offset first, one block's.
func runOf(first uint64, n, valueSize int) []*byzlogv1.StoredRecord {
	var rs []*byzlogv1.StoredRecord
	for i := range n {
		rs = append(rs, &byzlogv1.StoredRecord{Topic: "t.x", Partition: 3, Offset: first + uint64(i), Height: 12, TimestampUnixNano: 1_700_000_000_000_000_001,
			CreateTimeUnixNano: int64(i), Key: []byte{byte(i)}, Value: bytes.Repeat([]byte{'v'}, valueSize), ProducerKey: make([]byte, 32), Sequence: uint64(i / 3),
			Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte{1}}}})
	}
	return rs
}

func TestRunRoundTrip(t *testing.T) {
	rs := runOf(40, 5, 100)
	var e layout.Encoder
	m, err := e.Run(rs)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != layout.Subject("t.x", 3) || m.Header.Get(layout.HeaderRecords) != "5" || m.Header.Get(layout.HeaderOffset) != "40" || m.Header.Get(layout.HeaderHeight) != "12" {
		t.Fatalf("run message %s %v", m.Subject, m.Header)
	}
	back, err := layout.Records(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(rs) {
		t.Fatalf("%d records back, want %d", len(back), len(rs))
	}
	for i := range rs {
		if !proto.Equal(back[i], rs[i]) {
			t.Errorf("record %d: %v, want %v", i, back[i], rs[i])
		}
	}
	if _, err := layout.Record(m.Subject, m.Header, m.Data); err == nil || !strings.Contains(err.Error(), "a run of 5 records") {
		t.Errorf("Record of a run message: %v, want an error saying it is a run", err)
	}
	// A one-record message reads as a one-record run.
	one := layout.Message(rs[0])
	got, err := layout.Records(one.Subject, one.Header, one.Data)
	if err != nil || len(got) != 1 || got[0].Offset != 40 {
		t.Fatalf("Records of a one-record message: %v, %v", got, err)
	}
}

// TestTransactionPlaces: an aborted transaction's record goes out as its
// place, with none of its data, and both it and a marker read back as
// placeholders, and as the chain's record (SamePublished).
func TestTransactionPlaces(t *testing.T) {
	r := &byzlogv1.StoredRecord{Topic: "t", Offset: 7, Height: 2, ProducerKey: make([]byte, 32), Key: []byte("k"), Value: []byte("secret"),
		Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte("x")}}, KafkaProducerId: 9, KafkaEpoch: 1, KafkaTransactional: true}
	a := layout.Aborted(r)
	m := layout.Message(a)
	if len(m.Data) != 0 || m.Header.Get(layout.HeaderKey) != "" || len(m.Header.Values(layout.HeaderRecordHeader)) != 0 || m.Header.Get(layout.HeaderAborted) != "1" {
		t.Fatalf("an aborted record's place carries data: %q %v", m.Data, m.Header)
	}
	if r.Value == nil || len(r.Headers) != 1 {
		t.Fatal("Aborted changed the chain's record")
	}
	back, err := layout.Record(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !layout.Placeholder(back) || !layout.SamePublished(back, r) {
		t.Errorf("place %v: placeholder %v, same as the chain's record %v", back, layout.Placeholder(back), layout.SamePublished(back, r))
	}
	other := proto.Clone(r).(*byzlogv1.StoredRecord)
	other.Sequence++
	if layout.SamePublished(back, other) {
		t.Error("a place matches a record at its offset with another sequence")
	}
	plain := proto.Clone(r).(*byzlogv1.StoredRecord)
	plain.KafkaTransactional = false
	if layout.SamePublished(layout.Aborted(plain), plain) {
		t.Error("a plain record's place matches it: only a transaction's record can be aborted")
	}
	if layout.Placeholder(r) || !layout.Placeholder(&byzlogv1.StoredRecord{KafkaControl: &byzlogv1.KafkaControl{}}) {
		t.Error("Placeholder: a record is one, or a marker is not")
	}
	for _, bad := range []struct{ header, value string }{{layout.HeaderControl, "maybe"}, {layout.HeaderAborted, "yes"}, {layout.HeaderTransactional, "0"}} {
		m := layout.Message(r)
		m.Header.Set(bad.header, bad.value)
		if _, err := layout.Record(m.Subject, m.Header, m.Data); err == nil || !strings.Contains(err.Error(), bad.header) {
			t.Errorf("%s: %q: %v, want an error naming the header", bad.header, bad.value, err)
		}
	}
}

// TestRunRefusesWhatIsNotARun: what the subject, headers and payload must
// agree on, each broken once.
func TestRunRefusesWhatIsNotARun(t *testing.T) {
	rs := runOf(7, 3, 10)
	var e layout.Encoder
	good, err := e.Run(rs)
	if err != nil {
		t.Fatal(err)
	}
	gap := runOf(7, 3, 10)
	gap[2].Offset = 10
	otherTopic := runOf(7, 3, 10)
	otherTopic[1].Topic = "u"
	twoBlocks := runOf(7, 3, 10)
	twoBlocks[2].Height = 13
	encode := func(rs []*byzlogv1.StoredRecord) []byte {
		b, err := proto.Marshal(&byzlogv1.RecordRun{Records: rs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tiny := bytes.Repeat([]byte{0x0a, 0x00}, 1000) // a thousand empty entries
	other := append([]byte{0x12, 0x00}, good.Data...)
	for _, c := range []struct {
		name, count, offset string
		data                []byte
		want                string
	}{
		{"count past the bound", "5000", "7", bytes.Repeat(good.Data, 100), "at most 4096 a run"},
		{"empty entries", "3", "7", tiny, "record 0 of the run is \"\"/0@0"},
		{"entries past the count", "2", "7", good.Data, "the payload holds more"},
		{"another field", "3", "7", other, "a field other than records"},
		{"truncated", "3", "7", good.Data[:len(good.Data)-1], "not a StoredRecord"},
		{"count zero", "0", "7", good.Data, "want a positive count"},
		{"count not a number", "x", "7", good.Data, "want a positive count"},
		{"count too high", "4", "7", good.Data, "the payload holds 3"},
		{"count past the payload", "1000", "7", good.Data[:20], "records in a 20-byte payload"},
		{"first offset wrong", "3", "8", good.Data, "want \"t.x\"/3@8"},
		{"offset not a number", "3", "", good.Data, "Byzlog-Offset"},
		{"not protobuf", "3", "7", []byte{0xff, 0xff, 0xff}, "not a RecordRun"},
		{"a gap inside", "3", "7", encode(gap), "record 2 of the run"},
		{"another topic inside", "3", "7", encode(otherTopic), "record 1 of the run"},
		{"two blocks", "3", "7", encode(twoBlocks), "a run is one block's"},
	} {
		if c.name == "truncated" {
			c.want = "truncated record" // the last entry's length passes the payload
		}
		h := nats.Header{}
		h.Set(layout.HeaderRecords, c.count)
		h.Set(layout.HeaderOffset, c.offset)
		h.Set(layout.HeaderHeight, "12")
		_, err := layout.Records(good.Subject, h, c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		n, valueSize, max, want int
	}{
		{10, 100, 256, 10},
		{300, 100, 256, 256},
		{300, 100, 1, 1},
		{100, 1024, 256, 59},            // 64 KiB of 1 KiB records and their fields
		{3, layout.MaxRunBytes, 256, 1}, // one record past the bound still goes
	} {
		rs := runOf(0, c.n, c.valueSize)
		got := layout.Split(rs, c.max)
		if got != c.want {
			t.Errorf("Split of %d records of %d B, at most %d: %d, want %d", c.n, c.valueSize, c.max, got, c.want)
		}
		var e layout.Encoder
		m, err := e.Run(rs[:got])
		if err != nil {
			t.Fatal(err)
		}
		if got > 1 && len(m.Data) > layout.MaxRunBytes {
			t.Errorf("a run of %d records is %d bytes, past MaxRunBytes", got, len(m.Data))
		}
	}
	// A run is one block's: records held back behind a transaction go out
	// together with later blocks' records.
	rs := runOf(0, 10, 10)
	for _, r := range rs[4:] {
		r.Height++
	}
	if got := layout.Split(rs, 256); got != 4 {
		t.Errorf("Split across a block boundary at 4: %d", got)
	}
}

// FuzzRecords decodes arbitrary run messages: an error or records that
// each say the subject's topic and partition and follow on from the
// header's offset, never a panic.
func FuzzRecords(f *testing.F) {
	var e layout.Encoder
	m, err := e.Run(runOf(5, 3, 20))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(m.Subject, "3", "5", "12", m.Data)
	f.Add(m.Subject, "1", "18446744073709551615", "12", m.Data[:len(m.Data)/3])
	f.Add(m.Subject, "1000", "5", "12", bytes.Repeat([]byte{0x0a, 0x00}, 1000))
	f.Fuzz(func(t *testing.T, subject, count, offset, height string, data []byte) {
		h := nats.Header{}
		h.Set(layout.HeaderRecords, count)
		h.Set(layout.HeaderOffset, offset)
		h.Set(layout.HeaderHeight, height)
		rs, err := layout.Records(subject, h, data)
		if err != nil {
			return
		}
		topic, p, err := layout.ParseSubject(subject)
		if err != nil {
			t.Fatalf("records from subject %q, which does not parse: %v", subject, err)
		}
		for i, r := range rs {
			if r.Topic != topic || r.Partition != p || r.Offset != rs[0].Offset+uint64(i) || fmt.Sprint(rs[0].Offset) != offset || fmt.Sprint(r.Height) != height || fmt.Sprint(len(rs)) != count {
				t.Fatalf("record %d: %s/%d@%d from subject %q offset %q", i, r.Topic, r.Partition, r.Offset, subject, offset)
			}
		}
	})
}

// BenchmarkRun: 256 records of 100 B into one run message and back, per
// record.
func BenchmarkRun(b *testing.B) {
	rs := runOf(0, 256, 100)
	var e layout.Encoder
	var d layout.Decoder
	b.ReportAllocs()
	for b.Loop() {
		m, err := e.Run(rs)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Records(m.Subject, m.Header, m.Data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/record")
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		format string
		want   int
	}{
		{layout.FormatRecord, 1},
		{layout.RunFormat(256), 256},
		{"run/v1 2 65536", 2},
		{"run/v1 1 65536", 0},
		{"run/v1 4097 65536", 0},
		{"run/v1 256 1024", 0},
		{"run/v2 256 65536", 0},
		{"run/v1 0256 65536", 0},
		{"run 256 65536", 0},
		{"", 0},
	} {
		n, err := layout.ParseFormat(c.format)
		if n != c.want || (err == nil) != (c.want > 0) {
			t.Errorf("ParseFormat(%q) = %d, %v; want %d", c.format, n, err, c.want)
		}
	}
}

// TestEmptyIsNotNull: a one-record message keeps a null key, value or
// header value apart from an empty one (HeaderEmpty), and a run carries
// them as the StoredRecord does; a message without the marker (every
// message of a chain before rules version 5) reads empty as null.
func TestEmptyIsNotNull(t *testing.T) {
	base := func() *byzlogv1.StoredRecord {
		return &byzlogv1.StoredRecord{Topic: "t", Partition: 1, Offset: 7, Height: 3, ProducerKey: make([]byte, 32)}
	}
	empty := base()
	empty.Key, empty.Value = []byte{}, []byte{}
	empty.Headers = []*byzlogv1.RecordHeader{{Key: "e", Value: []byte{}}, {Key: "n"}, {Key: "v", Value: []byte("x")}}
	null := base()
	null.Headers = []*byzlogv1.RecordHeader{{Key: "n"}}
	for name, r := range map[string]*byzlogv1.StoredRecord{"empty": empty, "null": null} {
		m := layout.Message(r)
		got, err := layout.Record(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, r) {
			t.Errorf("%s: one-record message read back as %v, want %v", name, got, r)
		}
		var e layout.Encoder
		run, err := e.Run([]*byzlogv1.StoredRecord{r})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := layout.Records(run.Subject, run.Header, run.Data)
		if err != nil || len(recs) != 1 || !proto.Equal(recs[0], r) {
			t.Errorf("%s: run read back as %v (%v), want %v", name, recs, err, r)
		}
	}
	m := layout.Message(empty)
	m.Header.Del(layout.HeaderEmpty)
	got, err := layout.Record(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != nil || got.Value != nil || got.Headers[0].Value != nil {
		t.Errorf("a message without %s read key %#v, value %#v, header value %#v; want all null", layout.HeaderEmpty, got.Key, got.Value, got.Headers[0].Value)
	}
}

func TestKeySubjects(t *testing.T) {
	long := bytes.Repeat([]byte{0xfb}, layout.MaxKeyTokenBytes+1)
	for _, tc := range []struct {
		topic string
		p     uint32
		key   []byte
		want  string
	}{
		{"orders", 3, []byte("k1"), "byzlog.$key.orders.3.azE"},
		{"a.b", 0, []byte{0xfb, 0xff}, "byzlog.$key.a.b.0.-_8"},
		{"orders", 0, []byte{}, "byzlog.$key.orders.0.~"},
		{"..", 1, long, "byzlog.$key._x2e2e.1.~" + layout.KeySubjectToken(long)[1:]},
	} {
		got := layout.KeySubject(tc.topic, tc.p, tc.key)
		if got != tc.want {
			t.Errorf("layout.KeySubject(%q, %d, %x) = %s, want %s", tc.topic, tc.p, tc.key, got, tc.want)
		}
		topic, p, token, err := layout.ParseKeySubject(got)
		if err != nil || topic != tc.topic || p != tc.p || token != layout.KeySubjectToken(tc.key) {
			t.Errorf("layout.ParseKeySubject(%s) = %q, %d, %q, %v; want %q, %d, %q", got, topic, p, token, err, tc.topic, tc.p, layout.KeySubjectToken(tc.key))
		}
		if !layout.InFilter(layout.KeyPartitionSubjects(tc.topic, tc.p), got) || !layout.InFilter(layout.KeyTopicSubjects(tc.topic), got) {
			t.Errorf("layout.InFilter(%s, %s) or layout.InFilter(%s, %s) = false, want true", layout.KeyPartitionSubjects(tc.topic, tc.p), got, layout.KeyTopicSubjects(tc.topic), got)
		}
		if layout.InFilter(layout.KeyPartitionSubjects(tc.topic, tc.p+1), got) || layout.InFilter(layout.TopicSubjects(tc.topic), got) {
			t.Errorf("%s is in another partition's or the unkeyed filter", got)
		}
	}
	if len(layout.KeySubjectToken(long)) != 44 {
		t.Errorf("layout.KeySubjectToken(a %d-byte key) = %d characters, want 44 (~ and a hash)", len(long), len(layout.KeySubjectToken(long)))
	}
	// A compacted topic's subjects never take another topic's in.
	if layout.InFilter(layout.KeyTopicSubjects("orders"), layout.Subject("orders.eu", 0)) || layout.InFilter(layout.TopicSubjects("orders"), layout.KeySubject("orders", 0, []byte("k"))) {
		t.Error("keyed and unkeyed filters overlap")
	}
}

func TestKeyMessageRoundTrip(t *testing.T) {
	r := &byzlogv1.StoredRecord{Topic: "t", Partition: 2, Offset: 7, Height: 3, Key: []byte("k"), ProducerKey: make([]byte, 32), TimestampUnixNano: 1, CreateTimeUnixNano: 1}
	var e layout.Encoder
	m := e.KeyMessage(r)
	if m.Subject != "byzlog.$key.t.2.aw" {
		t.Fatalf("KeyMessage subject = %s, want byzlog.$key.t.2.aw", m.Subject)
	}
	got, err := layout.Records(m.Subject, m.Header, m.Data)
	if err != nil || len(got) != 1 || !layout.SameRecord(got[0], r) {
		t.Fatalf("layout.Records(KeyMessage(r)) = %v, %v; want r", got, err)
	}
	if got[0].Value != nil {
		t.Errorf("a tombstone's value decodes as %q, want null", got[0].Value)
	}
	// A message on another key's subject is refused.
	if _, err := layout.Records(layout.KeySubject("t", 2, []byte("other")), m.Header, m.Data); err == nil {
		t.Error("a record on another key's subject decoded; want an error")
	}
}
