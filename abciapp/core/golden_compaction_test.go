package core_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// TestAppHashGoldenCompaction pins the app hashes of a compacted topic's
// life (versions, tombstones, their expiry, retention on compact,delete, a
// topic deleted and created again) under rules versions 9 and 10: what an
// older chain computes must not move when a later version is built, and
// the key tree's layout is pinned with rules 10 (go test ./core -run
// Golden -update; the rules 9 file was written by the build before rules
// 10 existed).
func TestAppHashGoldenCompaction(t *testing.T) {
	for _, rules := range []uint64{9, 10} {
		t.Run(fmt.Sprintf("rules%d", rules), func(t *testing.T) {
			admin := wire.NewSigner(key("admin"), chainID)
			c := newChain(t, fmt.Sprintf(`{"admins": [%q], "rules_version": %d}`, hex.EncodeToString(admin.PublicKey()), rules))
			var hashes []string
			step := func(txs ...[]byte) {
				c.block(txs...)
				hashes = append(hashes, hex.EncodeToString(c.state.AppHash))
			}
			c.createTopic("t", &byzlogv1.TopicConfig{Partitions: 2, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT, DeleteRetentionMs: ms(2500)})
			c.createTopic("r", &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE, RetentionMs: 3000})
			p, q := wire.NewSigner(key("p"), chainID), wire.NewSigner(key("q"), chainID)
			step(bundle(t, batch(t, p, "t", 0, 0, kv("a=1", "b=1", "a=2")), batch(t, q, "t", 1, 0, kv("c=1", "d=1"))))
			step(bundle(t, batch(t, p, "r", 0, 0, kv("x=1", "y=1", "x=2"))))
			step(bundle(t, batch(t, p, "t", 0, 1, kv("b=", "a=3"))))
			for range 4 {
				step()
			}
			step(c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.DeleteTopic{Name: "t"}),
				c.adminTx(c.admin, c.nextNonce(c.admin), &byzlogv1.CreateTopic{Name: "t", Config: &byzlogv1.TopicConfig{Partitions: 1, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT}}))
			step(bundle(t, batch(t, q, "t", 0, 0, kv("a=9"))))
			step()
			got := strings.Join(hashes, "\n") + "\n"
			path := filepath.Join("testdata", fmt.Sprintf("apphash-compaction-rules%d.golden", rules))
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (create it with -update): %v", err)
			}
			if got != string(want) {
				t.Errorf("app hashes =\n%s\nwant (from %s)\n%s", got, path, want)
			}
		})
	}
}
