package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/indexer/consumer"
	"github.com/byzlog/byzlog/indexer/verify"
	"github.com/byzlog/byzlog/services/internal/gatewaylink"
	"github.com/byzlog/byzlog/services/internal/keyfile"
	"github.com/byzlog/byzlog/services/internal/natsconn"
	"github.com/byzlog/byzlog/services/internal/nodelink"
)

// consumeOptions are the consume command's flags.
type consumeOptions struct {
	partitions    []uint
	fromBeginning bool
	offset        uint64
	since         string
	group         string
	keyPath       string
	commitEvery   int
	count         int
	asJSON        bool
	natsURL       string
	gateway       string
	timeout       time.Duration
	verify        bool
	tf            gatewaylink.Trust
	tlsf          gatewaylink.TLS
	natsf         natsconn.Flags
	nodes         string
	link          nodelink.Flags
}

const consumeHelp = `Print TOPIC's records as byzlog-indexer published them to NATS JetStream.

Output, one line per record on stdout:
  PARTITION OFFSET KEY VALUE
separated by single spaces. KEY is - for a record without a key. KEY and VALUE
are printed as they are when they are UTF-8 without control characters and do
not start with a double quote (KEY also without spaces, and not empty or -);
otherwise as a quoted Go string ("a b", "\x00\n"), so a record is always one
line and VALUE is the rest of it.

With --json, one JSON object per line instead: topic, partition, offset,
height, timestamp and create_time (RFC 3339), producer (hex), sequence, key,
value, and headers [{key, value}]. A key or value that is valid UTF-8 is a
JSON string under "key"/"value", any other is base64 under "key_base64"/
"value_base64"; a record without a key has neither.

Where it starts in each partition: --from-beginning (the default without
--group), --offset N (the first record at or past offset N), --since T (the
first record committed at or after T: RFC 3339, or a duration such as 10m
meaning that long ago). With --group the default is the group's committed
offsets, read through --gateway (a partition without one starts at the
beginning); once the group's JetStream consumer exists, it resumes after the
records the group acknowledged and the start flags no longer apply.

With --group, several processes of the same group share the records. With
--key-file too, the group's offsets (the offset after the last record printed,
per partition) are committed on the chain, signed with that key, every
--commit-every records and when it stops.

With --verify, each record is proven before it is printed: headers are
verified with CometBFT's light client from --genesis (through --nodes, at
least two), and a Merkle proof of the record from a node must lead to the app
hash of the header after its block. A record that fails is not printed; it is
reported on stderr like a malformed message. It costs a query per record.

Offset commits are signed for the chain of --genesis (or --chain-id) and
verified like producer receipts: the commit and its result must be in a block
whose header the consumer's light client verified. --no-verify takes the
gateway's word for them.

It stops after --count records, after --timeout without a new record, or on
Ctrl-C, and then exits 0, except: when --timeout stops it before --count
records arrived, or when it skipped a malformed message or found records
missing from a partition (reported on stderr as it goes), it exits 1. A
summary goes to stderr.`

func newConsumeCommand() *cobra.Command {
	o := &consumeOptions{commitEvery: 1000, natsURL: natsconn.LocalnetURL, gateway: gatewaylink.LocalnetGateway,
		nodes: localnetNodes}
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print a topic's records, from NATS JetStream where the indexer publishes them",
		Long:  consumeHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
	}
	o.addFlags(cmd.Flags())
	cmd.MarkFlagsMutuallyExclusive("from-beginning", "offset", "since")
	return cmd
}

