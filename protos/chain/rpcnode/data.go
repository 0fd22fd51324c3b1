package rpcnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
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
	// downUntil (unix ns): after a call fails, the client uses the
	// node's RPC until then, so a data service that is down, misconfigured
	// or held up by someone else's connections costs one call's wait, not
	// every call's.
	downUntil atomic.Int64
	onError   func(error)
}

// dataRetry is how long the client keeps to the RPC after the data
// service failed a call.
const dataRetry = 10 * time.Second

// up says whether to try the data service now.
func (d *dataClient) up() bool { return d != nil && time.Now().UnixNano() >= d.downUntil.Load() }

// failed notes a failed call: unless the caller gave up (ctx), the data
// service is skipped for dataRetry.
func (d *dataClient) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	d.downUntil.Store(time.Now().Add(dataRetry).UnixNano())
	if d.onError != nil {
		d.onError(err)
	}
}

// maxDataHeaderBytes bounds the headers and trailers a data service may
// send with an answer.
const maxDataHeaderBytes = 64 << 10

// dialData connects (lazily: grpc.NewClient dials on the first call) to
// the data service at addr, in the forms tlsconf.NodeURL takes (https://
// is TLS checked against cfg; http:// or host:port plaintext, loopback
// only unless insecure), answers bounded by maxRecv bytes.
func dialData(addr string, cfg *tls.Config, insecureOK bool, maxRecv int64) (*dataClient, error) {
	host, scheme, err := DataHost(addr, insecureOK)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if scheme == "https" {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS13}
		}
		creds = credentials.NewTLS(cfg.Clone())
	}
	conn, err := grpc.NewClient("passthrough:///"+host, grpc.WithTransportCredentials(creds),
		grpc.WithMaxHeaderListSize(maxDataHeaderBytes),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(int(min(maxRecv, 1<<30)))))
	if err != nil {
		return nil, fmt.Errorf("data service %s: %w", addr, err)
	}
	return &dataClient{conn: conn, c: byzlogv1.NewNodeDataClient(conn), addr: addr}, nil
}

// DataHost checks a data service address (the forms tlsconf.NodeURL
// takes, with a port and no path) and returns its host:port and scheme.
func DataHost(addr string, insecureOK bool) (host, scheme string, err error) {
	u, err := tlsconf.NodeURL(addr, insecureOK)
	if err != nil {
		return "", "", fmt.Errorf("data service: %w", err)
	}
	p, err := url.Parse(u)
	if err != nil || p.Port() == "" || (p.Path != "" && p.Path != "/") || p.RawQuery != "" || p.User != nil {
		return "", "", fmt.Errorf("data service %q: want host:port, http://host:port or https://host:port", addr)
	}
	return p.Host, p.Scheme, nil
}

// CheckDataAddrs checks the data services given for n nodes, in the
// order of their RPC addresses: one entry each or none, each in a form
// DataHost takes or empty (that node is reached over its RPC alone), no
// two the same (one node answering for two would count twice where f+1
// nodes must agree).
func CheckDataAddrs(addrs []string, n int, insecureOK bool) error {
	if len(addrs) > 0 && len(addrs) != n {
		return fmt.Errorf("%d data services for %d nodes: give one entry per node (empty for a node without one), in the order of the nodes, or none", len(addrs), n)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if a == "" {
			continue
		}
		host, _, err := DataHost(a, insecureOK)
		if err != nil {
			return err
		}
		if seen[host] {
			return fmt.Errorf("data service %s given twice: each node has its own", host)
		}
		seen[host] = true
	}
	return nil
}

func (d *dataClient) query(ctx context.Context, path string, data []byte) (*ctypes.ResultABCIQuery, error) {
	r, err := d.c.Query(ctx, &byzlogv1.NodeQueryRequest{Path: path, Data: data})
	if err != nil {
		return nil, fmt.Errorf("query %s of the data service %s: %w", path, d.addr, err)
	}
	return &ctypes.ResultABCIQuery{Response: abci.ResponseQuery{Code: r.Code, Log: r.Log, Value: r.Value, Height: r.Height,
		Codespace: r.Codespace, Key: r.Key, Index: r.Index}}, nil
}

// ErrNoData is returned by Submit when the client has no data service,
// or it failed a call less than dataRetry ago: submit over the RPC.
var ErrNoData = errors.New("no node data service to use")

// HasData says whether the client was given the node's data service.
func (c *Client) HasData() bool { return c.data != nil }

// Submit submits tx to the node's app through its data service and
// returns its CheckTx answer as broadcast_tx_sync would (the hash is the
// transaction's, as CometBFT names it). An error wrapping ErrNoData says
// to use the RPC instead: there is no data service, or it failed (this
// call or one less than dataRetry ago).
func (c *Client) Submit(ctx context.Context, tx []byte) (*ctypes.ResultBroadcastTx, error) {
	if !c.data.up() {
		return nil, ErrNoData
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	r, err := c.data.c.Submit(ctx, &byzlogv1.NodeSubmitRequest{Tx: tx})
	if err != nil {
		err = fmt.Errorf("submit to the data service %s: %w", c.data.addr, err)
		c.data.failed(ctx, err)
		return nil, fmt.Errorf("%w: %w", ErrNoData, err)
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
