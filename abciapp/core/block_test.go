package core_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// committedBlock executes txs as block h and returns what an indexer sees:
// the block's time, its txs and results, the digest a node serves, and the
// app hashes before and after.
func committedBlock(t *testing.T, c *testChain, txs ...[]byte) (int64, []core.TxResult, *byzlogv1.BlockDigest, []byte, []byte) {
	t.Helper()
	prev := c.state.AppHash
	rs := c.block(txs...)
	results := make([]core.TxResult, len(rs))
	for i, r := range rs {
		results[i] = core.TxResult{Code: uint32(r.Code), Data: r.Data}
	}
	var d byzlogv1.BlockDigest
	c.query(wire.PathDigest, &byzlogv1.DigestRequest{Height: c.state.Height}, &d)
	return c.time, results, &d, prev, c.state.AppHash
}

func TestBlockRecordsRebuildsWhatWasStored(t *testing.T) {
	c := newChain(t, "")
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 3})
	p, q := wire.NewSigner(key("p"), chainID), wire.NewSigner(key("q"), chainID)
	dup := batch(t, p, "t", 0, 0, records("a", "b"))
	c.must(bundle(t, dup))
	zb, err := q.Batch("t", 2, 0, byzlogv1.Codec_CODEC_ZSTD, records("z1", "z2", "z3"))
	if err != nil {
		t.Fatal(err)
	}
	txs := [][]byte{
		bundle(t, batch(t, p, "t", 1, 0, records("c", "d")), zb),
		bundle(t, dup), // a duplicate: appends nothing
		bundle(t, batch(t, p, "t", 1, 5, records("gap"))), // rejected: appends nothing
		bundle(t, batch(t, q, "t", 1, 0, records("e")), batch(t, p, "t", 0, 1, records("f"))),
		c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1}}),
		c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.UpdateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1, Readers: [][]byte{key("r").Public().(ed25519.PublicKey)}}}),
	}
	h := c.state.Height + 1
	tm, results, d, prev, appHash := committedBlock(t, c, txs...)
	a, err := core.BlockRecords(h, tm, txs, results, core.MaxRulesVersion)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.CheckDigest(a, d, h, prev, appHash); err != nil {
		t.Fatalf("CheckDigest of an honest block: %v", err)
	}
	if a.Count() != 7 {
		t.Fatalf("rebuilt %d records, want 7", a.Count())
	}
	if len(a.Topics) != 2 || a.Topics[0].Name != "u" || a.Topics[0].Deleted || a.Topics[0].Config.GetPartitions() != 1 ||
		a.Topics[1].Name != "u" || len(a.Topics[1].Config.GetReaders()) != 1 {
		t.Fatalf("topic changes %v, want u created, then updated with one reader", a.Topics)
	}
	// Every rebuilt record is byte for byte the stored one.
	for _, part := range a.Partitions {
		var got byzlogv1.RecordsResponse
		c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: part.Root.Topic, Partition: part.Root.Partition, Offset: part.Root.FirstOffset}, &got)
		for i, r := range part.Records {
			var want byzlogv1.StoredRecord
			if i >= len(got.Records) || proto.Unmarshal(got.Records[i], &want) != nil || !proto.Equal(&want, r) {
				t.Fatalf("%s/%d record %d rebuilt as %v, not as stored", part.Root.Topic, part.Root.Partition, i, r)
			}
		}
	}

	tamper := []struct {
		name string
		fn   func(txs [][]byte, rs []core.TxResult, d *byzlogv1.BlockDigest) ([][]byte, []core.TxResult)
		want string
	}{
		{"result base offset", func(txs [][]byte, rs []core.TxResult, _ *byzlogv1.BlockDigest) ([][]byte, []core.TxResult) {
			var o byzlogv1.TxOutcome
			_ = proto.Unmarshal(rs[3].Data, &o)
			o.Batches[0].BaseOffset++ // t/1, after c and d of tx 0
			rs[3].Data, _ = proto.Marshal(&o)
			return txs, rs
		}, "base offset"},
		{"dropped tx", func(txs [][]byte, rs []core.TxResult, _ *byzlogv1.BlockDigest) ([][]byte, []core.TxResult) {
			return txs[1:], rs[1:]
		}, "partitions"},
		{"digest meta root", func(txs [][]byte, rs []core.TxResult, d *byzlogv1.BlockDigest) ([][]byte, []core.TxResult) {
			d.MetaRoot = bytes.Repeat([]byte{7}, 32)
			return txs, rs
		}, "app hash"},
		{"digest partition", func(txs [][]byte, rs []core.TxResult, d *byzlogv1.BlockDigest) ([][]byte, []core.TxResult) {
			d.Partitions[0].Root[0] ^= 1
			return txs, rs
		}, "differ"},
		{"results count", func(txs [][]byte, rs []core.TxResult, _ *byzlogv1.BlockDigest) ([][]byte, []core.TxResult) {
			return txs, rs[1:]
		}, "results"},
	}
	for _, tc := range tamper {
		t.Run(tc.name, func(t *testing.T) {
			txs2 := append([][]byte(nil), txs...)
			rs2 := append([]core.TxResult(nil), results...)
			d2 := proto.Clone(d).(*byzlogv1.BlockDigest)
			txs2, rs2 = tc.fn(txs2, rs2, d2)
			a2, err := core.BlockRecords(h, tm, txs2, rs2, core.MaxRulesVersion)
			if err == nil {
				err = core.CheckDigest(a2, d2, h, prev, appHash)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("tampered %s: err = %v, want one mentioning %q", tc.name, err, tc.want)
			}
		})
	}
}

