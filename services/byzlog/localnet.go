package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/byzlog/byzlog/services/internal/localnet"
)

func newLocalnetCommand() *cobra.Command {
	cfg := localnet.Default()
	cmd := &cobra.Command{
		Use:   "localnet",
		Short: "Run a validator network of stock cometbft nodes and byzlog-app on this machine",
		Long: `Run a validator network on loopback: one stock cometbft node and one byzlog-app
per validator. Node i listens on p2p BASE+100i, RPC BASE+100i+1 and ABCI
BASE+100i+2 (BASE defaults to 26656). Everything (node homes, app data, logs,
PID files) lives under --dir; "down" stops exactly the processes "up" started.`,
	}
	cmd.PersistentFlags().StringVar(&cfg.Dir, "dir", cfg.Dir, "run directory of the network")
	cmd.AddCommand(newLocalnetUpCommand(&cfg), newLocalnetDownCommand(&cfg), newLocalnetStatusCommand(&cfg), newLocalnetRebuildCommand(&cfg))
	return cmd
}

func newLocalnetUpCommand(cfg *localnet.Config) *cobra.Command {
	wait := 2 * time.Minute
	timeoutCommit := time.Duration(cfg.TimeoutCommit)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create (or resume) the network, start it and wait until every node has committed height 3",
		Long: `Create the network in --dir with "cometbft testnet" if it holds none, or resume
the one it holds with its data; start every byzlog-app and cometbft node in the
background and wait until every node has committed height 3. Starting a network
that is already running is an error. A new network's genesis lists one admin key
(the only key that may create topics), generated into DIR/admin.key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.TimeoutCommit = localnet.Duration(timeoutCommit)
			bin := localnet.BinDir()
			if cfg.CometBFT == "" {
				cfg.CometBFT = localnet.FindBinary(bin, "cometbft")
			}
			if cfg.App == "" {
				cfg.App = localnet.FindBinary(bin, "byzlog-app")
			}
			n, err := localnet.Open(*cfg)
			if err != nil {
				return err
			}
			if n.Existing() {
				if err := localnet.CheckShape(cmd.Flags(), *cfg, n.Config()); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			if err := n.Up(ctx, cmd.ErrOrStderr()); err != nil {
				return err
			}
			c := n.Config()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "localnet up: %d validators, chain %s, data in %s\n", c.Validators, c.ChainID, c.Dir)
			for i := 0; i < c.Validators; i++ {
				fmt.Fprintf(out, "  node%d  rpc %s  p2p 127.0.0.1:%d  abci 127.0.0.1:%d (%s)\n",
					i, c.RPCAddr(i), c.P2PPort(i), c.ABCIPort(i), c.Transport)
			}
			fmt.Fprintf(out, "admin key (genesis admin, signs topic changes): %s\n", filepath.Join(c.Dir, "admin.key"))
			if c.Admins > 1 {
				fmt.Fprintf(out, "admin keys: %d (admin.key, admin2.key, ... in %s); %d of them sign topic deletions and admin and validator changes\n", c.Admins, c.Dir, max(c.AdminThreshold, 1))
			}
			fmt.Fprintf(out, "status: byzlog localnet status --dir %s\nstop:   byzlog localnet down --dir %s\n", c.Dir, c.Dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&cfg.Validators, "validators", "n", cfg.Validators, "number of validators (a new network only)")
	f.IntVar(&cfg.BasePort, "base-port", cfg.BasePort, "node 0's p2p port; node i uses BASE+100i.. (a new network only)")
	f.StringVar(&cfg.Transport, "transport", cfg.Transport, "ABCI transport, grpc or socket (a new network only)")
	f.IntVar(&cfg.SnapshotInterval, "snapshot-interval", cfg.SnapshotInterval, "blocks between state roots and snapshots a wiped or new node can join from by state sync; 0: none (a new network only)")
	f.Int64Var(&cfg.RetainBlocks, "retain-blocks", 0, "every app's --retain-blocks: prune blocks older than the last N (at least 100) that the oldest snapshot and the network's indexer no longer need; 0 keeps every block (a new network only)")
	f.IntVar(&cfg.Admins, "admins", 1, "admin keys genesis lists: DIR/admin.key, DIR/admin2.key, ... (a new network only)")
	f.IntVar(&cfg.AdminThreshold, "admin-threshold", 1, "how many admins sign a topic deletion or a change of the admins or validators (a new network only)")
	f.DurationVar(&timeoutCommit, "timeout-commit", timeoutCommit, "consensus timeout_commit, the floor of the block interval (a new network only)")
	f.StringVar(&cfg.CometBFT, "cometbft", "", "cometbft binary (default: next to byzlog, else on PATH)")
	f.StringVar(&cfg.App, "app", "", "byzlog-app binary (default: next to byzlog, else on PATH)")
	f.DurationVar(&wait, "wait", wait, "how long to wait for every node to reach height 3")
	return cmd
}

func newLocalnetDownCommand(cfg *localnet.Config) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop every process of the network (data stays in --dir)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := openExisting(*cfg)
			if err != nil {
				return err
			}
			if len(n.Running()) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "nothing running in %s\n", n.Config().Dir)
				return nil
			}
			if err := n.Down(cmd.OutOrStdout()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stopped; data stays in %s\n", n.Config().Dir)
			return nil
		},
	}
}

func newLocalnetStatusCommand(cfg *localnet.Config) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Print every node's processes, height and app hash",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := openExisting(*cfg)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tCOMETBFT\tAPP\tHEIGHT\tAPP HASH\tNOTE")
			for _, s := range n.Status(cmd.Context()) {
				note := ""
				switch {
				case s.Err != nil:
					note = "rpc unreachable"
				case s.CatchingUp:
					note = "catching up"
				}
				fmt.Fprintf(w, "node%d\t%s\t%s\t%d\t%s\t%s\n", s.Node, pidText(s.CometBFTPID), pidText(s.AppPID), s.Height, s.AppHash, note)
			}
			return w.Flush()
		},
	}
}

func newLocalnetRebuildCommand(cfg *localnet.Config) *cobra.Command {
	wait := 3 * time.Minute
	cmd := &cobra.Command{
		Use:   "rebuild NODE",
		Short: "Rebuild a validator whose data is damaged from its peers",
		Long: `Rebuild validator NODE (0, 1, ...) from its peers, as docs/operating.md
("Rebuilding a validator") describes for any deployment: stop its cometbft and
byzlog-app, run "cometbft reset-state" (blocks, state, WAL; keys and signing
state kept), remove the app's data, move the signing state two heights past the
peers' highest block so the key cannot sign a height twice, start both and wait
until the node has caught up. The other validators must be running.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			i, err := strconv.Atoi(strings.TrimPrefix(args[0], "node"))
			if err != nil || i < 0 {
				return fmt.Errorf("node %q: want a validator number such as 2 (or node2)", args[0])
			}
			n, err := openExisting(*cfg)
			if err != nil {
				return err
			}
			if i >= n.Config().Validators {
				return fmt.Errorf("node %d: the network in %s has validators 0 to %d", i, n.Config().Dir, n.Config().Validators-1)
			}
			if err := n.KillRest(i); err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := n.ResetNode(ctx, i); err != nil {
				return err
			}
			if err := n.StartNode(ctx, i); err != nil {
				return err
			}
			var tip int64
			for _, s := range n.Status(ctx) {
				tip = max(tip, s.Height)
			}
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			if err := n.WaitHeight(wctx, []int{i}, tip, cmd.ErrOrStderr()); err != nil {
				return fmt.Errorf("node%d restarted empty but did not reach height %d within %s: %w (see its logs in %s)", i, tip, wait, err, n.Config().Dir)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node%d rebuilt: it synced %d blocks from its peers\n", i, tip)
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", wait, "how long to wait for the rebuilt node to catch up")
	return cmd
}

// openExisting opens the network in cfg.Dir, which must have been created.
func openExisting(cfg localnet.Config) (*localnet.Net, error) {
	n, err := localnet.Open(cfg)
	if err != nil {
		return nil, err
	}
	if !n.Existing() {
		return nil, fmt.Errorf("no network in %s", n.Config().Dir)
	}
	return n, nil
}

func pidText(pid int) string {
	if pid == 0 {
		return "stopped"
	}
	return fmt.Sprintf("pid %d", pid)
}
