package core_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// seedTx is a real transaction for a chain made by newChain with topic "t"
// (2 partitions) created by the admin with nonce 0. valid says whether
// CheckTx on that chain accepts it.
type seedTx struct {
	name  string
	tx    []byte
	valid bool
}

func seedTxs(tb testing.TB) []seedTx {
	tb.Helper()
	p := wire.NewSigner(key("p"), chainID)
	admin := wire.NewSigner(key("admin"), chainID)
	consumer := wire.NewSigner(key("c"), chainID)

	zb, err := p.Batch("t", 1, 0, byzlogv1.Codec_CODEC_ZSTD, records("z1", "z2", "z3"))
	if err != nil {
		tb.Fatal(err)
	}
	adminReq, err := admin.Admin(1, &byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1}})
	if err != nil {
		tb.Fatal(err)
	}
	adminTx, err := wire.AdminTx(adminReq)
	if err != nil {
		tb.Fatal(err)
	}
	co, err := consumer.CommitOffsets(0, "g", false, &byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 0, Metadata: "m"})
	if err != nil {
		tb.Fatal(err)
	}
	offsets, err := wire.OffsetsTx(co)
	if err != nil {
		tb.Fatal(err)
	}
	kb, err := p.KafkaBatch("t", 0, 7, 1, 0, byzlogv1.Codec_CODEC_NONE, 0, records("k1", "k2"))
	if err != nil {
		tb.Fatal(err)
	}
	txnReq, err := p.Txn(0, "tx", &byzlogv1.TxnInit{TimeoutMs: 60_000, ProducerId: -1, Epoch: -1})
	if err != nil {
		tb.Fatal(err)
	}
	txnInit, err := wire.TxnTx(txnReq)
	if err != nil {
		tb.Fatal(err)
	}
	expire, err := wire.TxnExpireTx("tx")
	if err != nil {
		tb.Fatal(err)
	}
	tb2, err := p.TransactionalBatch("t", 0, 1<<62, 0, 0, byzlogv1.Codec_CODEC_NONE, 0, records("t1"))
	if err != nil {
		tb.Fatal(err)
	}
	forged := batch(tb, p, "t", 0, 0, records("a"))
	forged.Signature = append([]byte(nil), forged.Signature...)
	forged.Signature[0] ^= 1

	return []seedTx{
		{"bundle", bundle(tb, batch(tb, p, "t", 0, 0, records("a", "b"))), true},
		{"zstd bundle", bundle(tb, zb), true},
		{"kafka producer's bundle", bundle(tb, kb), true},
		{"two-batch bundle", bundle(tb, batch(tb, p, "t", 0, 0, records("a")), batch(tb, p, "t", 1, 0, records("b"))), true},
		{"admin", adminTx, true},
		{"offsets", offsets, true},
		{"transaction init", txnInit, true},
		{"expiry of an unknown transactional id", expire, false},
		{"transactional batch of a producer id nobody holds", bundle(tb, tb2), false},
		{"unknown topic", bundle(tb, batch(tb, p, "nope", 0, 0, records("a"))), false},
		{"bad signature", bundle(tb, forged), false},
		{"empty bundle", bundle(tb), false},
		{"empty", nil, false},
		{"not protobuf", []byte{0xff, 0xff, 0xff}, false},
	}
}

func FuzzValidateTx(f *testing.F) {
	for _, s := range seedTxs(f) {
		if r := core.ValidateTx(s.tx); s.valid && !r.OK() {
			f.Fatalf("ValidateTx(%s seed) = %s (%s), want ok", s.name, r.Code, r.Log)
		}
		f.Add(s.tx)
	}
	f.Fuzz(func(t *testing.T, tx []byte) {
		r := core.ValidateTx(tx)
		if again := core.ValidateTx(tx); !reflect.DeepEqual(r, again) {
			t.Fatalf("ValidateTx(%x) = %+v, then %+v, want the same", tx, r, again)
		}
		if r.OK() && r.Log != "" {
			t.Errorf("ValidateTx(%x) = ok with log %q, want an empty log", tx, r.Log)
		}
		if !r.OK() && r.Log == "" {
			t.Errorf("ValidateTx(%x) = %s with an empty log, want a message", tx, r.Code)
		}
	})
}

