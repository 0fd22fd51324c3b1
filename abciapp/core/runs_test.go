package core_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// chainAt is a test chain whose genesis names rules version v.
func chainAt(t *testing.T, v uint64) *testChain {
	t.Helper()
	admin := wire.NewSigner(key("admin"), chainID)
	return newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(admin.PublicKey()), v))
}

// sized is n records of size-byte values, tagged with tag.
func sized(tag string, n, size int) []*byzlogv1.Record {
	out := make([]*byzlogv1.Record, n)
	for i := range out {
		v := bytes.Repeat([]byte{'a' + byte(i%26)}, size)
		copy(v, fmt.Sprintf("%s-%d-", tag, i))
		out[i] = &byzlogv1.Record{Value: v}
	}
	return out
}

// recordKeys counts the keys of CFRecords.
func (c *testChain) recordKeys() int {
	n := 0
	_ = c.store.Scan(core.CFRecords, nil, nil, func(_, _ []byte) bool { n++; return true })
	return n
}

// proofOf is the proof query's answer for an offset: the proof, or the
// code it was refused with.
func (c *testChain) proofOf(topic string, p uint32, offset uint64) (*byzlogv1.RecordProof, wire.Code) {
	c.t.Helper()
	req, _ := proto.Marshal(&byzlogv1.ProofRequest{Topic: topic, Partition: p, Offset: offset})
	v, r, err := core.Query(c.store, c.state, wire.PathProof, req)
	if err != nil {
		c.t.Fatalf("proof of %s/%d@%d: %v", topic, p, offset, err)
	}
	if !r.OK() {
		return nil, r.Code
	}
	var proof byzlogv1.RecordProof
	if err := proto.Unmarshal(v, &proof); err != nil {
		c.t.Fatal(err)
	}
	return &proof, r.Code
}

// TestRunsReadLikeOneKeyARecord: the same blocks executed under rules 3
// (a key a record) and rules 4 (records in runs) give the same results,
// the same digests, the same records read back, the same proofs and the
// same retention, block after block, with far fewer keys under rules 4.
// Retention by bytes cuts the log inside runs, so a run straddling the log
// start is read from the start and its records below it are not proven.
func TestRunsReadLikeOneKeyARecord(t *testing.T) {
	chains := []*testChain{chainAt(t, 3), chainAt(t, 4)}
	cfg := &byzlogv1.TopicConfig{Partitions: 2, RetentionBytes: 300 << 10}
	for _, c := range chains {
		c.createTopic("t", cfg)
	}
	p, q := wire.NewSigner(key("p"), chainID), wire.NewSigner(key("q"), chainID)
	seq := map[string]uint64{}
	next := func(s *wire.Signer, part uint32) uint64 { // a batch a sequence
		k := fmt.Sprintf("%x/%d", s.PublicKey()[:4], part)
		v := seq[k]
		seq[k]++
		return v
	}
	var blocks [][][]byte
	for b := range 12 {
		var txs [][]byte
		// A run of one, a small run, and a batch of several runs (150 B
		// values: ~200 B stored, past MaxRunBytes at ~330 records).
		txs = append(txs, bundle(t, batch(t, p, "t", 0, next(p, 0), sized(fmt.Sprintf("b%d-one", b), 1, 40))))
		txs = append(txs, bundle(t, batch(t, q, "t", 0, next(q, 0), sized(fmt.Sprintf("b%d-few", b), 3, 90))))
		n := 200 + 150*b
		txs = append(txs, bundle(t, batch(t, p, "t", 1, next(p, 1), sized(fmt.Sprintf("b%d-many", b), n, 150))))
		blocks = append(blocks, txs)
	}
	// One record larger than a run: a run of its own.
	blocks = append(blocks, [][]byte{bundle(t, batch(t, q, "t", 1, next(q, 1), sized("big", 1, core.MaxRunBytes+10)))})

	for i, txs := range blocks {
		var outs []core.Outcome
		for _, c := range chains {
			outs = append(outs, c.step(txs...))
		}
		for j, r := range outs[0].Results {
			if r.Code != wire.CodeOK || r.Code != outs[1].Results[j].Code || !bytes.Equal(r.Data, outs[1].Results[j].Data) {
				t.Fatalf("block %d tx %d: results %s %x and %s %x", i, j, r.Code, r.Data, outs[1].Results[j].Code, outs[1].Results[j].Data)
			}
		}
		d3, d4 := outs[0].Digest, outs[1].Digest
		if !bytes.Equal(d3.RecordsRoot, d4.RecordsRoot) || !bytes.Equal(d3.MetaRoot, d4.MetaRoot) {
			t.Fatalf("block %d: digests differ between the layouts: records %X/%X, meta %X/%X", i, d3.RecordsRoot, d4.RecordsRoot, d3.MetaRoot, d4.MetaRoot)
		}
		for part := range uint32(2) {
			i3, i4 := chains[0].partition("t", part), chains[1].partition("t", part)
			if !proto.Equal(i3, i4) {
				t.Fatalf("block %d: partition %d is %v under rules 3, %v under rules 4", i, part, i3, i4)
			}
			if got, want := values(chains[1].readAll("t", part)), values(chains[0].readAll("t", part)); got != want {
				t.Fatalf("block %d: partition %d reads back differently under rules 4", i, part)
			}
			lo := i3.LogStartOffset
			for _, o := range []uint64{0, max(lo, 1) - 1, lo, lo + 1, lo + 97, (lo + i3.NextOffset) / 2, max(i3.NextOffset, 1) - 1, i3.NextOffset} {
				p3, c3 := chains[0].proofOf("t", part, o)
				p4, c4 := chains[1].proofOf("t", part, o)
				if c3 != c4 || !proto.Equal(p3, p4) {
					t.Fatalf("block %d: proof of t/%d@%d (log %d..%d): %s under rules 3, %s under rules 4, or the proofs differ", i, part, o, lo, i3.NextOffset, c3, c4)
				}
				if c3 == wire.CodeOK {
					if _, err := core.VerifyRecord(p4, nil); err == nil {
						t.Fatal("a proof verified against no app hash")
					}
				}
			}
		}
	}
	if p1 := chains[0].partition("t", 1); p1.LogStartOffset == 0 {
		t.Fatalf("retention never cut partition 1 (%v): the test does not reach a straddling run", p1)
	}
	k3, k4 := chains[0].recordKeys(), chains[1].recordKeys()
	t.Logf("record keys: %d one a record, %d in runs", k3, k4)
	if k4*20 > k3 {
		t.Errorf("rules 4 stores %d record keys against %d: runs should cut them twentyfold", k4, k3)
	}
}