func (o *consumeOptions) addFlags(f *pflag.FlagSet) {
	f.UintSliceVar(&o.partitions, "partition", nil, "read only this partition; repeat or comma-separate for more (none: every partition)")
	f.BoolVar(&o.fromBeginning, "from-beginning", false, "start at each partition's first record (default without --group)")
	f.Uint64Var(&o.offset, "offset", 0, "start at the first record at or past this offset, in each partition")
	f.StringVar(&o.since, "since", "", "start at the first record committed at or after this time: RFC 3339, or a duration ago (10m)")
	f.StringVar(&o.group, "group", "", "consumer group: share the records with its other members and resume where it stopped")
	f.StringVar(&o.keyPath, "key-file", "", "consumer key `FILE` (from byzlog keygen) that signs the group's offset commits (default: no commits)")
	f.IntVar(&o.commitEvery, "commit-every", o.commitEvery, "with --key-file, commit every this many records (0: only when stopping)")
	f.IntVar(&o.count, "count", 0, "stop after this many records (0: no limit)")
	f.BoolVar(&o.asJSON, "json", false, "print one JSON object per record")
	f.StringVar(&o.natsURL, "nats", o.natsURL, "NATS server URL")
	o.natsf.Add(f, natsconn.Flags{User: "consumer", PasswordFile: gatewaylink.LocalnetNATSPassword, CA: gatewaylink.LocalnetCA})
	o.natsf.AddKeyFile(f)
	f.StringVar(&o.gateway, "gateway", o.gateway, "gateway address (host:port), for committed offsets and commits")
	f.DurationVar(&o.timeout, "timeout", 0, "stop after this long without a new record (0: wait forever)")
	f.BoolVar(&o.verify, "verify", false, "prove each record against light-client verified headers before printing it")
	o.tf.Add(f)
	o.tlsf.Add(f)
	f.StringVar(&o.nodes, "nodes", o.nodes, "with --verify: "+nodelink.NodesHelp+"; at least two")
	o.link.Add(f, nodelink.Flags{CA: gatewaylink.LocalnetCA})
}

// run subscribes to topic as o says, prints its records until one
// of the stop conditions, then commits and reports.
func (o *consumeOptions) run(cmd *cobra.Command, topic string) error {
	f := cmd.Flags()
	sopts, err := o.subscribeOptions(f)
	if err != nil {
		return err
	}
	if o.count < 0 || o.commitEvery < 0 || o.timeout < 0 {
		return errors.New("--count, --commit-every and --timeout must not be negative")
	}
	if o.keyPath != "" && o.group == "" {
		return errors.New("--key-file signs a group's offset commits: give --group too")
	}
	copts, err := o.clientOptions(cmd)
	if err != nil {
		return err
	}
	c, err := consumer.Connect(o.natsURL, copts...)
	if err != nil {
		return fmt.Errorf("%w (--nats)", err)
	}
	defer c.Close()
	ctx := cmd.Context()
	sub, err := c.Subscribe(ctx, topic, sopts...)
	if err != nil {
		if o.group != "" && !f.Changed("offset") && !f.Changed("since") && !o.fromBeginning {
			return fmt.Errorf("%w (the group's committed offsets are read through --gateway %s; pass --from-beginning, --offset or --since to start without them)", err, o.gateway)
		}
		return err
	}
	run := consumeRun{sub: sub, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), json: o.asJSON,
		count: o.count, timeout: o.timeout, commit: o.keyPath != "", commitEvery: o.commitEvery}
	runErr := run.loop(ctx)
	return run.stop(ctx, topic, runErr)
}

// subscribeOptions are the partitions, the start and the group o asks for.
func (o *consumeOptions) subscribeOptions(f *pflag.FlagSet) ([]consumer.SubscribeOption, error) {
	var sopts []consumer.SubscribeOption
	for _, p := range o.partitions {
		if p > 1<<32-1 {
			return nil, fmt.Errorf("--partition %d: too large", p)
		}
		sopts = append(sopts, consumer.WithPartitions(uint32(p)))
	}
	switch {
	case f.Changed("offset"):
		sopts = append(sopts, consumer.FromOffset(o.offset))
	case f.Changed("since"):
		t, err := parseSince(o.since, time.Now())
		if err != nil {
			return nil, err
		}
		sopts = append(sopts, consumer.FromTime(t))
	case o.fromBeginning || o.group == "":
		sopts = append(sopts, consumer.FromBeginning())
	default:
		sopts = append(sopts, consumer.FromCommitted())
	}
	if o.group != "" {
		sopts = append(sopts, consumer.WithGroup(o.group))
	}
	return sopts, nil
}

