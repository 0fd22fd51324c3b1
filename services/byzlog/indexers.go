package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/rpcnode"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/gatewaylink"
	"github.com/byzlog/byzlog/services/internal/keyfile"
	"github.com/byzlog/byzlog/services/internal/nodelink"
)

// localnetNodes are the RPC addresses of `make run`'s localnet nodes.
const localnetNodes = "https://127.0.0.1:26657,https://127.0.0.1:26757,https://127.0.0.1:26857,https://127.0.0.1:26957"

func newIndexerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "indexer",
		Short: "Register indexers, so that pruning nodes keep the blocks they have not published",
		Long: `A registered indexer (byzlog-indexer --progress-key) reports to the chain the
height it has published through; validators that prune (byzlog-app
--retain-blocks) keep every block above the lowest report. Registering needs one
admin's signature; unregistering, which lets nodes prune what that indexer has
not published, needs the admin set's threshold.

An indexer is named by its ed25519 public key in hex, or by the path of its key
file (byzlog keygen), whose public half is taken.`,
	}
	tf := gatewayGroup(cmd)
	cmd.AddCommand(newIndexerRegisterCommand(tf), newIndexerUnregisterCommand(tf), newIndexerListCommand())
	return cmd
}

func newIndexerRegisterCommand(tf *topicFlags) *cobra.Command {
	var name string
	register := signed(tf, &cobra.Command{
		Use:   "register KEY --name NAME",
		Short: "Register an indexer",
		Args:  cobra.ExactArgs(1),
	}, func(args []string) (proto.Message, string, error) {
		pk, err := indexerKey(args[0])
		return &byzlogv1.SetIndexer{PubKey: pk, Name: name}, fmt.Sprintf("indexer %s registered as %q", hex.EncodeToString(pk), name), err
	})
	register.Flags().StringVar(&name, "name", "", "the name reports show: 1 to 64 of a-z, A-Z, 0-9, '-' and '_'")
	_ = register.MarkFlagRequired("name")
	return register
}

func newIndexerUnregisterCommand(tf *topicFlags) *cobra.Command {
	return signed(tf, &cobra.Command{
		Use:   "unregister KEY",
		Short: "Unregister an indexer (the admin set's threshold)",
		Args:  cobra.ExactArgs(1),
	}, func(args []string) (proto.Message, string, error) {
		pk, err := indexerKey(args[0])
		return &byzlogv1.SetIndexer{PubKey: pk, Remove: true}, fmt.Sprintf("indexer %s unregistered", hex.EncodeToString(pk)), err
	})
}

func newIndexerListCommand() *cobra.Command {
	nodes := localnetNodes
	var link nodelink.Flags
	list := &cobra.Command{
		Use:   "list",
		Short: "Ask each node for the registered indexers and what it prunes",
		Long: `Asks every node in --nodes for the registered indexers (replicated state: the
nodes must agree) and for its own pruning (/pruning: the retain height it gives
CometBFT and what holds it back), and prints both.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := link.Link(cmd.Flags())
			if err != nil {
				return err
			}
			addrs, err := nodelink.ParseNodes(nodes, l.Insecure)
			if err != nil {
				return fmt.Errorf("--nodes: %w", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
			defer cancel()
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tHEIGHT\tRETAIN HEIGHT\tHELD BY\tRETAIN BLOCKS\tOLDEST SNAPSHOT")
			var sets [][]byte
			var first *byzlogv1.IndexerSet
			for _, a := range addrs {
				var set byzlogv1.IndexerSet
				var p byzlogv1.Pruning
				err := queryNode(ctx, a, l.TLS, l.Insecure, wire.PathIndexers, &set)
				if err == nil {
					err = queryNode(ctx, a, l.TLS, l.Insecure, wire.PathPruning, &p)
				}
				if err != nil {
					fmt.Fprintf(w, "%s\t%v\n", a, err)
					continue
				}
				b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&set)
				sets = append(sets, b)
				if first == nil {
					first = &set
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%d\n", a, p.Height, p.RetainHeight, p.HeldBy, p.RetainBlocks, p.OldestSnapshot)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if first == nil {
				return fmt.Errorf("no node of %s answered", nodes)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			for _, b := range sets[1:] {
				// Progress moves with every block: nodes at other heights
				// differ in it, not in who is registered.
				if !sameKeys(b, sets[0]) {
					fmt.Fprintln(cmd.OutOrStdout(), "warning: the nodes disagree on who is registered; the list below is the first node's")
					break
				}
			}
			w = tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "registered indexers: %d\n", len(first.Indexers))
			fmt.Fprintln(w, "NAME\tPUB KEY\tPUBLISHED\tREPORTED AT\tREGISTERED AT")
			for _, x := range first.Indexers {
				fmt.Fprintf(w, "%s\t%x\t%d\t%d\t%d\n", x.Name, x.PubKey, x.PublishedHeight, x.ReportedHeight, x.RegisteredHeight)
			}
			return w.Flush()
		},
	}
	list.Flags().StringVar(&nodes, "nodes", nodes, nodelink.NodesHelp)
	link.Add(list.Flags(), nodelink.Flags{CA: gatewaylink.LocalnetCA})
	return list
}

// sameKeys says whether two serialized IndexerSets register the same keys.
func sameKeys(a, b []byte) bool {
	var x, y byzlogv1.IndexerSet
	if proto.Unmarshal(a, &x) != nil || proto.Unmarshal(b, &y) != nil || len(x.Indexers) != len(y.Indexers) {
		return false
	}
	for i := range x.Indexers {
		if string(x.Indexers[i].PubKey) != string(y.Indexers[i].PubKey) {
			return false
		}
	}
	return true
}

// queryNode asks one node's app for path into m.
func queryNode(ctx context.Context, addr string, tlsCfg *tls.Config, insecure bool, path string, m proto.Message) error {
	u, err := tlsconf.NodeURL(addr, insecure)
	if err != nil {
		return err
	}
	c, err := rpcnode.New(u, rpcnode.Options{TLS: tlsCfg, MaxResponseBytes: 1 << 20})
	if err != nil {
		return err
	}
	res, err := c.ABCIQuery(ctx, path, nil)
	if err != nil {
		return err
	}
	if res.Response.Code != 0 {
		return fmt.Errorf("%s: %s", path, res.Response.Log)
	}
	return proto.Unmarshal(res.Response.Value, m)
}

// indexerKey reads an indexer's public key: hex, or a key file's public half.
func indexerKey(s string) ([]byte, error) {
	if k, err := hex.DecodeString(s); err == nil && len(k) == ed25519.PublicKeySize {
		return k, nil
	}
	if strings.ContainsAny(s, "/.") {
		k, err := keyfile.Read(s)
		if err != nil {
			return nil, err
		}
		return k.Public().(ed25519.PublicKey), nil
	}
	return nil, fmt.Errorf("indexer key %q: want an ed25519 public key (32 bytes) in hex, or the path of its key file", s)
}
