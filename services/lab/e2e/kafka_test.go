//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// checkKafkaFace runs kcat (librdkafka, from Debian) against the Kafka face
// of a `byzlog run` cluster whose topic orders holds the five records
// "one".."five" written with byzlog's SDK: kcat reads them, writes three
// records with each codec, and reads all 17 back in per-partition order;
// byzlog consume reads the 17 through NATS.
func checkKafkaFace(ctx context.Context, t *testing.T, dir, broker, natsURL string, bin func(name, stdin string, args ...string) string) {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatalf("kcat is not installed (make deps installs it): %v", err)
	}
	pw, err := os.ReadFile(filepath.Join(dir, "kafka", "byzlog.password"))
	if err != nil {
		t.Fatal(err)
	}
	auth := []string{"-b", broker, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=byzlog",
		"-X", "sasl.password=" + strings.TrimSpace(string(pw)), "-X", "ssl.ca.location=" + filepath.Join(dir, "tls", "ca.pem")}
	kcat := func(stdin string, args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, "kcat", append(args, auth...)...)
		c.Stdin = strings.NewReader(stdin)
		out, err := c.Output()
		if err != nil {
			t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	read := func() []string {
		t.Helper()
		out := kcat("", "-C", "-t", "orders", "-o", "beginning", "-e", "-q", "-f", "%p %o %s\n")
		return strings.Split(strings.TrimSpace(out), "\n")
	}
	if got := values(t, read()); strings.Join(got, " ") != "five four one three two" {
		t.Fatalf("kcat read %v from orders, want the five records byzlog produce wrote", got)
	}
	want := []string{"five", "four", "one", "three", "two"}
	for _, codec := range []string{"gzip", "snappy", "lz4", "zstd"} {
		var in []string
		for i := range 3 {
			in = append(in, fmt.Sprintf("%s-%d", codec, i))
		}
		want = append(want, in...)
		kcat(strings.Join(in, "\n")+"\n", "-P", "-t", "orders", "-z", codec, "-X", "acks=all")
	}
	sort.Strings(want)
	if got := values(t, read()); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("kcat read %v, want %v", got, want)
	}
	t.Log("kcat read the SDK's records, wrote 12 with gzip, snappy, lz4 and zstd, and read all 17 back in order")
	out := bin("byzlog", "", "consume", "orders", "--count", "17", "--timeout", "30s", "--nats", natsURL, "--tls-ca", filepath.Join(dir, "tls", "ca.pem"),
		"--nats-tls-ca", filepath.Join(dir, "tls", "ca.pem"), "--nats-password-file", filepath.Join(dir, "nats", "consumer.password"))
	for _, v := range want {
		if !strings.Contains(out, v) {
			t.Fatalf("byzlog consume (through NATS) lacks %q, written through the Kafka face:\n%s", v, out)
		}
	}
	t.Log("byzlog consume read the Kafka face's records through NATS")

	// A kcat group consumer reads the 17, commits; another in the group
	// after it finds nothing left before new records.
	group := func(n int) []string {
		t.Helper()
		out := kcat("", "-G", "kcat-group", "-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=200",
			"-e", "-q", "-c", fmt.Sprint(n), "-f", "%s\n", "orders")
		return strings.Fields(out)
	}
	if got := group(17); len(got) != 17 {
		t.Fatalf("kcat -G read %d records, want 17: %v", len(got), got)
	}
	kcat("after-1\nafter-2\n", "-P", "-t", "orders", "-X", "acks=all")
	if got := group(2); strings.Join(sorted(got), " ") != "after-1 after-2" {
		t.Fatalf("kcat -G after the group committed read %v, want only the 2 new records", got)
	}
	t.Log("kcat -G consumed with a group and resumed from its committed offsets")
}

