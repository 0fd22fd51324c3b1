package rpcnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/byzlog/byzlog/indexer/tlsconf"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// A node's app may serve the node data service (byzlogv1.NodeData,
// byzlog-app --data-listen) beside the node's RPC: abci_query and
// broadcast_tx_sync without JSON-RPC's base64 and hex, which cost the
// node more CPU than anything else it serves at load (a block's bundles
// are megabytes). Given its address (Options.Data), the client asks its
// queries there and Submit submits there; the answers are the app's
// own, checked by the caller as the RPC's are.

// dataClient is the node data service of one node's app.
type dataClient struct {
	conn *grpc.ClientConn
	c    byzlogv1.NodeDataClient
	addr string
}

// dialData connects (lazily: grpc.NewClient dials on the first call) to
// the data service at addr, in the forms tlsconf.NodeURL takes (https://
// is TLS checked against cfg; http:// or host:port plaintext, loopback
// only unless insecure), answers bounded by maxRecv bytes.
func dialData(addr string, cfg *tls.Config, insecureOK bool, maxRecv int64) (*dataClient, error) {
	u, err := tlsconf.NodeURL(addr, insecureOK)
	if err != nil {
		return nil, fmt.Errorf("data service: %w", err)
	}
	scheme, host, _ := strings.Cut(u, "://")
	creds := insecure.NewCredentials()
	if scheme == "https" {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(cfg.Clone())
	}
	conn, err := grpc.NewClient("passthrough:///"+host, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(int(min(maxRecv, 1<<30)))))
	if err != nil {
		return nil, fmt.Errorf("data service %s: %w", addr, err)
	}
	return &dataClient{conn: conn, c: byzlogv1.NewNodeDataClient(conn), addr: addr}, nil
}

func (d *dataClient) query(ctx context.Context, path string, data []byte) (*ctypes.ResultABCIQuery, error) {
	r, err := d.c.Query(ctx, &byzlogv1.NodeQueryRequest{Path: path, Data: data})
	if err != nil {
		return nil, fmt.Errorf("query %s of the data service %s: %w", path, d.addr, err)
	}
	return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Code: r.Code, Log: r.Log, Value: r.Value, Height: r.Height,
		Codespace: r.Codespace, Key: r.Key, Index: r.Index}}, nil
}

// ErrNoData is returned by Submit when the client has no data service.
var ErrNoData = errors.New("no node data service given")

// HasData says whether the client reaches the node's data service.
func (c *Client) HasData() bool { return c.data != nil }

// Submit submits tx to the node's app through its data service and
// returns its CheckTx answer as broadcast_tx_sync would (the hash is the
// transaction's, as CometBFT names it).
func (c *Client) Submit(ctx context.Context, tx []byte) (*ctypes.ResultBroadcastTx, error) {
	if c.data == nil {
		return nil, ErrNoData
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	r, err := c.data.c.Submit(ctx, &byzlogv1.NodeSubmitRequest{Tx: tx})
	if err != nil {
		return nil, fmt.Errorf("submit to the data service %s: %w", c.data.addr, err)
	}
	return &ctypes.ResultBroadcastTx{Code: r.Code, Data: r.Data, Log: r.Log, Codespace: r.Codespace,
		Hash: cmtbytes.HexBytes(cmttypes.Tx(tx).Hash())}, nil
}

// Close closes the connection to the data service, if any.
func (c *Client) Close() error {
	if c.data == nil {
		return nil
	}
	return c.data.conn.Close()
}
