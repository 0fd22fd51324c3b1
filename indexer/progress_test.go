package indexer

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/internal/natstest"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/verify"
)

// TestSavedRoot: the root saved with a progress report reads back only
// under the key that signed it, for its chain; a NATS that changes it is
// caught.
func TestSavedRoot(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Start(t)
	key := ed25519.NewKeyFromSeed(make([]byte, 32))
	cfg := Default()
	cfg.ChainID, cfg.ProgressKey = "c", key
	if _, ok, err := SavedRoot(ctx, nc, "c", cfg.ID, key.Public().(ed25519.PublicKey)); ok || err != nil {
		t.Fatalf("no bucket: ok %v, err %v; want neither", ok, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: layout.CursorBucket})
	if err != nil {
		t.Fatal(err)
	}
	want := verify.Trust{Height: 42, Hash: make([]byte, 32)}
	want.Hash[0] = 7
	if err := saveRoot(ctx, kv, cfg, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := SavedRoot(ctx, nc, "c", cfg.ID, key.Public().(ed25519.PublicKey))
	if err != nil || !ok || got.Height != 42 || got.Hash[0] != 7 {
		t.Fatalf("SavedRoot = %v %v %v, want height 42", got, ok, err)
	}
	other := ed25519.NewKeyFromSeed(append(make([]byte, 31), 1)).Public().(ed25519.PublicKey)
	if _, _, err := SavedRoot(ctx, nc, "c", cfg.ID, other); err == nil || !strings.Contains(err.Error(), "not a root") {
		t.Fatalf("root read under another key: %v, want refused", err)
	}
	// NATS moves the root to another height.
	e, err := kv.Get(ctx, rootKey("c", cfg.ID))
	if err != nil {
		t.Fatal(err)
	}
	var r savedRoot
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		t.Fatal(err)
	}
	r.Height = 43
	b, _ := json.Marshal(r)
	if _, err := kv.Put(ctx, rootKey("c", cfg.ID), b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := SavedRoot(ctx, nc, "c", cfg.ID, key.Public().(ed25519.PublicKey)); err == nil {
		t.Fatal("a root NATS changed was taken")
	}
}
