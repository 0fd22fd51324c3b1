// Command byzlog is byzlog's command-line tool. Today it runs local validator
// networks (`byzlog localnet`); producing, consuming and administration join
// it as the gateway and indexer land. This package is wiring only: every
// command calls a library that does the work.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "byzlog:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "byzlog",
		Short:         "byzlog: a Byzantine-fault-tolerant, Kafka-style replicated log",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newLocalnetCommand())
	return root
}
