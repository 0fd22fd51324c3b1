package core_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// key derives a fixed ed25519 key from a name, so tests are reproducible.
func key(name string) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	copy(seed, name)
	return ed25519.NewKeyFromSeed(seed)
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func signedBatch(t testing.TB, k ed25519.PrivateKey, topic string, seq uint64) *byzlogv1.SignedBatch {
	body := marshal(t, &byzlogv1.BatchBody{Topic: topic, Sequence: seq, Records: []byte("r")})
	return &byzlogv1.SignedBatch{Body: body, ProducerKey: k.Public().(ed25519.PublicKey), Signature: ed25519.Sign(k, body)}
}

func bundleTx(t testing.TB, batches ...*byzlogv1.SignedBatch) []byte {
	return marshal(t, &byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{Batches: batches}}})
}

func TestValidateTx(t *testing.T) {
	alice, admin := key("alice"), key("admin")
	good := signedBatch(t, alice, "orders", 0)
	tampered := signedBatch(t, alice, "orders", 0)
	tampered.Body = append([]byte(nil), tampered.Body...)
	tampered.Body[len(tampered.Body)-1] ^= 1
	shortKey := signedBatch(t, alice, "orders", 0)
	shortKey.ProducerKey = shortKey.ProducerKey[:31]
	wrongKey := signedBatch(t, alice, "orders", 0)
	wrongKey.ProducerKey = admin.Public().(ed25519.PublicKey)
	topicBody := marshal(t, &byzlogv1.CreateTopicBody{Name: "orders", Config: &byzlogv1.TopicConfig{Partitions: 3}})
	createTopic := marshal(t, &byzlogv1.Tx{Kind: &byzlogv1.Tx_CreateTopic{CreateTopic: &byzlogv1.CreateTopic{
		Body: topicBody, AdminKey: admin.Public().(ed25519.PublicKey), Signature: ed25519.Sign(admin, topicBody)}}})
	offsetsBody := marshal(t, &byzlogv1.CommitOffsetsBody{Group: "g", Offsets: []*byzlogv1.PartitionOffset{{Topic: "orders", Offset: 7}}})
	commitOffsets := marshal(t, &byzlogv1.Tx{Kind: &byzlogv1.Tx_CommitOffsets{CommitOffsets: &byzlogv1.CommitOffsets{
		Body: offsetsBody, ConsumerKey: alice.Public().(ed25519.PublicKey), Signature: ed25519.Sign(alice, offsetsBody)}}})
	emptyBody := &byzlogv1.SignedBatch{ProducerKey: alice.Public().(ed25519.PublicKey), Signature: ed25519.Sign(alice, nil)}

	tests := []struct {
		name    string
		tx      []byte
		want    core.Code
		logHint string
	}{
		{"produce bundle", bundleTx(t, good, signedBatch(t, admin, "other", 4)), core.CodeOK, ""},
		{"create topic", createTopic, core.CodeOK, ""},
		{"commit offsets", commitOffsets, core.CodeOK, ""},
		{"not protobuf", []byte{0xff, 0xff, 0xff}, core.CodeMalformedTx, "not a byzlog.v1.Tx"},
		{"empty envelope", nil, core.CodeUnknownTxKind, "no kind"},
		{"empty bundle", bundleTx(t), core.CodeEmptyBundle, "no batch"},
		{"tampered body", bundleTx(t, good, tampered), core.CodeBadSignature, "batch 1"},
		{"short key", bundleTx(t, shortKey), core.CodeBadPublicKey, "31 bytes"},
		{"someone else's key", bundleTx(t, wrongKey), core.CodeBadSignature, "does not verify"},
		{"empty body", bundleTx(t, emptyBody), core.CodeEmptyBody, "body is empty"},
		{"too large", make([]byte, core.MaxTxBytes+1), core.CodeTxTooLarge, "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := core.ValidateTx(tt.tx)
			if got.Code != tt.want {
				t.Fatalf("ValidateTx(%s) = %s (%q), want %s", tt.name, got.Code, got.Log, tt.want)
			}
			if !strings.Contains(got.Log, tt.logHint) {
				t.Errorf("ValidateTx(%s).Log = %q, want it to mention %q", tt.name, got.Log, tt.logHint)
			}
		})
	}
}

