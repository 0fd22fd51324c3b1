//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// proc is a process a test started; it is stopped when the test ends.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProc runs bin/NAME with args, logging to a file in the test's
// temporary directory, and waits until addr accepts connections.
func startProc(t *testing.T, name, addr string, args ...string) *proc {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir(t), name), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logf.Name(), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() { p.stop(syscall.SIGTERM) })
	deadline := time.Now().Add(90 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("%s exited before listening on %s:\n%s", name, addr, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s within 90 s", name, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop signals the process and waits; SIGKILL after 10 s.
func (p *proc) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startNATS runs bin/nats-server with JetStream on port, data in dir.
func startNATS(t *testing.T, port int, dir string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	startProc(t, "nats-server", addr, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", dir)
	return "nats://" + addr
}

// startIndexer runs bin/byzlog-indexer with cursor id against every node
// of n, publishing to natsURL; httpPort serves its metrics.
func startIndexer(t *testing.T, n *localnet.Net, natsURL, id string, httpPort int) *proc {
	t.Helper()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	return startProc(t, "byzlog-indexer", httpAddr, append([]string{"--genesis", filepath.Join(n.Config().Dir, "node0", "config", "genesis.json"),
		"--nats", natsURL, "--id", id, "--http-listen", httpAddr, "--log-format", "json"}, nodeFlags(n, rpcAddrs(n, 0))...)...)
}

// createTopicVia creates topic through the gateway at gw, signed with the
// localnet's genesis admin key.
func createTopicVia(ctx context.Context, t *testing.T, n *localnet.Net, gw, topic string, partitions uint32) {
	t.Helper()
	key, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	adm, err := client.NewAdmin(gw, key, trustOf(t, n), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, topic, &byzlogv1.TopicConfig{Partitions: partitions}); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// streamRecords is how many records topic's stream reaches (0 before it
// exists): per partition, the offset after the last record it holds. A
// message carries one record or a run of them (--records-per-message).
func streamRecords(ctx context.Context, js jetstream.JetStream, topic string) uint64 {
	st, err := js.Stream(ctx, layout.StreamName(topic))
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(layout.TopicSubjects(topic)))
	if err != nil {
		return 0
	}
	n := uint64(0)
	for subject := range info.State.Subjects {
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			continue
		}
		if rs, err := layout.Records(m.Subject, m.Header, m.Data); err == nil {
			n += rs[len(rs)-1].Offset + 1
		}
	}
	return n
}

// subjectMsgs is how many messages topic's stream holds on partition p's
// subject.
func subjectMsgs(ctx context.Context, t *testing.T, js jetstream.JetStream, topic string, p uint32) uint64 {
	t.Helper()
	st, err := js.Stream(ctx, layout.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(layout.Subject(topic, p)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[layout.Subject(topic, p)]
}

// metric reads one Prometheus value from a /metrics page.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	out, err := exec.Command("curl", "-s", "http://"+addr+"/metrics").Output()
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", addr, err)
	}
	var total float64
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			total += f
		}
	}
	return total
}

