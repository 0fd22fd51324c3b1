package core_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// queryFixture is a chain whose state every query path has something to
// answer about, built from real signed transactions:
//
//   - topic "t" with 2 partitions: producer p wrote a, b, c (sequence 0) and
//     d, e (sequence 1) to t/0, and x (sequence 0) to t/1;
//   - topic "empty" with 1 partition and no records;
//   - group "g" owned by consumer c with t/0 at 3 (metadata "m") and t/1 at 1;
//   - group "gg" owned by consumer d with t/0 at 5.
type queryFixture struct {
	c                   *testChain
	producer            *wire.Signer
	consumer, consumer2 *wire.Signer
}

func newQueryFixture(t testing.TB) *queryFixture {
	t.Helper()
	f := &queryFixture{
		c:         newChain(t, ""),
		producer:  wire.NewSigner(key("p"), chainID),
		consumer:  wire.NewSigner(key("c"), chainID),
		consumer2: wire.NewSigner(key("d"), chainID),
	}
	c, p := f.c, f.producer
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	c.createTopic("empty", &byzlogv1.TopicConfig{Partitions: 1})
	c.must(bundle(t, batch(t, p, "t", 0, 0, records("a", "b", "c")), batch(t, p, "t", 1, 0, records("x"))))
	c.must(bundle(t, batch(t, p, "t", 0, 1, records("d", "e"))))
	c.must(offsetsTx(t, c, f.consumer, "g",
		&byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 3, Metadata: "m"},
		&byzlogv1.PartitionOffset{Topic: "t", Partition: 1, Offset: 1}))
	c.must(offsetsTx(t, c, f.consumer2, "gg", &byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 5}))
	return f
}

// offsetsTx is an offset commit for group signed by s with its next nonce.
func offsetsTx(t testing.TB, c *testChain, s *wire.Signer, group string, offsets ...*byzlogv1.PartitionOffset) []byte {
	t.Helper()
	co, err := s.CommitOffsets(c.nextNonce(s), group, false, offsets...)
	return mustOffsetsTx(t, co, err)
}

// mustOffsetsTx is the transaction of a signed offsets body.
func mustOffsetsTx(t testing.TB, co *byzlogv1.CommitOffsets, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := wire.OffsetsTx(co)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// queryRaw runs core.Query with req encoded as the data (nil req: no data).
// A store error fails the test; a rejected query is returned as is.
func queryRaw(t *testing.T, c *testChain, path string, req proto.Message) ([]byte, core.Result) {
	t.Helper()
	var data []byte
	if req != nil {
		var err error
		if data, err = proto.Marshal(req); err != nil {
			t.Fatalf("marshal %T: %v", req, err)
		}
	}
	v, r, err := core.Query(c.store, c.state, path, data)
	if err != nil {
		t.Fatalf("Query(%s, %v) error = %v, want none", path, req, err)
	}
	if r.OK() && r.Log != "" {
		t.Errorf("Query(%s, %v) = ok with log %q, want an empty log", path, req, r.Log)
	}
	if !r.OK() {
		if v != nil {
			t.Errorf("Query(%s, %v) = %s with value %x, want no value", path, req, r.Code, v)
		}
		if r.Log == "" {
			t.Errorf("Query(%s, %v) = %s with an empty log, want a message", path, req, r.Code)
		}
	}
	return v, r
}

func decodeValue(t *testing.T, what string, v []byte, m proto.Message) {
	t.Helper()
	if err := proto.Unmarshal(v, m); err != nil {
		t.Fatalf("%s value is not a %T: %v", what, m, err)
	}
}

// topicSummary is "name:[next offsets by partition]".
func topicSummary(ti *byzlogv1.TopicInfo) string {
	next := make([]string, len(ti.Partitions))
	for i, p := range ti.Partitions {
		next[i] = fmt.Sprintf("%d=%d", p.Partition, p.NextOffset)
	}
	return fmt.Sprintf("%s:[%s]", ti.Name, strings.Join(next, " "))
}

func TestQueryState(t *testing.T) {
	admin := wire.NewSigner(key("admin"), chainID).PublicKey()
	fresh := newChain(t, "")
	f := newQueryFixture(t)
	tests := []struct {
		name string
		c    *testChain
		want int64
	}{
		{"fresh chain", fresh, 0},
		{"after blocks", f.c, f.c.state.Height},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, r := queryRaw(t, tt.c, wire.PathState, nil)
			if !r.OK() {
				t.Fatalf("Query(%s) = %s: %s, want ok", wire.PathState, r.Code, r.Log)
			}
			var got byzlogv1.AppState
			decodeValue(t, wire.PathState, v, &got)
			if got.Height != tt.want {
				t.Errorf("Query(%s).height = %d, want %d", wire.PathState, got.Height, tt.want)
			}
			if !bytes.Equal(got.AppHash, tt.c.state.AppHash) {
				t.Errorf("Query(%s).app_hash = %x, want %x", wire.PathState, got.AppHash, tt.c.state.AppHash)
			}
			if got.Params.GetChainId() != chainID {
				t.Errorf("Query(%s).params.chain_id = %q, want %q", wire.PathState, got.Params.GetChainId(), chainID)
			}
			if len(got.Params.GetAdmins()) != 1 || !bytes.Equal(got.Params.Admins[0], admin) {
				t.Errorf("Query(%s).params.admins = %x, want [%x]", wire.PathState, got.Params.GetAdmins(), admin)
			}
			if !proto.Equal(got.Params.GetLimits(), wire.DefaultLimits()) {
				t.Errorf("Query(%s).params.limits = %v, want %v", wire.PathState, got.Params.GetLimits(), wire.DefaultLimits())
			}
		})
	}
	if h := f.c.state.Height; h == 0 || len(f.c.state.AppHash) == 0 {
		t.Fatalf("fixture state = height %d app hash %x, want both set", h, f.c.state.AppHash)
	}
}

