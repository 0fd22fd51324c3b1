//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/verify"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/lab/tamper"
)

// TestIndexerRefusesTamperedData puts a lying proxy in front of the node
// the indexer lists first (its light client primary): it forges headers,
// alters transactions and results, and withholds blocks, one after another
// while records are produced. The indexer must notice each lie (metrics),
// get the data from another node, and publish every record once and
// unaltered.
func TestIndexerRefusesTamperedData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 7000)
	base := n.Config().BasePort
	natsURL := startNATS(t, base+850, t.TempDir())
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", base+900))
	proxyAddr := fmt.Sprintf("127.0.0.1:%d", base+870)
	upstream, err := n.RPCHTTPClient(0)
	if err != nil {
		t.Fatal(err)
	}
	serve, err := n.NodeServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := tamper.Start(proxyAddr, n.Config().RPCAddr(0), upstream, serve)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	const topic = "tamper"
	createTopicVia(ctx, t, n, gw.addr, topic, 2)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", base+860)
	rpcs := append([]string{"https://" + proxyAddr}, rpcAddrs(n, 1)...)
	ix := startProc(t, "byzlog-indexer", httpAddr, append([]string{"--genesis", n.Config().Dir + "/node0/config/genesis.json",
		"--nats", natsURL, "--http-listen", httpAddr, "--log-format", "json"}, nodeFlags(n, rpcs)...)...)

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.NewProducer(ctx, client.WithTrust(trustOf(t, n)), client.WithGateways(gw.addr), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	// A filler puts a transaction in nearly every block: the proxy serves
	// a quarter of the indexer's block reads (round-robin), and a producer
	// waiting for its receipts writes every other block, which could be
	// just the ones the proxy never serves.
	createTopicVia(ctx, t, n, gw.addr, "filler", 1)
	filler, err := client.NewProducer(ctx, client.WithTrust(trustOf(t, n)), client.WithGateways(gw.addr), client.WithAcks(byzlogv1.Ack_ACK_MEMPOOL), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFiller := context.WithCancel(ctx)
	fillerDone := make(chan struct{})
	go func() {
		defer close(fillerDone)
		for i := 0; fctx.Err() == nil && i < 100_000; i++ {
			filler.Produce(fctx, &client.Record{Topic: "filler", Value: []byte(fmt.Sprint("f", i))})
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { stopFiller(); <-fillerDone; _ = filler.Close(ctx) }()

	type where struct {
		partition uint32
		offset    uint64
	}
	acked := map[string]where{}
	stored := func() uint64 { return streamRecords(ctx, js, topic) }
	for _, phase := range []struct {
		mode, metric string
	}{
		{"header", "byzlog_indexer_light_client_errors_total"},
		{"tx", `byzlog_indexer_verification_failures_total{check="block"}`},
		{"results", `byzlog_indexer_verification_failures_total{check="results"}`},
		{"withhold", ""},
	} {
		before := 0.0
		if phase.metric != "" {
			before = metric(t, httpAddr, phase.metric)
		}
		proxy.SetMode(phase.mode)
		// Records over several blocks, so the proxy serves some of them.
		var futs []*client.Future
		var values []string
		for j := 0; j < 300; j++ {
			v := fmt.Sprintf("%s-%d", phase.mode, j)
			futs = append(futs, p.Produce(ctx, &client.Record{Topic: topic, Key: []byte(v), Value: []byte(v)}))
			values = append(values, v)
			if j%50 == 49 {
				time.Sleep(400 * time.Millisecond)
			}
		}
		for i, f := range futs {
			r, err := f.Wait(ctx)
			if err != nil {
				t.Fatalf("%s: %v", values[i], err)
			}
			acked[values[i]] = where{r.Partition, r.Offset}
		}
		deadline := time.Now().Add(90 * time.Second)
		for stored() < uint64(len(acked)) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if got := stored(); got != uint64(len(acked)) {
			t.Fatalf("%s phase: JetStream holds %d records, %d were acknowledged", phase.mode, got, len(acked))
		}
		if proxy.Count(phase.mode) == 0 {
			t.Fatalf("%s phase: the proxy never got to lie; the test did not test", phase.mode)
		}
		if phase.metric != "" {
			if after := metric(t, httpAddr, phase.metric); after <= before {
				b, _ := os.ReadFile(ix.log)
				t.Logf("indexer log:\n%s", b)
				t.Errorf("%s phase: the proxy lied %d times, %s stayed at %v", phase.mode, proxy.Count(phase.mode), phase.metric, after)
			}
		}
		t.Logf("%s phase: the proxy lied %d times; all %d records published", phase.mode, proxy.Count(phase.mode), len(acked))
	}
	proxy.SetMode("")

	// Verify mode: a record forged straight into the stream (by anyone who
	// can publish to NATS) is delivered by a plain subscriber but refused by
	// a verifying one, which proves the genuine records around it.
	var next0 uint64
	for _, w := range acked {
		if w.partition == 0 && w.offset+1 > next0 {
			next0 = w.offset + 1
		}
	}
	forged := layout.Message(&byzlogv1.StoredRecord{Topic: topic, Partition: 0, Offset: next0, Height: 5,
		Value: []byte("forged"), ProducerKey: make([]byte, 32), TimestampUnixNano: time.Now().UnixNano()})
	if _, err := js.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	gen, err := cmttypes.GenesisDocFromFile(n.Config().Dir + "/node0/config/genesis.json")
	if err != nil {
		t.Fatal(err)
	}
	provs, _, err := verify.NewNodes(gen.ChainID, rpcs, nodeLink(t, n))
	if err != nil {
		t.Fatal(err)
	}
	trust, err := verify.TrustGenesis(ctx, gen, provs)
	if err != nil {
		t.Fatal(err)
	}
	headers, err := verify.NewHeaders(gen.ChainID, rpcs, nodeLink(t, n), trust, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for _, verify := range []bool{false, true} {
		var opts []consumer.Option
		if verify {
			opts = append(opts, consumer.WithVerifier(headers))
		}
		c, err := consumer.New(nc, opts...)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Subscribe(ctx, topic, consumer.WithPartitions(0), consumer.FromOffset(next0-5))
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(0); i < 5; i++ {
			r, err := sub.Next(ctx)
			if err != nil || r.Offset != next0-5+i || acked[string(r.Value)] != (where{0, r.Offset}) {
				t.Fatalf("verify=%v: record %d: %v %v", verify, next0-5+i, r, err)
			}
		}
		r, err := sub.Next(ctx)
		switch {
		case !verify && (err != nil || string(r.Value) != "forged"):
			t.Fatalf("plain subscriber: the forged record should come through (it is in the stream), got %v %v", r, err)
		case verify && !errors.Is(err, consumer.ErrUnverified):
			t.Fatalf("verifying subscriber: the forged record gave %v %v, want ErrUnverified", r, err)
		}
		if verify {
			t.Logf("verify mode proved 5 genuine records and refused the forged one: %v", err)
		}
		sub.Close()
		c.Close()
	}

	// Nothing altered by the proxy reached NATS: every message before the
	// forged one is an acknowledged value at its receipt's offset.
	cons, err := js.OrderedConsumer(ctx, layout.StreamName(topic), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for seen < len(acked) {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			rs, err := layout.Records(msg.Subject(), msg.Headers(), msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if string(r.Value) == "forged" {
					continue
				}
				if acked[string(r.Value)] != (where{r.Partition, r.Offset}) || string(r.Key) != string(r.Value) {
					t.Fatalf("JetStream holds %q (key %q) at %d@%d; acknowledged at %v", r.Value, r.Key, r.Partition, r.Offset, acked[string(r.Value)])
				}
				seen++
			}
		}
		if got == 0 {
			t.Fatalf("read %d of %d records", seen, len(acked))
		}
	}
}
