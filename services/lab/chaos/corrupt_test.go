package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCorruptions: each damage does what its name says to a 10,000-byte
// file, and nothing else.
func TestCorruptions(t *testing.T) {
	orig := bytes.Repeat([]byte("0123456789"), 1000)
	old := bytes.Repeat([]byte("o"), 10000)
	for _, c := range corruptions {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := c.apply(path, old); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, err := os.ReadFile(path)
		if c.name == "delete" {
			if !os.IsNotExist(err) {
				t.Errorf("delete: the file is still there (%v)", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		diff := 0
		for i := range min(len(got), len(orig)) {
			if got[i] != orig[i] {
				diff++
			}
		}
		switch c.name {
		case "bit-flip":
			if len(got) != len(orig) || diff != 1 || got[5000]^orig[5000] != 0x10 {
				t.Errorf("bit-flip: %d bytes, %d differ", len(got), diff)
			}
		case "truncate":
			if len(got) != 9000 || diff != 0 {
				t.Errorf("truncate: %d bytes (want 9000), %d differ", len(got), diff)
			}
		case "rollback-4k":
			if len(got) != len(orig) || !bytes.Equal(got[4096:8192], old[4096:8192]) || diff != 4096 {
				t.Errorf("rollback-4k: %d bytes, %d differ, chunk %q...", len(got), diff, got[4096:4106])
			}
		case "zero-4k":
			if len(got) != len(orig) || !bytes.Equal(got[4096:8192], make([]byte, 4096)) {
				t.Errorf("zero-4k: chunk not zeroed")
			}
		}
	}
}

func TestHaltMessage(t *testing.T) {
	home := t.TempDir()
	log := "start\nERROR open store: Corruption: block checksum mismatch in 000012.sst\nexiting\n"
	if err := os.WriteFile(filepath.Join(home, "app.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := haltMessage(home, "000012.sst"); !strings.Contains(got, "app.log names the file") {
		t.Errorf("haltMessage = %q, want it to name the file", got)
	}
	if got := haltMessage(home, "CURRENT"); !strings.Contains(got, "no log names the file; last error app.log: ERROR open store") {
		t.Errorf("haltMessage = %q, want the last error", got)
	}
}