func TestQueryTopics(t *testing.T) {
	genesis := fmt.Sprintf(`{"admins": [%q], "topics": [{"name": "b", "partitions": 3}, {"name": "a", "partitions": 1}]}`,
		hex.EncodeToString(wire.NewSigner(key("admin"), chainID).PublicKey()))
	tests := []struct {
		name  string
		chain func(t *testing.T) *testChain
		want  string
	}{
		{"no topics", func(t *testing.T) *testChain { return newChain(t, "") }, ""},
		{"genesis topics, in name order", func(t *testing.T) *testChain { return newChain(t, genesis) }, "a:[0=0] b:[0=0 1=0 2=0]"},
		{"next offsets after produce", func(t *testing.T) *testChain { return newQueryFixture(t).c }, "empty:[0=0] t:[0=5 1=1]"},
		{"deleted topic is gone", func(t *testing.T) *testChain {
			c := newQueryFixture(t).c
			c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteTopic{Name: "empty"}))
			return c
		}, "t:[0=5 1=1]"},
		{"topic name that extends another", func(t *testing.T) *testChain {
			c := newQueryFixture(t).c
			c.createTopic("t.x", &byzlogv1.TopicConfig{Partitions: 1})
			p := wire.NewSigner(key("p"), chainID)
			c.must(bundle(t, batch(t, p, "t.x", 0, 0, records("y", "z"))))
			return c
		}, "empty:[0=0] t:[0=5 1=1] t.x:[0=2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.chain(t)
			v, r := queryRaw(t, c, wire.PathTopics, nil)
			if !r.OK() {
				t.Fatalf("Query(%s) = %s: %s, want ok", wire.PathTopics, r.Code, r.Log)
			}
			var list byzlogv1.TopicList
			decodeValue(t, wire.PathTopics, v, &list)
			var got []string
			for _, ti := range list.Topics {
				got = append(got, topicSummary(ti))
			}
			if s := strings.Join(got, " "); s != tt.want {
				t.Errorf("Query(%s) = %q, want %q", wire.PathTopics, s, tt.want)
			}
		})
	}
}

