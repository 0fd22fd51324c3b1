package lightclient

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cometbft/cometbft/light/provider"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// TestLightLoggerLevels: a provider failing or dropped is a counted
// warning; a witness without the height (it joined by state sync or
// prunes) is not, nor is the light client's routine chatter.
func TestLightLoggerLevels(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		kv        []any
		warn      bool
	}{
		{"witness without the block", "error in light block request to witness", []any{"err", fmt.Errorf("wrapped: %w", provider.ErrLightBlockNotFound)}, false},
		{"witness failing", "error in light block request to witness", []any{"err", errors.New("connection refused")}, true},
		{"primary dropped", "error from light block request from primary, removing...", []any{"err", provider.ErrLightBlockNotFound}, true},
		{"routine", "VerifyHeader", []any{"height", 5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "light_errors_test"})
			l := lightLogger{log: zerolog.New(&buf).Level(zerolog.InfoLevel), errors: errs}
			l.Info(tc.msg, tc.kv...)
			warned := strings.Contains(buf.String(), `"level":"warn"`)
			if counted := testutil.ToFloat64(errs) == 1; warned != tc.warn || counted != tc.warn {
				t.Fatalf("Info(%q, %v): warned %v, counted %v; want %v (log: %s)", tc.msg, tc.kv, warned, counted, tc.warn, buf.String())
			}
		})
	}
}