// clientOptions are the consumer's connections: the gateway (for a
// group's offsets), the commit key, the verifier and NATS.
func (o *consumeOptions) clientOptions(cmd *cobra.Command) ([]consumer.Option, error) {
	f := cmd.Flags()
	var copts []consumer.Option
	// A group's committed offsets are read, and its commits made,
	// through the gateway; a run that starts elsewhere and commits
	// nothing needs none.
	startsElsewhere := o.fromBeginning || f.Changed("offset") || f.Changed("since")
	if o.group != "" && (o.keyPath != "" || !startsElsewhere) {
		transport, err := o.tlsf.ConsumerOption(f)
		if err != nil {
			return nil, err
		}
		copts = append(copts, consumer.WithGateway(o.gateway), transport)
	}
	if o.keyPath != "" {
		k, err := keyfile.Read(o.keyPath)
		if err != nil {
			return nil, fmt.Errorf("--key-file: %w", err)
		}
		trust, err := o.tf.Root(f)
		if err != nil {
			return nil, err
		}
		copts = append(copts, consumer.WithKey(k), consumer.WithTrust(trust))
	}
	if o.verify {
		l, err := o.link.Link(f)
		if err != nil {
			return nil, err
		}
		h, err := headersFrom(cmd.Context(), o.tf.Genesis, o.nodes, l)
		if err != nil {
			return nil, err
		}
		copts = append(copts, consumer.WithVerifier(h))
	}
	o.natsf.Insecure = o.tlsf.Insecure
	natsOpts, err := o.natsf.Options(f)
	if err != nil {
		return nil, err
	}
	errOut := cmd.ErrOrStderr()
	natsOpts = append(natsOpts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			fmt.Fprintf(errOut, "byzlog consume: NATS refused a request: %v (a topic whose config lists readers is read as one of them, --nats-key-file)\n", err)
		}
	}))
	return append(copts, consumer.WithNATSOptions(natsOpts...)), nil
}

// consumeRun is one consume command's loop and its counts.
type consumeRun struct {
	sub         *consumer.Subscription
	out, errOut io.Writer
	json        bool
	count       int
	timeout     time.Duration
	commit      bool
	commitEvery int

	n       int   // records printed
	skipped int   // malformed messages and gaps reported
	height  int64 // of the last commit
}