// FuzzNonceUse: a client decodes the transaction a gateway shows it as
// having used its nonce. Any bytes give an answer, and a yes is a signed
// admin request or offset commit the chain would check the same way.
func FuzzNonceUse(f *testing.F) {
	for _, s := range seedTxs(f) {
		f.Add(s.tx)
	}
	f.Fuzz(func(t *testing.T, tx []byte) {
		key, nonce, ok := wire.NonceUse(tx)
		if !ok {
			if key != nil || nonce != 0 {
				t.Fatalf("wire.NonceUse(%x) = %x, %d, false; want nothing with false", tx, key, nonce)
			}
			return
		}
		if len(key) != 32 {
			t.Fatalf("wire.NonceUse(%x) = a %d-byte key", tx, len(key))
		}
		if r := core.ValidateTx(tx); !r.OK() {
			t.Fatalf("wire.NonceUse(%x) = ok, ValidateTx = %s (%s)", tx, r.Code, r.Log)
		}
	})
}

func FuzzCheckTx(f *testing.F) {
	c := newChain(f, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	for _, s := range seedTxs(f) {
		if r := c.check(s.tx); r.OK() != s.valid {
			f.Fatalf("Check(%s seed) = %s (%s), want ok %v", s.name, r.Code, r.Log, s.valid)
		}
		f.Add(s.tx)
	}
	f.Fuzz(func(t *testing.T, tx []byte) {
		r, err := core.Check(c.store, tx)
		if err != nil {
			t.Fatalf("Check(%x) error = %v, want none", tx, err)
		}
		again, err := core.Check(c.store, tx)
		if err != nil || !reflect.DeepEqual(r, again) {
			t.Fatalf("Check(%x) = %+v, then %+v, %v, want the same", tx, r, again, err)
		}
		if r.OK() != (r.Log == "") {
			t.Errorf("Check(%x) = %s with log %q, want a log exactly when rejected", tx, r.Code, r.Log)
		}
		// Check starts with the stateless checks: what they reject, it rejects
		// the same way.
		if v := core.ValidateTx(tx); !v.OK() && (v.Code != r.Code || v.Log != r.Log) {
			t.Errorf("Check(%x) = %s (%s), want ValidateTx's %s (%s)", tx, r.Code, r.Log, v.Code, v.Log)
		}
	})
}

// zstdFrame is a raw zstd frame holding data in one raw block, with its
// content size declared or not.
func zstdFrame(data []byte, withSize bool) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd}
	if withSize {
		// Single segment, 4-byte frame content size; no window descriptor.
		out = append(out, 0x80|0x20)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(data)))
	} else {
		// No content size, not single segment: a window descriptor (1 KiB).
		out = append(out, 0x00, 0x00)
	}
	hdr := uint32(len(data))<<3 | 1 // raw block, last
	out = append(out, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	return append(out, data...)
}

// skippableFrame is a zstd skippable frame of n bytes in all, as the signer
// pads a frame with.
func skippableFrame(n int) []byte {
	out := binary.LittleEndian.AppendUint32(nil, 0x184D2A50)
	out = binary.LittleEndian.AppendUint32(out, uint32(n-8))
	return append(out, make([]byte, n-8)...)
}