// checkKafkaTransactions runs a franz-go transactional producer against
// the Kafka face of the cluster checkKafkaFace ran on, whose topic orders
// holds 19 records then: it commits three records, aborts three, commits
// two; then byzlog produce --transactional-id writes four more atomically
// through gateway gw. kcat (librdkafka reads committed data by default)
// and byzlog consume (NATS holds committed data only) read the nine
// committed and none of the aborted, the 19 before them included.
func checkKafkaTransactions(ctx context.Context, t *testing.T, dir, gw, broker, natsURL string, bin func(name, stdin string, args ...string) string) {
	t.Helper()
	pw, err := os.ReadFile(filepath.Join(dir, "kafka", "byzlog.password"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DialTLSConfig(&tls.Config{RootCAs: pool}),
		kgo.SASL(plain.Auth{User: "byzlog", Pass: strings.TrimSpace(string(pw))}.AsMechanism()),
		kgo.TransactionalID("e2e-orders"), kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	txn := func(commit bool, values ...string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if err := cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
				t.Fatalf("transactional produce of %s: %v", v, err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction (commit %v): %v", commit, err)
		}
	}
	txn(true, "txn-c1", "txn-c2", "txn-c3")
	txn(false, "txn-a1", "txn-a2", "txn-a3")
	txn(true, "txn-d1", "txn-d2")
	out := bin("byzlog", "atom-1\natom-2\natom-3\natom-4\n", "produce", "orders", "--transactional-id", "e2e-cli", "--verbose", "--gateway", gw,
		"--genesis", filepath.Join(dir, "node0", "config", "genesis.json"), "--tls-ca", filepath.Join(dir, "tls", "ca.pem"))
	if n := strings.Count(out, "orders/"); n != 4 {
		t.Fatalf("byzlog produce --transactional-id printed %d receipts, want 4:\n%s", n, out)
	}
	committed := []string{"txn-c1", "txn-c2", "txn-c3", "txn-d1", "txn-d2", "atom-1", "atom-2", "atom-3", "atom-4"}
	check := func(who, out string) {
		t.Helper()
		for _, v := range committed {
			if !strings.Contains(out, v) {
				t.Fatalf("%s lacks %s, which a transaction committed:\n%s", who, v, out)
			}
		}
		if strings.Contains(out, "txn-a") {
			t.Fatalf("%s read a record of the aborted transaction:\n%s", who, out)
		}
	}
	c := exec.CommandContext(ctx, "kcat", "-C", "-t", "orders", "-o", "beginning", "-e", "-q", "-f", "%s\n", "-b", broker, "-X", "security.protocol=SASL_SSL",
		"-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=byzlog", "-X", "sasl.password="+strings.TrimSpace(string(pw)), "-X", "ssl.ca.location="+filepath.Join(dir, "tls", "ca.pem"))
	kout, err := c.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, kout)
	}
	if n := len(strings.Fields(string(kout))); n != 28 {
		t.Fatalf("kcat read %d records of orders, want 28 (19 and the 9 committed):\n%s", n, kout)
	}
	check("kcat (read_committed)", string(kout))
	consumed := bin("byzlog", "", "consume", "orders", "--count", "28", "--timeout", "30s", "--nats", natsURL, "--tls-ca", filepath.Join(dir, "tls", "ca.pem"),
		"--nats-tls-ca", filepath.Join(dir, "tls", "ca.pem"), "--nats-password-file", filepath.Join(dir, "nats", "consumer.password"))
	check("byzlog consume (NATS)", consumed)
	t.Log("a franz-go transactional producer committed 3, aborted 3, committed 2, byzlog produce --transactional-id 4; kcat and byzlog consume read the 9 committed and none aborted")
}

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}

// values checks that kcat's "partition offset value" lines count offsets
// from 0 in each partition, and returns the values sorted.
func values(t *testing.T, lines []string) []string {
	t.Helper()
	next := map[string]int{}
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("kcat line %q: want partition offset value", l)
		}
		if f[1] != fmt.Sprint(next[f[0]]) {
			t.Fatalf("partition %s: offset %s where %d was next (lines %q)", f[0], f[1], next[f[0]], lines)
		}
		next[f[0]]++
		out = append(out, f[2])
	}
	sort.Strings(out)
	return out
}
