package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// The node data service (byzlogv1.NodeData) carries the bulk bytes between
// a validator and its readers and writers without CometBFT's JSON-RPC:
// gateways submit bundles with Submit (what broadcast_tx_sync does with
// mempool.type = "app", without the hex form the node decodes), and
// gateways and indexers read the bundles blocks reference with Query
// (abci_query's answer, without base64 in JSON). Under closed-loop load at
// 100 B records the node's RPC spent about half of a cometbft's CPU on
// those bytes. It answers from the same code as the ABCI calls, so it is
// no more trusted than the RPC: every reader checks what it reads.

// Bounds of the data service. A request is at most one transaction; an
// answer at most what abci_query answers (a /bundles answer is up to
// wire.MaxBundlesBytes, 3 MiB), within the readers' own bound. gRPC holds
// a request's whole message while it arrives, so connections and calls
// are few (at most 1,024 requests of at most 2 MiB at once), and a
// connection lives at most maxDataConnAge (and its grace): a client that
// holds calls open cannot keep its slots. A gateway or an indexer keeps
// one connection to a node.
const (
	maxDataRecvBytes      = wire.MaxTxBytes + 4<<10
	maxDataSendBytes      = wire.MinReaderResponseBytes
	maxDataConns          = 64
	maxDataStreamsPerConn = 16
	maxDataConnAge        = 2 * time.Minute
	maxDataConnAgeGrace   = 30 * time.Second
)

// DefaultDataMaxTxBytes is CometBFT's default mempool.max_tx_bytes.
const DefaultDataMaxTxBytes = 4 << 20

// DataConfig says where to serve the node data service.
type DataConfig struct {
	// Listen is host:port; empty serves none.
	Listen string
	// TLS is the server's certificate; nil serves plaintext, which
	// Validate allows on loopback only unless Insecure.
	TLS *tls.Config
	// Insecure allows plaintext beyond loopback.
	Insecure bool
	// MaxTxBytes refuses a larger submission, as the node's RPC does
	// above its mempool.max_tx_bytes: a peer's mempool would refuse it
	// (and may drop the connection that gossips it). 0 is
	// DefaultDataMaxTxBytes; the app's own limit (wire.MaxTxBytes) holds
	// either way.
	MaxTxBytes int
}

// Validate says what is wrong with c.
func (c DataConfig) Validate() error {
	if c.Listen == "" {
		return nil
	}
	if c.MaxTxBytes < 0 {
		return fmt.Errorf("data max tx bytes (%d) must not be negative", c.MaxTxBytes)
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("data listen %q: want host:port: %w", c.Listen, err)
	}
	if ip := net.ParseIP(host); c.TLS == nil && !c.Insecure && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("data listen %q: plaintext beyond loopback carries every record in the clear; give a certificate (--data-tls-cert, --data-tls-key) or allow it with --data-insecure", c.Listen)
	}
	return nil
}

// ServeData serves the node data service of a on c.Listen until ctx is
// done; with no Listen it returns at once.
func ServeData(ctx context.Context, c DataConfig, a *App) error {
	if c.Listen == "" {
		return nil
	}
	if err := c.Validate(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen for the node data service on %s: %w", c.Listen, err)
	}
	return serveGRPCUntil(ctx, newDataServer(c, a), netutil.LimitListener(ln, maxDataConns), "the node data service on "+c.Listen)
}

// newDataServer is the bounded gRPC server of the data service: messages,
// calls per connection (and connections, by the listener), handshake time,
// keepalive pings and idle connections.
func newDataServer(c DataConfig, a *App) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxDataRecvBytes),
		grpc.MaxSendMsgSize(maxDataSendBytes),
		grpc.MaxConcurrentStreams(maxDataStreamsPerConn),
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute,
			MaxConnectionAge: maxDataConnAge, MaxConnectionAgeGrace: maxDataConnAgeGrace}),
	}
	if c.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(c.TLS)))
	}
	maxTx := c.MaxTxBytes
	if maxTx == 0 {
		maxTx = DefaultDataMaxTxBytes
	}
	srv := grpc.NewServer(opts...)
	byzlogv1.RegisterNodeDataServer(srv, dataService{a: a, maxTx: maxTx})
	return srv
}

// dataService answers from the app's own ABCI calls.
type dataService struct {
	byzlogv1.UnimplementedNodeDataServer
	a     *App
	maxTx int
}

func (s dataService) Query(ctx context.Context, req *byzlogv1.NodeQueryRequest) (*byzlogv1.NodeQueryResponse, error) {
	r, err := s.a.Query(ctx, &abci.RequestQuery{Path: req.Path, Data: req.Data})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &byzlogv1.NodeQueryResponse{Code: r.Code, Log: r.Log, Value: r.Value, Height: r.Height, Codespace: r.Codespace, Key: r.Key, Index: r.Index}, nil
}

func (s dataService) Submit(ctx context.Context, req *byzlogv1.NodeSubmitRequest) (*byzlogv1.NodeSubmitResponse, error) {
	if len(req.Tx) == 0 {
		return nil, status.Error(codes.InvalidArgument, "submit: an empty transaction")
	}
	if len(req.Tx) > s.maxTx {
		return &byzlogv1.NodeSubmitResponse{Code: uint32(wire.CodeTxTooLarge), Codespace: wire.Codespace,
			Log: fmt.Sprintf("transaction is %d bytes, this node's mempool takes at most %d (byzlog-app --data-max-tx-bytes, as its node's mempool.max_tx_bytes)", len(req.Tx), s.maxTx)}, nil
	}
	r, err := s.a.CheckTx(ctx, &abci.RequestCheckTx{Tx: req.Tx})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &byzlogv1.NodeSubmitResponse{Code: r.Code, Log: r.Log, Data: r.Data, Codespace: r.Codespace}, nil
}
