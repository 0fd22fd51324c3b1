package powerfs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/byzlog/byzlog/services/lab/powerfs"
)

// mount serves a fresh backing directory until the test ends.
func mount(t *testing.T) (*powerfs.FS, string) {
	t.Helper()
	backing, dir := t.TempDir(), t.TempDir()
	p, err := powerfs.Mount(backing, dir)
	if err != nil {
		t.Fatalf("mount (needs root and /dev/fuse): %v", err)
	}
	t.Cleanup(func() {
		if err := p.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return p, dir
}

func write(t *testing.T, path string, flag int, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPowerLoss: synced data survives a power loss and unsynced data goes,
// for appends, overwrites, truncation, renames and new files.
func TestPowerLoss(t *testing.T) {
	p, dir := mount(t)
	log, moved, fresh, trunc := filepath.Join(dir, "log"), filepath.Join(dir, "moved"), filepath.Join(dir, "fresh"), filepath.Join(dir, "trunc")
	write(t, log, os.O_CREATE|os.O_WRONLY, []byte("synced "), true)
	write(t, log, os.O_WRONLY|os.O_APPEND, []byte("unsynced"), false)
	write(t, moved, os.O_CREATE|os.O_WRONLY, []byte("0123456789"), true)
	f, err := os.OpenFile(moved, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("abcd"), 3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Rename(moved, moved+"2"); err != nil {
		t.Fatal(err)
	}
	write(t, fresh, os.O_CREATE|os.O_WRONLY, []byte("never synced"), false)
	write(t, trunc, os.O_CREATE|os.O_WRONLY, []byte("keep all of this"), true)
	if err := os.Truncate(trunc, 4); err != nil {
		t.Fatal(err)
	}
	write(t, trunc, os.O_WRONLY|os.O_TRUNC, []byte("new"), false)
	if got := read(t, log); got != "synced unsynced" {
		t.Fatalf("before the power loss log = %q", got)
	}
	if n := p.Pending(); n != 4 {
		t.Errorf("pending files = %d, want 4", n)
	}

	n, err := p.PowerLoss()
	if err != nil || n != 4 {
		t.Fatalf("PowerLoss = %d, %v; want 4 files rolled back", n, err)
	}
	for path, want := range map[string]string{log: "synced ", moved + "2": "0123456789", fresh: "", trunc: "keep all of this"} {
		if got := read(t, path); got != want {
			t.Errorf("after the power loss %s = %q, want %q", filepath.Base(path), got, want)
		}
	}
	// Written and synced after the loss: kept through the next.
	write(t, log, os.O_WRONLY|os.O_APPEND, []byte("again"), true)
	if _, err := p.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, log); got != "synced again" {
		t.Errorf("after a second power loss log = %q, want %q", got, "synced again")
	}
}

// TestWritesGoThroughPowerFS: large writes and reads round-trip, and
// every write is seen by powerfs (none passes through to the backing file
// unrecorded, as go-fuse's passthrough would).
func TestWritesGoThroughPowerFS(t *testing.T) {
	p, dir := mount(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	path := filepath.Join(dir, "big")
	write(t, path, os.O_CREATE|os.O_WRONLY, data, false)
	if got := read(t, path); got != string(data) {
		t.Fatalf("read back %d bytes, want the %d written", len(got), len(data))
	}
	if _, err := p.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, path); got != "" {
		t.Errorf("an unsynced 1 MiB file after a power loss holds %d bytes, want none", len(got))
	}
}

// TestOSyncWritesSurvive: a file opened with O_SYNC (as nats-server writes
// a stream's meta.inf under sync_interval: always) is synced by every
// write, so a power loss keeps it.
func TestOSyncWritesSurvive(t *testing.T) {
	p, dir := mount(t)
	meta := filepath.Join(dir, "meta.inf")
	write(t, meta, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_SYNC, []byte(`{"name":"KV_cursor"}`), false)
	write(t, meta+".sum", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, []byte("unsynced"), false)
	if _, err := p.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, meta); got != `{"name":"KV_cursor"}` {
		t.Errorf("O_SYNC file after a power loss = %q, want what was written", got)
	}
	if got := read(t, meta+".sum"); got != "" {
		t.Errorf("unsynced file after a power loss = %q, want it empty", got)
	}
}
