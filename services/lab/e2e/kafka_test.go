//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
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