func TestQueryTopic(t *testing.T) {
	f := newQueryFixture(t)
	tests := []struct {
		name string
		code wire.Code
		want string // topicSummary when ok
	}{
		{"t", wire.CodeOK, "t:[0=5 1=1]"},
		{"empty", wire.CodeOK, "empty:[0=0]"},
		{"nope", wire.CodeUnknownTopic, ""},
		{"T", wire.CodeUnknownTopic, ""},     // names are case sensitive
		{"t\x00", wire.CodeUnknownTopic, ""}, // not a prefix match
		{"", wire.CodeUnknownTopic, ""},
	}
	for _, tt := range tests {
		req := &byzlogv1.TopicRequest{Name: tt.name}
		v, r := queryRaw(t, f.c, wire.PathTopic, req)
		if r.Code != tt.code {
			t.Errorf("Query(%s, %q) = %s (%s), want %s", wire.PathTopic, tt.name, r.Code, r.Log, tt.code)
			continue
		}
		if !r.OK() {
			if !strings.Contains(r.Log, fmt.Sprintf("%q", tt.name)) {
				t.Errorf("Query(%s, %q).log = %q, want it to name the topic", wire.PathTopic, tt.name, r.Log)
			}
			continue
		}
		var info byzlogv1.TopicInfo
		decodeValue(t, wire.PathTopic, v, &info)
		if got := topicSummary(&info); got != tt.want {
			t.Errorf("Query(%s, %q) = %s, want %s", wire.PathTopic, tt.name, got, tt.want)
		}
		if info.CreatedHeight <= 0 || info.Config.GetPartitions() != uint32(len(info.Partitions)) {
			t.Errorf("Query(%s, %q) = created at %d with config %v, want a positive height and one partition per config partition",
				wire.PathTopic, tt.name, info.CreatedHeight, info.Config)
		}
	}
}

// storedSizes returns the stored size of each record of t/0 in offset order.
func storedSizes(t *testing.T, c *testChain) []uint32 {
	t.Helper()
	var resp byzlogv1.RecordsResponse
	c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Partition: 0}, &resp)
	sizes := make([]uint32, len(resp.Records))
	for i, r := range resp.Records {
		sizes[i] = uint32(len(r))
	}
	return sizes
}

