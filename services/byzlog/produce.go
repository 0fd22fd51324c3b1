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
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/gatewaylink"
	"github.com/byzlog/byzlog/services/internal/keyfile"
)

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

// topicFlags are the flags every topic subcommand shares: where the
// gateway is and how to reach it.
type topicFlags struct {
	gateway string
	tlsf    gatewaylink.TLS
}

func newTopicCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "topic", Short: "Create, list, describe and delete topics"}
	tf := gatewayGroup(cmd)
	cmd.AddCommand(newTopicCreateCommand(tf), newTopicListCommand(tf), newTopicDescribeCommand(tf), newTopicDeleteCommand(tf))
	return cmd
}

// topicCreateOptions are topic create's own flags.
type topicCreateOptions struct {
	adminKey         string
	trust            gatewaylink.Trust
	cfg              *byzlogv1.TopicConfig
	allowed, readers []string
	cleanupPolicy    string
	deleteRetention  time.Duration
}

func newTopicCreateCommand(tf *topicFlags) *cobra.Command {
	o := &topicCreateOptions{cfg: &byzlogv1.TopicConfig{Partitions: 1}}
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic (signed with an admin key listed in genesis)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, tf, args[0])
		},
	}
	f := create.Flags()
	f.StringVar(&o.adminKey, "admin-key", "", "admin key file (the localnet's is DIR/admin.key)")
	f.Uint32Var(&o.cfg.Partitions, "partitions", o.cfg.Partitions, "number of partitions")
	f.Uint32Var(&o.cfg.MaxRecordBytes, "max-record-bytes", 0, "largest record (0: the chain's limit)")
	f.Int64Var(&o.cfg.RetentionMs, "retention-ms", 0, "delete records older than this (0: keep forever)")
	f.Int64Var(&o.cfg.RetentionBytes, "retention-bytes", 0, "keep at most this many bytes per partition (0: no limit)")
	f.StringSliceVar(&o.allowed, "allowed-producer", nil, "public key (hex) allowed to produce; repeat for more (none: any key)")
	f.StringSliceVar(&o.readers, "reader", nil, "public key (hex) allowed to consume, as a NATS nkey user (byzlog consume --nats-key-file); repeat for more (none: every consumer the cluster admits)")
	f.StringVar(&o.cleanupPolicy, "cleanup-policy", "delete", "delete (retention removes the oldest records), compact (the chain keeps the latest record of each key; records need a key; retention is off) or compact,delete (both), as Kafka's cleanup.policy")
	f.DurationVar(&o.deleteRetention, "delete-retention", 24*time.Hour, "on a compacted topic, how long a tombstone (a key without a value) stays once compaction passed it (Kafka's delete.retention.ms)")
	f.Int64Var(&o.cfg.MinCompactionLagMs, "min-compaction-lag-ms", 0, "on a compacted topic, the least time in ms a record stays before compaction may remove it")
	o.trust.Add(f)
	_ = create.MarkFlagRequired("admin-key")
	return create
}

// run creates topic name, signed with the admin key.
func (o *topicCreateOptions) run(cmd *cobra.Command, tf *topicFlags, name string) error {
	key, err := keyfile.Read(o.adminKey)
	if err != nil {
		return fmt.Errorf("--admin-key: %w", err)
	}
	cfg := o.cfg
	if cfg.AllowedProducers, err = publicKeys("allowed-producer", o.allowed); err != nil {
		return err
	}
	if cfg.CleanupPolicy, err = wire.ParseCleanupPolicy(o.cleanupPolicy); err != nil {
		return fmt.Errorf("--cleanup-policy: %w", err)
	}
	if cmd.Flags().Changed("delete-retention") {
		ms := o.deleteRetention.Milliseconds()
		cfg.DeleteRetentionMs = &ms
	}
	if cfg.Readers, err = publicKeys("reader", o.readers); err != nil {
		return err
	}
	trust, err := o.trust.Root(cmd.Flags())
	if err != nil {
		return err
	}
	transport, err := tf.tlsf.ProducerOption(cmd.Flags())
	if err != nil {
		return err
	}
	adm, err := client.NewAdmin(tf.gateway, key, trust, transport)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	h, err := adm.CreateTopic(ctx, name, cfg)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "created topic %s with %d partitions at height %d\n", name, cfg.Partitions, h)
	return nil
}