// TestIndexerExactlyOnce produces 10,000 records through a gateway while
// the indexer is killed with SIGKILL and restarted twice and a second
// indexer joins; every acknowledged record must reach JetStream exactly
// once, at its receipt's offset, in offset order, with the right headers,
// and the stock nats CLI must read the same.
func TestIndexerExactlyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 6000)
	base := n.Config().BasePort
	natsURL := startNATS(t, base+850, t.TempDir())
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", base+900))
	const topic, partitions = "ix.events", 4
	createTopicVia(ctx, t, n, gw.addr, topic, partitions)
	ixA := startIndexer(t, n, natsURL, "a", base+860)

	const producers, perProducer = 4, 2500
	type sent struct {
		value string
		key   []byte
		prod  string // hex, as the Byzlog-Producer header has it
		fut   *client.Future
	}
	var mu sync.Mutex
	var all []sent
	var wg sync.WaitGroup
	for i := 0; i < producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := client.NewProducer(ctx, client.WithTrust(trustOf(t, n)), client.WithGateways(gw.addr), tlsOpt(t, n))
			if err != nil {
				t.Error(err)
				return
			}
			for j := 0; j < perProducer; j++ {
				k := []byte(fmt.Sprintf("k%d", j%16))
				v := fmt.Sprintf("p%d-%d", i, j)
				f := p.Produce(ctx, &client.Record{Topic: topic, Key: k, Value: []byte(v)})
				mu.Lock()
				all = append(all, sent{v, k, hex.EncodeToString(p.PublicKey()), f})
				mu.Unlock()
				if j%100 == 99 {
					time.Sleep(250 * time.Millisecond) // about 6 s of producing
				}
			}
			cctx, ccancel := context.WithTimeout(ctx, 3*time.Minute)
			defer ccancel()
			if err := p.Close(cctx); err != nil {
				t.Errorf("producer %d close: %v", i, err)
			}
		}()
	}
	// The faults, at random points while producing (about 6 s): kill -9
	// and restart, a second indexer beside it, kill -9 again.
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	pause := func(lo, hi time.Duration) time.Duration {
		d := lo + time.Duration(rng.Int64N(int64(hi-lo)))
		time.Sleep(d)
		return d
	}
	t.Logf("fault schedule seed %d", seed)
	d1 := pause(300*time.Millisecond, 2500*time.Millisecond)
	ixA.stop(syscall.SIGKILL)
	d2 := pause(200*time.Millisecond, 1500*time.Millisecond)
	ixA = startIndexer(t, n, natsURL, "a", base+860)
	ixB := startIndexer(t, n, natsURL, "b", base+861)
	d3 := pause(300*time.Millisecond, 2000*time.Millisecond)
	ixA.stop(syscall.SIGKILL)
	d4 := pause(100*time.Millisecond, 1000*time.Millisecond)
	ixA = startIndexer(t, n, natsURL, "a", base+860)
	t.Logf("indexer a: SIGKILL after %s, restarted %s later with indexer b beside it, SIGKILL %s later, restarted %s later",
		d1.Round(time.Millisecond), d2.Round(time.Millisecond), d3.Round(time.Millisecond), d4.Round(time.Millisecond))
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	type where struct {
		partition uint32
		offset    uint64
	}
	want := map[string]where{}
	perPartition := make([]uint64, partitions)
	byValue := map[string]sent{}
	for _, s := range all {
		r, err := s.fut.Wait(ctx)
		if err != nil {
			t.Fatalf("record %s: %v", s.value, err)
		}
		want[s.value] = where{r.Partition, r.Offset}
		byValue[s.value] = s
		perPartition[r.Partition]++
	}

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the indexers to catch up, then give a replay time to show
	// itself as a duplicate.
	stream := layout.StreamName(topic)
	count := func() uint64 { return streamRecords(ctx, js, topic) }
	deadline := time.Now().Add(2 * time.Minute)
	for count() < uint64(len(want)) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if got := count(); got != uint64(len(want)) {
		t.Fatalf("stream %s reaches %d records; %d were acknowledged", stream, got, len(want))
	}

	// Per partition: dense offsets in stream order, each at its receipt,
	// with the key and producer it was sent with.
	runs := make([]uint64, partitions)
	for p := uint32(0); p < partitions; p++ {
		cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{layout.Subject(topic, p)}})
		if err != nil {
			t.Fatal(err)
		}
		var next, msgs uint64
		for next < perPartition[p] {
			batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for msg := range batch.Messages() {
				got++
				msgs++
				rs, err := layout.Records(msg.Subject(), msg.Headers(), msg.Data())
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rs {
					s, ok := byValue[string(r.Value)]
					switch {
					case r.Offset != next:
						t.Fatalf("%s/%d: message %d has offset %d", topic, p, next, r.Offset)
					case !ok || want[s.value] != (where{p, r.Offset}):
						t.Fatalf("%s/%d@%d holds %q, acknowledged at %v", topic, p, r.Offset, r.Value, want[string(r.Value)])
					case !bytes.Equal(r.Key, s.key) || hex.EncodeToString(r.ProducerKey) != s.prod:
						t.Fatalf("%s/%d@%d: key %q producer %x, sent with key %q by %s", topic, p, r.Offset, r.Key, r.ProducerKey, s.key, s.prod)
					case r.Height <= 0 || r.TimestampUnixNano <= 0:
						t.Fatalf("%s/%d@%d: height %d timestamp %d", topic, p, r.Offset, r.Height, r.TimestampUnixNano)
					}
					next++
				}
			}
			if got == 0 {
				t.Fatalf("%s/%d: read %d of %d records", topic, p, next, perPartition[p])
			}
		}
		if held := subjectMsgs(ctx, t, js, topic, p); held != msgs {
			t.Fatalf("%s/%d: read its %d records in %d messages, and it holds %d messages: one past them", topic, p, next, msgs, held)
		}
		runs[p] = msgs
	}
	t.Logf("JetStream holds the %d acknowledged records once each, at their receipts' offsets, in order (%d, %d, %d, %d per partition, in %d, %d, %d, %d messages)",
		len(want), perPartition[0], perPartition[1], perPartition[2], perPartition[3], runs[0], runs[1], runs[2], runs[3])

	// The consumer SDK, from the beginning: every record once, each
	// partition in offset order, at its receipt, with its key and producer.
	_, sdkKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := consumer.Connect(natsURL, consumer.WithGateway(gw.addr), consumer.WithGatewayTLS(gwTLS(t, n)), consumer.WithKey(sdkKey), consumer.WithTrust(trustOf(t, n)))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	sub, err := cons.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	nextOffset := make([]uint64, partitions)
	for i := 0; i < len(want); i++ {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := sub.Next(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("consumer SDK: record %d of %d: %v", i, len(want), err)
		}
		s := byValue[string(r.Value)]
		switch {
		case r.Offset != nextOffset[r.Partition]:
			t.Fatalf("consumer SDK: %s/%d gave offset %d, want %d", topic, r.Partition, r.Offset, nextOffset[r.Partition])
		case want[string(r.Value)] != (where{r.Partition, r.Offset}):
			t.Fatalf("consumer SDK: %q at %d@%d, acknowledged at %v", r.Value, r.Partition, r.Offset, want[string(r.Value)])
		case !bytes.Equal(r.Key, s.key) || hex.EncodeToString(r.Producer) != s.prod || r.Timestamp.IsZero():
			t.Fatalf("consumer SDK: %q has key %q producer %x time %v; sent with key %q by %s", r.Value, r.Key, r.Producer, r.Timestamp, s.key, s.prod)
		}
		nextOffset[r.Partition]++
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	if r, err := sub.Next(rctx); err == nil {
		t.Fatalf("consumer SDK: a record past the %d acknowledged: %s/%d@%d %q", len(want), r.Topic, r.Partition, r.Offset, r.Value)
	}
	rcancel()
	sub.Close()
	t.Logf("consumer SDK read the %d records once each, in offset order per partition", len(want))

	// A group reads some records and commits its offsets on the chain
	// through the gateway; the chain then reports them.
	gsub, err := cons.Subscribe(ctx, topic, consumer.WithGroup("audit"), consumer.WithPartitions(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := gsub.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gsub.Commit(ctx); err != nil {
		t.Fatalf("group commit through the gateway: %v", err)
	}
	gsub.Close()
	offs, err := cons.GroupOffsets(ctx, "audit")
	if err != nil {
		t.Fatal(err)
	}
	var got uint64
	for _, o := range offs.Offsets {
		if o.Topic == topic && o.Partition == 0 {
			got = o.Offset
		}
	}
	if got != 50 {
		t.Fatalf("group audit's committed offset of %s/0 is %d, want 50 (after the 50 records read): %+v", topic, got, offs)
	}

	// byzlog consume prints a partition the same way.
	q := uint32(2)
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), "consume", topic, "--partition", "2",
		"--count", strconv.FormatUint(perPartition[q], 10), "--nats", natsURL, "--timeout", "30s").Output()
	if err != nil {
		t.Fatalf("byzlog consume: %v\n%s", err, out)
	}
	cl := strings.Split(strings.TrimSpace(string(out)), "\n")
	if uint64(len(cl)) != perPartition[q] {
		t.Fatalf("byzlog consume printed %d lines, want %d", len(cl), perPartition[q])
	}
	for i, line := range cl {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 || f[0] != "2" || f[1] != strconv.Itoa(i) || want[f[3]] != (where{q, uint64(i)}) || f[2] != string(byValue[f[3]].key) {
			t.Fatalf("byzlog consume line %d: %q", i, line)
		}
	}
	t.Logf("byzlog consume printed %s/2's %d records in order", topic, perPartition[q])

	// byzlog consume --verify proves each record it prints.
	vout, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), append([]string{"consume", topic, "--partition", "3", "--count", "100",
		"--nats", natsURL, "--timeout", "30s", "--verify", "--genesis", filepath.Join(n.Config().Dir, "node0", "config", "genesis.json")},
		nodeFlags(n, rpcAddrs(n, 0))...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("byzlog consume --verify: %v\n%s", err, vout)
	}
	if !strings.Contains(string(vout), "consumed 100 records") {
		t.Fatalf("byzlog consume --verify:\n%s", vout)
	}

	for _, ix := range []struct {
		name string
		addr string
	}{{"a", fmt.Sprintf("127.0.0.1:%d", base+860)}, {"b", fmt.Sprintf("127.0.0.1:%d", base+861)}} {
		if f := metric(t, ix.addr, "byzlog_indexer_verification_failures_total"); f != 0 {
			t.Errorf("indexer %s counted %v verification failures on an honest chain", ix.name, f)
		}
	}
	ixB.stop(syscall.SIGTERM)
}

// trustOf is the clients' root of trust in n: its genesis, so every
// receipt a test counts was verified against the chain.
// gwTLS is how the tests' clients check the gateways startGateway runs:
// against the network's CA.
func gwTLS(t testing.TB, n *localnet.Net) *tls.Config {
	t.Helper()
	c, err := n.ClientTLS(localnet.Services{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tlsOpt is gwTLS as a producer or admin option.
func tlsOpt(t testing.TB, n *localnet.Net) client.Option { return client.WithTLS(gwTLS(t, n)) }

func trustOf(t testing.TB, n *localnet.Net) client.Trust {
	t.Helper()
	tr, err := client.TrustGenesis(n.GenesisPath())
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
