// Command byzlog-lab is byzlog's lab: the benchmarks beside stock CometBFT
// and NATS JetStream (bench), the fault suite with its history checker
// (chaos), the Byzantine-client suite (attack) and the demo that proves a
// local network end to end. It is never shipped: it links the power-loss
// file system and a gateway built to lie to clients. Operators use the
// byzlog command. This package is wiring only.
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
		fmt.Fprintln(os.Stderr, "byzlog-lab:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "byzlog-lab",
		Short:         "byzlog-lab: benchmarks, fault and attack suites, and the demo, run on local networks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDemoCommand(), newBenchCommand(), newChaosCommand(), newAttackCommand())
	return root
}
