package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		c       Config
		wantErr string
	}{
		{Default(), ""},
		{Config{Level: "debug", Format: FormatJSON}, ""},
		{Config{Level: "loud", Format: FormatJSON}, `log level "loud"`},
		{Config{Level: "info", Format: "xml"}, `log format "xml"`},
		{Config{Level: "", Format: FormatAuto}, `log level ""`},
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%+v.Validate() = %v, want error containing %q", tt.c, err, tt.wantErr)
		}
	}
}

func TestNewWritesJSONWithFields(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(Config{Level: "info", Format: FormatAuto}, &buf, "test")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("hidden")
	log.Info().Int64("height", 7).Msg("committed")
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil {
		t.Fatalf("output %q is not one JSON line: %v", buf.String(), err)
	}
	if line["message"] != "committed" || line["height"] != float64(7) || line["process"] != "test" || line["level"] != "info" {
		t.Errorf("log line = %v, want message, height, process and level fields", line)
	}
}
