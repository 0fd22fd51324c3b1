package main

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/tlsconf"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// localnetCA is the CA of `make run`'s localnet: the default the gateway's
// certificate is checked against, so the quick start speaks TLS without a
// flag.
const localnetCA = "run/localnet/tls/ca.pem"

// localnetNATSPassword is the password file of `make run`'s NATS user
// "consumer", the default of byzlog consume.
const localnetNATSPassword = "run/localnet/nats/consumer.password"

// tlsFlags are a client's transport to the gateway: TLS checked against a
// CA, a certificate for mutual TLS, or plaintext with --insecure.
type tlsFlags struct {
	files    tlsconf.Files
	insecure bool
}

func (t *tlsFlags) add(f *pflag.FlagSet) {
	t.files.CA = localnetCA
	f.StringVar(&t.files.CA, "tls-ca", t.files.CA, "PEM CA the gateway's TLS certificate is checked against (empty: the system's roots)")
	f.StringVar(&t.files.Cert, "tls-cert", "", "PEM client certificate, for a gateway that requires mutual TLS")
	f.StringVar(&t.files.Key, "tls-key", "", "PEM private key of --tls-cert")
	f.BoolVar(&t.insecure, "insecure", false, "talk plaintext to a gateway started with --insecure (anyone on the path reads the records)")
}

// config is the TLS configuration, nil with --insecure.
func (t *tlsFlags) config(f *pflag.FlagSet) (*tls.Config, error) {
	if t.insecure {
		if f.Changed("tls-ca") || f.Changed("tls-cert") || f.Changed("tls-key") {
			return nil, errors.New("--insecure talks plaintext: drop --tls-ca, --tls-cert and --tls-key, or --insecure")
		}
		return nil, nil
	}
	c, err := t.files.Client()
	if err != nil {
		return nil, fmt.Errorf("%w (is the localnet up? `make run` writes %s; --insecure for a plaintext gateway)", err, localnetCA)
	}
	return c, nil
}

// producerOption is the transport as a producer or admin option.
func (t *tlsFlags) producerOption(f *pflag.FlagSet) (client.Option, error) {
	c, err := t.config(f)
	switch {
	case err != nil:
		return nil, err
	case c == nil:
		return client.WithInsecure(), nil
	}
	return client.WithTLS(c), nil
}

// consumerOptions is the transport as consumer options.
func (t *tlsFlags) consumerOption(f *pflag.FlagSet) (consumer.Option, error) {
	c, err := t.config(f)
	switch {
	case err != nil:
		return nil, err
	case c == nil:
		return consumer.WithGatewayInsecure(), nil
	}
	return consumer.WithGatewayTLS(c), nil
}

// dial connects to one gateway for read-only calls, over c (nil:
// plaintext).
func dial(addr string, c *tls.Config) (byzlogv1.GatewayClient, func(), error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tlsconf.Transport(c, c == nil)))
	if err != nil {
		return nil, nil, fmt.Errorf("gateway %s: %w", addr, err)
	}
	return byzlogv1.NewGatewayClient(conn), func() { _ = conn.Close() }, nil
}
