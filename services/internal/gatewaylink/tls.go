package gatewaylink

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// LocalnetGateway is the first gateway of `make run`'s localnet: the default
// --gateway.
const LocalnetGateway = "127.0.0.1:7070"

// LocalnetCA is the CA of `make run`'s localnet: the default the gateway's
// certificate is checked against, so the quick start speaks TLS without a
// flag.
const LocalnetCA = "run/localnet/tls/ca.pem"

// LocalnetNATSPassword is the password file of `make run`'s NATS user
// "consumer", the default of byzlog consume.
const LocalnetNATSPassword = "run/localnet/nats/consumer.password"

// TLS is a client's transport to the gateway: TLS checked against a
// CA, a certificate for mutual TLS, or plaintext with --insecure.
type TLS struct {
	Files    tlsconf.Files
	Insecure bool
}

// Add adds --tls-ca, --tls-cert, --tls-key and --insecure, the CA
// defaulting to the localnet's.
func (t *TLS) Add(f *pflag.FlagSet) {
	t.Files.CA = LocalnetCA
	f.StringVar(&t.Files.CA, "tls-ca", t.Files.CA, "PEM CA the gateway's TLS certificate is checked against (empty: the system's roots)")
	f.StringVar(&t.Files.Cert, "tls-cert", "", "PEM client certificate, for a gateway that requires mutual TLS")
	f.StringVar(&t.Files.Key, "tls-key", "", "PEM private key of --tls-cert")
	f.BoolVar(&t.Insecure, "insecure", false, "talk plaintext to a gateway started with --insecure (anyone on the path reads the records)")
}

// Config is the TLS configuration, nil with --insecure.
func (t *TLS) Config(f *pflag.FlagSet) (*tls.Config, error) {
	if t.Insecure {
		if f.Changed("tls-ca") || f.Changed("tls-cert") || f.Changed("tls-key") {
			return nil, errors.New("--insecure talks plaintext: drop --tls-ca, --tls-cert and --tls-key, or --insecure")
		}
		return nil, nil
	}
	c, err := t.Files.Client()
	if err != nil {
		return nil, fmt.Errorf("%w (is the localnet up? `make run` writes %s; --insecure for a plaintext gateway)", err, LocalnetCA)
	}
	return c, nil
}

// ProducerOption is the transport as a producer or admin option.
func (t *TLS) ProducerOption(f *pflag.FlagSet) (client.Option, error) {
	c, err := t.Config(f)
	switch {
	case err != nil:
		return nil, err
	case c == nil:
		return client.WithInsecure(), nil
	}
	return client.WithTLS(c), nil
}

// ConsumerOption is the transport as a consumer option.
func (t *TLS) ConsumerOption(f *pflag.FlagSet) (consumer.Option, error) {
	c, err := t.Config(f)
	switch {
	case err != nil:
		return nil, err
	case c == nil:
		return consumer.WithGatewayInsecure(), nil
	}
	return consumer.WithGatewayTLS(c), nil
}

// Dial connects to one gateway for read-only calls, over c (nil:
// plaintext).
func Dial(addr string, c *tls.Config) (byzlogv1.GatewayClient, func(), error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tlsconf.Transport(c, c == nil)))
	if err != nil {
		return nil, nil, fmt.Errorf("gateway %s: %w", addr, err)
	}
	return byzlogv1.NewGatewayClient(conn), func() { _ = conn.Close() }, nil
}

// ParseAcks reads an --acks value.
func ParseAcks(s string) (byzlogv1.Ack, error) {
	ack, ok := map[string]byzlogv1.Ack{"none": byzlogv1.Ack_ACK_NONE, "mempool": byzlogv1.Ack_ACK_MEMPOOL, "commit": byzlogv1.Ack_ACK_COMMIT}[s]
	if !ok {
		return 0, fmt.Errorf("--acks %q: want none, mempool or commit", s)
	}
	return ack, nil
}
