//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestKafkaProbes runs the librdkafka probes of issue 45 against a gateway's
// Kafka face on a 4-validator network of stock CometBFT, at librdkafka's
// defaults (scripts/kafka-probes): the order probe writes 4,000 records to
// one partition over 3 s, with several requests in flight, and reads them
// back; the
// commit probe commits 1..50 asynchronously and reads 50 back.
// BYZLOG_KAFKA_PROBE_RUNS runs each that many times (make kafka-probes: 10;
// make test: 1).
func TestKafkaProbes(t *testing.T) {
	runs := 1
	if v := os.Getenv("BYZLOG_KAFKA_PROBE_RUNS"); v != "" {
		var err error
		if runs, err = strconv.Atoi(v); err != nil || runs < 1 {
			t.Fatalf("BYZLOG_KAFKA_PROBE_RUNS=%q: want a count of 1 or more", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+3*runs)*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 6500)
	base := basePort(t) + 6500
	gw, kafka := fmt.Sprintf("127.0.0.1:%d", base+900), fmt.Sprintf("127.0.0.1:%d", base+920)
	// The face's key is not the admin key the topics are created with: a
	// key's nonces are one stream, and an admin request signed elsewhere
	// takes a nonce the face counted on (it then refuses one commit and
	// reads the chain again: TestNoncesRereadAfterInFlight).
	faceKey := filepath.Join(t.TempDir(), "face.key")
	if out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "keygen", faceKey).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	g := startGateway(t, n, gw, "--insecure", "--kafka-listen", kafka, "--kafka-insecure", "--kafka-anonymous-key", faceKey)
	waitPort(t, kafka)
	probe := func(out any, script string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "/usr/bin/python3", append([]string{filepath.Join("..", "..", "..", "scripts", "kafka-probes", script)}, args...)...)
		stdout, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("%s %v: %v\n%s%s", script, args, err, stdout, stderr)
		}
		if err := json.Unmarshal(stdout, out); err != nil {
			t.Fatalf("%s printed %q: %v", script, stdout, err)
		}
	}
	const n4k = 4000
	for run := range runs {
		topic := fmt.Sprintf("probe-%d", run)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "topic", "create", topic, "--partitions", "1",
			"--admin-key", n.AdminKeyPath(), "--gateway="+gw, "--genesis="+n.GenesisPath(), "--insecure").CombinedOutput()
		if err != nil {
			t.Fatalf("topic create %s: %v\n%s", topic, err, out)
		}
		var order struct {
			Delivered   int      `json:"delivered"`
			Errors      []string `json:"errors"`
			Undelivered int      `json:"undelivered"`
		}
		start := time.Now()
		probe(&order, "order.py", kafka, topic, "0", strconv.Itoa(n4k), "3")
		took := time.Since(start)
		if order.Delivered != n4k || len(order.Errors) > 0 {
			t.Fatalf("run %d: librdkafka delivered %d of %d, errors %v", run, order.Delivered, n4k, order.Errors)
		}
		var values []string
		for _, r := range readPartition(ctx, t, n, 0, topic, 0) {
			values = append(values, string(r.Value))
		}
		inversions, misplaced := 0, 0
		for i, v := range values {
			if v != strconv.Itoa(i) {
				misplaced++
			}
			if i > 0 {
				a, _ := strconv.Atoi(values[i-1])
				b, _ := strconv.Atoi(v)
				if b < a {
					inversions++
				}
			}
		}
		var commits struct {
			Read      int      `json:"read"`
			Callbacks int      `json:"callbacks"`
			Committed int64    `json:"committed"`
			Fresh     int64    `json:"committed_fresh"`
			Errors    []string `json:"errors"`
		}
		probe(&commits, "commits.py", kafka, topic, "0", "50", "probe-group-"+topic)
		t.Logf("run %d: order probe %d records in %.1f s, read back %d, %d inversions, %d misplaced; commit probe: %d callbacks, committed %d (fresh consumer %d), errors %v",
			run, n4k, took.Seconds(), len(values), inversions, misplaced, commits.Callbacks, commits.Committed, commits.Fresh, commits.Errors)
		if len(values) != n4k || inversions > 0 || misplaced > 0 {
			t.Errorf("run %d: read back %d records with %d inversions and %d misplaced, want %d in order", run, len(values), inversions, misplaced, n4k)
		}
		if commits.Callbacks != 50 || commits.Committed != 50 || commits.Fresh != 50 || len(commits.Errors) > 0 {
			if b, err := os.ReadFile(g.proc.log); err == nil {
				t.Logf("gateway log:\n%s", tail(b, 40))
			}
			t.Errorf("run %d: 50 asynchronous commits: %d callbacks, committed %d (fresh %d), errors %v; want 50, 50, 50, none",
				run, commits.Callbacks, commits.Committed, commits.Fresh, commits.Errors)
		}
	}
}
