package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/byzlog/byzlog/services/internal/nodecheck"
)

func newNodeCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Inspect a validator's files"}
	cmd.AddCommand(newNodeCheckCommand())
	return cmd
}

func newNodeCheckCommand() *cobra.Command {
	var home, appData string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Read a stopped validator's files and name each one that is damaged",
		Long: `Read a stopped validator's files as CometBFT and byzlog-app read them, without
changing a byte: the signing state and key, CometBFT's consensus WAL (every
record's checksum), its goleveldb databases (block store, state, evidence, tx
index: every key read, journals and blocks strictly checked) and byzlog-app's
RocksDB store (every key of every column family, checksums verified). It prints
one line per file and exits 1 if any is damaged; the validator is then rebuilt
from its peers (docs/operating.md, "Rebuilding a validator"). CometBFT halts
on some of these damages without naming the file and opens around others; this
names it. Stop the node first: the databases are locked while it runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if home == "" {
				return errors.New("--home: give the validator's CometBFT home")
			}
			if appData == "" {
				appData = filepath.Join(home, "app")
			}
			rs := nodecheck.Check(home, appData)
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "FILE\tSTATE\tDETAIL")
			for _, r := range rs {
				state, detail := "ok", r.Detail
				if r.Err != nil {
					state, detail = "DAMAGED", r.Err.Error()
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", r.File, state, detail)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if nodecheck.Damaged(rs) {
				return errors.New("damaged files found: rebuild this validator from its peers (docs/operating.md, Rebuilding a validator)")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&home, "home", "", "the validator's CometBFT home (config/ and data/)")
	cmd.Flags().StringVar(&appData, "app-data", "", "byzlog-app's --data-dir (default HOME/app, the localnet's layout)")
	return cmd
}