func TestQueryRecords(t *testing.T) {
	f := newQueryFixture(t)
	sz := storedSizes(t, f.c)
	if len(sz) != 5 {
		t.Fatalf("t/0 holds %d records, want 5", len(sz))
	}
	tests := []struct {
		name string
		req  *byzlogv1.RecordsRequest
		code wire.Code
		want string // values() of the records when ok
		next uint64 // next_offset when ok
	}{
		{"all from 0", &byzlogv1.RecordsRequest{Topic: "t"}, wire.CodeOK, "0:a,1:b,2:c,3:d,4:e", 5},
		{"from the middle of a batch", &byzlogv1.RecordsRequest{Topic: "t", Offset: 2}, wire.CodeOK, "2:c,3:d,4:e", 5},
		{"last record", &byzlogv1.RecordsRequest{Topic: "t", Offset: 4}, wire.CodeOK, "4:e", 5},
		{"other partition", &byzlogv1.RecordsRequest{Topic: "t", Partition: 1}, wire.CodeOK, "0:x", 1},
		{"max_records", &byzlogv1.RecordsRequest{Topic: "t", MaxRecords: 2}, wire.CodeOK, "0:a,1:b", 5},
		{"max_records past the end", &byzlogv1.RecordsRequest{Topic: "t", Offset: 3, MaxRecords: 10}, wire.CodeOK, "3:d,4:e", 5},
		{"max_records above the default is the default", &byzlogv1.RecordsRequest{Topic: "t", MaxRecords: math.MaxUint32}, wire.CodeOK, "0:a,1:b,2:c,3:d,4:e", 5},
		{"max_bytes below one record still returns one", &byzlogv1.RecordsRequest{Topic: "t", MaxBytes: 1}, wire.CodeOK, "0:a", 5},
		{"max_bytes below one record from an offset", &byzlogv1.RecordsRequest{Topic: "t", Offset: 3, MaxBytes: 1}, wire.CodeOK, "3:d", 5},
		{"max_bytes exactly two records", &byzlogv1.RecordsRequest{Topic: "t", MaxBytes: sz[0] + sz[1]}, wire.CodeOK, "0:a,1:b", 5},
		{"max_bytes one short of two records", &byzlogv1.RecordsRequest{Topic: "t", MaxBytes: sz[0] + sz[1] - 1}, wire.CodeOK, "0:a", 5},
		{"max_bytes and max_records, records first", &byzlogv1.RecordsRequest{Topic: "t", MaxRecords: 1, MaxBytes: sz[0] + sz[1]}, wire.CodeOK, "0:a", 5},
		{"max_bytes at the cap", &byzlogv1.RecordsRequest{Topic: "t", MaxBytes: wire.MaxQueryBytes}, wire.CodeOK, "0:a,1:b,2:c,3:d,4:e", 5},
		{"offset at the end", &byzlogv1.RecordsRequest{Topic: "t", Offset: 5}, wire.CodeOK, "", 5},
		{"empty partition", &byzlogv1.RecordsRequest{Topic: "empty"}, wire.CodeOK, "", 0},
		{"offset beyond the end", &byzlogv1.RecordsRequest{Topic: "t", Offset: 6}, wire.CodeOffsetOutOfRange, "", 0},
		{"offset beyond an empty partition", &byzlogv1.RecordsRequest{Topic: "empty", Offset: 1}, wire.CodeOffsetOutOfRange, "", 0},
		{"largest offset", &byzlogv1.RecordsRequest{Topic: "t", Offset: math.MaxUint64}, wire.CodeOffsetOutOfRange, "", 0},
		{"max_bytes above the cap", &byzlogv1.RecordsRequest{Topic: "t", MaxBytes: wire.MaxQueryBytes + 1}, wire.CodeBadQuery, "", 0},
		{"largest max_bytes", &byzlogv1.RecordsRequest{Topic: "t", MaxBytes: math.MaxUint32}, wire.CodeBadQuery, "", 0},
		{"unknown topic", &byzlogv1.RecordsRequest{Topic: "nope"}, wire.CodeUnknownTopic, "", 0},
		{"no topic", &byzlogv1.RecordsRequest{}, wire.CodeUnknownTopic, "", 0},
		{"unknown partition", &byzlogv1.RecordsRequest{Topic: "t", Partition: 2}, wire.CodeUnknownPartition, "", 0},
		{"largest partition", &byzlogv1.RecordsRequest{Topic: "t", Partition: math.MaxUint32}, wire.CodeUnknownPartition, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, r := queryRaw(t, f.c, wire.PathRecords, tt.req)
			if r.Code != tt.code {
				t.Fatalf("Query(%s, %v) = %s (%s), want %s", wire.PathRecords, tt.req, r.Code, r.Log, tt.code)
			}
			if !r.OK() {
				return
			}
			var resp byzlogv1.RecordsResponse
			decodeValue(t, wire.PathRecords, v, &resp)
			recs := make([]*byzlogv1.StoredRecord, len(resp.Records))
			for i, b := range resp.Records {
				recs[i] = &byzlogv1.StoredRecord{}
				decodeValue(t, wire.PathRecords+" record", b, recs[i])
				if recs[i].Topic != tt.req.Topic || recs[i].Partition != tt.req.Partition {
					t.Errorf("Query(%s, %v) record %d is of %s/%d, want %s/%d", wire.PathRecords, tt.req, i,
						recs[i].Topic, recs[i].Partition, tt.req.Topic, tt.req.Partition)
				}
			}
			if got := values(recs); got != tt.want {
				t.Errorf("Query(%s, %v) = %q, want %q", wire.PathRecords, tt.req, got, tt.want)
			}
			if resp.NextOffset != tt.next || resp.LogStartOffset != 0 {
				t.Errorf("Query(%s, %v) = log start %d next %d, want 0 and %d", wire.PathRecords, tt.req, resp.LogStartOffset, resp.NextOffset, tt.next)
			}
		})
	}
}

// TestQueryRecordsPaging reads t/0 a page at a time, as a consumer does, and
// must see every record exactly once.
func TestQueryRecordsPaging(t *testing.T) {
	f := newQueryFixture(t)
	for _, page := range []uint32{1, 2, 3, 5, 6} {
		var all []*byzlogv1.StoredRecord
		offset := uint64(0)
		for range 10 {
			var resp byzlogv1.RecordsResponse
			f.c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t", Offset: offset, MaxRecords: page}, &resp)
			if len(resp.Records) == 0 {
				break
			}
			if len(resp.Records) > int(page) {
				t.Fatalf("Query(%s, offset %d, max_records %d) returned %d records", wire.PathRecords, offset, page, len(resp.Records))
			}
			for _, b := range resp.Records {
				var rec byzlogv1.StoredRecord
				decodeValue(t, wire.PathRecords, b, &rec)
				all = append(all, &rec)
			}
			offset = all[len(all)-1].Offset + 1
		}
		if got, want := values(all), "0:a,1:b,2:c,3:d,4:e"; got != want {
			t.Errorf("paging t/0 by %d = %q, want %q", page, got, want)
		}
	}
}