// TestRunsAcrossTheUpgrade: records written a key a record under rules 3
// and in runs from the upgrade to rules 4 on read back as one log, prove
// against their blocks' app hashes on both sides, and retention by time
// deletes across the boundary.
func TestRunsAcrossTheUpgrade(t *testing.T) {
	c := chainAt(t, 3)
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: 30_000})
	p := wire.NewSigner(key("p"), chainID)
	var seq uint64
	type proven struct {
		offset  uint64
		appHash []byte
	}
	var samples []proven
	produce := func(tag string, n int) {
		c.t.Helper()
		out := c.step(bundle(t, batch(t, p, "t", 0, seq, sized(tag, n, 100))))
		if out.Results[0].Code != wire.CodeOK {
			t.Fatalf("batch %s: %s %s", tag, out.Results[0].Code, out.Results[0].Log)
		}
		first := c.partition("t", 0).NextOffset - uint64(n)
		samples = append(samples, proven{first + uint64(n)/2, c.state.AppHash})
		seq++
	}
	for i := range 3 {
		produce(fmt.Sprintf("v3-%d", i), 500)
	}
	before := c.recordKeys()
	if before != 1500 {
		t.Fatalf("rules 3 stored %d record keys for 1,500 records, want one a record", before)
	}
	at := c.state.Height + 1 + wire.MinUpgradeLead
	c.must(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.ScheduleUpgrade{RulesVersion: core.RunsRulesVersion, Height: at}))
	for c.state.Height+1 < at {
		c.step()
	}
	for i := range 3 {
		produce(fmt.Sprintf("v4-%d", i), 500)
	}
	if got := c.recordKeys() - before; got >= 30 {
		t.Fatalf("rules 4 stored %d record keys for 1,500 records, want runs", got)
	}
	all := c.readAll("t", 0)
	if len(all) != 3000 {
		t.Fatalf("read back %d records across the upgrade, want 3,000", len(all))
	}
	for i, r := range all {
		if r.Offset != uint64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
	}
	for _, s := range samples {
		proof, code := c.proofOf("t", 0, s.offset)
		if code != wire.CodeOK {
			t.Fatalf("proof of offset %d: %s", s.offset, code)
		}
		if rec, err := core.VerifyRecord(proof, s.appHash); err != nil || rec.Offset != s.offset {
			t.Fatalf("proof of offset %d: %v (record at %d)", s.offset, err, rec.GetOffset())
		}
	}
	// Time passes: retention (30 s; a block a second) deletes the rules-3
	// records and then the runs, one block at a time.
	starts := map[uint64]bool{}
	for range 2*wire.MinUpgradeLead + 40 {
		c.step()
		info := c.partition("t", 0)
		starts[info.LogStartOffset] = true
		recs := c.readAll("t", 0)
		if uint64(len(recs)) != info.NextOffset-info.LogStartOffset || (len(recs) > 0 && recs[0].Offset != info.LogStartOffset) {
			t.Fatalf("log %d..%d reads back %d records from %d", info.LogStartOffset, info.NextOffset, len(recs), recs[0].GetOffset())
		}
		if info.LogStartOffset > 0 {
			if _, code := c.proofOf("t", 0, info.LogStartOffset-1); code != wire.CodeOffsetOutOfRange {
				t.Fatalf("proof below the log start %d: %s, want %s", info.LogStartOffset, code, wire.CodeOffsetOutOfRange)
			}
		}
	}
	if !starts[1500] || !starts[3000] {
		t.Fatalf("log starts seen %v: want the boundary (1500) and the end (3000)", starts)
	}
	if n := c.recordKeys(); n != 0 {
		t.Fatalf("%d record keys left after retention deleted every record", n)
	}
}

