// Package daemon is what byzlog's daemons (byzlog-app, byzlog-gateway,
// byzlog-indexer) configure and serve the same way: their log and runtime
// profile options, registered as flags in one place, and the HTTP face
// that serves Prometheus metrics. It never holds a daemon's own settings.
package daemon

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/services/internal/logging"
	"github.com/byzlog/byzlog/services/internal/profiling"
)

// Options are the settings every daemon has.
type Options struct {
	Log logging.Config
	// PprofListen is the host:port of the runtime profiles; empty: off.
	PprofListen string
}

// Default is info-level logs in the auto format, profiles off.
func Default() Options { return Options{Log: logging.Default()} }

// AddFlags registers --pprof-listen, --log-level and --log-format, with
// o's values as defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.PprofListen, "pprof-listen", o.PprofListen, "host:port to serve Go runtime profiles (/debug/pprof/) on; empty: off")
	f.StringVar(&o.Log.Level, "log-level", o.Log.Level, "trace, debug, info, warn or error")
	f.StringVar(&o.Log.Format, "log-format", o.Log.Format, "auto (pretty on a terminal, else JSON), json or pretty")
}

// Validate says which setting is wrong.
func (o Options) Validate() error { return o.Log.Validate() }

// Start builds the daemon's logger (to w, tagged with process) and serves
// its runtime profiles until stop is called.
func (o Options) Start(w io.Writer, process string) (log zerolog.Logger, stop func(), err error) {
	log, err = logging.New(o.Log, w, process)
	if err != nil {
		return log, nil, err
	}
	stop, err = profiling.Serve(o.PprofListen, log)
	return log, stop, err
}

// MetricsHandler serves cs, with the Go runtime's and the process's
// collectors, in Prometheus's format: the daemons' /metrics.
func MetricsHandler(cs ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// ReadHeaderTimeout bounds how long an HTTP face waits for a request's
// headers, for servers built with NewHTTPServer.
const ReadHeaderTimeout = 5 * time.Second

// NewHTTPServer is an HTTP server for h with ReadHeaderTimeout.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout}
}

// ServeHTTP listens on addr and serves srv there (TLS with tc, when not
// nil) until stop is called. The listen error is net.Listen's, for the
// caller to say what was listening.
func ServeHTTP(addr string, tc *tls.Config, srv *http.Server) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}
