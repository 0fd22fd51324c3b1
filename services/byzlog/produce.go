package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

const defaultGateway = "127.0.0.1:7070"

func newKeygenCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen FILE",
		Short: "Write a new ed25519 key to FILE and print its public key",
		Long: `Write a new ed25519 key (the 32-byte seed in hex, mode 0600) to FILE, which must
not exist, and print the public key in hex. Producers sign their batches with it,
consumers their offset commits, admins their topic changes (an admin's public key
must be listed in genesis app_state.admins).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := keyfile.Generate(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), hex.EncodeToString(k.Public().(ed25519.PublicKey)))
			return nil
		},
	}
}

// publicKeys parses --flag's hex ed25519 public keys.
func publicKeys(flag string, vals []string) ([][]byte, error) {
	var out [][]byte
	for _, a := range vals {
		k, err := hex.DecodeString(a)
		if err != nil || len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("--%s %q: want a %d-byte public key in hex", flag, a, ed25519.PublicKeySize)
		}
		out = append(out, k)
	}
	return out, nil
}

// readersText says who may consume a topic.
func readersText(readers [][]byte) string {
	if len(readers) == 0 {
		return "open to every consumer"
	}
	return fmt.Sprintf("%d readers", len(readers))
}

func newTopicCommand() *cobra.Command {
	gateway := defaultGateway
	cmd := &cobra.Command{Use: "topic", Short: "Create, list and describe topics"}
	cmd.PersistentFlags().StringVar(&gateway, "gateway", gateway, "gateway address (host:port)")
	var tlsf tlsFlags
	tlsf.add(cmd.PersistentFlags())

	var adminKey string
	var tf trustFlags
	cfg := &byzlogv1.TopicConfig{Partitions: 1}
	var allowed, readers []string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic (signed with an admin key listed in genesis)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := keyfile.Read(adminKey)
			if err != nil {
				return fmt.Errorf("--admin-key: %w", err)
			}
			if cfg.AllowedProducers, err = publicKeys("allowed-producer", allowed); err != nil {
				return err
			}
			if cfg.Readers, err = publicKeys("reader", readers); err != nil {
				return err
			}
			trust, err := tf.trust(cmd.Flags())
			if err != nil {
				return err
			}
			transport, err := tlsf.producerOption(cmd.Flags())
			if err != nil {
				return err
			}
			adm, err := client.NewAdmin(gateway, key, trust, transport)
			if err != nil {
				return err
			}
			defer adm.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			h, err := adm.CreateTopic(ctx, args[0], cfg)
			if err != nil {
				return fmt.Errorf("create topic %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created topic %s with %d partitions at height %d\n", args[0], cfg.Partitions, h)
			return nil
		},
	}
	f := create.Flags()
	f.StringVar(&adminKey, "admin-key", "", "admin key file (the localnet's is DIR/admin.key)")
	f.Uint32Var(&cfg.Partitions, "partitions", cfg.Partitions, "number of partitions")
	f.Uint32Var(&cfg.MaxRecordBytes, "max-record-bytes", 0, "largest record (0: the chain's limit)")
	f.Int64Var(&cfg.RetentionMs, "retention-ms", 0, "delete records older than this (0: keep forever)")
	f.Int64Var(&cfg.RetentionBytes, "retention-bytes", 0, "keep at most this many bytes per partition (0: no limit)")
	f.StringSliceVar(&allowed, "allowed-producer", nil, "public key (hex) allowed to produce; repeat for more (none: any key)")
	f.StringSliceVar(&readers, "reader", nil, "public key (hex) allowed to consume, as a NATS nkey user (byzlog consume --nats-key-file); repeat for more (none: every consumer the cluster admits)")
	tf.add(f)
	_ = create.MarkFlagRequired("admin-key")

	list := &cobra.Command{
		Use:   "list",
		Short: "List topics with their partitions and record counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tc, err := tlsf.config(cmd.Flags())
			if err != nil {
				return err
			}
			gw, closeFn, err := dial(gateway, tc)
			if err != nil {
				return err
			}
			defer closeFn()
			resp, err := gw.ListTopics(cmd.Context(), &byzlogv1.ListTopicsRequest{})
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TOPIC\tPARTITIONS\tRECORDS\tRETENTION MS\tRETENTION BYTES")
			for _, t := range resp.Topics {
				var n uint64
				for _, p := range t.Partitions {
					n += p.NextOffset - p.LogStartOffset
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", t.Name, t.GetConfig().GetPartitions(), n, t.GetConfig().GetRetentionMs(), t.GetConfig().GetRetentionBytes())
			}
			return w.Flush()
		},
	}
	describe := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a topic's config and each partition's offsets",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tc, err := tlsf.config(cmd.Flags())
			if err != nil {
				return err
			}
			gw, closeFn, err := dial(gateway, tc)
			if err != nil {
				return err
			}
			defer closeFn()
			resp, err := gw.DescribeTopic(cmd.Context(), &byzlogv1.DescribeTopicRequest{Name: args[0]})
			if err != nil {
				return err
			}
			t := resp.Topic
			c := t.GetConfig()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "topic %s (created at height %d): %d partitions, max record bytes %d, retention %d ms / %d bytes, %d allowed producers, %s\n",
				t.Name, t.CreatedHeight, c.GetPartitions(), c.GetMaxRecordBytes(), c.GetRetentionMs(), c.GetRetentionBytes(), len(c.GetAllowedProducers()), readersText(c.GetReaders()))
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PARTITION\tLOG START\tNEXT OFFSET\tBYTES")
			for _, p := range t.Partitions {
				fmt.Fprintf(w, "%d\t%d\t%d\t%d\n", p.Partition, p.LogStartOffset, p.NextOffset, p.SizeBytes)
			}
			return w.Flush()
		},
	}
	cmd.AddCommand(create, list, describe)
	return cmd
}

func newProduceCommand() *cobra.Command {
	var (
		gateways  = []string{defaultGateway}
		keyPath   string
		value     string
		key       string
		parseKey  bool
		acks            = "commit"
		partition int64 = -1
		verbose   bool
		zstd      bool
		tf        trustFlags
		tlsf      tlsFlags
	)
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce records: --value for one, else one record per line of stdin",
		Long: `Produce records to TOPIC through a gateway. With --value one record is sent;