// compactionText says how a compacted topic is compacted ("" for one that
// is not).
func compactionText(c *byzlogv1.TopicConfig) string {
	switch c.GetCleanupPolicy() {
	case byzlogv1.CleanupPolicy_CLEANUP_COMPACT:
		return fmt.Sprintf(", compacted (tombstones kept %d ms, min lag %d ms; retention off)", wire.DeleteRetentionMs(c), c.GetMinCompactionLagMs())
	case byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE:
		return fmt.Sprintf(", compacted (tombstones kept %d ms, min lag %d ms) and retained", wire.DeleteRetentionMs(c), c.GetMinCompactionLagMs())
	}
	return ""
}

// dialGateway connects to the topic commands' gateway.
func (tf *topicFlags) dialGateway(cmd *cobra.Command) (byzlogv1.GatewayClient, func(), error) {
	tc, err := tf.tlsf.Config(cmd.Flags())
	if err != nil {
		return nil, nil, err
	}
	return gatewaylink.Dial(tf.gateway, tc)
}

func newTopicListCommand(tf *topicFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List topics with their partitions and record counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gw, closeFn, err := tf.dialGateway(cmd)
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
}

func newTopicDescribeCommand(tf *topicFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a topic's config and each partition's offsets",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			gw, closeFn, err := tf.dialGateway(cmd)
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
			fmt.Fprintf(out, "topic %s (created at height %d): %d partitions, max record bytes %d, retention %d ms / %d bytes, %d allowed producers, %s%s\n",
				t.Name, t.CreatedHeight, c.GetPartitions(), c.GetMaxRecordBytes(), c.GetRetentionMs(), c.GetRetentionBytes(), len(c.GetAllowedProducers()), readersText(c.GetReaders()), compactionText(c))
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PARTITION\tLOG START\tNEXT OFFSET\tBYTES")
			for _, p := range t.Partitions {
				fmt.Fprintf(w, "%d\t%d\t%d\t%d\n", p.Partition, p.LogStartOffset, p.NextOffset, p.SizeBytes)
			}
			return w.Flush()
		},
	}
}

// produceOptions are the produce command's flags.
type produceOptions struct {
	gateways  []string
	keyPath   string
	value     string
	key       string
	parseKey  bool
	acks      string
	partition int64
	verbose   bool
	zstd      bool
	txnID     string
	tf        gatewaylink.Trust
	tlsf      gatewaylink.TLS
}

const produceHelp = `Produce records to TOPIC through a gateway. With --value one record is sent;
otherwise every line of stdin is a record (with --parse-key, "key<TAB>value").
Records without a key spread over partitions like Kafka's sticky partitioner;
keyed records go where Kafka's murmur2 partitioner puts them. Prints each
record's topic/partition@offset (--verbose, or a single record), then a summary.
Without --key, a new key is generated for this run (a new producer identity).

Every receipt is verified before it is printed: its proof must lead to a header
the producer's light client verified from --genesis (or --trust-height and
--trust-hash), so a gateway cannot acknowledge records the chain did not write.
--no-verify takes receipts on the gateway's word.

With --transactional-id every record goes in one Kafka transaction under that
id (the key comes to own it): readers of committed data (NATS, byzlog consume,
a Kafka client at read_committed) see all of them or none.`

func newProduceCommand() *cobra.Command {
	o := &produceOptions{gateways: []string{gatewaylink.LocalnetGateway}, acks: "commit", partition: -1}
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce records: --value for one, else one record per line of stdin",
		Long:  produceHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.gateways, "gateway", o.gateways, "gateway addresses (host:port); more than one fails over")
	f.StringVar(&o.keyPath, "key-file", "", "producer key file from `byzlog keygen` (default: a new key for this run)")
	f.StringVar(&o.value, "value", "", "produce one record with this value instead of reading stdin")
	f.StringVar(&o.key, "key", "", "record key (for every record)")
	f.BoolVar(&o.parseKey, "parse-key", false, "read stdin lines as key<TAB>value")
	f.StringVar(&o.acks, "acks", o.acks, "none, mempool or commit")
	f.Int64Var(&o.partition, "partition", -1, "pin every record to this partition (default: the partitioner chooses)")
	f.BoolVar(&o.verbose, "verbose", false, "print every record's receipt")
	f.BoolVar(&o.zstd, "zstd", false, "compress batches with zstd")
	f.StringVar(&o.txnID, "transactional-id", "", "write every record atomically, as one Kafka transaction under this id (needs --acks commit)")
	o.tf.Add(f)
	o.tlsf.Add(f)
	return cmd
}

