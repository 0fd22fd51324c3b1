package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/gateway/kafka"
	"github.com/byzlog/byzlog/gateway/kafka/sasl"
	"github.com/byzlog/byzlog/gateway/pipeline"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

// kafkaOptions are the Kafka face's flags.
type kafkaOptions struct {
	cfg           kafka.Config
	brokers       string
	users         string
	anonymousKey  string
	autoCreateKey string
}

func defaultKafkaOptions() kafkaOptions { return kafkaOptions{cfg: kafka.Default()} }

func (k *kafkaOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&k.cfg.Listen, "kafka-listen", "", "host:port of the Kafka face (Kafka's wire protocol, for Kafka clients: kcat, franz-go, librdkafka, Java); empty: off")
	f.StringVar(&k.cfg.Advertise, "kafka-advertise", "", "host:port Kafka clients reach this gateway at, when --kafka-brokers is empty; empty: --kafka-listen")
	f.StringVar(&k.brokers, "kafka-brokers", "", "every gateway's Kafka address as ID=host:port,... in the same order on all gateways (partition p's leader is the (p mod N)th); empty: this gateway alone")
	f.Int32Var(&k.cfg.NodeID, "kafka-node-id", 0, "this gateway's broker id in --kafka-brokers")
	f.StringVar(&k.users, "kafka-users", "", "users file (JSON) of the Kafka face's SASL users: each a name, salted SCRAM credentials and the key file that signs its batches (byzlog-gateway kafka-user writes entries)")
	f.StringVar(&k.anonymousKey, "kafka-anonymous-key", "", "instead of --kafka-users: key file that signs every Kafka client's batches, without authenticating (anyone who reaches the port writes as this key)")
	f.BoolVar(&k.cfg.AnonymousAdmin, "kafka-anonymous-admin", false, "let clients that do not authenticate create and delete topics with --kafka-anonymous-key, which must be a genesis admin key (for test clusters: franz-go's test suite needs it)")
	f.StringVar(&k.autoCreateKey, "kafka-auto-create-key", "", "key file of a genesis admin key with which the face creates a topic a Kafka client names and the chain lacks, as Kafka's auto.create.topics.enable (give the gateway a key for this alone); empty: off")
	f.DurationVar(&k.cfg.InitialRebalanceDelay, "kafka-initial-rebalance-delay", k.cfg.InitialRebalanceDelay, "how long an empty consumer group's first rebalance waits for more members, again for each that arrives (Kafka's group.initial.rebalance.delay.ms); 0: none")
	f.Int32Var(&k.cfg.AutoCreatePartitions, "kafka-auto-create-partitions", k.cfg.AutoCreatePartitions, "partitions of an auto-created topic (Kafka's num.partitions)")
	f.BoolVar(&k.cfg.Insecure, "kafka-insecure", false, "serve the Kafka face in plaintext instead of TLS with --tls-cert (passwords and records cross the network readable)")
	f.Int32Var(&k.cfg.MaxRequestBytes, "kafka-max-request-bytes", k.cfg.MaxRequestBytes, "largest Kafka request taken from an authenticated client")
	f.IntVar(&k.cfg.MaxConns, "kafka-max-conns", k.cfg.MaxConns, "Kafka connections open at once; more are closed")
	f.IntVar(&k.cfg.MaxConnsPerIP, "kafka-max-conns-per-ip", k.cfg.MaxConnsPerIP, "Kafka connections open at once from one address")
}