// loop prints records until --count, --timeout or ctx says stop.
func (r *consumeRun) loop(ctx context.Context) error {
	for r.count == 0 || r.n < r.count {
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if r.timeout > 0 {
			nctx, cancel = context.WithTimeout(ctx, r.timeout)
		}
		rec, err := r.sub.Next(nctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil // interrupted
		case errors.Is(err, context.DeadlineExceeded):
			if r.count > 0 {
				return fmt.Errorf("no record for %s (--timeout) after %d of %d records (--count)", r.timeout, r.n, r.count)
			}
			return nil
		case errors.Is(err, consumer.ErrMalformed), errors.Is(err, consumer.ErrGap), errors.Is(err, consumer.ErrUnverified):
			r.skipped++
			fmt.Fprintln(r.errOut, "byzlog:", err)
			continue
		case err != nil:
			return err
		}
		if err := r.print(rec); err != nil {
			return fmt.Errorf("write record: %w", err)
		}
		r.n++
		if r.commit && r.commitEvery > 0 && r.n%r.commitEvery == 0 {
			if err := r.commitNow(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// stop commits (when the run commits) and closes the subscription, even
// when interrupted, prints the summary and returns the first error: the
// loop's (runErr), the commit's, the close's, or the problems reported.
func (r *consumeRun) stop(ctx context.Context, topic string, runErr error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var commitErr error
	if r.commit {
		commitErr = r.commitNow(ctx)
	}
	closeErr := r.sub.Close()
	summary := fmt.Sprintf("consumed %d records from %s", r.n, topic)
	if r.height > 0 {
		summary += fmt.Sprintf(", offsets committed at height %d", r.height)
	}
	if r.skipped > 0 {
		summary += fmt.Sprintf(", %d problems reported", r.skipped)
	}
	fmt.Fprintln(r.errOut, summary)
	switch {
	case runErr != nil:
		return runErr
	case commitErr != nil:
		return commitErr
	case closeErr != nil:
		return closeErr
	case r.skipped > 0:
		return fmt.Errorf("%d malformed messages or gaps (see above)", r.skipped)
	}
	return nil
}

func (r *consumeRun) commitNow(ctx context.Context) error {
	h, err := r.sub.Commit(ctx)
	if err != nil {
		return err
	}
	if h > 0 {
		r.height = h
	}
	return nil
}

func (r *consumeRun) print(rec *consumer.Record) error {
	if !r.json {
		key := "-"
		if rec.Key != nil {
			key = plain(rec.Key, false)
		}
		_, err := fmt.Fprintf(r.out, "%d %d %s %s\n", rec.Partition, rec.Offset, key, plain(rec.Value, true))
		return err
	}
	j := jsonRecord{
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Height: rec.Height,
		Timestamp: rec.Timestamp.Format(time.RFC3339Nano), CreateTime: rec.CreateTime.Format(time.RFC3339Nano),
		Producer: hex.EncodeToString(rec.Producer), Sequence: rec.Sequence, Headers: []jsonHeader{},
	}
	j.Key, j.KeyBase64 = jsonBytes(rec.Key)
	j.Value, j.ValueBase64 = jsonBytes(rec.Value)
	if j.Value == nil && j.ValueBase64 == nil {
		j.Value = new(string) // an empty value
	}
	for _, h := range rec.Headers {
		jh := jsonHeader{Key: h.Key}
		jh.Value, jh.ValueBase64 = jsonBytes(h.Value)
		j.Headers = append(j.Headers, jh)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = r.out.Write(append(b, '\n'))
	return err
}

type jsonRecord struct {
	Topic       string       `json:"topic"`
	Partition   uint32       `json:"partition"`
	Offset      uint64       `json:"offset"`
	Height      int64        `json:"height"`
	Timestamp   string       `json:"timestamp"`
	CreateTime  string       `json:"create_time"`
	Producer    string       `json:"producer"`
	Sequence    uint64       `json:"sequence"`
	Key         *string      `json:"key,omitempty"`
	KeyBase64   *string      `json:"key_base64,omitempty"`
	Value       *string      `json:"value,omitempty"`
	ValueBase64 *string      `json:"value_base64,omitempty"`
	Headers     []jsonHeader `json:"headers"`
}

type jsonHeader struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
}

// jsonBytes is b as a JSON string when it is valid UTF-8, else as base64;
// both nil for nil b.
func jsonBytes(b []byte) (text, b64 *string) {
	if b == nil {
		return nil, nil
	}
	s := string(b)
	if utf8.ValidString(s) {
		return &s, nil
	}
	e := base64.StdEncoding.EncodeToString(b)
	return nil, &e
}

// plain is b as it is when it is UTF-8 without control characters (and,
// unless spaceOK, without spaces, a leading quote or being "-" or empty),
// else quoted as a Go string.
func plain(b []byte, spaceOK bool) string {
	s := string(b)
	ok := utf8.ValidString(s) && !strings.HasPrefix(s, `"`) && (spaceOK || (s != "" && s != "-"))
	for _, c := range s {
		if !ok {
			break
		}
		ok = !unicode.IsControl(c) && (spaceOK || !unicode.IsSpace(c))
	}
	if ok {
		return s
	}
	return strconv.Quote(s)
}

// parseSince reads --since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (10m)", s)
	}
	return now.Add(-d), nil
}

// headersFrom starts a light client for --verify from a genesis file,
// through the nodes of nodeList.
func headersFrom(ctx context.Context, genesisPath, nodeList string, link verify.NodeLink) (*verify.Headers, error) {
	addrs, err := nodelink.ParseNodes(nodeList, link.Insecure)
	if err != nil {
		return nil, fmt.Errorf("--nodes: %w", err)
	}
	gen, trust, err := nodelink.TrustGenesis(ctx, genesisPath, addrs, link, 0)
	if err != nil {
		return nil, fmt.Errorf("--verify: %w", err)
	}
	h, err := verify.NewHeaders(gen.ChainID, addrs, link, trust, zerolog.Nop())
	if err != nil {
		return nil, fmt.Errorf("--verify: %w", err)
	}
	return h, nil
}