func marshalBody(tb testing.TB, b *byzlogv1.BatchBody) []byte {
	tb.Helper()
	out, err := proto.Marshal(b)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// decodeBody decodes a batch body the way a client would, independently of
// core, and returns its records.
func decodeBody(t *testing.T, body []byte) (*byzlogv1.BatchBody, []*byzlogv1.Record) {
	t.Helper()
	var b byzlogv1.BatchBody
	if err := proto.Unmarshal(body, &b); err != nil {
		t.Fatalf("accepted body does not decode: %v", err)
	}
	raw := b.Records
	if b.Codec == byzlogv1.Codec_CODEC_ZSTD {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if raw, err = d.DecodeAll(b.Records, nil); err != nil {
			t.Fatalf("accepted body's records do not decompress: %v", err)
		}
	}
	var set byzlogv1.RecordSet
	if err := proto.Unmarshal(raw, &set); err != nil {
		t.Fatalf("accepted body's records do not decode: %v", err)
	}
	return &b, set.Records
}

func FuzzBatchBody(f *testing.F) {
	p := wire.NewSigner(key("p"), chainID)
	recs := records("a", "b", "c")
	raw, err := proto.Marshal(&byzlogv1.RecordSet{Records: recs})
	if err != nil {
		f.Fatal(err)
	}
	zb, err := p.Batch("t", 1, 0, byzlogv1.Codec_CODEC_ZSTD, recs)
	if err != nil {
		f.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		f.Fatal(err)
	}
	zeros := enc.EncodeAll(make([]byte, 4<<20), nil)
	mib := make([]byte, 1<<20)
	bigRaw, err := proto.Marshal(&byzlogv1.RecordSet{Records: []*byzlogv1.Record{{Value: mib}, {Value: mib}, {Value: mib}}})
	if err != nil {
		f.Fatal(err)
	}
	bigZstd := enc.EncodeAll(bigRaw, nil)
	enc.Close()
	mkBody := func(codec byzlogv1.Codec, size uint32, data []byte) []byte {
		return marshalBody(f, &byzlogv1.BatchBody{ChainId: chainID, Topic: "t", Codec: codec, UncompressedSize: size, Records: data})
	}
	seeds := []struct {
		name string
		body []byte
		code wire.Code // on a fresh chain with topic "t"
	}{
		{"none", batch(f, p, "t", 0, 0, recs).Body, wire.CodeOK},
		{"zstd", zb.Body, wire.CodeOK},
		{"zstd raw block", mkBody(byzlogv1.Codec_CODEC_ZSTD, uint32(len(raw)), zstdFrame(raw, true)), wire.CodeOK},
		{"size past max_batch_bytes", mkBody(byzlogv1.Codec_CODEC_NONE, 1<<32-1, raw), wire.CodeBatchTooLarge},
		{"zstd size past max_batch_bytes", mkBody(byzlogv1.Codec_CODEC_ZSTD, 1<<32-1, zb.Body), wire.CodeBatchTooLarge},
		{"zstd inflating past the compression ratio", mkBody(byzlogv1.Codec_CODEC_ZSTD, 4<<20, zeros), wire.CodeBadCompression},
		{"zstd of zero records past the ratio", mkBody(byzlogv1.Codec_CODEC_ZSTD, uint32(len(bigRaw)), bigZstd), wire.CodeBadCompression},
		{"zstd of zero records padded to the ratio", mkBody(byzlogv1.Codec_CODEC_ZSTD, uint32(len(bigRaw)),
			append(bigZstd, skippableFrame(len(bigRaw)/wire.MaxCompressionRatio)...)), wire.CodeOK},
		{"zstd without content size", mkBody(byzlogv1.Codec_CODEC_ZSTD, uint32(len(raw)), zstdFrame(raw, false)), wire.CodeBadCompression},
		{"zstd with a second frame", mkBody(byzlogv1.Codec_CODEC_ZSTD, uint32(len(raw)),
			append(zstdFrame(raw, true), zstdFrame([]byte("more"), false)...)), wire.CodeBadCompression},
		{"zstd content size not the declared size", mkBody(byzlogv1.Codec_CODEC_ZSTD, uint32(len(raw))+1, zb.Body), wire.CodeBadCompression},
		{"declared size one too many", mkBody(byzlogv1.Codec_CODEC_NONE, uint32(len(raw))+1, raw), wire.CodeBatchTooLarge},
		{"no records", mkBody(byzlogv1.Codec_CODEC_NONE, 0, nil), wire.CodeEmptyBatch},
		{"unknown codec", mkBody(byzlogv1.Codec(7), uint32(len(raw)), raw), wire.CodeBadCompression},
		{"other chain", marshalBody(f, &byzlogv1.BatchBody{ChainId: "other", Topic: "t", UncompressedSize: uint32(len(raw)), Records: raw}), wire.CodeWrongChain},
		{"unknown partition", marshalBody(f, &byzlogv1.BatchBody{ChainId: chainID, Topic: "t", Partition: 2, UncompressedSize: uint32(len(raw)), Records: raw}), wire.CodeUnknownPartition},
		{"sequence gap", marshalBody(f, &byzlogv1.BatchBody{ChainId: chainID, Topic: "t", Sequence: 1, UncompressedSize: uint32(len(raw)), Records: raw}), wire.CodeSequenceGap},
		{"not protobuf", []byte{0xff}, wire.CodeMalformedTx},
		{"empty", nil, wire.CodeEmptyBody},
	}
	for _, s := range seeds {
		c := newChain(f, "")
		c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
		sb := &byzlogv1.SignedBatch{Body: s.body, ProducerKey: p.PublicKey(), Signature: ed25519.Sign(key("p"), s.body)}
		if r := c.block(bundle(f, sb))[0]; r.Code != s.code {
			f.Errorf("block(%s seed) = %s (%s), want %s", s.name, r.Code, r.Log, s.code)
		}
		f.Add(s.body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := newChain(t, "")
		c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
		sb := &byzlogv1.SignedBatch{Body: body, ProducerKey: p.PublicKey(), Signature: ed25519.Sign(key("p"), body)}
		tx := bundle(t, sb)
		next := []uint64{c.partition("t", 0).NextOffset, c.partition("t", 1).NextOffset}

		check := c.check(tx)
		// The block with the batch, and the same block without it: a rejected
		// transaction must leave the block's effects exactly as if it were
		// absent.
		blk := core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time + 1_000_000_000, Txs: [][]byte{tx}}
		out, err := core.Execute(c.store, c.state, blk)
		if err != nil {
			t.Fatalf("Execute(block with batch body %x) error = %v, want none", body, err)
		}
		blk.Txs = nil
		without, err := core.Execute(c.store, c.state, blk)
		if err != nil {
			t.Fatalf("Execute(empty block) error = %v, want none", err)
		}
		c.store.apply(out.Changes)
		c.state, c.time = out.State, blk.TimeUnixNano
		r := out.Results[0]

		if !r.OK() {
			if r.Log == "" {
				t.Errorf("batch body %x: block result %s has an empty log", body, r.Code)
			}
			if !bytes.Equal(out.State.AppHash, without.State.AppHash) || !reflect.DeepEqual(out.Changes, without.Changes) {
				t.Errorf("batch body %x: rejected (%s: %s) but the block's changes differ from an empty block's", body, r.Code, r.Log)
			}
			for part := range uint32(2) {
				if got := c.partition("t", part).NextOffset; got != next[part] {
					t.Errorf("batch body %x: rejected (%s) but t/%d next offset = %d, want %d", body, r.Code, part, got, next[part])
				}
			}
			if r.Data != nil {
				if o := outcome(t, r); len(o.Batches) != 1 || o.Batches[0].Code != uint32(r.Code) {
					t.Errorf("batch body %x: rejected (%s) with outcome %v, want one batch with that code", body, r.Code, o)
				}
			}
			// CheckTx is only more lenient than a block about sequences
			// (earlier ones may still be in the mempool).
			if r.Code != wire.CodeSequenceGap && check.Code != r.Code {
				t.Errorf("batch body %x: Check = %s (%s), block = %s (%s), want the same", body, check.Code, check.Log, r.Code, r.Log)
			}
			return
		}

		if !check.OK() {
			t.Errorf("batch body %x: Check = %s (%s), but a block accepts it", body, check.Code, check.Log)
		}
		b, want := decodeBody(t, body)
		if b.ChainId != chainID || b.Topic != "t" || b.Partition > 1 || b.Sequence != 0 {
			t.Fatalf("batch body %x: accepted for chain %q %s/%d sequence %d", body, b.ChainId, b.Topic, b.Partition, b.Sequence)
		}
		o := outcome(t, r)
		if len(o.Batches) != 1 || o.Batches[0].RecordCount != uint32(len(want)) || o.Batches[0].BaseOffset != next[b.Partition] {
			t.Errorf("batch body %x: outcome %v, want one batch of %d records at %d", body, o, len(want), next[b.Partition])
		}
		for part := range uint32(2) {
			grow := uint64(0)
			if part == b.Partition {
				grow = uint64(len(want))
			}
			if got := c.partition("t", part).NextOffset; got != next[part]+grow {
				t.Errorf("batch body %x: accepted %d records for t/%d, t/%d next offset = %d, want %d", body, len(want), b.Partition, part, got, next[part]+grow)
			}
		}
		stored := c.readAll("t", b.Partition)
		if len(stored) != len(want) {
			t.Fatalf("batch body %x: t/%d holds %d records, want %d", body, b.Partition, len(stored), len(want))
		}
		for i, s := range stored {
			w := want[i]
			if s.Offset != uint64(i) || !bytes.Equal(s.Key, w.Key) || !bytes.Equal(s.Value, w.Value) ||
				s.CreateTimeUnixNano != w.CreateTimeUnixNano || len(s.Headers) != len(w.Headers) ||
				!bytes.Equal(s.ProducerKey, p.PublicKey()) || s.Sequence != 0 {
				t.Errorf("batch body %x: stored record %d = %v, want %v from producer %x", body, i, s, w, p.PublicKey())
			}
		}
	})
}