// FuzzBlockRecords feeds arbitrary transaction and result bytes: no panic,
// and whatever is rebuilt is dense per partition and counted right.
func FuzzBlockRecords(f *testing.F) {
	s := wire.NewSigner(key("p"), chainID)
	b, _ := s.Batch("t", 0, 0, byzlogv1.Codec_CODEC_NONE, records("a"))
	tx, _ := wire.BundleTx(b)
	out, _ := proto.Marshal(&byzlogv1.TxOutcome{Batches: []*byzlogv1.BatchResult{{Topic: "t", RecordCount: 1}}})
	f.Add(tx, out)
	f.Fuzz(func(t *testing.T, tx, data []byte) {
		a, err := core.BlockRecords(1, 1, [][]byte{tx, tx}, []core.TxResult{{Data: data}, {Data: data}}, core.MaxRulesVersion)
		if err != nil {
			return
		}
		for _, p := range a.Partitions {
			if int(p.Root.Count) != len(p.Records) {
				t.Fatalf("%s/%d: root counts %d, %d records", p.Root.Topic, p.Root.Partition, p.Root.Count, len(p.Records))
			}
			for i, r := range p.Records {
				if r.Offset != p.Root.FirstOffset+uint64(i) || r.Topic != p.Root.Topic || r.Partition != p.Root.Partition {
					t.Fatalf("record %d of %s/%d is %s/%d@%d", i, p.Root.Topic, p.Root.Partition, r.Topic, r.Partition, r.Offset)
				}
			}
		}
	})
}