// chain applies blocks of the given transactions from genesis and returns
// the app hash after each.
func chain(t testing.TB, blocks [][][]byte) [][]byte {
	t.Helper()
	var st core.State
	var hashes [][]byte
	for i, txs := range blocks {
		out, err := core.Apply(st, core.Block{Height: int64(i + 1), Txs: txs})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Results) != len(txs) {
			t.Fatalf("block %d: %d results for %d txs", i+1, len(out.Results), len(txs))
		}
		st = out.State
		hashes = append(hashes, st.AppHash)
	}
	return hashes
}

func testBlocks(t testing.TB) [][][]byte {
	alice, bob := key("alice"), key("bob")
	return [][][]byte{
		nil,
		{bundleTx(t, signedBatch(t, alice, "orders", 0))},
		{bundleTx(t, signedBatch(t, alice, "orders", 1)), bundleTx(t, signedBatch(t, bob, "orders", 0))},
		{[]byte("not a tx")},
		nil,
	}
}

func TestApplyIsDeterministic(t *testing.T) {
	a, b := chain(t, testBlocks(t)), chain(t, testBlocks(t))
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("height %d: app hash %X, then %X from the same blocks", i+1, a[i], b[i])
		}
	}
	seen := map[string]int{}
	for i, h := range a {
		if j, dup := seen[string(h)]; dup {
			t.Errorf("heights %d and %d have the same app hash %X: the height is not chained", j+1, i+1, h)
		}
		seen[string(h)] = i
	}
}

func TestApplyHashDependsOnContentAndOrder(t *testing.T) {
	base := testBlocks(t)
	swapped := testBlocks(t)
	swapped[2][0], swapped[2][1] = swapped[2][1], swapped[2][0]
	dropped := testBlocks(t)
	dropped[1] = nil
	hb, hs, hd := chain(t, base), chain(t, swapped), chain(t, dropped)
	if bytes.Equal(hb[2], hs[2]) {
		t.Errorf("swapping two txs of block 3 left the app hash at %X", hb[2])
	}
	if bytes.Equal(hb[1], hd[1]) || bytes.Equal(hb[4], hd[4]) {
		t.Errorf("dropping block 2's tx left app hashes unchanged (h2 %X, h5 %X)", hb[1], hb[4])
	}
}

// TestAppHashGolden pins the app hash function: a change here changes what
// every validator computes, so it must be deliberate (go test -update).
func TestAppHashGolden(t *testing.T) {
	var b strings.Builder
	for _, h := range chain(t, testBlocks(t)) {
		b.WriteString(hex.EncodeToString(h))
		b.WriteString("\n")
	}
	path := filepath.Join("testdata", "apphash.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (create it with go test -update): %v", err)
	}
	if b.String() != string(want) {
		t.Errorf("app hashes =\n%s\nwant (from %s)\n%s", b.String(), path, want)
	}
}

func TestApplyRejectsHeightsOutOfSequence(t *testing.T) {
	st := core.State{Height: 5, AppHash: []byte{1}}
	for _, h := range []int64{5, 7, 1} {
		if _, err := core.Apply(st, core.Block{Height: h}); err == nil {
			t.Errorf("Apply(committed 5, block %d) = nil error, want an error", h)
		}
	}
	if _, err := core.Apply(core.State{}, core.Block{Height: 0}); err == nil {
		t.Error("Apply(genesis, block 0) = nil error, want an error")
	}
	if _, err := core.Apply(st, core.Block{Height: 6}); err != nil {
		t.Errorf("Apply(committed 5, block 6) = %v, want nil", err)
	}
}

func FuzzValidateTx(f *testing.F) {
	alice := key("alice")
	f.Add(bundleTx(f, signedBatch(f, alice, "orders", 0)))
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, tx []byte) {
		r := core.ValidateTx(tx)
		if r.OK() != (r.Log == "") {
			t.Fatalf("ValidateTx = %s with log %q: a rejection must say why, an acceptance must not", r.Code, r.Log)
		}
		if again := core.ValidateTx(tx); again != r {
			t.Fatalf("ValidateTx is not deterministic: %v then %v", r, again)
		}
	})
}