// run sends the records (--value, or stdin's lines) to topic, waits for
// every receipt and reports them.
func (o *produceOptions) run(cmd *cobra.Command, topic string) error {
	ack, err := gatewaylink.ParseAcks(o.acks)
	if err != nil {
		return err
	}
	if o.txnID != "" && ack != byzlogv1.Ack_ACK_COMMIT {
		return fmt.Errorf("--transactional-id writes are answered once committed: use --acks commit, not %s", o.acks)
	}
	ctx := cmd.Context()
	p, err := o.producer(cmd, ack)
	if err != nil {
		return err
	}
	var pin *uint32
	if o.partition >= 0 {
		v := uint32(o.partition)
		pin = &v
	}
	start := time.Now()
	var futs []*client.Future
	var atomic []*client.Record
	send := func(k, v []byte) {
		r := &client.Record{Topic: topic, Key: k, Value: v, Partition: pin}
		if o.txnID != "" {
			atomic = append(atomic, r)
			return
		}
		futs = append(futs, p.Produce(ctx, r))
	}
	if cmd.Flags().Changed("value") {
		var k []byte
		if o.key != "" {
			k = []byte(o.key)
		}
		send(k, []byte(o.value))
	} else if err := readLines(cmd.InOrStdin(), o.parseKey, o.key, send); err != nil {
		_ = p.Close(ctx)
		return err
	}
	closeCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if o.txnID != "" {
		return o.writeAtomically(closeCtx, cmd, p, topic, atomic, start)
	}
	closeErr := p.Close(closeCtx)
	failed, firstErr := o.printReceipts(closeCtx, cmd.OutOrStdout(), futs, ack)
	elapsed := time.Since(start)
	fmt.Fprintf(cmd.ErrOrStderr(), "produced %d of %d records to %s in %s (%.0f records/s), acks=%s, producer %x\n",
		len(futs)-failed, len(futs), topic, elapsed.Round(time.Millisecond), float64(len(futs)-failed)/elapsed.Seconds(), o.acks, p.PublicKey())
	switch {
	case failed > 0:
		return fmt.Errorf("%d records failed; the first: %w", failed, firstErr)
	case closeErr != nil:
		return closeErr
	}
	return nil
}

// writeAtomically writes records as one transaction (--transactional-id)
// and reports where they landed.
func (o *produceOptions) writeAtomically(ctx context.Context, cmd *cobra.Command, p *client.Producer, topic string, records []*client.Record, start time.Time) error {
	receipts, err := p.WriteAtomically(ctx, o.txnID, records)
	closeErr := p.Close(ctx)
	if err != nil {
		return fmt.Errorf("transaction %q of %d records to %s: %w", o.txnID, len(records), topic, err)
	}
	out := cmd.OutOrStdout()
	for _, r := range receipts {
		if o.verbose || len(receipts) == 1 {
			fmt.Fprintf(out, "%s/%d@%d height %d\n", r.Topic, r.Partition, r.Offset, r.Height)
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "committed %d records to %s in one transaction (%q) in %s, producer %x\n",
		len(receipts), topic, o.txnID, time.Since(start).Round(time.Millisecond), p.PublicKey())
	return closeErr
}

// producer starts the SDK producer o's flags describe.
func (o *produceOptions) producer(cmd *cobra.Command, ack byzlogv1.Ack) (*client.Producer, error) {
	trust, err := o.tf.Root(cmd.Flags())
	if err != nil {
		return nil, err
	}
	transport, err := o.tlsf.ProducerOption(cmd.Flags())
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithTrust(trust), client.WithGateways(o.gateways...), client.WithAcks(ack), transport}
	if o.keyPath != "" {
		k, err := keyfile.Read(o.keyPath)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		opts = append(opts, client.WithKey(k))
	}
	if o.zstd {
		opts = append(opts, client.WithCompression(byzlogv1.Codec_CODEC_ZSTD))
	}
	return client.NewProducer(cmd.Context(), opts...)
}

// printReceipts waits for every send and prints its receipt (every one
// with --verbose, else only a single record's); it returns how many
// failed and the first failure.
func (o *produceOptions) printReceipts(ctx context.Context, out io.Writer, futs []*client.Future, ack byzlogv1.Ack) (failed int, firstErr error) {
	for _, f := range futs {
		r, err := f.Wait(ctx)
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if o.verbose || len(futs) == 1 {
			dup := ""
			if r.Duplicate {
				dup = " (duplicate)"
			}
			if ack == byzlogv1.Ack_ACK_COMMIT {
				fmt.Fprintf(out, "%s/%d@%d height %d%s\n", r.Topic, r.Partition, r.Offset, r.Height, dup)
			} else {
				fmt.Fprintf(out, "%s/%d accepted (%s)\n", r.Topic, r.Partition, o.acks)
			}
		}
	}
	return failed, firstErr
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
