// Package rpcnode builds the RPC client for one CometBFT node, the one
// piece the indexer's nodes and the gateway's node pool share: CometBFT's
// HTTP client, https checked against the nodes' CA (tlsconf), every
// response body cut at a limit, connections kept for reuse, blocks read by
// a decoder of only their header and transactions, abci_query answers
// (megabytes of bundles, for /bundles) by a scanner, and an optional
// timeout per call. It
// judges no answer: what a node says is checked by whoever reads it.
package rpcnode

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	rpchttp "github.com/cometbft/cometbft/rpc/client/http"
	jsonrpcclient "github.com/cometbft/cometbft/rpc/jsonrpc/client"

	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// Options shape a node's client.
type Options struct {
	// TLS checks https nodes' certificates; nil uses the system's roots.
	TLS *tls.Config
	// Timeout bounds each call; 0 leaves calls to their contexts.
	Timeout time.Duration
	// MaxResponseBytes bounds every response body (LimitTransport), and
	// every answer of the data service.
	MaxResponseBytes int64
	// Data is the address of the node's data service (byzlog-app
	// --data-listen), in a form tlsconf.NodeURL takes; https:// is checked
	// against TLS. Empty: none, queries and submissions go over the RPC.
	Data string
	// InsecureData allows a plaintext Data address beyond loopback.
	InsecureData bool
	// OnDataError, when set, hears of each failed call to the data
	// service, after which the RPC is used for a while.
	OnDataError func(error)
}

// New returns the RPC client for the node at url (an http(s):// URL, as
// tlsconf.NodeURL makes it).
func New(url string, o Options) (*Client, error) {
	hc, err := jsonrpcclient.DefaultHTTPClient(url)
	if err != nil {
		return nil, err
	}
	hc.Timeout = o.Timeout
	if t, ok := hc.Transport.(*http.Transport); ok {
		keepConnections(t)
	}
	hc.Transport = LimitTransport(tlsconf.NodeTransport(hc.Transport, o.TLS), o.MaxResponseBytes)
	post, err := httpURL(url)
	if err != nil {
		return nil, err
	}
	c, err := rpchttp.NewWithClient(url, "/websocket", hc)
	if err != nil {
		return nil, err
	}
	out := &Client{HTTP: c, hc: hc, url: post, timeout: o.Timeout}
	if o.Data != "" {
		if out.data, err = dialData(o.Data, o.TLS, o.InsecureData, o.MaxResponseBytes); err != nil {
			return nil, err
		}
		out.data.onError = o.OnDataError
	}
	return out, nil
}

// idleConnsPerNode is how many idle connections to one node are kept for
// the next calls. net/http keeps 2 by default, and a gateway has many calls
// to a node in flight at once (bundles, queries, block reads): every one
// past the second closed its connection when done, and the next one paid a
// new TLS handshake, a third of the gateway's CPU at closed-loop load (and
// the node's side of each handshake on top).
const idleConnsPerNode = 64

// keepConnections makes t keep idle connections for reuse, closing them
// after a minute and a half unused.
func keepConnections(t *http.Transport) {
	t.MaxIdleConnsPerHost = idleConnsPerNode
	t.MaxIdleConns = idleConnsPerNode
	t.IdleConnTimeout = 90 * time.Second
}

// A node that lies can answer any call with a body of any size, and
// CometBFT's RPC client (and so the light client's provider) reads whole
// bodies into memory. So every response body is cut at a limit, and a
// call whose body passes it fails.

// ErrResponseTooLarge is wrapped by the error of a call whose response
// passed the limit.
var ErrResponseTooLarge = errors.New("response too large")

// LimitTransport is base with every response body capped at max bytes.
func LimitTransport(base http.RoundTripper, max int64) http.RoundTripper {
	return limitTransport{base: base, max: max}
}

type limitTransport struct {
	base http.RoundTripper
	max  int64
}

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s answered with %d bytes, more than max_response_bytes (%d)", ErrResponseTooLarge, req.URL.Redacted(), resp.ContentLength, t.max)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max, max: t.max, url: req.URL.Redacted()}
	return resp, nil
}

// limitedBody reads at most max bytes, then fails the read.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	max  int64
	url  string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly max bytes from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("%w: the response from %s is over max_response_bytes (%d)", ErrResponseTooLarge, b.url, b.max)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
