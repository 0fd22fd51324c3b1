// Command byzlog-app is byzlog's ABCI application: the replicated log state
// machine that a stock CometBFT node drives over gRPC (or CometBFT's socket
// protocol), with its state in RocksDB. This file is wiring only.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/abciapp/app"
	"github.com/byzlog/byzlog/abciapp/store"
	"github.com/byzlog/byzlog/services/internal/daemon"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

// options are byzlog-app's settings, one flag each.
type options struct {
	daemon.Options
	serve     app.ServeConfig
	data      dataOptions
	app       app.Config
	peers     peerOptions
	dataDir   string
	gcPercent int
}

func defaultOptions() options {
	return options{Options: daemon.Default(), serve: app.DefaultServeConfig(), app: app.DefaultConfig(),
		dataDir: "byzlog-app-data", gcPercent: 400}
}

// Validate says which setting is wrong.
func (o options) Validate() error {
	if err := o.serve.Validate(); err != nil {
		return err
	}
	if err := o.data.validate(); err != nil {
		return err
	}
	if err := o.app.Validate(); err != nil {
		return err
	}
	return o.Options.Validate()
}

const help = `byzlog-app serves byzlog's replicated log state machine to one CometBFT node.

Run one byzlog-app next to each validator. With the default gRPC transport the
node's config.toml needs:

  proxy_app = "127.0.0.1:26658"   # host:port, no tcp:// scheme
  abci = "grpc"

With --transport socket use proxy_app = "tcp://127.0.0.1:26658" and abci = "socket".

byzlog-app keeps its own mempool, so the node also needs

  [mempool]
  type = "app"

Admission, order, the bounds below and expiry are the app's; the node only
gossips what the app reaps. A transaction is ready when it applies in order
on committed state and the ready ones before it; one whose earlier sequence or
nonce has not arrived waits apart (bounded, expiring after --mempool-waiting-heights
blocks) and is never proposed until ready.
State is kept in RocksDB under --data-dir; on restart the app reports its last
committed height and CometBFT replays the blocks it is missing.

From rules version 3 a block carries a large transaction (a gateway's bundle)
as a reference to it, its SHA-256; the bundle itself travels by mempool gossip.
A validator that lacks one a block references (it arrived late, or the node
restarted or is catching up) fetches it from the other nodes in --peer-rpc,
over https checked against --peer-tls-ca. Every answer is checked against its
hash, so any node of the chain will do.

With --data-listen the app also serves the node data service (gRPC, TLS with
--data-tls-cert): gateways submit bundles and gateways and indexers read the
bundles blocks reference there (their --node-data), as broadcast_tx_sync and
abci_query would but without JSON-RPC's hex and base64, which cost the node
more CPU than anything else it serves under load.`

