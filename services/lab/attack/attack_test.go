package attack

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/lab/chaos"
)

const chain = "byzlog-test"

func rng() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

func decodeTx(t *testing.T, raw []byte) *byzlogv1.Tx {
	t.Helper()
	var tx byzlogv1.Tx
	if err := proto.Unmarshal(raw, &tx); err != nil {
		t.Fatalf("a built transaction does not decode: %v", err)
	}
	return &tx
}

// batchBody decodes a signed batch, checking its signature.
func batchBody(t *testing.T, b *byzlogv1.SignedBatch) *byzlogv1.BatchBody {
	t.Helper()
	var body byzlogv1.BatchBody
	if err := proto.Unmarshal(b.Body, &body); err != nil {
		t.Fatalf("batch body does not decode: %v", err)
	}
	return &body
}

func validSig(b *byzlogv1.SignedBatch) bool {
	return len(b.ProducerKey) == ed25519.PublicKeySize && ed25519.Verify(b.ProducerKey, b.Body, b.Signature)
}

func TestCrashBundleIsOneSignedBatchForTheCrashTopic(t *testing.T) {
	if len(CrashTopic) != 65 || !utf8.ValidString(CrashTopic) || !strings.HasPrefix(CrashTopic, "\x01\x01") {
		t.Fatalf("CrashTopic = %q (%d bytes), want \\x01×59 + a×6", CrashTopic, len(CrashTopic))
	}
	raw, err := crashBundle(rng(), chain)
	if err != nil {
		t.Fatal(err)
	}
	bs := decodeTx(t, raw).GetProduceBundle().GetBatches()
	if len(bs) != 1 || !validSig(bs[0]) {
		t.Fatalf("crashBundle = %d batches (signature valid: %v), want one validly signed", len(bs), len(bs) == 1 && validSig(bs[0]))
	}
	if body := batchBody(t, bs[0]); body.Topic != CrashTopic || body.ChainId != chain || body.Sequence != 0 {
		t.Fatalf("crashBundle body = topic %q chain %q seq %d, want the crash topic on %s at 0", body.Topic, body.ChainId, body.Sequence, chain)
	}
}

func TestFuzzCorpusIsVariedAndHoldsTheCrashInput(t *testing.T) {
	txs, err := fuzzTxs(rng(), chain, "junk")
	if err != nil {
		t.Fatal(err)
	}
	var undecodable, envelopes, crash int
	seen := map[string]bool{}
	for _, raw := range txs {
		seen[string(raw)] = true
		var tx byzlogv1.Tx
		if proto.Unmarshal(raw, &tx) != nil {
			undecodable++
			continue
		}
		envelopes++
		for _, b := range tx.GetProduceBundle().GetBatches() {
			var body byzlogv1.BatchBody
			if proto.Unmarshal(b.Body, &body) == nil && body.Topic == CrashTopic && validSig(b) {
				crash++
			}
		}
	}
	if len(txs) < 60 || len(seen) < len(txs)-2 {
		t.Fatalf("fuzzTxs = %d transactions, %d distinct; want 60 or more, nearly all distinct", len(txs), len(seen))
	}
	if undecodable < 5 || envelopes < 20 || crash != 1 {
		t.Fatalf("fuzzTxs: %d undecodable, %d envelopes, %d crash batches; want some of each and the crash input once", undecodable, envelopes, crash)
	}
}

func TestRawTopicBatchCarriesInvalidUTF8(t *testing.T) {
	for _, name := range []string{"\xff\xfe", "ok", strings.Repeat("é", 3) + "\xc3"} {
		b, err := rawTopicBatch(freshKey(rng()), chain, name)
		if err != nil {
			t.Fatalf("rawTopicBatch(%q): %v", name, err)
		}
		if !validSig(b) || !bytes.Contains(b.Body, []byte(name)) {
			t.Fatalf("rawTopicBatch(%q): signature valid %v, name in body %v", name, validSig(b), bytes.Contains(b.Body, []byte(name)))
		}
		var body byzlogv1.BatchBody
		err = proto.Unmarshal(b.Body, &body)
		if utf8.ValidString(name) != (err == nil) {
			t.Fatalf("rawTopicBatch(%q) body decodes with %v; want an error exactly when the name is invalid UTF-8", name, err)
		}
	}
}