// offsetsSummary is "topic/partition=offset(metadata)" for each offset.
func offsetsSummary(g *byzlogv1.GroupOffsets) string {
	var out []string
	for _, o := range g.Offsets {
		out = append(out, fmt.Sprintf("%s/%d=%d(%s)", o.Topic, o.Partition, o.Offset, o.Metadata))
	}
	return strings.Join(out, " ")
}

func TestQueryGroup(t *testing.T) {
	f := newQueryFixture(t)
	tests := []struct {
		group string
		code  wire.Code
		owner []byte
		want  string // offsetsSummary when ok
	}{
		{"g", wire.CodeOK, f.consumer.PublicKey(), "t/0=3(m) t/1=1()"},
		{"gg", wire.CodeOK, f.consumer2.PublicKey(), "t/0=5()"},
		{"nope", wire.CodeNotFound, nil, ""},
		{"G", wire.CodeNotFound, nil, ""},
		{strings.Repeat("x", wire.MaxGroupName), wire.CodeNotFound, nil, ""},
		{"", wire.CodeBadQuery, nil, ""},
		{"g\x00", wire.CodeBadQuery, nil, ""},
		{strings.Repeat("x", wire.MaxGroupName+1), wire.CodeBadQuery, nil, ""},
	}
	for _, tt := range tests {
		req := &byzlogv1.GroupRequest{Group: tt.group}
		v, r := queryRaw(t, f.c, wire.PathGroup, req)
		if r.Code != tt.code {
			t.Errorf("Query(%s, %q) = %s (%s), want %s", wire.PathGroup, tt.group, r.Code, r.Log, tt.code)
			continue
		}
		if !r.OK() {
			continue
		}
		var got byzlogv1.GroupOffsets
		decodeValue(t, wire.PathGroup, v, &got)
		if got.Group != tt.group || !bytes.Equal(got.OwnerKey, tt.owner) {
			t.Errorf("Query(%s, %q) = group %q owner %x, want group %q owner %x", wire.PathGroup, tt.group, got.Group, got.OwnerKey, tt.group, tt.owner)
		}
		if s := offsetsSummary(&got); s != tt.want {
			t.Errorf("Query(%s, %q).offsets = %q, want %q", wire.PathGroup, tt.group, s, tt.want)
		}
	}
}

// TestQueryGroupAfterCommits follows a group through a second commit.
func TestQueryGroupAfterCommits(t *testing.T) {
	f := newQueryFixture(t)
	f.c.must(offsetsTx(t, f.c, f.consumer, "g",
		&byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 5, Metadata: "m2"},
		&byzlogv1.PartitionOffset{Topic: "empty", Partition: 0, Offset: 0}))
	var got byzlogv1.GroupOffsets
	f.c.query(wire.PathGroup, &byzlogv1.GroupRequest{Group: "g"}, &got)
	if s, want := offsetsSummary(&got), "empty/0=0() t/0=5(m2) t/1=1()"; s != want {
		t.Errorf("Query(%s, %q).offsets = %q, want %q", wire.PathGroup, "g", s, want)
	}
}

func TestQueryProducer(t *testing.T) {
	f := newQueryFixture(t)
	p := f.producer.PublicKey()
	tests := []struct {
		name string
		req  *byzlogv1.ProducerRequest
		code wire.Code
		want uint64
	}{
		{"after two batches", &byzlogv1.ProducerRequest{ProducerKey: p, Topic: "t"}, wire.CodeOK, 2},
		{"after one batch", &byzlogv1.ProducerRequest{ProducerKey: p, Topic: "t", Partition: 1}, wire.CodeOK, 1},
		{"partition never written", &byzlogv1.ProducerRequest{ProducerKey: p, Topic: "empty"}, wire.CodeOK, 0},
		{"another producer", &byzlogv1.ProducerRequest{ProducerKey: f.consumer.PublicKey(), Topic: "t"}, wire.CodeOK, 0},
		{"31-byte key", &byzlogv1.ProducerRequest{ProducerKey: p[:31], Topic: "t"}, wire.CodeBadQuery, 0},
		{"33-byte key", &byzlogv1.ProducerRequest{ProducerKey: append(append([]byte(nil), p...), 0), Topic: "t"}, wire.CodeBadQuery, 0},
		{"no key", &byzlogv1.ProducerRequest{Topic: "t"}, wire.CodeBadQuery, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, r := queryRaw(t, f.c, wire.PathProducer, tt.req)
			if r.Code != tt.code {
				t.Fatalf("Query(%s, %v) = %s (%s), want %s", wire.PathProducer, tt.req, r.Code, r.Log, tt.code)
			}
			if !r.OK() {
				return
			}
			var got byzlogv1.ProducerState
			decodeValue(t, wire.PathProducer, v, &got)
			if got.NextSequence != tt.want {
				t.Errorf("Query(%s, %v).next_sequence = %d, want %d", wire.PathProducer, tt.req, got.NextSequence, tt.want)
			}
		})
	}
}

