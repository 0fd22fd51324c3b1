// Package keyfile reads and writes byzlog's ed25519 key files: the 32-byte
// seed in hex on one line, readable only by its owner. It never prints a
// private key.
package keyfile

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Generate writes a new key to path, refusing to overwrite a file.
func Generate(path string) (ed25519.PrivateKey, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("key file %s exists; remove it or choose another path", path)
	}
	if err != nil {
		return nil, fmt.Errorf("write key file: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(seed) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("write key file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write key file %s: %w", path, err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// Read loads the key in path.
func Read(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("key file %s: want %d bytes in hex on one line (as `byzlog keygen` writes)", path, ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}
