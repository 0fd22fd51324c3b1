//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/failpoint"
	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// gatewayProc is a byzlog-gateway process started by a test.
type gatewayProc struct {
	*proc
	addr    string
	metrics string // host:port of /metrics and /healthz
}

// startGateway runs bin/byzlog-gateway on addr against every node of n and
// waits until it serves; it is stopped when the test ends. extra flags are
// passed on to the gateway. It serves TLS with the network's certificate
// (clients check it with gwTLS) unless extra says --insecure.
func startGateway(t *testing.T, n *localnet.Net, addr string, extra ...string) *gatewayProc {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	metrics := net.JoinHostPort(host, strconv.Itoa(p+50))
	args := append([]string{"--listen", addr, "--http-listen", metrics, "--log-format", "json"}, nodeFlags(n, rpcAddrs(n, 0))...)
	if !slices.Contains(extra, "--insecure") {
		gwTLS(t, n) // makes the network's certificates
		f := n.TLS().Party("gateway")
		args = append(args, "--tls-cert", f.Cert, "--tls-key", f.Key)
	}
	args = append(args, extra...)
	return &gatewayProc{proc: startProc(t, "byzlog-gateway", addr, args...), addr: addr, metrics: metrics}
}

// rpcAddrs are the RPC URLs of n's nodes from the first on.
func rpcAddrs(n *localnet.Net, first int) []string {
	var rpcs []string
	for i := first; i < n.Config().Validators; i++ {
		rpcs = append(rpcs, n.Config().RPCAddr(i))
	}
	return rpcs
}

// nodeFlags are the --nodes flag for rpcs, and the CA that checks their
// certificates, for the gateway, the indexer and byzlog consume --verify.
func nodeFlags(n *localnet.Net, rpcs []string) []string {
	return []string{"--nodes", strings.Join(rpcs, ","), "--node-tls-ca", n.TLS().CA()}
}

// nodeLink is how a test's clients reach n's nodes.
func nodeLink(t *testing.T, n *localnet.Net) verify.NodeLink {
	t.Helper()
	l, err := n.NodeLink()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// readPartition reads every record of topic/partition from node i.
func readPartition(ctx context.Context, t *testing.T, n *localnet.Net, i int, topic string, partition uint32) []*byzlogv1.StoredRecord {
	t.Helper()
	c, err := n.Client(i)
	if err != nil {
		t.Fatal(err)
	}
	var out []*byzlogv1.StoredRecord
	for offset := uint64(0); ; {
		req, err := proto.Marshal(&byzlogv1.RecordsRequest{Topic: topic, Partition: partition, Offset: offset})
		if err != nil {
			t.Fatal(err)
		}
		q, err := c.ABCIQuery(ctx, wire.PathRecords, req)
		if err != nil || q.Response.Code != 0 {
			t.Fatalf("node%d records %s/%d@%d: %v %s", i, topic, partition, offset, err, q.Response.Log)
		}
		var resp byzlogv1.RecordsResponse
		if err := proto.Unmarshal(q.Response.Value, &resp); err != nil {
			t.Fatal(err)
		}
		for _, b := range resp.Records {
			var r byzlogv1.StoredRecord
			if err := proto.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, &r)
		}
		if len(resp.Records) == 0 || offset+uint64(len(resp.Records)) >= resp.NextOffset {
			return out
		}
		offset += uint64(len(resp.Records))
	}
}

