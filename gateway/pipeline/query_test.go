package pipeline

import (
	"errors"
	"strings"
	"testing"
)

func TestAgree(t *testing.T) {
	a := func(code uint32, value string, h int64) *queryAnswer {
		return &queryAnswer{code: code, value: []byte(value), height: h}
	}
	down := errors.New("node down")
	for _, tc := range []struct {
		name      string
		answers   []*queryAnswer
		errs      []error
		need      int
		wantValue string // "" for none
		wantLow   int64
		wantSplit bool
		wantErr   string
	}{
		{"f+1 agree", []*queryAnswer{a(0, "x", 5), a(0, "x", 4), nil}, []error{nil, nil, down}, 2, "x", 4, false, ""},
		{"one liar first", []*queryAnswer{a(0, "lie", 9), a(0, "x", 5), a(0, "x", 6)}, nil, 2, "x", 5, true, ""},
		{"a rejection counts as an answer", []*queryAnswer{a(3, "", 5), a(3, "", 5)}, nil, 2, "", 5, false, ""},
		{"differing answers", []*queryAnswer{a(0, "x", 5), a(0, "y", 5), nil}, []error{nil, nil, down}, 2, "", 0, false, "2 different answers"},
		{"no answers: the last error", []*queryAnswer{nil, nil}, []error{errors.New("first"), down}, 1, "", 0, false, "node down"},
		{"no nodes", nil, nil, 1, "", 0, false, ""},
		{"a single node is trusted", []*queryAnswer{a(0, "x", 5)}, nil, 1, "x", 5, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.errs
			if errs == nil {
				errs = make([]error, len(tc.answers))
			}
			win, low, split, err := agree(tc.answers, errs, tc.need)
			switch {
			case tc.wantErr == "" && err != nil, tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("agree() error = %v, want %q", err, tc.wantErr)
			case tc.wantValue == "" && tc.wantLow == 0 && win != nil:
				t.Fatalf("agree() = %+v, want none", win)
			case tc.wantLow != 0 && (win == nil || string(win.value) != tc.wantValue || low != tc.wantLow || split != tc.wantSplit):
				t.Fatalf("agree() = %+v, low %d, split %v; want %q, low %d, split %v", win, low, split, tc.wantValue, tc.wantLow, tc.wantSplit)
			}
		})
	}
}
