package localnet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestRaiseSignState(t *testing.T) {
	for _, tc := range []struct {
		name, before string
		want         string
	}{
		{"missing", "", "102"},
		{"unreadable", "{\"height\": \"9", "102"},
		{"zeroed", "\x00\x00\x00\x00", "102"},
		{"rolled back", `{"height": "40", "round": 1, "step": 3}`, "102"},
		{"already past", `{"height": "500", "round": 0, "step": 2}`, "500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "priv_validator_state.json")
			if tc.before != "" {
				if err := os.WriteFile(path, []byte(tc.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := RaiseSignState(path, 102); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				Height string `json:"height"`
				Round  int32  `json:"round"`
				Step   int8   `json:"step"`
			}
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatalf("state after = %q: %v", b, err)
			}
			if st.Height != tc.want {
				t.Errorf("height after = %s, want %s (state %q)", st.Height, tc.want, b)
			}
		})
	}
}