func FuzzQuery(f *testing.F) {
	fx := newQueryFixture(f)
	// The response message of each path this test knows; a path added
	// since is still fuzzed, its value just not decoded.
	responses := map[string]func() proto.Message{
		wire.PathState:    func() proto.Message { return &byzlogv1.AppState{} },
		wire.PathTopics:   func() proto.Message { return &byzlogv1.TopicList{} },
		wire.PathTopic:    func() proto.Message { return &byzlogv1.TopicInfo{} },
		wire.PathRecords:  func() proto.Message { return &byzlogv1.RecordsResponse{} },
		wire.PathGroup:    func() proto.Message { return &byzlogv1.GroupOffsets{} },
		wire.PathProducer: func() proto.Message { return &byzlogv1.ProducerState{} },
		wire.PathNonce:    func() proto.Message { return &byzlogv1.NonceResponse{} },
		wire.PathTxns:     func() proto.Message { return &byzlogv1.TxnList{} },
	}
	requests := map[string]proto.Message{
		wire.PathTopic:    &byzlogv1.TopicRequest{Name: "t"},
		wire.PathRecords:  &byzlogv1.RecordsRequest{Topic: "t", Offset: 1, MaxRecords: 2, MaxBytes: 100},
		wire.PathGroup:    &byzlogv1.GroupRequest{Group: "g"},
		wire.PathProducer: &byzlogv1.ProducerRequest{ProducerKey: fx.producer.PublicKey(), Topic: "t"},
		wire.PathNonce:    &byzlogv1.NonceRequest{Key: fx.consumer.PublicKey()},
		wire.PathTxns:     &byzlogv1.TxnsRequest{Limit: 2},
	}
	for i, path := range wire.QueryPaths {
		var data []byte
		if req, ok := requests[path]; ok {
			var err error
			if data, err = proto.Marshal(req); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(byte(i), data)
		f.Add(byte(i), []byte{0xff})
	}
	f.Fuzz(func(t *testing.T, pathIndex byte, data []byte) {
		path := wire.QueryPaths[int(pathIndex)%len(wire.QueryPaths)]
		v, r, err := core.Query(fx.c.store, fx.c.state, path, data)
		if err != nil {
			t.Fatalf("Query(%s, %x) error = %v, want none", path, data, err)
		}
		v2, r2, err := core.Query(fx.c.store, fx.c.state, path, data)
		if err != nil || !bytes.Equal(v, v2) || !reflect.DeepEqual(r, r2) {
			t.Fatalf("Query(%s, %x) = %x %+v, then %x %+v %v, want the same", path, data, v, r, v2, r2, err)
		}
		if !r.OK() {
			if v != nil || r.Log == "" {
				t.Errorf("Query(%s, %x) = %s with value %x and log %q, want no value and a message", path, data, r.Code, v, r.Log)
			}
			return
		}
		if r.Log != "" {
			t.Errorf("Query(%s, %x) = ok with log %q, want an empty log", path, data, r.Log)
		}
		if resp, ok := responses[path]; ok {
			if err := proto.Unmarshal(v, resp()); err != nil {
				t.Errorf("Query(%s, %x) value does not decode: %v", path, data, err)
			}
		}
	})
}

// TestBatchBodyInflationBound: a zstd batch must not inflate far past its
// declared uncompressed_size before it is rejected, even when a second frame
// follows the first (found by review of the fuzz seeds: DecodeAll used to
// inflate every following frame up to the decoder's 64 MiB cap).
func TestBatchBodyInflationBound(t *testing.T) {
	p := wire.NewSigner(key("p"), chainID)
	raw, err := proto.Marshal(&byzlogv1.RecordSet{Records: records("a")})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	bomb := enc.EncodeAll(make([]byte, 60<<20), nil)
	enc.Close()
	body := marshalBody(t, &byzlogv1.BatchBody{ChainId: chainID, Topic: "t", Codec: byzlogv1.Codec_CODEC_ZSTD,
		UncompressedSize: uint32(len(raw)), Records: append(zstdFrame(raw, true), bomb...)})
	tx := bundle(t, &byzlogv1.SignedBatch{Body: body, ProducerKey: p.PublicKey(), Signature: ed25519.Sign(key("p"), body)})
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := c.check(tx)
	runtime.ReadMemStats(&after)
	if r.Code != wire.CodeBadCompression {
		t.Errorf("Check(%d-byte batch declaring %d bytes) = %s (%s), want %s", len(body), len(raw), r.Code, r.Log, wire.CodeBadCompression)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("Check(%d-byte batch declaring %d bytes) allocated %d MiB, want under 8 MiB", len(body), len(raw), got>>20)
	}
}

// FuzzWithRecords: what ProcessProposal takes from the mempool, a precheck
// made without records and given them afterwards (Checked.WithRecords), is
// the full precheck of the same bytes: the same verdict and cost, and a
// block of it executes to the same results, changes and app hash.
func FuzzWithRecords(f *testing.F) {
	c := newChain(f, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	params, err := core.LoadParams(c.store)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range seedTxs(f) {
		f.Add(s.tx)
	}
	// A bundle whose second batch fails before its records are read.
	other := wire.NewSigner(key("p"), "other-chain")
	f.Add(bundle(f, batch(f, wire.NewSigner(key("p"), chainID), "t", 0, 0, records("a")), batch(f, other, "t", 1, 0, records("b"))))
	f.Fuzz(func(t *testing.T, tx []byte) {
		full := core.Precheck(params, tx, true)
		mempool := core.Precheck(params, tx, false)
		added := mempool.WithRecords(params)
		if !reflect.DeepEqual(full.Result(), added.Result()) || full.Cost != added.Cost || full.Hash != added.Hash {
			t.Fatalf("WithRecords(%x) = %+v cost %d, want Precheck's %+v cost %d", tx, added.Result(), added.Cost, full.Result(), full.Cost)
		}
		if again := mempool.WithRecords(params); !reflect.DeepEqual(again.Result(), added.Result()) || again.Cost != added.Cost {
			t.Fatalf("WithRecords(%x) changed the mempool's precheck: %+v then %+v", tx, added.Result(), again.Result())
		}
		b := core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time + 1, Txs: [][]byte{tx}}
		b.Checked = []*core.Checked{full}
		want, err := core.Execute(c.store, c.state, b)
		if err != nil {
			t.Fatal(err)
		}
		b.Checked = []*core.Checked{added}
		got, err := core.Execute(c.store, c.state, b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Results, want.Results) || !reflect.DeepEqual(got.Changes, want.Changes) || !bytes.Equal(got.State.AppHash, want.State.AppHash) {
			t.Fatalf("a block of %x executes to %+v with WithRecords, %+v with Precheck", tx, got.Results, want.Results)
		}
	})
}

// TestExecutionLeavesPrechecksAlone: a mempool's precheck and a block's
// (WithRecords) share what was decoded, so executing one must not change
// the other. Verifying a block blanks its batches' messages (results are
// hashed into the next header: no free text), and once did so in the
// precheck result itself: the mempool then answered the same bundle
// without saying why its bad batch failed.
func TestExecutionLeavesPrechecksAlone(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2})
	params, err := core.LoadParams(c.store)
	if err != nil {
		t.Fatal(err)
	}
	p := wire.NewSigner(key("p"), chainID)
	tx := bundle(t, batch(t, p, "t", 0, 0, records("a")), batch(t, wire.NewSigner(key("p"), "other-chain"), "t", 1, 0, records("b")))
	pooled := core.Precheck(params, tx, false)
	admit := func() core.Result {
		t.Helper()
		r, _, err := core.NewPending(c.store, params, c.state.Height+1).Add(pooled)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := admit()
	if before.OK() || !strings.Contains(string(before.Data), "other-chain") {
		t.Fatalf("the mempool's verdict %s (%q) does not name the wrong chain", before.Code, before.Data)
	}
	b := core.Block{Height: c.state.Height + 1, TimeUnixNano: c.time + 1, Txs: [][]byte{tx}, Checked: []*core.Checked{pooled.WithRecords(params)}}
	if _, _, err := core.Verify(c.store, b); err != nil {
		t.Fatal(err)
	}
	if after := admit(); !reflect.DeepEqual(after, before) {
		t.Fatalf("after a block was verified, the mempool's verdict is %s (%q), was %s (%q)", after.Code, after.Data, before.Code, before.Data)
	}
}
