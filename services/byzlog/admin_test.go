package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func TestValidatorKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	b64 := base64.StdEncoding.EncodeToString(key)
	dir := t.TempDir()
	priv := filepath.Join(dir, "priv_validator_key.json")
	show := filepath.Join(dir, "show.json")
	if err := os.WriteFile(priv, []byte(`{"address":"AB","pub_key":{"type":"tendermint/PubKeyEd25519","value":"`+b64+`"},"priv_key":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(show, []byte(`{"type":"tendermint/PubKeyEd25519","value":"`+b64+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{b64, hex.EncodeToString(key), priv, show} {
		got, err := validatorKey(in)
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("validatorKey(%s) = %x, %v; want %x", in, got, err, key)
		}
	}
	for _, in := range []string{"", "AAAA", hex.EncodeToString(key[:31])} {
		if _, err := validatorKey(in); err == nil {
			t.Errorf("validatorKey(%q) = nil error, want one", in)
		}
	}
}
