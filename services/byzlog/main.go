// Command byzlog is byzlog's command-line tool: keys, topics, producing
// through gateways, consuming from NATS JetStream, and local validator
// networks. This package is wiring only: every command calls a library that
// does the work.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "byzlog:", describe(err))
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
	root.AddCommand(newLocalnetCommand(), newKeygenCommand(), newTopicCommand(), newProduceCommand(), newConsumeCommand(), newRunCommand(), newCertsCommand(), newNodeCommand(), newValidatorCommand(), newAdminCommand(), newIndexerCommand(), newGetCommand())
	return root
}

// describe renders an error for a person: a gRPC status as its code and
// message, without the transport's framing.
func describe(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		st := se.GRPCStatus()
		msg := err.Error()
		if prefix, _, ok := strings.Cut(msg, "rpc error: "); ok {
			return fmt.Sprintf("%s%s: %s", prefix, st.Code(), st.Message())
		}
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return err.Error()
}
