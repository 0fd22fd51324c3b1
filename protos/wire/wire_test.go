package wire_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"strings"
	"testing"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"google.golang.org/protobuf/proto"
)

func TestCheckTopicName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string // a substring of the error; "" for valid
	}{
		{"orders", ""},
		{"a.b_c-D9", ""},
		{strings.Repeat("x", wire.MaxTopicName), ""},
		{"", "must be 1 to 249 characters"},
		{strings.Repeat("x", wire.MaxTopicName+1), "must be 1 to 249 characters"},
		{"a/b", `has '/'`},
		{"é", "use only a-z"},
		{".", "is reserved"},
		{"..", "is reserved"},
	} {
		err := wire.CheckTopicName(tc.name)
		if got := errText(err); tc.want == "" && err != nil || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("CheckTopicName(%.20q) = %v; want %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckGroupName(t *testing.T) {
	for _, tc := range []struct {
		group string
		want  string
	}{
		{"billing", ""},
		{"grüppe ✓", ""},
		{strings.Repeat("g", wire.MaxGroupName), ""},
		{"", "must be 1 to 255 bytes of UTF-8"},
		{strings.Repeat("g", wire.MaxGroupName+1), "must be 1 to 255 bytes of UTF-8"},
		{"\xff", "must be 1 to 255 bytes of UTF-8"},
		{"a\x00b", "holds a NUL byte"},
	} {
		err := wire.CheckGroupName(tc.group)
		if got := errText(err); tc.want == "" && err != nil || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("CheckGroupName(%.20q) = %v; want %q", tc.group, err, tc.want)
		}
	}
}

func TestQuoteBoundsLongNames(t *testing.T) {
	if got := wire.Quote(strings.Repeat("n", 1000)); len(got) > 100 || !strings.Contains(got, "(1000 bytes)") {
		t.Errorf("Quote(1000 bytes) = %q; want the first 64 bytes and the length", got)
	}
	if got := wire.Quote("t"); got != `"t"` {
		t.Errorf(`Quote("t") = %s; want "t"`, got)
	}
}

func TestSignedBodiesVerifyAndNonceUse(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	s := wire.NewSigner(key, "chain-a")
	admin, err := s.Admin(7, &byzlogv1.DeleteTopic{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	commit, err := s.CommitOffsets(9, "g", false)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := s.Batch("t", 0, 1, byzlogv1.Codec_CODEC_ZSTD, []*byzlogv1.Record{{Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	if !wire.Verify(batch.ProducerKey, batch.Body, batch.Signature) {
		t.Fatal("Verify rejects a batch Signer signed")
	}
	forged := &byzlogv1.AdminRequest{Body: admin.Body, AdminKey: wire.NewSigner(other, "chain-a").PublicKey(), Signature: admin.Signature}
	adminTx, _ := wire.AdminTx(admin)
	offsetsTx, _ := wire.OffsetsTx(commit)
	forgedTx, _ := wire.AdminTx(forged)
	bundleTx, _ := wire.BundleTx(batch)
	for _, tc := range []struct {
		name  string
		tx    []byte
		ok    bool
		nonce uint64
	}{
		{"admin request", adminTx, true, 7},
		{"offset commit", offsetsTx, true, 9},
		{"admin request under another key", forgedTx, false, 0},
		{"produce bundle", bundleTx, false, 0},
		{"garbage", []byte{0xff, 0x01}, false, 0},
		{"too large", make([]byte, wire.MaxTxBytes+1), false, 0},
	} {
		k, n, ok := wire.NonceUse(tc.tx)
		if ok != tc.ok || n != tc.nonce || ok && !ed25519.PublicKey(k).Equal(s.PublicKey()) {
			t.Errorf("NonceUse(%s) = %x, %d, %v; want ok=%v nonce %d", tc.name, k, n, ok, tc.ok, tc.nonce)
		}
	}
}

func TestCodeNames(t *testing.T) {
	if wire.CodeDuplicate.String() != "duplicate" || wire.Code(10_000).String() != "unknown_code" {
		t.Errorf("names: %s, %s", wire.CodeDuplicate, wire.Code(10_000))
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestZstdPaddedToTheRatio: a zstd batch that compresses better than the
// chain's ratio is padded to exactly what InflateAllowance asks for, and no
// other batch is.
func TestZstdPaddedToTheRatio(t *testing.T) {
	s := wire.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)), "c")
	for _, n := range []int{100, 60 << 10, 1 << 20, 4<<20 - 64} {
		sb, err := s.Batch("t", 0, 0, byzlogv1.Codec_CODEC_ZSTD, []*byzlogv1.Record{{Value: make([]byte, n)}})
		if err != nil {
			t.Fatal(err)
		}
		var body byzlogv1.BatchBody
		if err := proto.Unmarshal(sb.Body, &body); err != nil {
			t.Fatal(err)
		}
		size, got := int(body.UncompressedSize), len(body.Records)
		if size > wire.InflateAllowance(got) {
			t.Errorf("%d zeros: %d bytes of zstd for %d uncompressed, past the chain's ratio", n, got, size)
		}
		if size > 64<<10 && got > (size+wire.MaxCompressionRatio-1)/wire.MaxCompressionRatio+8 {
			t.Errorf("%d zeros: padded to %d bytes, want at most %d", n, got, size/wire.MaxCompressionRatio+9)
		}
	}
}

// The fixed encoding of a bundle reference is what protobuf makes of a Tx
// with only bundle_ref set, and nothing else is taken for one.
func TestBundleRefIsTheTxEncoding(t *testing.T) {
	sum := sha256.Sum256([]byte("a bundle"))
	ref := wire.NewBundleRef(sum)
	want, err := proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_BundleRef{BundleRef: sum[:]}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ref, want) {
		t.Fatalf("NewBundleRef = %x, protobuf encodes %x", ref, want)
	}
	if got, ok := wire.BundleRef(ref); !ok || got != sum {
		t.Fatalf("BundleRef(NewBundleRef(sum)) = %x, %v", got, ok)
	}
	short, _ := proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_BundleRef{BundleRef: sum[:31]}})
	other, _ := proto.Marshal(&byzlogv1.Tx{Kind: &byzlogv1.Tx_ProduceBundle{ProduceBundle: &byzlogv1.ProduceBundle{Batches: []*byzlogv1.SignedBatch{{Body: make([]byte, 28)}}}}})
	for name, tx := range map[string][]byte{"short": short, "longer": append(ref[:len(ref):len(ref)], 0), "bundle": other, "empty": nil} {
		if _, ok := wire.BundleRef(tx); ok {
			t.Errorf("%s (%x) is taken for a bundle reference", name, tx)
		}
	}
}