func TestQueryNonce(t *testing.T) {
	f := newQueryFixture(t)
	admin := f.c.admin.PublicKey()
	tests := []struct {
		name string
		key  []byte
		code wire.Code
		want uint64
	}{
		{"admin after two admin txs", admin, wire.CodeOK, 2},
		{"consumer after one commit", f.consumer.PublicKey(), wire.CodeOK, 1},
		{"producers use sequences, not nonces", f.producer.PublicKey(), wire.CodeOK, 0},
		{"31-byte key", admin[:31], wire.CodeBadQuery, 0},
		{"no key", nil, wire.CodeBadQuery, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &byzlogv1.NonceRequest{Key: tt.key}
			v, r := queryRaw(t, f.c, wire.PathNonce, req)
			if r.Code != tt.code {
				t.Fatalf("Query(%s, %x) = %s (%s), want %s", wire.PathNonce, tt.key, r.Code, r.Log, tt.code)
			}
			if !r.OK() {
				return
			}
			var got byzlogv1.NonceResponse
			decodeValue(t, wire.PathNonce, v, &got)
			if got.NextNonce != tt.want {
				t.Errorf("Query(%s, %x).next_nonce = %d, want %d", wire.PathNonce, tt.key, got.NextNonce, tt.want)
			}
		})
	}
}

// TestQueryNonceAdvances: an accepted admin tx advances the admin's nonce, a
// rejected one does not; the answer names the block of the tx that used the
// nonce before, and NonceUse reads the key and nonce from that tx.
func TestQueryNonceAdvances(t *testing.T) {
	c := newChain(t, "")
	var usedAt int64
	var usedTx []byte
	adminNonce := func() uint64 {
		var got byzlogv1.NonceResponse
		c.query(wire.PathNonce, &byzlogv1.NonceRequest{Key: c.admin.PublicKey()}, &got)
		if got.UsedHeight != usedAt {
			t.Errorf("Query(%s, admin).used_height = %d, want %d", wire.PathNonce, got.UsedHeight, usedAt)
		}
		return got.NextNonce
	}
	create := &byzlogv1.CreateTopic{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 1}}
	steps := []struct {
		name  string
		nonce uint64
		op    proto.Message
		code  wire.Code
		want  uint64 // next nonce after the step
	}{
		{"create", 0, create, wire.CodeOK, 1},
		{"create again: topic exists", 1, create, wire.CodeTopicExists, 1},
		{"reused nonce", 0, create, wire.CodeBadNonce, 1},
		{"nonce ahead", 2, create, wire.CodeBadNonce, 1},
		{"delete", 1, &byzlogv1.DeleteTopic{Name: "t"}, wire.CodeOK, 2},
		{"create after delete", 2, create, wire.CodeOK, 3},
	}
	if got := adminNonce(); got != 0 {
		t.Fatalf("Query(%s, admin) on a fresh chain = %d, want 0", wire.PathNonce, got)
	}
	for _, s := range steps {
		tx := c.adminTx(c.admin, s.nonce, s.op)
		r := c.block(tx)[0]
		if r.Code != s.code {
			t.Fatalf("%s: admin tx with nonce %d = %s (%s), want %s", s.name, s.nonce, r.Code, r.Log, s.code)
		}
		if r.OK() {
			usedAt, usedTx = c.state.Height, tx
		}
		if got := adminNonce(); got != s.want {
			t.Errorf("%s: Query(%s, admin) = %d, want %d", s.name, wire.PathNonce, got, s.want)
		}
		key, nonce, ok := wire.NonceUse(usedTx)
		if !ok || string(key) != string(c.admin.PublicKey()) || nonce != s.want-1 {
			t.Errorf("%s: wire.NonceUse(the tx at %d) = %x, %d, %v; want the admin key and nonce %d", s.name, usedAt, key, nonce, ok, s.want-1)
		}
	}
	for name, tx := range map[string][]byte{
		"a produce bundle": bundle(t, batch(t, wire.NewSigner(key("p"), chainID), "t", 0, 0, records("a"))),
		"garbage":          []byte("not a tx"),
		"a forged signature": func() []byte {
			tx := c.adminTx(c.admin, 9, create)
			tx[len(tx)-1] ^= 1
			return tx
		}(),
	} {
		if key, n, ok := wire.NonceUse(tx); ok {
			t.Errorf("wire.NonceUse(%s) = %x, %d, true; want false", name, key, n)
		}
	}
}

