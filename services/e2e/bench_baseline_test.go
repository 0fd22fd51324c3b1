//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestBenchJetStreamBaseline runs `byzlog bench --baseline jetstream` for
// 2 s on a 3-server cluster it starts itself, with fsync on every write,
// and checks it measured something and stopped every server.
func TestBenchJetStreamBaseline(t *testing.T) {
	out := filepath.Join(t.TempDir(), "jetstream.json")
	cmd := exec.Command(filepath.Join(binDir(t), "byzlog"), "bench", "--baseline", "jetstream", "--sync-always",
		"--jetstream-port", strconv.Itoa(basePort(t)+9000), "--warmup", "1s", "--duration", "2s", "--producers", "2",
		"--in-flight", "256", "--out", out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("byzlog bench --baseline jetstream: %v\n%s", err, b)
	}
	var res struct {
		Committed int64   `json:"committed_records"`
		Rate      float64 `json:"records_per_sec"`
		Processes []struct {
			PID int `json:"pid"`
		} `json:"processes"`
	}
	raw, err := os.ReadFile(out)
	if err != nil || json.Unmarshal(raw, &res) != nil || res.Committed == 0 || len(res.Processes) != 3 {
		t.Fatalf("result %v %s", err, raw)
	}
	for _, p := range res.Processes {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe"); err == nil && filepath.Base(exe) == "nats-server" {
			t.Errorf("nats-server pid %d still runs after the baseline", p.PID)
		}
	}
	t.Logf("JetStream R3 with sync_interval always: %.0f msgs/s of 100 B (%d in 2 s)", res.Rate, res.Committed)
}

// TestBenchBuiltinBaselines runs `byzlog bench --baseline kvstore` and
// `--baseline noop` for 2 s each: stock cometbft with its built-in apps on
// a 4-validator localnet; each must commit some and stop every node.
func TestBenchBuiltinBaselines(t *testing.T) {
	for _, app := range []string{"kvstore", "noop"} {
		t.Run(app, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), app+".json")
			cmd := exec.Command(filepath.Join(binDir(t), "byzlog"), "bench", "--baseline", app, "--tx-size", "65536",
				"--kvstore-base-port", strconv.Itoa(basePort(t)+9200), "--warmup", "1s", "--duration", "2s", "--producers", "4", "--out", out)
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("byzlog bench --baseline %s: %v\n%s", app, err, b)
			}
			var res struct {
				Committed int64   `json:"committed_records"`
				Rate      float64 `json:"records_per_sec"`
				Processes []struct {
					PID int `json:"pid"`
				} `json:"processes"`
			}
			raw, err := os.ReadFile(out)
			if err != nil || json.Unmarshal(raw, &res) != nil || res.Committed == 0 || len(res.Processes) != 4 {
				t.Fatalf("result %v %s", err, raw)
			}
			for _, p := range res.Processes {
				if exe, err := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe"); err == nil && filepath.Base(exe) == "cometbft" {
					t.Errorf("cometbft pid %d still runs after the baseline", p.PID)
				}
			}
			t.Logf("%s: %.0f records/s of 100 B (%d in 2 s)", app, res.Rate, res.Committed)
		})
	}
}
