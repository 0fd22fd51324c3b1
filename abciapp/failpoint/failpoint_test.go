package failpoint

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := parse("commit-after-write@12, byzantine-proposer=replay,,finalize-start,commit-delay=700,wrong-app-hash@9,bundle-liar=corrupt")
	if err != nil {
		t.Fatal(err)
	}
	want := []term{{CommitAfterWrite, 12, ""}, {ByzantineProposer, 0, "replay"}, {FinalizeStart, 0, ""}, {CommitDelay, 0, "700"}, {WrongAppHash, 9, ""}, {BundleLiar, 0, "corrupt"}}
	if len(got) != len(want) {
		t.Fatalf("parse = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("parse term %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"nope", "commit-after-write@x", "commit-after-write@0", "commit-delay", "commit-delay=0", "commit-delay=soon", "bundle-liar", "bundle-liar=sometimes"} {
		if _, err := parse(bad); err == nil || !strings.Contains(err.Error(), EnvVar) {
			t.Errorf("parse(%q) = %v, want an error naming %s", bad, err, EnvVar)
		}
	}
}