// TestProofOfACraftedTopicName: a proof query for a topic name no topic
// can have (NUL bytes make its key range reach another topic's records)
// is refused as a bad query, never an error: an error from a query stops
// a node whose app is served over the socket transport.
func TestProofOfACraftedTopicName(t *testing.T) {
	c := chainAt(t, core.MaxRulesVersion)
	c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1})
	p := wire.NewSigner(key("p"), chainID)
	c.must(bundle(t, batch(t, p, "t", 0, 0, sized("a", 5, 50))))
	c.must(bundle(t, batch(t, p, "t", 0, 1, sized("b", 1, 50))))
	for _, name := range []string{"t\x00\x00\x00\x00\x00", "t\x00", "", "no such topic"} {
		for _, offset := range []uint64{0, 1, 5, 1 << 40} {
			req, _ := proto.Marshal(&byzlogv1.ProofRequest{Topic: name, Offset: offset})
			_, r, err := core.Query(c.store, c.state, wire.PathProof, req)
			if err != nil {
				t.Fatalf("proof of %q@%d: error %v, want a refusal", name, offset, err)
			}
			if r.OK() {
				t.Fatalf("proof of %q@%d succeeded", name, offset)
			}
		}
	}
	if _, code := c.proofOf("t", 1, 0); code != wire.CodeUnknownPartition {
		t.Fatalf("proof of a partition past the topic's: %s, want %s", code, wire.CodeUnknownPartition)
	}
}

// TestRetentionStopsInsideARun: retention deletes at most
// MaxRetentionDeletes records of a partition a block, and that bound
// falls inside a run; both layouts delete the same records block by
// block, and read the same log.
func TestRetentionStopsInsideARun(t *testing.T) {
	chains := []*testChain{chainAt(t, 3), chainAt(t, 4)}
	p := wire.NewSigner(key("p"), chainID)
	for _, c := range chains {
		c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 1, RetentionMs: 3_000})
		// One block: its records are all as old, and retention takes
		// them MaxRetentionDeletes at a time.
		var txs [][]byte
		for seq := range uint64(3) {
			txs = append(txs, bundle(t, batch(t, p, "t", 0, seq, sized(fmt.Sprint(seq), 9_000, 30))))
		}
		for _, r := range c.step(txs...).Results {
			if !r.OK() {
				t.Fatalf("batch: %s %s", r.Code, r.Log)
			}
		}
	}
	if k3, k4 := chains[0].recordKeys(), chains[1].recordKeys(); k3 != 27_000 || k4 > 27_000/100 {
		t.Fatalf("record keys: %d and %d, want 27,000 a key a record and runs of hundreds", k3, k4)
	}
	var starts []uint64
	for range 6 {
		for _, c := range chains {
			c.step()
		}
		i3, i4 := chains[0].partition("t", 0), chains[1].partition("t", 0)
		if !proto.Equal(i3, i4) {
			t.Fatalf("partition under rules 3 %v, under rules 4 %v", i3, i4)
		}
		if got, want := values(chains[1].readAll("t", 0)), values(chains[0].readAll("t", 0)); got != want {
			t.Fatalf("log from %d reads back differently under rules 4", i3.LogStartOffset)
		}
		starts = append(starts, i3.LogStartOffset)
	}
	if !slices.Contains(starts, core.MaxRetentionDeletes) || !slices.Contains(starts, 2*core.MaxRetentionDeletes) || starts[len(starts)-1] != 27_000 {
		t.Fatalf("log start offsets %v: want retention to take several blocks", starts)
	}
	for i := 1; i < len(starts); i++ {
		if d := starts[i] - starts[i-1]; d > core.MaxRetentionDeletes {
			t.Fatalf("retention deleted %d records in one block, past MaxRetentionDeletes", d)
		}
	}
	if n := chains[1].recordKeys(); n != 0 {
		t.Fatalf("%d record keys left under rules 4 after retention deleted every record", n)
	}
}