func newCommand() *cobra.Command {
	o := defaultOptions()
	cmd := &cobra.Command{
		Use:           "byzlog-app",
		Short:         "byzlog's ABCI application, driven by a stock CometBFT node",
		Long:          help,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(o.gcPercent)
			}
			err := run(cmd.Context(), o)
			if err != nil {
				fmt.Fprintln(os.Stderr, "byzlog-app:", err)
			}
			return err
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *options) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.serve.Listen, "listen", o.serve.Listen, "where to serve ABCI: host:port, or unix:///path for a unix socket (only this host's processes with access to the file reach it)")
	f.StringVar(&o.serve.Transport, "transport", o.serve.Transport, "ABCI transport: grpc or socket")
	f.BoolVar(&o.serve.PrivateNetwork, "private-network", false, "allow --listen on an address other than loopback: one on a network only this validator's node reaches (ABCI has no authentication or encryption)")
	f.StringVar(&o.dataDir, "data-dir", o.dataDir, "directory of the RocksDB state")
	f.StringVar(&o.app.BundleDir, "bundle-dir", "", "where the bundles blocks reference (rules version 3) are kept: a RocksDB of block data beside the state, pruned with --retain-blocks (default: DATA_DIR.bundles beside the data directory)")
	f.StringVar(&o.app.SnapshotDir, "snapshot-dir", "", "where checkpoints of the states the chain hashes (genesis snapshot_interval) are kept, for state sync (default: DATA_DIR.snapshots beside the data directory)")
	f.IntVar(&o.app.SnapshotKeep, "snapshot-keep", o.app.SnapshotKeep, "how many hashed checkpoints stay (each holds on to the table files of its state)")
	f.Int64Var(&o.app.RetainBlocks, "retain-blocks", 0, "prune: let CometBFT drop blocks older than the last N (at least 100), but never one at or after the oldest snapshot kept or one a registered indexer has not reported published; 0 keeps every block (query /pruning for what holds it back)")
	mp := &o.app.Mempool
	f.Int64Var(&mp.MaxBytes, "mempool-max-bytes", mp.MaxBytes, "bytes of transactions the mempool holds, ready and waiting")
	f.IntVar(&mp.MaxTxs, "mempool-max-txs", mp.MaxTxs, "transactions the mempool holds, ready and waiting (all are checked again after every block)")
	f.Int64Var(&mp.MaxCost, "mempool-max-cost", mp.MaxCost, "bytes the held transactions may inflate to (records, headers)")
	f.Int64Var(&mp.MaxWaitingBytes, "mempool-max-waiting-bytes", mp.MaxWaitingBytes, "bytes of transactions waiting for an earlier sequence or nonce")
	f.IntVar(&mp.MaxWaiting, "mempool-max-waiting", mp.MaxWaiting, "transactions waiting for an earlier sequence or nonce")
	f.IntVar(&mp.MaxWaitingPerSigner, "mempool-max-waiting-per-signer", mp.MaxWaitingPerSigner, "waiting transactions one key may have signed into")
	f.Int64Var(&mp.ReadyHeights, "mempool-ready-heights", mp.ReadyHeights, "blocks a ready transaction may wait to be proposed before it is dropped")
	f.Int64Var(&mp.WaitingHeights, "mempool-waiting-heights", mp.WaitingHeights, "blocks a waiting transaction may wait for its predecessor before it is dropped")
	o.peers.addFlags(f, &o.app)
	o.data.addFlags(f)
	f.IntVar(&o.gcPercent, "gc-percent", o.gcPercent, "Go GC target (as GOGC, which overrides it): 400 trades ~5x the live heap for less GC work per block")
	o.Options.AddFlags(f)
}

func run(ctx context.Context, o options) error {
	if o.app.BundleDir == "" {
		o.app.BundleDir = filepath.Clean(o.dataDir) + ".bundles"
	}
	if err := o.Validate(); err != nil {
		return err
	}
	log, stopProfiles, err := o.Start(os.Stderr, "byzlog-app")
	if err != nil {
		return err
	}
	defer stopProfiles()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if o.app.Peers, err = o.peers.peers(); err != nil {
		return err
	}
	st, err := store.Open(o.dataDir)
	if err != nil {
		return err
	}
	if o.app.SnapshotDir == "" {
		o.app.SnapshotDir = filepath.Clean(o.dataDir) + ".snapshots"
	}
	a, err := app.New(st, log, o.app)
	if err != nil {
		_ = st.Close()
		return err
	}
	defer func() {
		if err := a.Close(); err != nil {
			log.Error().Err(err).Msg("close")
		}
	}()
	dc, err := o.data.config()
	if err != nil {
		return err
	}
	log.Info().Str("listen", o.serve.Listen).Str("transport", o.serve.Transport).Str("data_dir", o.dataDir).Int("bundle_peers", len(o.app.Peers)).
		Str("data_listen", dc.Listen).Bool("data_tls", dc.TLS != nil).Int("malloc_arena_max", mallocArenaCap()).Msg("serving ABCI")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dataErr := make(chan error, 1)
	go func() {
		err := app.ServeData(ctx, dc, a)
		if err != nil {
			cancel() // a data service that fails stops the app: it was asked for
		}
		dataErr <- err
	}()
	err = app.Serve(ctx, o.serve, a)
	cancel()
	if derr := <-dataErr; err == nil {
		err = derr
	}
	if err != nil {
		return err
	}
	log.Info().Msg("stopped")
	return nil
}
