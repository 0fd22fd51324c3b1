package lightclient

import (
	"errors"
	"fmt"
	"strings"

	cmtlog "github.com/cometbft/cometbft/libs/log"
	"github.com/cometbft/cometbft/light/provider"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// lightLogger hands the light client's log to zerolog: its errors and the
// providers it drops (a primary that sent an invalid header and was
// replaced, a witness that disagreed or failed) are warnings worth seeing
// and are counted; the rest is debug.
type lightLogger struct {
	log    zerolog.Logger
	errors prometheus.Counter
	kv     []any
}

var _ cmtlog.Logger = lightLogger{}

func (l lightLogger) Debug(msg string, kv ...any) { l.event(l.log.Debug(), msg, kv) }
func (l lightLogger) Warn(msg string, kv ...any)  { l.event(l.log.Warn(), msg, kv) }

// Info carries a provider failing or being dropped ("error from light block
// request from primary, removing...", "error in light block request to
// witness"): a node misbehaving or down. A witness that has no block at the
// height is neither: one that joined by state sync or prunes lacks old
// blocks, and catching up over them logged one warning a header (17,910 in
// three minutes); that is debug.
func (l lightLogger) Info(msg string, kv ...any) {
	if strings.Contains(msg, "witness") && notFound(kv) {
		l.event(l.log.Debug(), msg, kv)
		return
	}
	if strings.Contains(msg, "error") || strings.Contains(msg, "replacing") || strings.Contains(msg, "removing") || strings.Contains(msg, "different") {
		l.Error(msg, kv...)
		return
	}
	l.event(l.log.Debug(), msg, kv)
}

// notFound reports whether kv carries provider.ErrLightBlockNotFound.
func notFound(kv []any) bool {
	for _, v := range kv {
		if err, ok := v.(error); ok && errors.Is(err, provider.ErrLightBlockNotFound) {
			return true
		}
	}
	return false
}

func (l lightLogger) Error(msg string, kv ...any) {
	l.errors.Inc()
	l.event(l.log.Warn(), msg, kv)
}

func (l lightLogger) With(kv ...any) cmtlog.Logger {
	return lightLogger{log: l.log, errors: l.errors, kv: append(append([]any(nil), l.kv...), kv...)}
}

func (l lightLogger) event(e *zerolog.Event, msg string, kv []any) {
	all := append(append([]any(nil), l.kv...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		e = e.Str(fmt.Sprint(all[i]), fmt.Sprint(all[i+1]))
	}
	e.Str("component", "light").Msg(msg)
}
