package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/byzlog/byzlog/gateway/client"
	"github.com/byzlog/byzlog/services/internal/gatewaylink"
)

// getOptions are the get command's flags.
type getOptions struct {
	gateway   string
	partition int64
	hexKey    bool
	after     int64
	maxAge    time.Duration
	tf        gatewaylink.Trust
	tlsf      gatewaylink.TLS
}

const getHelp = `Print the latest value of KEY in the compacted topic TOPIC, read as a table:
the key's latest record among those compaction has passed (each block's records
are passed at the start of the next block, after min.compaction.lag.ms), proven
against the app hash of a header this command verified from the root of trust
(--genesis, or --trust-height with --trust-hash). Neither the gateway nor the
node that answered is trusted: an older value, or a key said to be absent while
it holds a value, fails the proof. The key goes to the partition Kafka's
default partitioner picks (murmur2), unless --partition names one.

An older proof is a true statement about the past, so a node could hide later
writes behind one: the answer's proving header must be at most --max-age old
by the local clock, and with --after-offset its compaction must have passed
that offset (to read your own write: compaction passes a block's records at
the start of the next).

Prints the value, then on stderr the offset, the height it was proven at and
how far compaction had passed. Exits 1 when the key has no value (never
written, deleted by a tombstone, or removed by retention), saying which.`

func newGetCommand() *cobra.Command {
	o := &getOptions{gateway: gatewaylink.LocalnetGateway, partition: -1}
	cmd := &cobra.Command{
		Use:   "get TOPIC KEY",
		Short: "Print a key's latest value in a compacted topic, proven against the chain",
		Long:  getHelp,
		Args:  cobra.ExactArgs(2),
		RunE:  func(cmd *cobra.Command, args []string) error { return runGet(cmd, o, args[0], args[1]) },
	}
	f := cmd.Flags()
	f.StringVar(&o.gateway, "gateway", o.gateway, "gateway address (host:port)")
	f.Int64Var(&o.partition, "partition", o.partition, "the partition to read (default: the one Kafka's partitioner picks for KEY)")
	f.BoolVar(&o.hexKey, "hex", false, "KEY is hex (for keys that are not text)")
	f.Int64Var(&o.after, "after-offset", -1, "wait (up to 30 s) for an answer that covers this offset of the key's partition, e.g. your write's, from its receipt")
	f.DurationVar(&o.maxAge, "max-age", client.DefaultMaxAge, "refuse an answer whose proving header is older than this by the local clock (0: no bound)")
	o.tf.Add(f)
	o.tlsf.Add(f)
	return cmd
}

func runGet(cmd *cobra.Command, o *getOptions, topic, keyArg string) error {
	key := []byte(keyArg)
	if o.hexKey {
		var err error
		if key, err = hex.DecodeString(keyArg); err != nil {
			return fmt.Errorf("--hex: KEY %q is not hex: %w", keyArg, err)
		}
	}
	if len(key) == 0 {
		return fmt.Errorf("KEY is empty: records of a compacted topic all have a key")
	}
	trust, err := o.tf.Root(cmd.Flags())
	if err != nil {
		return err
	}
	transport, err := o.tlsf.ProducerOption(cmd.Flags())
	if err != nil {
		return err
	}
	tbl, err := client.NewTable(o.gateway, trust, transport)
	if err != nil {
		return err
	}
	defer tbl.Close()
	tbl.MaxAge = o.maxAge
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	l, err := getFresh(ctx, tbl, o, topic, key)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("proven at height %d; compaction passed offsets below %d of %d", l.Height, l.CleanOffset, l.NextOffset)
	switch {
	case l.Tombstone:
		return fmt.Errorf("key %q was deleted (a tombstone at offset %d; %s)", keyArg, l.Offset, where)
	case l.Removed:
		return fmt.Errorf("key %q has no value: retention removed its latest record (offset %d; %s)", keyArg, l.Offset, where)
	case l.Record == nil:
		return fmt.Errorf("key %q has no value in %s/%d (%s)", keyArg, topic, tblPartition(l, o, key), where)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s\n", l.Record.Value)
	fmt.Fprintf(cmd.ErrOrStderr(), "%s/%d@%d, %s\n", topic, l.Record.Partition, l.Offset, where)
	return nil
}

// getFresh reads key, and with --after-offset again until compaction has
// passed that offset (each block's records are passed at the start of the
// next) or ctx ends.
func getFresh(ctx context.Context, tbl *client.Table, o *getOptions, topic string, key []byte) (*client.Latest, error) {
	for {
		var l *client.Latest
		var err error
		if o.partition >= 0 {
			l, err = tbl.GetPartition(ctx, topic, uint32(o.partition), key, uint64(o.after+1))
		} else if l, err = tbl.Get(ctx, topic, key); err == nil && o.after >= 0 && l.CleanOffset <= uint64(o.after) {
			err = fmt.Errorf("%w: compaction had passed %d records of the partition, not offset %d", client.ErrStale, l.CleanOffset, o.after)
		}
		if !errors.Is(err, client.ErrStale) || o.after < 0 {
			return l, err
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return nil, err
		}
	}
}

// tblPartition is the partition a get read.
func tblPartition(l *client.Latest, o *getOptions, key []byte) uint32 {
	if o.partition >= 0 {
		return uint32(o.partition)
	}
	return client.KafkaPartition(key, l.Partitions)
}