// TestGatewaysProduce writes 10,000 records from four producers through two
// gateways concurrently, kills one gateway with SIGKILL mid-stream, and
// checks that every acknowledged record is on every validator exactly at
// its receipt's offset, once, in each producer's order.
func TestGatewaysProduce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 3000)
	base := n.Config().BasePort
	gws := []*gatewayProc{
		startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", base+900)),
		startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", base+901)),
	}
	const topic, partitions = "orders", 4
	createTopicVia(ctx, t, n, gws[1].addr, topic, partitions)
	if err := waitHeight(ctx, t, n, []int{0, 1, 2, 3}, maxHeight(ctx, n, []int{0, 1, 2, 3})+1); err != nil {
		t.Fatal(err)
	}

	const producers, perProducer = 4, 2500
	type sent struct {
		producer, seq int
		fut           *client.Future
	}
	results := make([][]sent, producers)
	var wg sync.WaitGroup
	var killOnce sync.Once
	start := time.Now()
	for i := 0; i < producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each producer prefers one gateway and fails over to the other.
			order := []string{gws[i%2].addr, gws[(i+1)%2].addr}
			p, err := client.NewProducer(ctx, client.WithTrust(trustOf(t, n)), client.WithGateways(order...), client.WithRequestTimeout(5*time.Second), tlsOpt(t, n))
			if err != nil {
				t.Error(err)
				return
			}
			for j := 0; j < perProducer; j++ {
				v := fmt.Sprintf("p%d-%d", i, j)
				results[i] = append(results[i], sent{i, j, p.Produce(ctx, &client.Record{Topic: topic, Key: []byte(fmt.Sprintf("p%d-k%d", i, j%8)), Value: []byte(v)})})
				if i == 0 && j == perProducer*2/5 {
					killOnce.Do(func() { gws[0].stop(syscall.SIGKILL); t.Logf("killed gateway %s with SIGKILL", gws[0].addr) })
				}
				if j%500 == 499 {
					time.Sleep(100 * time.Millisecond) // spread the load over several blocks
				}
			}
			cctx, ccancel := context.WithTimeout(ctx, 3*time.Minute)
			defer ccancel()
			if err := p.Close(cctx); err != nil {
				t.Errorf("producer %d close: %v", i, err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if t.Failed() {
		t.FailNow()
	}

	// Every record acknowledged, with a receipt.
	type where struct {
		partition uint32
		offset    uint64
		height    int64
	}
	at := map[string]where{}
	dupOf := map[string]bool{}
	dups := 0
	for i := range results {
		for _, s := range results[i] {
			r, err := s.fut.Wait(ctx)
			if err != nil {
				t.Fatalf("producer %d record %d: %v", s.producer, s.seq, err)
			}
			if r.Duplicate {
				dups++
				dupOf[fmt.Sprintf("p%d-%d", s.producer, s.seq)] = true
			}
			at[fmt.Sprintf("p%d-%d", s.producer, s.seq)] = where{r.Partition, r.Offset, r.Height}
		}
	}
	t.Logf("%d records acknowledged through 2 gateways in %s (%.0f records/s), %d answered as duplicates of an earlier attempt",
		len(at), elapsed.Round(time.Millisecond), float64(len(at))/elapsed.Seconds(), dups)

	// Acknowledged means committed on some node: wait for every node to
	// have committed the highest receipt's block before reading.
	var top int64
	for i := range results {
		for _, s := range results[i] {
			r, _ := s.fut.Wait(ctx)
			top = max(top, r.Height)
		}
	}
	if err := waitHeight(ctx, t, n, []int{0, 1, 2, 3}, top); err != nil {
		t.Fatal(err)
	}

	// Every validator holds each record exactly at its receipt's offset,
	// once, and each producer's records in its order within a partition.
	for node := 0; node < 4; node++ {
		seen := map[string]bool{}
		total := 0
		for p := uint32(0); p < partitions; p++ {
			recs := readPartition(ctx, t, n, node, topic, p)
			last := map[string]int{}
			for j, r := range recs {
				v := string(r.Value)
				if r.Offset != uint64(j) {
					t.Fatalf("node%d %s/%d: record %d has offset %d: a gap", node, topic, p, j, r.Offset)
				}
				if seen[v] {
					t.Fatalf("node%d: %q appears twice", node, v)
				}
				seen[v] = true
				w, ok := at[v]
				if !ok || w.partition != p || w.offset != r.Offset {
					t.Fatalf("node%d: %q is at %d@%d, its receipt said %d@%d (acknowledged %v)", node, v, p, r.Offset, w.partition, w.offset, ok)
				}
				var prod, seq int
				if _, err := fmt.Sscanf(v, "p%d-%d", &prod, &seq); err != nil {
					t.Fatalf("record value %q: %v", v, err)
				}
				key := fmt.Sprint(prod)
				if prev, ok := last[key]; ok && seq <= prev {
					t.Fatalf("node%d %s/%d: producer %d's record %d comes after its record %d", node, topic, p, prod, seq, prev)
				}
				last[key] = seq
			}
			total += len(recs)
		}
		if total != producers*perProducer {
			var missing []string
			for v, w := range at {
				if !seen[v] && len(missing) < 5 {
					holder := "nothing"
					if recs := readPartition(ctx, t, n, node, topic, w.partition); w.offset < uint64(len(recs)) {
						r := recs[w.offset]
						holder = fmt.Sprintf("%s (height %d, producer %x sequence %d)", r.Value, r.Height, r.ProducerKey[:4], r.Sequence)
					}
					missing = append(missing, fmt.Sprintf("%s (receipt %d@%d height %d duplicate=%v; that offset holds %s)", v, w.partition, w.offset, w.height, dupOf[v], holder))
				}
			}
			t.Fatalf("node%d holds %d records, want %d; acknowledged but missing: %v", node, total, producers*perProducer, missing)
		}
	}
	t.Logf("all 4 validators hold the %d records at their receipts' offsets, once each, in producer order", producers*perProducer)
	checkReferences(ctx, t, n, top)

	t.Run("byzlog CLI creates a topic, produces and lists", func(t *testing.T) {
		cli := func(stdin string, args ...string) (string, error) {
			if !slices.ContainsFunc(args, func(a string) bool { return a == "--insecure" || strings.HasPrefix(a, "--tls-ca") }) {
				args = append(args, "--tls-ca="+n.TLS().CA())
			}
			cmd := exec.CommandContext(ctx, filepath.Join(binDir(t), "byzlog"), args...)
			cmd.Stdin = strings.NewReader(stdin)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		gw, gen := "--gateway="+gws[1].addr, "--genesis="+n.GenesisPath()
		if out, err := cli("", "topic", "create", "cli", "--partitions", "2", "--admin-key", n.AdminKeyPath(), gw, gen); err != nil || !strings.Contains(out, "created topic cli with 2 partitions") {
			t.Fatalf("topic create: %v\n%s", err, out)
		}
		out, err := cli("k1\tv1\nk2\tv2\nk1\tv3\n", "produce", "cli", "--parse-key", "--verbose", gw, gen)
		if err != nil || strings.Count(out, "cli/") != 3 || !strings.Contains(out, "produced 3 of 3 records") {
			t.Fatalf("produce from stdin: %v\n%s", err, out)
		}
		chain := "--chain-id=" + trustOf(t, n).ChainID()
		if out, err := cli("", "produce", "cli", "--value", "unverified", "--no-verify", chain, gw); err != nil || !strings.Contains(out, "produced 1 of 1 records") {
			t.Fatalf("produce --no-verify --chain-id: %v\n%s", err, out)
		}
		if out, err := cli("", "produce", "cli", "--value", "x", "--genesis=/nonexistent/genesis.json", gw); err == nil || !strings.Contains(out, "--genesis") {
			t.Fatalf("produce without a readable genesis = %v, want exit 1 naming --genesis:\n%s", err, out)
		}
		out, err = cli("", "produce", "nope", "--value", "x", gw, gen)
		if err == nil || !strings.Contains(out, "NotFound") || !strings.Contains(out, `topic "nope" does not exist`) {
			t.Fatalf("produce to a missing topic = %v, want exit 1 naming the topic:\n%s", err, out)
		}
		out, err = cli("", "topic", "list", gw)
		if err != nil || !strings.Contains(out, "cli") || !strings.Contains(out, "orders") {
			t.Fatalf("topic list: %v\n%s", err, out)
		}
		if out, err := cli("", "topic", "list", gw, "--insecure"); err == nil {
			t.Fatalf("topic list in plaintext from a TLS gateway worked:\n%s", out)
		}
		if out, err := cli("", "topic", "list", gw, "--tls-ca=/nonexistent/ca.pem"); err == nil || !strings.Contains(out, "read CA /nonexistent/ca.pem") {
			t.Fatalf("topic list with a missing CA = %v, want an error naming it:\n%s", err, out)
		}
	})

	https := &http.Client{Transport: &http.Transport{TLSClientConfig: gwTLS(t, n)}}
	t.Run("metrics count answered batches and latency", func(t *testing.T) {
		resp, err := https.Get("https://" + gws[1].metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`byzlog_gateway_batches_total{outcome="ok"}`, `byzlog_gateway_produce_seconds_count{ack="ACK_COMMIT"}`,
			"byzlog_gateway_bundle_batches_count", "byzlog_gateway_queued_bytes"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if resp, err := https.Get("https://" + gws[1].metrics + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz = %v %v, want 200", resp, err)
		}
	})

	t.Run("HTTP/JSON produce and topic listing", func(t *testing.T) {
		base := "https://" + gws[1].metrics
		s := wire.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize)), n.Config().ChainID)
		post := func(topic string) (int, string) {
			b, err := s.Batch(topic, 0, 0, byzlogv1.Codec_CODEC_NONE, []*byzlogv1.Record{{Value: []byte("over http")}})
			if err != nil {
				t.Fatal(err)
			}
			body, err := protojson.Marshal(&byzlogv1.ProduceRequest{RequestId: 7, Batch: b})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := https.Post(base+"/v1/produce", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(out)
		}
		if code, out := post(topic); code != http.StatusOK || !strings.Contains(out, `"receipt"`) || !strings.Contains(out, `"height"`) {
			t.Errorf("POST /v1/produce = %d %s, want 200 with a commit receipt", code, out)
		}
		if code, out := post("nope"); code != http.StatusNotFound || !strings.Contains(out, `"code":"NotFound"`) {
			t.Errorf("POST /v1/produce to a missing topic = %d %s, want 404 NotFound", code, out)
		}
		resp, err := https.Post(base+"/v1/produce", "application/json", strings.NewReader("{not json"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST /v1/produce with bad JSON = %d, want 400", resp.StatusCode)
		}
		resp, err = https.Get(base + "/v1/topics")
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"name":"orders"`) {
			t.Errorf("GET /v1/topics = %d %s, want the topics", resp.StatusCode, out)
		}
	})

	t.Run("grpcurl lists and calls the API through reflection", func(t *testing.T) {
		grpcurl := filepath.Join(binDir(t), "grpcurl")
		for _, c := range []struct {
			flags []string // before the address
			call  []string // after it
			want  []string
		}{
			{nil, []string{"list"}, []string{"byzlog.v1.Gateway", "grpc.health.v1.Health", "grpc.reflection"}},
			{nil, []string{"describe", "byzlog.v1.Gateway"}, []string{"rpc Produce", "rpc ProduceStream", "rpc ListTopics"}},
			{[]string{"-d", "{}"}, []string{"byzlog.v1.Gateway/ListTopics"}, []string{`"name": "orders"`, `"nextOffset"`}},
			{[]string{"-d", `{"name": "nope"}`}, []string{"byzlog.v1.Gateway/DescribeTopic"}, []string{"NotFound", "unknown_topic"}},
			{nil, []string{"grpc.health.v1.Health/Check"}, []string{"SERVING"}},
		} {
			args := append(append(append([]string{"-cacert", n.TLS().CA()}, c.flags...), gws[1].addr), c.call...)
			out, _ := exec.CommandContext(ctx, grpcurl, args...).CombinedOutput()
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("grpcurl %s: output lacks %q:\n%s", strings.Join(args, " "), w, out)
				}
			}
		}
	})
}

// TestReadYourWrites makes every validator's Commit wait 700 ms (a
// failpoint), so CometBFT stores each block and its results well before the
// app's state moves on, and checks that what a receipt acknowledges is
// visible at once: in the gateway's answer to a query, and on every node as
// soon as the localnet reports the receipt's height committed.
func TestReadYourWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	fpApp := failpointApp(t)
	n, _ := startNet(ctx, t, 4500)
	all := []int{0, 1, 2, 3}
	env := []string{fmt.Sprintf("%s=%s=700", failpoint.EnvVar, failpoint.CommitDelay)}
	for i := range all {
		if err := n.KillNode(i); err != nil {
			t.Fatal(err)
		}
		if err := n.StartNodeWith(ctx, i, fpApp, env); err != nil {
			t.Fatal(err)
		}
		if err := waitHeight(ctx, t, n, all, maxHeight(ctx, n, all)+1); err != nil {
			t.Fatal(err)
		}
	}
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", n.Config().BasePort+900))
	p, err := client.NewProducer(ctx, client.WithTrust(trustOf(t, n)), client.WithGateways(gw.addr), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	conn, err := grpc.NewClient(gw.addr, grpc.WithTransportCredentials(credentials.NewTLS(gwTLS(t, n))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	gc := byzlogv1.NewGatewayClient(conn)

	for i := 0; i < 4; i++ {
		v := fmt.Sprintf("ryw-%d", i)
		rc, err := p.ProduceSync(ctx, &client.Record{Topic: "log", Value: []byte(v)})
		if err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
		ps, err := gc.GetProducerState(ctx, &byzlogv1.ProducerRequest{ProducerKey: p.PublicKey(), Topic: "log", Partition: 0})
		if err != nil {
			t.Fatal(err)
		}
		if ps.NextSequence != uint64(i+1) {
			t.Fatalf("right after the receipt of %s (height %d) the gateway says the producer's next sequence is %d, want %d: it read a node whose app had not committed the block",
				v, rc.Height, ps.NextSequence, i+1)
		}
		if err := waitHeight(ctx, t, n, all, rc.Height); err != nil {
			t.Fatal(err)
		}
		for node := range all {
			recs := readPartition(ctx, t, n, node, "log", 0)
			if rc.Offset >= uint64(len(recs)) || string(recs[rc.Offset].Value) != v {
				t.Fatalf("node%d reports height %d committed but holds %d records: %s (receipt log/0@%d) is not readable", node, rc.Height, len(recs), v, rc.Offset)
			}
		}
		t.Logf("%s: receipt log/0@%d at height %d; the gateway's next sequence and all 4 nodes' records show it at once", v, rc.Offset, rc.Height)
	}
}

// checkReferences checks that the chain (rules version 3) carried bundles
// out of its blocks: some of blocks 1..top reference bundles instead of
// carrying them, and every node serves each referenced bundle, the bytes
// whose SHA-256 the reference is.
func checkReferences(ctx context.Context, t *testing.T, n *localnet.Net, top int64) {
	t.Helper()
	refs := 0
	for node := 0; node < 4; node++ {
		c, err := n.Client(node)
		if err != nil {
			t.Fatal(err)
		}
		for h := int64(1); h <= top; h++ {
			raw, err := c.Block(ctx, &h)
			if err != nil {
				t.Fatalf("node%d block %d: %v", node, h, err)
			}
			b, _, err := chain.ReadBlock(ctx, c, h)
			if err != nil {
				t.Fatalf("node%d block %d with its bundles: %v", node, h, err)
			}
			for i, tx := range raw.Block.Txs {
				sum, ok := wire.BundleRef(tx)
				if !ok {
					continue
				}
				if node == 0 {
					refs++
				}
				if got := sha256.Sum256(b.Block.Txs[i]); got != sum {
					t.Fatalf("node%d block %d tx %d: the bundle read hashes to %X, the reference is %X", node, h, i, got, sum)
				}
			}
		}
	}
	if refs == 0 {
		t.Fatalf("none of blocks 1..%d references a bundle: the chain carried every bundle in its blocks", top)
	}
	t.Logf("blocks 1..%d reference %d bundles; every node serves each", top, refs)
}