func TestFutureBundleIsNeverTheNextSequence(t *testing.T) {
	raw, err := futureBundle(rng(), chain, "junk", 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	bs := decodeTx(t, raw).GetProduceBundle().GetBatches()
	if len(bs) != 64 {
		t.Fatalf("futureBundle = %d batches, want 64", len(bs))
	}
	keys := map[string]bool{}
	for i, b := range bs {
		body := batchBody(t, b)
		if !validSig(b) || body.Sequence < 1 || body.Sequence > 64 || body.Partition >= 16 || body.Topic != "junk" {
			t.Fatalf("batch %d: sig %v, seq %d, partition %d, topic %q; want signed, 1..64 ahead, partition < 16, topic junk", i, validSig(b), body.Sequence, body.Partition, body.Topic)
		}
		keys[string(b.ProducerKey)] = true
	}
	if len(keys) != 64 {
		t.Fatalf("futureBundle used %d keys for 64 batches, want a fresh one each", len(keys))
	}
}

func TestFutureAdminIsFromANonAdminAhead(t *testing.T) {
	raw, err := futureAdmin(rng(), chain)
	if err != nil {
		t.Fatal(err)
	}
	req := decodeTx(t, raw).GetAdmin()
	var body byzlogv1.AdminBody
	if err := proto.Unmarshal(req.GetBody(), &body); err != nil || body.Nonce < 1 || body.Nonce > 64 || body.GetCreateTopic() == nil {
		t.Fatalf("futureAdmin body = %v (%v), want a topic creation at nonce 1..64", &body, err)
	}
}

func TestPaddedOffsetsFitTheBudget(t *testing.T) {
	l := wire.DefaultLimits()
	budget := wire.MaxTxBytes - 1<<10
	n := offsetsFitting(budget, 4096, len("attack-junk"), int(l.MaxCommitOffsets))
	if n < 400 || n > int(l.MaxCommitOffsets) {
		t.Fatalf("offsetsFitting(%d) = %d, want several hundred, at most %d", budget, n, l.MaxCommitOffsets)
	}
	if got := offsetsFitting(1<<30, 4096, 11, 1024); got != 1024 {
		t.Fatalf("offsetsFitting(1 GiB) = %d, want the limit 1024", got)
	}
	raw, err := paddedOffsets(rng(), chain, "attack-junk", n, 4096, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > budget {
		t.Fatalf("paddedOffsets(%d offsets) = %d bytes, over the budget of %d", n, len(raw), budget)
	}
	c := decodeTx(t, raw).GetCommitOffsets()
	var body byzlogv1.CommitOffsetsBody
	if err := proto.Unmarshal(c.GetBody(), &body); err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(c.ConsumerKey, c.Body, c.Signature) || body.Nonce != 7 || len(body.Offsets) != n || len(body.Offsets[n-1].Metadata) != 4096 || body.Offsets[n-1].Partition != uint32(n-1) {
		t.Fatalf("paddedOffsets: nonce %d, %d offsets, want a signed commit at nonce 7 of %d distinct partitions with 4096 bytes of metadata each", body.Nonce, len(body.Offsets), n)
	}
}

func TestHeaderBombIsSmallOnTheWireAndLargeDecoded(t *testing.T) {
	raw, err := headerBombTx(rng(), chain, "junk", 2, 10_000, 64)
	if err != nil {
		t.Fatal(err)
	}
	bs := decodeTx(t, raw).GetProduceBundle().GetBatches()
	if len(bs) != 2 {
		t.Fatalf("headerBombTx = %d batches, want 2", len(bs))
	}
	body := batchBody(t, bs[0])
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	plain, err := dec.DecodeAll(body.Records, nil)
	if err != nil || body.Codec != byzlogv1.Codec_CODEC_ZSTD || uint32(len(plain)) != body.UncompressedSize {
		t.Fatalf("bomb records: codec %v, %v, %d bytes decoded vs %d declared", body.Codec, err, len(plain), body.UncompressedSize)
	}
	var set byzlogv1.RecordSet
	if err := proto.Unmarshal(plain, &set); err != nil || len(set.Records) != 10_000 || len(set.Records[9999].Headers) != 64 {
		t.Fatalf("bomb record set: %v, %d records; want 10,000 with 64 headers each", err, len(set.Records))
	}
	if len(raw) > 64<<10 || len(plain) < 1<<20 {
		t.Fatalf("headerBombTx: %d bytes on the wire, %d decoded; want under 64 KiB inflating past 1 MiB", len(raw), len(plain))
	}
	if ratio := len(plain) / len(body.Records); ratio > wire.MaxCompressionRatio || ratio < 50 {
		t.Fatalf("bomb compression ratio %d, want 50..%d (the chain's limit)", ratio, wire.MaxCompressionRatio)
	}
	if bytes.Equal(bs[0].ProducerKey, bs[1].ProducerKey) || !ed25519.Verify(bs[1].ProducerKey, bs[1].Body, bs[1].Signature) {
		t.Fatal("headerBombTx: the batches share a producer, or the second's signature does not verify")
	}
}

// TestBombShape: a bomb is what the chain's byte bounds let through and
// commit, at the default limits (10,000 headers a record) and at a chain's
// of 64.
func TestBombShape(t *testing.T) {
	for _, maxHeaders := range []uint32{64, 10_000} {
		l := wire.DefaultLimits()
		l.MaxHeaders = maxHeaders
		records, headers := bombShape(l)
		b, err := bombBatch(rng(), chain, "junk", records, headers)
		if err != nil {
			t.Fatal(err)
		}
		body := batchBody(t, b)
		inflated := int64(body.UncompressedSize) + int64(records*headers*core.HeaderHeap)
		one := int64(body.UncompressedSize)/int64(records) + int64(headers*core.HeaderHeap)
		if headers != int(maxHeaders) || records > int(l.MaxBatchRecords) || body.UncompressedSize > l.MaxBatchBytes ||
			inflated > int64(l.MaxTxUncompressedBytes) || inflated < int64(l.MaxTxUncompressedBytes)-3*one {
			t.Fatalf("max_headers %d: %d records of %d headers, %d bytes uncompressed and %d inflated; want max_headers a record, at most %d records, within max_batch_bytes (%d) and within a few records of max_tx_uncompressed_bytes (%d)",
				maxHeaders, records, headers, body.UncompressedSize, inflated, l.MaxBatchRecords, l.MaxBatchBytes, l.MaxTxUncompressedBytes)
		}
	}
}

func TestBadLastSignatureBreaksOnlyTheLast(t *testing.T) {
	valid, err := validBatches(rng(), chain, "junk", 8, 31)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := badLastSignature(rng(), chain, "junk", valid)
	if err != nil {
		t.Fatal(err)
	}
	bs := decodeTx(t, raw).GetProduceBundle().GetBatches()
	if len(bs) != 32 {
		t.Fatalf("badLastSignature = %d batches, want 32", len(bs))
	}
	for i, b := range bs {
		if want := i < 31; validSig(b) != want {
			t.Fatalf("batch %d: signature valid %v, want %v", i, validSig(b), want)
		}
	}
	other, _ := badLastSignature(rand.New(rand.NewPCG(9, 9)), chain, "junk", valid)
	if bytes.Equal(raw, other) {
		t.Fatal("two bad-last-signature bundles are the same bytes: a node's cache would refuse the second unchecked")
	}
}

func TestParseBroadcast(t *testing.T) {
	for _, tc := range []struct {
		body, refusal, err string
	}{
		{`{"jsonrpc":"2.0","id":1,"result":{"code":0,"data":"","log":"","hash":"AB"}}`, "", ""},
		{`{"jsonrpc":"2.0","id":1,"result":{"code":13,"log":"sequence 5 skips ahead"}}`, "code 13: sequence 5 skips ahead", ""},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":"tx already exists in cache"}}`, "", "broadcast_tx_sync: Internal error: tx already exists in cache"},
		{`<html>`, "", "broadcast_tx_sync: the answer is no JSON-RPC response"},
		{`{}`, "", "broadcast_tx_sync: the answer has neither result nor error"},
	} {
		refusal, err := parseBroadcast([]byte(tc.body))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if refusal != tc.refusal || !strings.HasPrefix(got, tc.err) || (tc.err == "") != (err == nil) {
			t.Errorf("parseBroadcast(%s) = %q, %v; want %q, %q", tc.body, refusal, err, tc.refusal, tc.err)
		}
	}
}

func TestTallyAndKinds(t *testing.T) {
	tl := newTally()
	tl.count(10, "", nil)
	tl.count(20, "code 13: sequence 5 skips ahead: the next sequence is 0", nil)
	tl.count(30, "code 13: sequence 7 skips ahead: the next sequence is 0", nil)
	tl.count(40, "", errors.New("dial tcp 127.0.0.1:29657: connection refused"))
	tl.count(0, "code 20: key 3f9a0b11c2d4e5f6 is not an admin", nil)
	tl.count(0, "code 20: key 0123abcdef456789 is not an admin", nil)
	s := tl.stats()
	if s.Sent != 6 || s.Bytes != 100 || s.Accepted != 1 || s.Refused["code #: sequence # skips ahead: the next sequence is #"] != 2 ||
		s.Refused["code #: key # is not an admin"] != 2 || s.Errors["dial tcp #.#.#.#:#: connection refused"] != 1 {
		t.Fatalf("stats = %+v", s)
	}
	if got := s.summary(); !strings.HasPrefix(got, "2× refused: code #") || !strings.Contains(got, "1× error: dial tcp") {
		t.Fatalf("summary = %q, want the refusals first, then the error", got)
	}
}

func TestPacerSpacesBytes(t *testing.T) {
	p := newPacer(1000) // bytes/s
	start := time.Now()
	for i := 0; i < 4; i++ {
		if !p.wait(context.Background(), 100) {
			t.Fatal("wait ended without a cancelled context")
		}
	}
	// The first goes at once, each next 100 ms later.
	if d := time.Since(start); d < 280*time.Millisecond || d > 2*time.Second {
		t.Fatalf("4 waits of 100 bytes at 1000 B/s took %s, want about 300 ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.wait(ctx, 1_000_000)
	if p.wait(ctx, 1) {
		t.Fatal("wait on a cancelled context after a long reservation returned true")
	}
}

func TestEvaluate(t *testing.T) {
	ok := Row{Attack: "x", Rate: 380, Chaos: chaos.Row{Report: chaos.Report{Counts: map[string]int{}}}}
	for _, tc := range []struct {
		name string
		row  func(Row) Row
		base float64
		want []string // substrings, one per miss
	}{
		{"meets the goal", func(r Row) Row { return r }, 400, nil},
		{"exactly 0.8×", func(r Row) Row { r.Rate = 320; return r }, 400, nil},
		{"slow", func(r Row) Row { r.Rate = 100; return r }, 400, []string{"honest throughput 0.25×"}},
		{"crashed", func(r Row) Row { r.Crashed = []string{"node0/byzlog-app", "node0/cometbft"}; return r }, 400, []string{"2 processes died (node0/byzlog-app, node0/cometbft)"}},
		{"an unauthorized send accepted", func(r Row) Row { r.Unauthorized, r.Stats = true, Stats{Sent: 70, Accepted: 1}; return r }, 400, []string{"1 of 70 sends accepted from an identity with no right"}},
		{"unauthorized, all refused", func(r Row) Row { r.Unauthorized, r.Stats = true, Stats{Sent: 70}; return r }, 400, nil},
		{"authorized sends accepted", func(r Row) Row { r.Stats = Stats{Sent: 70, Accepted: 70}; return r }, 400, nil},
		{"anomalies", func(r Row) Row {
			r.Chaos.Report.Counts = map[string]int{chaos.Lost: 3, chaos.Unseen: 1}
			return r
		}, 400, []string{"4 anomalies (lost 3, unseen 1)"}},
		{"no baseline", func(r Row) Row { return r }, 0, []string{"acknowledged nothing"}},
		{"run errors", func(r Row) Row { r.Chaos.Errors = []string{"did not catch up"}; return r }, 400, []string{"did not run whole"}},
		{"everything", func(r Row) Row {
			r.Rate, r.Crashed, r.Chaos.Errors = 0, []string{"gateway0"}, []string{"e"}
			r.Chaos.Report.Counts = map[string]int{chaos.Forged: 1}
			return r
		}, 400, []string{"1 processes died", "1 anomalies (forged 1)", "0.00×", "did not run whole"}},
	} {
		got := Evaluate(tc.row(ok), tc.base, 0.8)
		if len(got) != len(tc.want) {
			t.Errorf("%s: Evaluate = %q, want %d misses like %q", tc.name, got, len(tc.want), tc.want)
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: Evaluate()[%d] = %q, want it to say %q", tc.name, i, got[i], w)
			}
		}
	}
}

func TestCrashCounts(t *testing.T) {
	r := Row{Crashed: []string{"node0/byzlog-app", "node1/byzlog-app", "node1/cometbft", "gateway0"}}
	if r.AppCrashes() != 2 || r.NodeCrashes() != 1 || r.OtherCrashes() != 1 || r.Crashes() != 4 {
		t.Fatalf("crash counts = app %d, node %d, other %d, all %d; want 2, 1, 1, 4", r.AppCrashes(), r.NodeCrashes(), r.OtherCrashes(), r.Crashes())
	}
}

func TestWriteTable(t *testing.T) {
	base := Row{Attack: "none", Rate: 400, Ratio: 1, Chaos: chaos.Row{Report: chaos.Report{Sends: 4000, Acked: 4000, Counts: map[string]int{}}, ReceiptP99: 812 * time.Millisecond}}
	bad := Row{Attack: "crash-input", Rate: 40, Ratio: 0.1, Crashed: []string{"node0/byzlog-app", "node0/cometbft"},
		Chaos: chaos.Row{Report: chaos.Report{Sends: 4000, Acked: 400, Unknown: 3600, Counts: map[string]int{chaos.Lost: 2}}},
		Stats: Stats{Sent: 9, Bytes: 2048, Refused: map[string]int{"code #: topic name": 4}, Errors: map[string]int{"connection refused": 5}}}
	bad.Misses = Evaluate(bad, base.Rate, 0.8)
	var b bytes.Buffer
	if err := WriteTable(&b, []Row{base, bad}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	for _, want := range []string{"app crashes", "node crashes", "honest rec/s", "ratio", "p99 receipt", "lost", "goal"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header %q lacks %q", lines[0], want)
		}
	}
	if f := strings.Fields(lines[1]); f[0] != "none" || f[len(f)-1] != "ok" || !strings.Contains(lines[1], "812ms") {
		t.Errorf("baseline line = %q, want none … 812ms … ok", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "crash-input" || f[1] != "1" || f[2] != "1" || f[len(f)-1] != "MISS" || !strings.Contains(lines[2], "0.10") {
		t.Errorf("attack line = %q, want crash-input 1 1 … 0.10 … MISS", lines[2])
	}
	for _, want := range []string{"crash-input: the attacker sent 9 (2.0 KiB), 0 accepted; 5× error: connection refused; 4× refused: code #: topic name",
		"crash-input missed its goal:", "2 processes died", "lost: 2 of"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if got := Missed([]Row{base, bad}); len(got) != 1 || got[0] != "crash-input" {
		t.Errorf("Missed = %v, want [crash-input]", got)
	}
}

func TestLookup(t *testing.T) {
	all, err := Lookup([]string{"all"})
	if err != nil || len(all) != len(Attacks) || len(Attacks) != 13 {
		t.Fatalf("Lookup(all) = %d attacks, %v; want the 13", len(all), err)
	}
	if _, err := Lookup([]string{"nuke"}); err == nil || !strings.Contains(err.Error(), "crash-input") {
		t.Fatalf("Lookup(nuke) = %v, want an error listing the attacks", err)
	}
}
