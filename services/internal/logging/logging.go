// Package logging builds the zerolog logger every byzlog process uses: JSON
// lines for machines, a readable console format on a terminal. It is the only
// place that decides log format; libraries take the logger it returns and
// never build or read a global one.
package logging

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// Formats.
const (
	FormatAuto   = "auto"   // pretty on a terminal, JSON otherwise
	FormatJSON   = "json"   // one JSON object per line
	FormatPretty = "pretty" // zerolog's console writer
)

// Config selects level and format.
type Config struct {
	// Level is one of trace, debug, info, warn, error.
	Level string
	// Format is auto, json or pretty.
	Format string
}

// Default returns info level, auto format.
func Default() Config { return Config{Level: "info", Format: FormatAuto} }

// Validate says which field is wrong and what it may be.
func (c Config) Validate() error {
	if _, err := parseLevel(c.Level); err != nil {
		return err
	}
	switch c.Format {
	case FormatAuto, FormatJSON, FormatPretty:
		return nil
	}
	return fmt.Errorf("log format %q: must be %s, %s or %s", c.Format, FormatAuto, FormatJSON, FormatPretty)
}

// New returns a logger writing to w (a terminal check applies when w is an
// *os.File), tagged with the process name.
func New(c Config, w io.Writer, process string) (zerolog.Logger, error) {
	if err := c.Validate(); err != nil {
		return zerolog.Nop(), err
	}
	level, _ := parseLevel(c.Level)
	pretty := c.Format == FormatPretty
	if c.Format == FormatAuto {
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			pretty = true
		}
	}
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Str("process", process).Logger(), nil
}

func parseLevel(s string) (zerolog.Level, error) {
	switch s {
	case "trace", "debug", "info", "warn", "error":
		return zerolog.ParseLevel(s)
	}
	return zerolog.NoLevel, fmt.Errorf("log level %q: must be trace, debug, info, warn or error", s)
}
