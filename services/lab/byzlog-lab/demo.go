package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/internal/keyfile"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

func newDemoCommand() *cobra.Command {
	cfg := localnet.Default()
	cfg.BasePort = 20656
	svc := localnet.Services{NATSPort: 20422, Gateways: 1, GatewayPort: 20470, IndexerPort: 20480}
	records := 10000
	keep := false
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "A scripted tour that checks itself: start a cluster, produce, consume through NATS, verify, stop",
		Long: `Start a fresh cluster as "byzlog run" does (in a temporary directory, on ports
of its own: nodes from 20656, NATS 20422, gateway 20470, indexer 20480, so it
can run beside "byzlog run"), create topic "demo" with 4 partitions, produce
--records keyed records through the gateway with the producer SDK, read them
back from NATS JetStream with the consumer SDK while they are produced, and
check that every record arrived exactly once, at the offset its commit receipt
named, in offset order per partition. It prints throughput and latency figures
and a PASS or FAIL line, stops everything, and exits 0 only on PASS. The
directory is removed on PASS unless --keep; on FAIL it stays, with the logs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if records < 1 || records > 1_000_000 {
				return fmt.Errorf("--records %d: want 1 to 1,000,000", records)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			dir, err := os.MkdirTemp("", "byzlog-demo-")
			if err != nil {
				return err
			}
			cfg.Dir, cfg.InsecureRPC = filepath.Join(dir, "cluster"), svc.Insecure
			n, err := localnet.OpenChecked(cmd.Flags(), cfg)
			if err != nil {
				return err
			}
			bin := localnet.BinDir()
			svc.NATS, svc.Gateway, svc.Indexer = localnet.FindBinary(bin, "nats-server"), localnet.FindBinary(bin, "byzlog-gateway"), localnet.FindBinary(bin, "byzlog-indexer")
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			t0 := time.Now()
			if err := localnet.StartAll(ctx, n, svc, errOut); err != nil {
				return err
			}
			fmt.Fprintf(out, "cluster up in %s: 4 validators, NATS, gateway, indexer (in %s)\n", time.Since(t0).Round(100*time.Millisecond), dir)
			res, runErr := runDemo(ctx, n, svc, records, errOut)
			_ = n.Down(io.Discard)
			res.print(out, records)
			switch {
			case runErr != nil:
				fmt.Fprintf(out, "FAIL: %v\nthe cluster's data and logs stay in %s\n", runErr, dir)
				return errors.New("demo failed")
			case keep:
				fmt.Fprintf(out, "PASS; the cluster's data stays in %s\n", dir)
			default:
				_ = os.RemoveAll(dir)
				fmt.Fprintln(out, "PASS")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&records, "records", records, "how many records to produce and check")
	f.BoolVar(&keep, "keep", keep, "keep the cluster's directory after a PASS")
	localnet.AddServiceTLSFlags(f, &svc)
	return cmd
}

// demoResult is what a demo measured.
type demoResult struct {
	produceTime          time.Duration
	receipt, fromReceipt []time.Duration // produce→receipt; receipt→consumer
	consumed             int
}

func (r demoResult) print(w io.Writer, n int) {
	if r.produceTime > 0 {
		fmt.Fprintf(w, "produced %d records in %s: %.0f records/s committed\n", len(r.receipt), r.produceTime.Round(time.Millisecond), float64(len(r.receipt))/r.produceTime.Seconds())
	}
	if len(r.receipt) > 0 {
		fmt.Fprintf(w, "produce→commit receipt: p50 %s p99 %s\n", pct(r.receipt, 0.5), pct(r.receipt, 0.99))
	}
	if len(r.fromReceipt) > 0 {
		fmt.Fprintf(w, "commit receipt→consumer (through the indexer and JetStream): p50 %s p99 %s\n", pct(r.fromReceipt, 0.5), pct(r.fromReceipt, 0.99))
	}
	fmt.Fprintf(w, "consumed %d of %d records through NATS\n", r.consumed, n)
}

func pct(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))].Round(time.Millisecond)
}

type placed struct {
	partition uint32
	offset    uint64
	at        time.Time // when the receipt came
}

// runDemo produces and consumes, and checks what it read against the
// receipts.
func runDemo(ctx context.Context, n *localnet.Net, svc localnet.Services, records int, progress io.Writer) (demoResult, error) {
	var res demoResult
	const topic, partitions = "demo", 4
	key, err := keyfile.Read(filepath.Join(n.Config().Dir, "admin.key"))
	if err != nil {
		return res, err
	}
	trust, err := client.TrustGenesis(n.GenesisPath())
	if err != nil {
		return res, err
	}
	transport, err := n.ProducerTransport(svc)
	if err != nil {
		return res, err
	}
	if err := createDemoTopic(ctx, svc, key, trust, transport, topic, partitions); err != nil {
		return res, err
	}
	p, err := client.NewProducer(ctx, client.WithTrust(trust), client.WithGateways(svc.GatewayAddr(0)), transport)
	if err != nil {
		return res, err
	}
	defer p.Close(context.WithoutCancel(ctx))

	acked := map[string]placed{}
	// The topic's stream exists once it has a record: produce one first.
	first := "demo-0"
	t1 := time.Now()
	r0, err := p.ProduceSync(ctx, &client.Record{Topic: topic, Key: []byte("key-0"), Value: []byte(first)})
	if err != nil {
		return res, fmt.Errorf("produce: %w", err)
	}
	acked[first] = placed{r0.Partition, r0.Offset, time.Now()}
	res.receipt = append(res.receipt, time.Since(t1))
	cons, sub, err := subscribeDemo(ctx, n, svc, topic)
	if err != nil {
		return res, err
	}
	defer cons.Close()
	defer sub.Close()

	// Consume while producing; check once every receipt is in.
	reads, readDone := readDemo(ctx, sub, records)
	line := localnet.StatusLine(progress)
	if err := produceDemo(ctx, p, topic, records, line, acked, &res); err != nil {
		line("", true)
		return res, err
	}
	res.produceTime = time.Since(t1)

	line(fmt.Sprintf("all %d committed; reading them back", records), false)
	if err := <-readDone; err != nil {
		line("", true)
		return res, err
	}
	line("", true)

	lat, err := checkReads(*reads, acked)
	res.fromReceipt, res.consumed = lat, len(*reads)
	if err != nil {
		return res, err
	}
	return res, nil
}

// createDemoTopic creates the demo's topic with the admin key.
func createDemoTopic(ctx context.Context, svc localnet.Services, key ed25519.PrivateKey, trust client.Trust, transport client.Option, topic string, partitions uint32) error {
	adm, err := client.NewAdmin(svc.GatewayAddr(0), key, trust, transport)
	if err != nil {
		return err
	}
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, topic, &byzlogv1.TopicConfig{Partitions: partitions}); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	return nil
}

// subscribeDemo connects a consumer to NATS and subscribes to topic,
// retrying for a minute while the topic's stream does not exist yet.
func subscribeDemo(ctx context.Context, n *localnet.Net, svc localnet.Services, topic string) (*consumer.Consumer, *consumer.Subscription, error) {
	natsOpts, err := n.NATSOptions(svc, localnet.NATSConsumerUser)
	if err != nil {
		return nil, nil, err
	}
	cons, err := consumer.Connect(svc.NATSURL(), consumer.WithNATSOptions(natsOpts...))
	if err != nil {
		return nil, nil, err
	}
	var sub *consumer.Subscription
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if sub, err = cons.Subscribe(ctx, topic); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		cons.Close()
		return nil, nil, fmt.Errorf("subscribe: %w", err)
	}
	return cons, sub, nil
}

// readDemo reads records from sub in the background. The channel gets
// nil once all are read, or the first error; only then may the caller
// look at the reads.
func readDemo(ctx context.Context, sub *consumer.Subscription, records int) (*[]got, <-chan error) {
	var reads []got
	readDone := make(chan error, 1)
	go func() {
		for i := 0; i < records; i++ {
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			r, err := sub.Next(rctx)
			cancel()
			if err != nil {
				readDone <- fmt.Errorf("consume record %d of %d: %w", i+1, records, err)
				return
			}
			reads = append(reads, got{r, time.Now()})
		}
		readDone <- nil
	}()
	return &reads, readDone
}

// produceDemo produces records demo-1.. (demo-0 is in already), then
// collects their receipts in order into acked and res, reporting
// progress on line.
func produceDemo(ctx context.Context, p *client.Producer, topic string, records int, line func(string, bool), acked map[string]placed, res *demoResult) error {
	futs := make([]*client.Future, 0, records)
	sent := make([]time.Time, 0, records)
	for i := 1; i < records; i++ {
		sent = append(sent, time.Now())
		futs = append(futs, p.Produce(ctx, &client.Record{Topic: topic, Key: []byte(fmt.Sprintf("key-%d", i%16)), Value: []byte(fmt.Sprintf("demo-%d", i))}))
		if i%500 == 0 {
			line(fmt.Sprintf("produced %d of %d", i, records), false)
		}
	}
	// Receipts, in order per partition; collected as they come.
	for i, f := range futs {
		r, err := f.Wait(ctx)
		if err != nil {
			return fmt.Errorf("record demo-%d: %w", i+1, err)
		}
		now := time.Now()
		res.receipt = append(res.receipt, now.Sub(sent[i]))
		acked[fmt.Sprintf("demo-%d", i+1)] = placed{r.Partition, r.Offset, now}
		if (i+1)%500 == 0 {
			line(fmt.Sprintf("committed %d of %d", i+2, records), false)
		}
	}
	return nil
}

// got is one record a consumer read, and when.
type got struct {
	r  *consumer.Record
	at time.Time
}

// checkReads checks what was read against the receipts: every acknowledged
// record read once, at the offset its receipt named, each partition in
// offset order from 0. It returns each record's receipt→read latency.
func checkReads(reads []got, acked map[string]placed) ([]time.Duration, error) {
	var lat []time.Duration
	next := map[uint32]uint64{}
	seen := map[string]bool{}
	for _, g := range reads {
		v := string(g.r.Value)
		want, ok := acked[v]
		switch {
		case !ok:
			return lat, fmt.Errorf("read %q at %d@%d, which was never acknowledged", v, g.r.Partition, g.r.Offset)
		case seen[v]:
			return lat, fmt.Errorf("%q read twice", v)
		case want.partition != g.r.Partition || want.offset != g.r.Offset:
			return lat, fmt.Errorf("%q read at %d@%d, its receipt said %d@%d", v, g.r.Partition, g.r.Offset, want.partition, want.offset)
		case g.r.Offset != next[g.r.Partition]:
			return lat, fmt.Errorf("partition %d: read offset %d, expected %d (out of order or missing)", g.r.Partition, g.r.Offset, next[g.r.Partition])
		}
		if g.at.After(want.at) {
			lat = append(lat, g.at.Sub(want.at))
		}
		seen[v] = true
		next[g.r.Partition]++
	}
	for v := range acked {
		if !seen[v] {
			return lat, fmt.Errorf("%q was acknowledged but never read", v)
		}
	}
	return lat, nil
}
