package tlsconf

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// NodeURL is a CometBFT RPC address as the URL a client dials: host:port
// and tcp://host:port (CometBFT's notation) become http://, http:// and
// https:// stay. Plaintext (http) reaches only a loopback host unless
// insecure: a node's RPC carries every record, so anywhere else it must be
// https (the node's rpc.tls_cert_file and rpc.tls_key_file).
func NodeURL(addr string, insecure bool) (string, error) {
	u := addr
	switch {
	case strings.HasPrefix(u, "tcp://"):
		u = "http://" + strings.TrimPrefix(u, "tcp://")
	case !strings.Contains(u, "://"):
		u = "http://" + u
	}
	scheme, rest, _ := strings.Cut(u, "://")
	u = scheme + "://" + strings.TrimRight(rest, "/")
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "", fmt.Errorf("node %q: want host:port or an http(s):// URL", addr)
	}
	switch p.Scheme {
	case "https":
	case "http":
		if !insecure && !loopback(p.Hostname()) {
			return "", fmt.Errorf("node %q: plaintext RPC to a host other than loopback carries every record in the clear; serve the node's RPC with TLS (rpc.tls_cert_file, rpc.tls_key_file) and give https://, or accept plaintext with insecure_nodes", addr)
		}
	default:
		return "", fmt.Errorf("node %q: scheme %q: want http or https", addr, p.Scheme)
	}
	return u, nil
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// NodeTransport is base (an http.Transport, as CometBFT's RPC client
// makes) with https checked against cfg: the nodes' CA; nil keeps the
// system's roots.
func NodeTransport(base http.RoundTripper, cfg *tls.Config) http.RoundTripper {
	t, ok := base.(*http.Transport)
	if !ok || cfg == nil {
		return base
	}
	t = t.Clone()
	t.TLSClientConfig = cfg.Clone()
	return t
}
