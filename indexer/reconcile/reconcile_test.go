package reconcile

import (
	"testing"
)

func TestParseCursor(t *testing.T) {
	for in, want := range map[string]int64{"7": 7, `{"height":9,"ends":{"t\u00000":{"next":3,"first_height":2}}}`: 9} {
		c, err := ParseCursor([]byte(in))
		if err != nil || c.Height != want {
			t.Errorf("ParseCursor(%s) = %+v %v, want height %d", in, c, err, want)
		}
	}
	if c, _ := ParseCursor([]byte(`{"height":9,"ends":{"t\u00000":{"next":3,"first_height":2}}}`)); c.Ends[Key("t", 0)].Next != 3 {
		t.Errorf("ParseCursor lost the ends: %+v", c)
	}
	for _, bad := range []string{"", "x", `{"height":-1}`} {
		if _, err := ParseCursor([]byte(bad)); err == nil {
			t.Errorf("ParseCursor(%q) = nil error", bad)
		}
	}
}
