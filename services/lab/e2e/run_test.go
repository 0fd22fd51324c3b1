//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/byzlog/byzlog/indexer/layout"
)

// runProc is a `byzlog run` the test started.
type runProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// stop sends SIGINT (Ctrl-C) and waits up to a minute for the run to end.
func (r *runProc) stop() bool {
	_ = r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.done:
		return true
	case <-time.After(time.Minute):
		return false
	}
}

// runCluster starts `byzlog run` on dir with ports from base and waits for
// its banner. When the test ends it is stopped with SIGINT and, whatever
// became of it, every process with a PID file under dir is stopped too.
func runCluster(t *testing.T, dir string, base int) *runProc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir(t), "byzlog"), "run", "--dir", dir,
		"--base-port", strconv.Itoa(base), "--nats-port", strconv.Itoa(base+850), "--gateway-port", strconv.Itoa(base+900),
		"--indexer-port", strconv.Itoa(base+860), "--kafka-port", strconv.Itoa(base+870))
	r := &runProc{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		if !r.stop() {
			_ = cmd.Process.Kill()
			<-r.done
		}
		// A safety net: stop by PID file whatever is left.
		_ = exec.Command(filepath.Join(binDir(t), "byzlog"), "localnet", "down", "--dir", dir).Run()
	})
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(r.out.String(), "byzlog is running") {
		select {
		case <-r.done:
			t.Fatalf("byzlog run exited before it was ready:\n%s", r.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("byzlog run not ready within 3 minutes:\n%s", r.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return r
}

// pidsUnder reads every PID file below dir.
func pidsUnder(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestRunWholeSystem is the quick start's first command: `byzlog run`
// brings up validators, NATS, a gateway and the indexer; records produced
// with `byzlog produce` appear in `nats sub 'byzlog.orders.*'` (as runs,
// by their headers) and `byzlog consume`; a second run on
// the same directory is refused; Ctrl-C stops every process it started;
// running it again resumes the same data.
func TestRunWholeSystem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "cluster")
	base := basePort(t) + 8000
	gw, natsURL := fmt.Sprintf("127.0.0.1:%d", base+900), fmt.Sprintf("nats://127.0.0.1:%d", base+850)
	run := runCluster(t, dir, base)
	out := run.out
	pids := pidsUnder(t, dir)
	if len(pids) != 11 {
		t.Fatalf("%d PID files under %s, want 11 (4 cometbft, 4 byzlog-app, NATS, gateway, indexer):\n%s", len(pids), dir, out.String())
	}

	// A second run on the same directory is a clear error.
	second, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "run", "--dir", dir, "--base-port", strconv.Itoa(base)).CombinedOutput()
	if err == nil || !strings.Contains(string(second), "already running") {
		t.Fatalf("a second byzlog run on %s: %v\n%s", dir, err, second)
	}

	bin := func(name string, stdin string, args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, filepath.Join(binDir(t), name), args...)
		c.Stdin = strings.NewReader(stdin)
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	bin("byzlog", "", "topic", "create", "orders", "--partitions", "3", "--admin-key", filepath.Join(dir, "admin.key"), "--gateway", gw, "--genesis", filepath.Join(dir, "node0", "config", "genesis.json"), "--tls-ca", filepath.Join(dir, "tls", "ca.pem"))
	pw, err := os.ReadFile(filepath.Join(dir, "nats", "consumer.password"))
	if err != nil {
		t.Fatal(err)
	}
	natsAuth := []string{"--server", natsURL, "--user", "consumer", "--password", strings.TrimSpace(string(pw)), "--tlsca", filepath.Join(dir, "tls", "ca.pem")}
	waitStream(ctx, t, natsAuth, "byzlog-orders")
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	sub := exec.CommandContext(subCtx, filepath.Join(binDir(t), "nats"), append([]string{"sub", "byzlog.orders.*", "--headers-only"}, natsAuth...)...)
	subOut, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // subscribed before the records commit
	bin("byzlog", "one\ntwo\nthree\nfour\nfive\n", "produce", "orders", "--gateway", gw, "--genesis", filepath.Join(dir, "node0", "config", "genesis.json"), "--tls-ca", filepath.Join(dir, "tls", "ca.pem"))
	// The indexer publishes runs of records (--records-per-message): the
	// headers say how many a message carries.
	records, msgs := 0, 0
	var lines []string
	sc := bufio.NewScanner(subOut)
	for records < 5 && sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		lines = append(lines, l)
		if v, ok := strings.CutPrefix(l, layout.HeaderRecords+": "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("nats sub: %q", l)
			}
			records += n
			msgs++
		}
	}
	stopSub()
	_ = sub.Wait()
	if records != 5 {
		t.Fatalf("nats sub 'byzlog.orders.*' saw %d records in runs, want 5:\n%s", records, strings.Join(lines, "\n"))
	}
	t.Logf("the 5 records produced with byzlog produce appeared in nats sub, in %d run messages", msgs)
	consumed := bin("byzlog", "", "consume", "orders", "--count", "5", "--nats", natsURL, "--nats-user", "consumer", "--nats-password-file", filepath.Join(dir, "nats", "consumer.password"), "--nats-tls-ca", filepath.Join(dir, "tls", "ca.pem"), "--timeout", "30s")
	for _, v := range []string{"one", "two", "three", "four", "five"} {
		if !strings.Contains(consumed, " "+v+"\n") {
			t.Fatalf("byzlog consume printed\n%s\nwithout %q", consumed, v)
		}
	}
	checkKafkaFace(ctx, t, dir, fmt.Sprintf("127.0.0.1:%d", base+870), natsURL, bin)
	checkKafkaTransactions(ctx, t, dir, gw, fmt.Sprintf("127.0.0.1:%d", base+870), natsURL, bin)

	// A topic with readers: its reader consumes it with its key; the
	// consumer user and a key it does not list cannot.
	aliceKey := filepath.Join(t.TempDir(), "alice.key")
	alice := strings.TrimSpace(bin("byzlog", "", "keygen", aliceKey))
	bobKey := filepath.Join(t.TempDir(), "bob.key")
	bin("byzlog", "", "keygen", bobKey)
	bin("byzlog", "", "topic", "create", "payroll", "--partitions", "1", "--reader", alice, "--admin-key", filepath.Join(dir, "admin.key"), "--gateway", gw, "--genesis", filepath.Join(dir, "node0", "config", "genesis.json"), "--tls-ca", filepath.Join(dir, "tls", "ca.pem"))
	waitStream(ctx, t, natsAuth, "byzlog-payroll")
	bin("byzlog", "salary-1\nsalary-2\n", "produce", "payroll", "--gateway", gw, "--genesis", filepath.Join(dir, "node0", "config", "genesis.json"), "--tls-ca", filepath.Join(dir, "tls", "ca.pem"))
	consume := func(extra ...string) (string, error) {
		args := append([]string{"consume", "payroll", "--count", "2", "--timeout", "10s", "--nats", natsURL, "--tls-ca", filepath.Join(dir, "tls", "ca.pem"),
			"--nats-tls-ca", filepath.Join(dir, "tls", "ca.pem"), "--nats-password-file", filepath.Join(dir, "nats", "consumer.password")}, extra...)
		b, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), args...).CombinedOutput()
		return string(b), err
	}
	if out, err := consume("--nats-key-file", aliceKey); err != nil || !strings.Contains(out, "salary-2") || !strings.Contains(out, "consumed 2 records") {
		t.Fatalf("payroll's reader consumes it: %v\n%s", err, out)
	}
	if out, err := consume(); err == nil || strings.Contains(out, "salary-") || !strings.Contains(out, "Permissions Violation") {
		t.Fatalf("the consumer user reads payroll, which lists a reader: %v\n%s", err, out)
	} else {
		t.Logf("the consumer user is refused payroll: %s", firstLine(errors.New(strings.TrimSpace(out))))
	}
	if out, err := consume("--nats-key-file", bobKey); err == nil || strings.Contains(out, "salary-") || !strings.Contains(out, "Authorization Violation") {
		t.Fatalf("a key payroll does not list reads it: %v\n%s", err, out)
	} else {
		t.Logf("a key payroll does not list is refused: %s", firstLine(errors.New(strings.TrimSpace(out))))
	}

	// byzlog-lab bench loads the running cluster and reports on every process.
	result := filepath.Join(t.TempDir(), "bench.json")
	bin("byzlog-lab", "", "bench", "--dir", dir, "--gateway", gw, "--nats", natsURL, "--warmup", "1s", "--duration", "2s",
		"--producers", "2", "--out", result)
	var res struct {
		Committed int64 `json:"committed_records"`
		Processes []struct {
			Name    string `json:"name"`
			PeakRSS int64  `json:"peak_rss_bytes"`
		} `json:"processes"`
	}
	if b, err := os.ReadFile(result); err != nil || json.Unmarshal(b, &res) != nil || res.Committed == 0 || len(res.Processes) != 11 {
		t.Fatalf("byzlog-lab bench result: %v %+v", err, res)
	}
	t.Logf("byzlog-lab bench: %d records committed in 2 s, %d processes measured", res.Committed, len(res.Processes))

	// Ctrl-C: every process it started is gone.
	if !run.stop() {
		t.Fatalf("byzlog run did not stop within a minute of SIGINT:\n%s", out.String())
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(b, []byte(dir)) || bytes.Contains(b, []byte(gw)) {
				t.Errorf("pid %d (%s) still runs after Ctrl-C", pid, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
			}
		}
	}
	if !strings.Contains(out.String(), "data stays in "+dir) {
		t.Errorf("byzlog run did not say where the data stayed:\n%s", out.String())
	}

	// Again on the same directory: the same chain, with its records.
	runCluster(t, dir, base)
	list := bin("byzlog", "", "topic", "list", "--gateway", gw, "--tls-ca", filepath.Join(dir, "tls", "ca.pem"))
	found := false
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "orders" {
			found = true
			// 19, the transactions' 12 (3 of them aborted) and their 9
			// markers: offsets the log holds, as Kafka's end offset counts.
			if f[2] != "40" {
				t.Fatalf("after resuming, orders holds %s records, want 40:\n%s", f[2], list)
			}
		}
	}
	if !found {
		t.Fatalf("after resuming, topic list lacks orders:\n%s", list)
	}
	t.Log("run again on the same directory: the chain resumed with its 40 offsets of orders")
}

// waitStream waits until stream exists, seen with the nats CLI as auth's
// user: the indexer makes a topic's stream once NATS's permissions for it
// are in place.
func waitStream(ctx context.Context, t *testing.T, auth []string, stream string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "nats"), append([]string{"stream", "info", stream, "--json"}, auth...)...).CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s did not appear within a minute: %v\n%s", stream, err, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for a process writing and a test reading.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
