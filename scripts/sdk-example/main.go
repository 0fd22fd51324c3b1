// Command sdk-example produces records through byzlog's producer SDK and
// reads them back through its consumer SDK, against the cluster `make run`
// starts. It is its own module, outside the repository's Go workspace, so it
// builds against the SDKs the way a user's program does (make
// verify-sdk-example builds it in CI):
//
//	cd scripts/sdk-example && go run . -topic demo -n 10
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
)

func main() {
	dir := flag.String("dir", "../../run/localnet", "the localnet's directory (make run writes it)")
	gateway := flag.String("gateway", "127.0.0.1:7070", "gateway address (host:port)")
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "NATS server URL")
	topic := flag.String("topic", "demo", "topic to produce to and read back (it must exist)")
	n := flag.Int("n", 10, "records to produce")
	flag.Parse()
	if err := run(*dir, *gateway, *natsURL, *topic, *n); err != nil {
		fmt.Fprintln(os.Stderr, "sdk-example:", err)
		os.Exit(1)
	}
}

func run(dir, gateway, natsURL, topic string, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	trust, err := client.TrustGenesis(filepath.Join(dir, "node0", "config", "genesis.json"))
	if err != nil {
		return err
	}
	tc, err := caConfig(filepath.Join(dir, "tls", "ca.pem"))
	if err != nil {
		return err
	}
	p, err := client.NewProducer(ctx, client.WithTrust(trust), client.WithGateways(gateway), client.WithTLS(tc))
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	var first client.Receipt
	for i := 0; i < n; i++ {
		rc, err := p.ProduceSync(ctx, &client.Record{Topic: topic, Value: fmt.Appendf(nil, "sdk-example %d", i)})
		if err != nil {
			return fmt.Errorf("produce record %d: %w", i, err)
		}
		if i == 0 {
			first = rc
		}
	}
	fmt.Printf("produced %d records to %s/%d from offset %d\n", n, topic, first.Partition, first.Offset)
	return readBack(ctx, dir, natsURL, tc, trust, first, n)
}

// readBack reads the n records from the first one's offset on its partition.
func readBack(ctx context.Context, dir, natsURL string, tc *tls.Config, trust client.Trust, first client.Receipt, n int) error {
	password, err := os.ReadFile(filepath.Join(dir, "nats", "consumer.password"))
	if err != nil {
		return err
	}
	c, err := consumer.Connect(natsURL, consumer.WithTrust(trust),
		consumer.WithNATSOptions(nats.UserInfo("consumer", strings.TrimSpace(string(password))), nats.Secure(tc)))
	if err != nil {
		return err
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, first.Topic, consumer.WithPartitions(first.Partition), consumer.FromOffset(first.Offset))
	if err != nil {
		return err
	}
	defer sub.Close()
	for i := 0; i < n; i++ {
		r, err := sub.Next(ctx)
		if err != nil {
			return fmt.Errorf("read record %d: %w", i, err)
		}
		fmt.Printf("%s/%d@%d height %d: %s\n", r.Topic, r.Partition, r.Offset, r.Height, r.Value)
	}
	return nil
}

func caConfig(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}