// TestEmptyIsNotNull: from rules version 5 an empty key, value or header
// value is stored empty and a missing one null, as Kafka keeps them (length
// 0 against -1); before, both are stored null, byte for byte as a build
// without presence stored them. BlockRecords rebuilds each under its own
// rules, and the other rules' bytes fail CheckDigest.
func TestEmptyIsNotNull(t *testing.T) {
	recs := []*byzlogv1.Record{
		{Key: []byte{}, Value: []byte{}, Headers: []*byzlogv1.RecordHeader{{Key: "e", Value: []byte{}}, {Key: "n"}}},
		{Key: nil, Value: nil},
		{Key: []byte("k"), Value: []byte("v"), Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte("x")}}},
	}
	for _, rules := range []uint64{4, 5} {
		admin := wire.NewSigner(key("admin"), chainID)
		c := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(admin.PublicKey()), rules))
		c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
		txs := [][]byte{bundle(t, batch(t, wire.NewSigner(key("p"), chainID), "t", 0, 0, recs))}
		h := c.state.Height + 1
		tm, results, d, prev, appHash := committedBlock(t, c, txs...)
		var got byzlogv1.RecordsResponse
		c.query(wire.PathRecords, &byzlogv1.RecordsRequest{Topic: "t"}, &got)
		if len(got.Records) != 3 {
			t.Fatalf("rules %d: %d records stored, want 3", rules, len(got.Records))
		}
		var r [3]byzlogv1.StoredRecord
		for i := range r {
			if err := proto.Unmarshal(got.Records[i], &r[i]); err != nil {
				t.Fatal(err)
			}
		}
		keep := rules >= core.KafkaRulesVersion
		for _, c := range []struct {
			what      string
			val       []byte
			wantEmpty bool
		}{
			{"empty key", r[0].Key, keep}, {"empty value", r[0].Value, keep}, {"empty header value", r[0].Headers[0].Value, keep},
			{"null header value", r[0].Headers[1].Value, false}, {"null key", r[1].Key, false}, {"null value", r[1].Value, false},
		} {
			if isEmpty := c.val != nil && len(c.val) == 0; isEmpty != c.wantEmpty || len(c.val) != 0 {
				t.Errorf("rules %d: %s stored as %#v, want empty %v (else null)", rules, c.what, c.val, c.wantEmpty)
			}
		}
		if string(r[2].Key) != "k" || string(r[2].Value) != "v" || string(r[2].Headers[0].Value) != "x" {
			t.Errorf("rules %d: record 2 = %v", rules, &r[2])
		}
		for _, as := range []uint64{4, 5} {
			a, err := core.BlockRecords(h, tm, txs, results, as)
			if err != nil {
				t.Fatal(err)
			}
			err = core.CheckDigest(a, d, h, prev, appHash)
			if (err == nil) != (as == rules) {
				t.Errorf("block of rules %d rebuilt as rules %d: CheckDigest = %v, want an error only for the other rules", rules, as, err)
			}
		}
	}
}

// TestEmptyAcrossTheUpgrade: a chain at rules version 4 switches to 5 at an
// agreed height. Records with an empty key and value written before it read
// back null, the same records after it empty, in one log, and both are
// proven; a commit past the end is refused before and taken after.
func TestEmptyAcrossTheUpgrade(t *testing.T) {
	c := chainAt(t, 4)
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	alice := wire.NewSigner(key("alice"), chainID)
	empties := func(seq uint64) []byte {
		return bundle(t, batch(t, p, "t", 0, seq, []*byzlogv1.Record{{Key: []byte{}, Value: []byte{}, Headers: []*byzlogv1.RecordHeader{{Key: "h", Value: []byte{}}}}}))
	}
	pastEnd := func(nonce uint64) wire.Code {
		co, err := alice.CommitOffsets(nonce, "g", true, &byzlogv1.PartitionOffset{Topic: "t", Offset: 99})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := wire.OffsetsTx(co)
		if err != nil {
			t.Fatal(err)
		}
		return c.block(tx)[0].Code
	}
	c.must(empties(0))
	before := c.state.AppHash
	if code := pastEnd(0); code != wire.CodeOffsetBeyondEnd {
		t.Fatalf("rules 4: a commit past the end = %s, want offset_beyond_end", code)
	}
	at := c.state.Height + 1 + wire.MinUpgradeLead
	c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.ScheduleUpgrade{RulesVersion: core.KafkaRulesVersion, Height: at}))
	for c.state.Height+1 < at {
		c.step()
	}
	c.must(empties(1))
	after := c.state.AppHash
	if code := pastEnd(0); code != wire.CodeOK { // the refused commit used no nonce
		t.Fatalf("rules 5: a commit past the end = %s, want ok", code)
	}
	all := c.readAll("t", 0)
	if len(all) != 2 {
		t.Fatalf("read back %d records, want 2", len(all))
	}
	for i, want := range []bool{false, true} {
		r := all[i]
		if got := r.Key != nil && r.Value != nil && r.Headers[0].Value != nil; got != want {
			t.Errorf("record %d (rules %d) read back key %#v value %#v header %#v, want empty %v (else null)", i, 4+i, r.Key, r.Value, r.Headers[0].Value, want)
		}
	}
	for i, appHash := range [][]byte{before, after} {
		proof, code := c.proofOf("t", 0, uint64(i))
		if code != wire.CodeOK {
			t.Fatalf("proof of offset %d: %s", i, code)
		}
		if _, err := core.VerifyRecord(proof, appHash); err != nil {
			t.Errorf("proof of offset %d: %v", i, err)
		}
	}
}