otherwise every line of stdin is a record (with --parse-key, "key<TAB>value").
Records without a key spread over partitions like Kafka's sticky partitioner;
keyed records go where Kafka's murmur2 partitioner puts them. Prints each
record's topic/partition@offset (--verbose, or a single record), then a summary.
Without --key, a new key is generated for this run (a new producer identity).

Every receipt is verified before it is printed: its proof must lead to a header
the producer's light client verified from --genesis (or --trust-height and
--trust-hash), so a gateway cannot acknowledge records the chain did not write.
--no-verify takes receipts on the gateway's word.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ack, err := parseAcks(acks)
			if err != nil {
				return err
			}
			trust, err := tf.trust(cmd.Flags())
			if err != nil {
				return err
			}
			transport, err := tlsf.producerOption(cmd.Flags())
			if err != nil {
				return err
			}
			opts := []client.Option{client.WithTrust(trust), client.WithGateways(gateways...), client.WithAcks(ack), transport}
			if keyPath != "" {
				k, err := keyfile.Read(keyPath)
				if err != nil {
					return fmt.Errorf("--key: %w", err)
				}
				opts = append(opts, client.WithKey(k))
			}
			if zstd {
				opts = append(opts, client.WithCompression(byzlogv1.Codec_CODEC_ZSTD))
			}
			ctx := cmd.Context()
			p, err := client.NewProducer(ctx, opts...)
			if err != nil {
				return err
			}
			var pin *uint32
			if partition >= 0 {
				v := uint32(partition)
				pin = &v
			}
			start := time.Now()
			var futs []*client.Future
			send := func(k, v []byte) {
				futs = append(futs, p.Produce(ctx, &client.Record{Topic: args[0], Key: k, Value: v, Partition: pin}))
			}
			if cmd.Flags().Changed("value") {
				var k []byte
				if key != "" {
					k = []byte(key)
				}
				send(k, []byte(value))
			} else if err := readLines(cmd.InOrStdin(), parseKey, key, send); err != nil {
				_ = p.Close(ctx)
				return err
			}
			closeCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			closeErr := p.Close(closeCtx)
			out := cmd.OutOrStdout()
			failed := 0
			var firstErr error
			for _, f := range futs {
				r, err := f.Wait(closeCtx)
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				if verbose || len(futs) == 1 {
					dup := ""
					if r.Duplicate {
						dup = " (duplicate)"
					}
					if ack == byzlogv1.Ack_ACK_COMMIT {
						fmt.Fprintf(out, "%s/%d@%d height %d%s\n", r.Topic, r.Partition, r.Offset, r.Height, dup)
					} else {
						fmt.Fprintf(out, "%s/%d accepted (%s)\n", r.Topic, r.Partition, acks)
					}
				}
			}
			elapsed := time.Since(start)
			fmt.Fprintf(cmd.ErrOrStderr(), "produced %d of %d records to %s in %s (%.0f records/s), acks=%s, producer %x\n",
				len(futs)-failed, len(futs), args[0], elapsed.Round(time.Millisecond), float64(len(futs)-failed)/elapsed.Seconds(), acks, p.PublicKey())
			switch {
			case failed > 0:
				return fmt.Errorf("%d records failed; the first: %w", failed, firstErr)
			case closeErr != nil:
				return closeErr
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&gateways, "gateway", gateways, "gateway addresses (host:port); more than one fails over")
	f.StringVar(&keyPath, "key-file", "", "producer key file from `byzlog keygen` (default: a new key for this run)")
	f.StringVar(&value, "value", "", "produce one record with this value instead of reading stdin")
	f.StringVar(&key, "key", "", "record key (for every record)")
	f.BoolVar(&parseKey, "parse-key", false, "read stdin lines as key<TAB>value")
	f.StringVar(&acks, "acks", acks, "none, mempool or commit")
	f.Int64Var(&partition, "partition", -1, "pin every record to this partition (default: the partitioner chooses)")
	f.BoolVar(&verbose, "verbose", false, "print every record's receipt")
	f.BoolVar(&zstd, "zstd", false, "compress batches with zstd")
	tf.add(f)
	tlsf.add(f)
	return cmd
}

func readLines(r io.Reader, parseKey bool, key string, send func(k, v []byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		var k []byte
		if key != "" {
			k = []byte(key)
		}
		if parseKey {
			kk, v, ok := strings.Cut(text, "\t")
			if !ok {
				return fmt.Errorf("stdin line %d has no TAB between key and value (--parse-key)", line)
			}
			k, text = []byte(kk), v
		}
		send(k, []byte(text))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin line %d: %w", line+1, err)
	}
	return nil
}

// parseAcks reads an --acks value.
func parseAcks(s string) (byzlogv1.Ack, error) {
	ack, ok := map[string]byzlogv1.Ack{"none": byzlogv1.Ack_ACK_NONE, "mempool": byzlogv1.Ack_ACK_MEMPOOL, "commit": byzlogv1.Ack_ACK_COMMIT}[s]
	if !ok {
		return 0, fmt.Errorf("--acks %q: want none, mempool or commit", s)
	}
	return ack, nil
}
