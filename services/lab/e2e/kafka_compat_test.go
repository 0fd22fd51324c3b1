//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"crypto/rand"
	"encoding/json"

	"github.com/byzlog/byzlog/gateway/kafka/sasl"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

// franzGoVersion is the franz-go whose kgo test suite runs against the
// Kafka face: the version gateway/go.mod requires.
const franzGoVersion = "v1.22.3"

// kgoSubset are the kgo suite's broker tests that make test runs: each
// passes against the Kafka face within seconds, but TestTxnEtl (Kafka
// transactions: a transactional consume-transform-produce with three
// group balancers, about 80 s beside the others). `make kafka-compat` runs
// the whole suite (BYZLOG_KGO_RUN=.) and writes which pass.
const kgoSubset = "^(TestTxnEtl|TestPing|TestGroupSimple|TestConsumeTopicRetrieval|TestUnknownGroupOffsetFetchPinned|TestIssue325|TestIssue337|TestIssue434|TestIssue648|TestIssue1034|TestIssueProduceSyncManualPartitionNegativeDoesNotPanic|TestPooling|TestConsumeRegex|TestOptValuesCoversEveryOption|TestConsumeMaxDecompressBatchBytes|TestSCRAMAuth|TestSCRAMAuthBadCredentials)$"

// TestKafkaCompat runs franz-go's own client test suite (pkg/kgo, built
// from the module cache) against the Kafka face of a gateway on a fresh
// 4-validator network, as KGO_SEEDS. The suite's clients do not
// authenticate and create their own topics, so the face serves plaintext
// with the genesis admin key as the anonymous, admin principal.
func TestKafkaCompat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 9500)
	base := basePort(t) + 9500
	gw, kafka := fmt.Sprintf("127.0.0.1:%d", base+900), fmt.Sprintf("127.0.0.1:%d", base+920)
	// Every client of the suite comes from 127.0.0.1, and its tests run
	// side by side (TestTxnEtl's and TestGroupETL's groups together open
	// over 256): the per-address bound is a production one.
	startGateway(t, n, gw, "--insecure", "--kafka-listen", kafka, "--kafka-insecure",
		"--kafka-anonymous-key", filepath.Join(n.Config().Dir, "admin.key"), "--kafka-anonymous-admin",
		"--kafka-max-conns", "4096", "--kafka-max-conns-per-ip", "4096")
	// A second gateway whose face authenticates with SCRAM-SHA-512, for
	// the suite's SCRAM tests (KGO_TEST_SCRAM_SEEDS).
	scram := fmt.Sprintf("127.0.0.1:%d", base+960)
	startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", base+940), "--insecure", "--kafka-listen", scram, "--kafka-insecure",
		"--kafka-users", scramUsers(t, "kgo", "kgo-password"))
	waitPort(t, kafka)
	waitPort(t, scram)
	suite, pkgDir := os.Getenv("BYZLOG_KGO_SUITE"), os.Getenv("BYZLOG_KGO_DIR") // a suite built by hand, to debug
	if suite == "" {
		suite, pkgDir = buildKgoSuite(ctx, t)
	}

	run := os.Getenv("BYZLOG_KGO_RUN")
	if run == "" {
		run = kgoSubset
	}
	// TestClient_Produce takes ~30 min (20,000 records through 50 workers
	// sharing 5 KB of buffer: a block a round trip), so the other tests
	// run beside it.
	cmd := exec.CommandContext(ctx, suite, "-test.run", run, "-test.parallel", "8",
		"-test.v", "-test.timeout", "40m")
	logLevel := os.Getenv("BYZLOG_KGO_LOG_LEVEL") // the suite's client logs, to debug one test
	if logLevel == "" {
		logLevel = "none"
	}
	cmd.Env = append(os.Environ(), "KGO_SEEDS="+kafka, "KGO_TEST_RECORDS=1000", "KGO_LOG_LEVEL="+logLevel,
		"KGO_TEST_SCRAM_SEEDS="+scram, "KGO_TEST_SCRAM=kgo:kgo-password:512")
	cmd.Dir = pkgDir // some tests read the package's sources
	out, err := cmd.CombinedOutput()
	passed, failed := kgoResults(out)
	t.Logf("kgo suite (-run %s): %d passed, %d failed", run, len(passed), len(failed))
	if path := os.Getenv("BYZLOG_KGO_RESULTS"); path != "" {
		report := fmt.Sprintf("franz-go %s kgo suite against the Kafka face, -run %s\n\npassed (%d):\n%s\n\nfailed (%d):\n%s\n",
			franzGoVersion, run, len(passed), strings.Join(passed, "\n"), len(failed), strings.Join(failed, "\n"))
		if werr := os.WriteFile(path, []byte(report), 0o644); werr != nil {
			t.Error(werr)
		}
		// The suite's whole output, to read why a test failed.
		if werr := os.WriteFile(path+".log", out, 0o644); werr != nil {
			t.Error(werr)
		}
	}
	if run == kgoSubset && (err != nil || len(failed) > 0 || len(passed) == 0) {
		t.Fatalf("kgo subset: %v; failed %v\n%s", err, failed, tail(out, 80))
	}
}

// scramUsers writes a Kafka face users file with one user, name, whose
// batches a fresh key signs, and returns its path.
func scramUsers(t *testing.T, name, password string) string {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, name+".key")
	if _, err := keyfile.Generate(key); err != nil {
		t.Fatal(err)
	}
	e, err := sasl.NewEntry(name, key, false, password, sasl.MinIterations, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(sasl.File{Users: []sasl.Entry{e}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "users.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// buildKgoSuite compiles franz-go's kgo tests from the module cache in a
// module of its own (outside byzlog's workspace), and returns the test
// binary and the package's directory in the module cache.
func buildKgoSuite(ctx context.Context, t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module kgosuite\n\ngo 1.26.0\n\nrequire github.com/twmb/franz-go " + franzGoVersion + "\n",
		"doc.go": "// Package kgosuite pins franz-go so its kgo tests build.\npackage kgosuite\n\nimport _ \"github.com/twmb/franz-go/pkg/kgo\"\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "kgo.test")
	var modDir []byte
	for _, args := range [][]string{{"mod", "tidy"}, {"test", "-c", "-o", bin, "github.com/twmb/franz-go/pkg/kgo"}, {"list", "-m", "-f", "{{.Dir}}", "github.com/twmb/franz-go"}} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		modDir = out
	}
	return bin, filepath.Join(strings.TrimSpace(string(modDir)), "pkg", "kgo")
}

var kgoResult = regexp.MustCompile(`^\s*--- (PASS|FAIL): (\S+)`)

// kgoResults reads the top-level tests' results from go test -v output.
func kgoResults(out []byte) (passed, failed []string) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := kgoResult.FindStringSubmatch(sc.Text())
		if m == nil || strings.Contains(m[2], "/") {
			continue
		}
		if m[1] == "PASS" {
			passed = append(passed, m[2])
		} else {
			failed = append(failed, m[2])
		}
	}
	sort.Strings(passed)
	sort.Strings(failed)
	return passed, failed
}

func waitPort(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tail is the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
