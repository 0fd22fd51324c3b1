//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// TestCaptureSeesNoRecords is issue 15's capture test: tcpdump records
// all TCP traffic on loopback while `byzlog-lab demo` produces its records
// ("demo-N") and reads them back, and no record value may be in the
// capture. Every hop crosses loopback: producers to the gateway, the
// gateway and the indexer to the nodes' RPC, the indexer and consumers to
// NATS, validators to each other (CometBFT's encrypted p2p); only the
// node-to-app ABCI link does not (a unix socket). The same demo with
// --insecure shows the values, so the test can fail.
func TestCaptureSeesNoRecords(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Fatal("tcpdump is not installed: make deps installs it (apt-get install tcpdump)")
	}
	count := func(insecure bool) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		pcap := filepath.Join(t.TempDir(), "capture.pcap")
		dump := exec.CommandContext(ctx, tcpdump, "-i", "lo", "-n", "-U", "-s", "0", "-w", pcap, "tcp")
		var dumpErr bytes.Buffer
		dump.Stderr = &dumpErr
		if err := dump.Start(); err != nil {
			t.Fatal(err)
		}
		stopDump := func() {
			_ = dump.Process.Signal(syscall.SIGINT)
			_ = dump.Wait()
		}
		t.Cleanup(stopDump)
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(dumpErr.String(), "listening on"); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("tcpdump did not start: %s", dumpErr.String())
			}
		}
		args := []string{"demo", "--records", "500"}
		if insecure {
			args = append(args, "--insecure")
		}
		out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog-lab"), args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS") {
			t.Fatalf("byzlog-lab %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		stopDump()
		b, err := os.ReadFile(pcap)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 10<<10 {
			t.Fatalf("the capture holds %d bytes: tcpdump saw no demo traffic on loopback (%s)", len(b), dumpErr.String())
		}
		n := bytes.Count(b, []byte("demo-"))
		t.Logf("demo insecure=%v: %d KiB captured on loopback, %d record values in it", insecure, len(b)>>10, n)
		return n
	}
	if n := count(false); n != 0 {
		t.Errorf("with TLS the capture holds %d record values in plaintext; want 0", n)
	}
	if n := count(true); n == 0 {
		t.Error("with --insecure the capture holds no record value: the test cannot see plaintext, so it proves nothing")
	}
}

// TestMutualTLS: a gateway with --tls-client-ca serves only clients with
// a certificate of that CA: one without a certificate, one with another
// CA's, and a plaintext one are refused; the network's client produces.
func TestMutualTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 8500)
	gwTLS(t, n) // the network's certificates
	ca := n.TLS().CA()
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", n.Config().BasePort+900), "--tls-client-ca", ca)
	other := tlsconf.Local{Dir: filepath.Join(t.TempDir(), "other")}
	if err := other.Ensure([]string{"127.0.0.1"}, "client"); err != nil {
		t.Fatal(err)
	}
	mine := n.TLS().Party("client")
	foreign := other.Party("client")
	for _, c := range []struct {
		name  string
		files tlsconf.Files
		plain bool
		ok    bool
	}{
		{"the network's client certificate", tlsconf.Files{CA: ca, Cert: mine.Cert, Key: mine.Key}, false, true},
		{"no client certificate", tlsconf.Files{CA: ca}, false, false},
		{"a certificate of another CA", tlsconf.Files{CA: ca, Cert: foreign.Cert, Key: foreign.Key}, false, false},
		{"plaintext", tlsconf.Files{}, true, false},
	} {
		opt := client.WithInsecure()
		if !c.plain {
			cfg, err := c.files.Client()
			if err != nil {
				t.Fatal(err)
			}
			opt = client.WithTLS(cfg)
		}
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		p, err := client.NewProducer(pctx, client.WithTrust(trustOf(t, n)), client.WithGateways(gw.addr), client.WithRequestTimeout(2*time.Second), opt)
		if err == nil {
			_, err = p.ProduceSync(pctx, &client.Record{Topic: "log", Value: []byte(c.name)})
			_ = p.Close(pctx)
		}
		pcancel()
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v; want a receipt", c.name, err)
		case !c.ok && err == nil:
			t.Errorf("%s: produced; want refused", c.name)
		case !c.ok:
			t.Logf("%s: refused: %v", c.name, firstLine(err))
		}
	}
	for _, r := range readPartition(ctx, t, n, 0, "log", 0) {
		if v := string(r.Value); v != "the network's client certificate" {
			t.Errorf("the chain holds %q, which a refused client sent", v)
		}
	}
}

// firstLine is err's first line, at most 300 bytes.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s[:min(len(s), 300)]
}
