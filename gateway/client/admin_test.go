package client

import (
	"crypto/ed25519"
	"crypto/sha256"
	"strings"
	"testing"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

func testKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(name))
	return ed25519.NewKeyFromSeed(seed[:])
}

func TestCosign(t *testing.T) {
	req, err := wire.NewSigner(testKey("a"), "chain").AdminUntil(3, 90, &byzlogv1.DeleteTopic{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Cosign(req, testKey("b"), "other"); err == nil || !strings.Contains(err.Error(), `for chain "chain"`) {
		t.Fatalf("cosign for another chain = %v, want a refusal naming the chain", err)
	}
	if err := Cosign(req, testKey("b"), "chain"); err != nil {
		t.Fatal(err)
	}
	if len(req.Cosignatures) != 1 || !wire.Verify(req.Cosignatures[0].AdminKey, req.Body, req.Cosignatures[0].Signature) {
		t.Fatalf("cosignatures = %v, want one that verifies over the body", req.Cosignatures)
	}
	what, err := Describe(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`delete topic "orders"`, "nonce 3", "height 90", ", "} {
		if !strings.Contains(what, want) {
			t.Errorf("Describe = %q, want it to say %q", what, want)
		}
	}
	// A body changed after signing is refused before anyone cosigns it.
	req.Body = append([]byte(nil), req.Body...)
	req.Body[len(req.Body)-1] ^= 1
	if err := Cosign(req, testKey("c"), "chain"); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("cosign a changed body = %v, want a refusal", err)
	}
}