func TestQueryUnknownPath(t *testing.T) {
	f := newQueryFixture(t)
	for _, path := range []string{"", "/", "state", "/State", "/records/", "/topics/t", "/store/key", "/state\x00"} {
		_, r := queryRaw(t, f.c, path, nil)
		if r.Code != wire.CodeUnknownQuery {
			t.Errorf("Query(%q) = %s (%s), want %s", path, r.Code, r.Log, wire.CodeUnknownQuery)
			continue
		}
		for _, p := range wire.QueryPaths {
			if !strings.Contains(r.Log, p) {
				t.Errorf("Query(%q).log = %q, want it to list path %s", path, r.Log, p)
			}
		}
	}
}

// TestQueryBadData: every path that takes a request rejects data that does
// not decode as that request; /state and /topics take none and ignore it.
func TestQueryBadData(t *testing.T) {
	f := newQueryFixture(t)
	truncated := []byte{0xff}                      // a varint that never ends
	badUTF8 := []byte{0x0a, 0x02, 0xc3, 0x28}      // field 1 (a string) holding invalid UTF-8
	wrongLen := []byte{0x0a, 0x7f, 'a'}            // field 1 declares 127 bytes, holds 1
	groupNUL := []byte{0x0a, 0x03, 'g', 0x00, 'g'} // decodes; the name is checked after
	tests := []struct {
		path string
		data []byte
		code wire.Code
		msg  string // in the log when rejected
	}{
		{wire.PathState, truncated, wire.CodeOK, ""},
		{wire.PathTopics, truncated, wire.CodeOK, ""},
		{wire.PathTopic, truncated, wire.CodeBadQuery, "byzlog.v1.TopicRequest"},
		{wire.PathTopic, badUTF8, wire.CodeBadQuery, "byzlog.v1.TopicRequest"},
		{wire.PathTopic, wrongLen, wire.CodeBadQuery, "byzlog.v1.TopicRequest"},
		{wire.PathRecords, truncated, wire.CodeBadQuery, "byzlog.v1.RecordsRequest"},
		{wire.PathRecords, badUTF8, wire.CodeBadQuery, "byzlog.v1.RecordsRequest"},
		{wire.PathGroup, truncated, wire.CodeBadQuery, "byzlog.v1.GroupRequest"},
		{wire.PathGroup, badUTF8, wire.CodeBadQuery, "byzlog.v1.GroupRequest"},
		{wire.PathGroup, groupNUL, wire.CodeBadQuery, "NUL"},
		{wire.PathProducer, truncated, wire.CodeBadQuery, "byzlog.v1.ProducerRequest"},
		{wire.PathProducer, wrongLen, wire.CodeBadQuery, "byzlog.v1.ProducerRequest"},
		{wire.PathNonce, truncated, wire.CodeBadQuery, "byzlog.v1.NonceRequest"},
		{wire.PathNonce, wrongLen, wire.CodeBadQuery, "byzlog.v1.NonceRequest"},
	}
	for _, tt := range tests {
		v, r, err := core.Query(f.c.store, f.c.state, tt.path, tt.data)
		if err != nil {
			t.Fatalf("Query(%s, %x) error = %v, want none", tt.path, tt.data, err)
		}
		if r.Code != tt.code {
			t.Errorf("Query(%s, %x) = %s (%s), want %s", tt.path, tt.data, r.Code, r.Log, tt.code)
			continue
		}
		if r.OK() {
			if v == nil {
				t.Errorf("Query(%s, %x) = ok with no value, want a value", tt.path, tt.data)
			}
			continue
		}
		if v != nil || !strings.Contains(r.Log, tt.msg) {
			t.Errorf("Query(%s, %x) = value %x log %q, want no value and a log naming %s", tt.path, tt.data, v, r.Log, tt.msg)
		}
	}
}