// config completes the face's configuration; serverTLS is the gRPC face's.
func (k kafkaOptions) config(serverTLS *tls.Config) (kafka.Config, error) {
	c := k.cfg
	if !c.Insecure {
		if serverTLS == nil {
			return c, errors.New("--kafka-listen serves TLS with --tls-cert and --tls-key: give them, or --kafka-insecure")
		}
		c.TLS = serverTLS
	}
	if (k.users == "") == (k.anonymousKey == "") {
		return c, errors.New("--kafka-listen needs --kafka-users (SASL) or --kafka-anonymous-key, one of them")
	}
	if k.users != "" {
		u, err := sasl.Load(k.users)
		if err != nil {
			return c, fmt.Errorf("--kafka-users: %w", err)
		}
		c.Auth = kafka.SASL(u)
	}
	if k.anonymousKey != "" {
		key, err := keyfile.Read(k.anonymousKey)
		if err != nil {
			return c, fmt.Errorf("--kafka-anonymous-key: %w", err)
		}
		c.AnonymousKey = key
	}
	if k.autoCreateKey != "" {
		key, err := keyfile.Read(k.autoCreateKey)
		if err != nil {
			return c, fmt.Errorf("--kafka-auto-create-key: %w", err)
		}
		c.AutoCreateKey = key
	}
	var err error
	if c.Brokers, err = parseBrokers(k.brokers); err != nil {
		return c, fmt.Errorf("--kafka-brokers: %w", err)
	}
	return c, c.Validate()
}

// parseBrokers reads ID=host:port,...
func parseBrokers(s string) ([]kafka.Broker, error) {
	var out []kafka.Broker
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		id, addr, ok := strings.Cut(item, "=")
		n, err := strconv.ParseInt(id, 10, 32)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("%q: want ID=host:port with ID a broker id >= 0", item)
		}
		b, err := kafka.ParseBroker(int32(n), addr)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// serveKafka runs the face until ctx is done; the returned wait blocks
// until it has stopped.
func serveKafka(ctx context.Context, cfg kafka.Config, g *pipeline.Gateway, log zerolog.Logger) (func() error, error) {
	srv, err := kafka.New(cfg, kafka.Over(g), log)
	if err != nil {
		return nil, err
	}
	ln, err := srv.Listen()
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	log.Info().Str("kafka_listen", cfg.Listen).Bool("tls", cfg.TLS != nil).Bool("sasl", cfg.Auth != nil).Bool("anonymous", cfg.AnonymousKey != nil).
		Bool("auto_create", cfg.AutoCreateKey != nil).Msg("serving kafka")
	return func() error { return <-done }, nil
}

const kafkaUserHelp = `kafka-user prints a users file entry for the Kafka face (--kafka-users): the
user's name, the key file whose ed25519 key signs the user's batches, and
salted SCRAM-SHA-256 and SCRAM-SHA-512 credentials of the password read from
stdin (one line). The gateway stores no password: PLAIN logins are checked
against the SCRAM credentials too. The users file is

  {"users": [ENTRY, ...]}

with key_file paths relative to the users file. Key files must be readable by
their owner only (chmod 600).`

func newKafkaUserCommand() *cobra.Command {
	var name, keyFile string
	var admin bool
	iterations := sasl.DefaultIterations
	cmd := &cobra.Command{
		Use:   "kafka-user --name NAME --key-file FILE < password",
		Short: "print a Kafka face users file entry for a password read from stdin",
		Long:  kafkaUserHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := readLine(cmd.InOrStdin())
			if err != nil {
				return err
			}
			e, err := sasl.NewEntry(name, keyFile, admin, line, iterations, rand.Reader)
			if err != nil {
				return err
			}
			b, err := json.MarshalIndent(e, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "the user's name (its SASL user name)")
	f.StringVar(&keyFile, "key-file", "", "key file (as byzlog keygen writes) whose key signs the user's batches")
	f.BoolVar(&admin, "admin", false, "the user may create and delete topics (its key must be a genesis admin key)")
	f.IntVar(&iterations, "iterations", iterations, fmt.Sprintf("PBKDF2 iterations of the credentials (%d..%d)", sasl.MinIterations, sasl.MaxIterations))
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("key-file")
	return cmd
}

// readLine reads one line (the password), without its line ending.
func readLine(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return "", fmt.Errorf("read password from stdin: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", errors.New("no password on stdin: pipe one line, e.g. `read -s pw; echo \"$pw\" | byzlog-gateway kafka-user ...`")
	}
	return line, nil
}
