// Package profiling serves Go's runtime profiles (net/http/pprof) on an
// address of their own, for the binaries' --pprof-listen flag: never on a
// public API port, off unless asked for. `byzlog-lab bench suite --profile`
// collects from it.
package profiling

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rs/zerolog"
)

// Serve listens on addr and serves /debug/pprof/ until the returned stop
// is called. An empty addr serves nothing.
func Serve(addr string, log zerolog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("addr", addr).Msg("pprof server stopped")
		}
	}()
	log.Info().Str("addr", addr).Msg("serving runtime profiles")
	return func() { _ = srv.Close() }, nil
}
