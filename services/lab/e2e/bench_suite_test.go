//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/byzlog/byzlog/services/lab/bench"
)

// TestBenchSuiteSmoke runs `byzlog-lab bench suite --smoke --profile`: every
// system of bench.SmokeSystems (byzlog over gRPC and socket, with JSON+zstd,
// through the Kafka face, stock kvstore and noop, JetStream with and without
// fsync) for 3 s on this machine. It
// checks that each produced figures, that the table, chart and profiles
// were written, and that no process of the suite outlived it.
func TestBenchSuiteSmoke(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(binDir(t), "byzlog-lab"), "bench", "suite", "--smoke", "--profile",
		"--base-port", strconv.Itoa(basePort(t)+9000), "--out", out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("byzlog-lab bench suite --smoke: %v\n%s", err, b)
	}
	var s bench.Suite
	raw, err := os.ReadFile(filepath.Join(out, "suite.json"))
	if err != nil || json.Unmarshal(raw, &s) != nil {
		t.Fatalf("suite.json: %v\n%s", err, raw)
	}
	for _, sys := range bench.SmokeSystems() {
		r, ok := s.Find(sys, 100)
		switch {
		case !ok:
			t.Errorf("%s: no row", sys)
		case r.Err != "" || r.Result.Committed == 0 || r.Result.RecordsPerSec <= 0 || r.Result.Receipt.Count == 0:
			t.Errorf("%s: no figures: %q %+v", sys, r.Err, r.Result)
		case len(r.Result.Processes) == 0:
			t.Errorf("%s: no process statistics", sys)
		}
		for _, p := range r.Result.Processes {
			if p.PID == os.Getpid() {
				continue
			}
			if exe, err := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe"); err == nil && strings.Contains(exe, filepath.Base(p.Name)) {
				t.Errorf("%s: %s (pid %d) still runs after the suite", sys, p.Name, p.PID)
			}
		}
	}
	if r, ok := s.Find(bench.SystemNoop, 100); ok && r.TxSize < 1000 {
		t.Errorf("noop ran with %d-byte transactions: want byzlog's mean bundle size", r.TxSize)
	}
	if len(s.Ratios()) < 4 {
		t.Errorf("%d ratios, want the 6 goal and context ratios", len(s.Ratios()))
	}
	table, _ := os.ReadFile(filepath.Join(out, "suite.txt"))
	svg, _ := os.ReadFile(filepath.Join(out, "suite.svg"))
	if !strings.Contains(string(table), "byzlog / kvstore records/s") || !strings.HasPrefix(string(svg), "<svg") {
		t.Errorf("suite.txt or suite.svg missing or empty:\n%s", table)
	}
	for _, sys := range []string{bench.SystemByzlog, bench.SystemByzlogSocket, bench.SystemByzlogJSON} {
		for _, f := range []string{"byzlog-app-node0.cpu.pprof", "byzlog-app-node0.heap.pprof", "gateway0.cpu.pprof", "gateway0.heap.pprof"} {
			p, err := os.ReadFile(filepath.Join(out, "profiles", sys+"-100B", f))
			if err != nil || len(p) < 2 || p[0] != 0x1f || p[1] != 0x8b { // pprof files are gzipped protobuf
				t.Errorf("profile %s/%s: %v (%d bytes)", sys, f, err, len(p))
			}
		}
	}
	t.Logf("\n%s", table)
}
