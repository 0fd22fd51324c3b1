package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/byzlog/byzlog/services/internal/nodecheck"
)

// corruptNode is the validator corrupt-one damages, the same one all phase
// long: one faulty validator of four.
const corruptNode = 3

// corruptTargets are the files corrupt-one damages, in turn, relative to a
// validator's home: CometBFT's WAL, block store and state (goleveldb
// journals and tables), its signing state, and the app's RocksDB.
var corruptTargets = []string{
	"data/cs.wal/wal",
	"data/blockstore.db/*.log",
	"data/blockstore.db/*.ldb",
	"data/state.db/*.log",
	"data/priv_validator_state.json",
	"app/*.sst",
	"app/*.log",
	"app/MANIFEST-*",
	"app/CURRENT",
}

// corruption is one way a file is damaged.
type corruption struct {
	name  string
	apply func(path string, old []byte) error // old: the file at the phase's start, if it existed then
}

// corruptions are the damages corrupt-one applies, in turn.
var corruptions = []corruption{
	{"bit-flip", func(path string, _ []byte) error {
		return rewrite(path, func(b []byte) []byte {
			if len(b) > 0 {
				b[len(b)/2] ^= 0x10
			}
			return b
		})
	}},
	{"truncate", func(path string, _ []byte) error {
		return rewrite(path, func(b []byte) []byte { return b[:len(b)-min(len(b)/2, 1000)] })
	}},
	{"rollback-4k", func(path string, old []byte) error {
		return rewrite(path, func(b []byte) []byte {
			// The 4 KB chunk at the middle as it was at the phase's
			// start (zeros where the file was shorter then).
			at := len(b) / 2 &^ 4095
			chunk := make([]byte, min(4096, len(b)-at))
			if at < len(old) {
				copy(chunk, old[at:])
			}
			copy(b[at:], chunk)
			return b
		})
	}},
	{"zero-4k", func(path string, _ []byte) error {
		return rewrite(path, func(b []byte) []byte {
			at := len(b) / 2 &^ 4095
			clear(b[at:min(len(b), at+4096)])
			return b
		})
	}},
	{"delete", func(path string, _ []byte) error { return os.Remove(path) }},
}

// rewrite replaces path's content with edit's, synced.
func rewrite(path string, edit func([]byte) []byte) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(edit(b)); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// corruptTarget picks the file of target (a glob) in home to damage: the
// middle one of its matches, sorted; "" when none exists.
func corruptTarget(home, target string) string {
	matches, _ := filepath.Glob(filepath.Join(home, target))
	slices.Sort(matches)
	if len(matches) == 0 {
		return ""
	}
	return matches[len(matches)/2]
}

// corruptOne stops corruptNode, damages one of its files (round picks the
// file and the damage, each in turn: 9 files and 5 damages, so 45 rounds
// pair each file with each damage once), and heals by
// starting it: it must either converge (the checker's app-hash and replica
// checks say whether it serves what the others do) or halt saying which
// file, after which it is rebuilt from its peers.
func corruptOne(ctx context.Context, c *Cluster, round int) (string, func(context.Context) error, error) {
	i := corruptNode % c.validators()
	home := c.Net.Home(i)
	if c.snapshots == nil {
		// What the files held at the phase's start, for rollbacks.
		c.snapshots = map[string][]byte{}
		for _, t := range corruptTargets {
			if p := corruptTarget(home, t); p != "" {
				c.snapshots[p], _ = os.ReadFile(p)
			}
		}
	}
	target := corruptTargets[round%len(corruptTargets)]
	damage := corruptions[round%len(corruptions)]
	if err := c.Net.KillNode(i); err != nil {
		return "", nil, err
	}
	path := corruptTarget(home, target)
	what := fmt.Sprintf("node%d %s %s", i, damage.name, target)
	if path == "" {
		c.note(what + ": no such file yet")
	} else {
		what = fmt.Sprintf("node%d %s %s", i, damage.name, strings.TrimPrefix(path, home+"/"))
		if err := damage.apply(path, c.snapshots[path]); err != nil {
			return "", nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return what, func(ctx context.Context) error { return startCorrupted(ctx, c, i, what, path) }, nil
}

// startCorrupted starts node i after its file at path was damaged. If
// either process is gone 10 s later, or does not start, the node halted:
// the note says whether its logs name the file; it is then rebuilt from
// its peers and must catch up.
func startCorrupted(ctx context.Context, c *Cluster, i int, what, path string) error {
	err := c.Net.StartNode(ctx, i)
	if err == nil {
		sleep(ctx, 10*time.Second)
		if cmt, app := c.Net.Alive(i); cmt && app {
			c.note(what + ": started and ran on")
			return nil
		}
	}
	said := haltMessage(c.Net.Home(i), filepath.Base(path))
	if err := c.Net.KillRest(i); err != nil {
		return err
	}
	c.note(fmt.Sprintf("%s: halted (%v); %s; byzlog node check: %s", what, err, said, checkSays(c.Net.Home(i))))
	if err := c.Net.ResetNode(ctx, i); err != nil {
		return err
	}
	if err := c.Net.StartNode(ctx, i); err != nil {
		return fmt.Errorf("node%d, rebuilt after %s, did not start: %w", i, what, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := c.Net.WaitHeight(wctx, []int{i}, maxCommitted(ctx, c), io.Discard); err != nil {
		return fmt.Errorf("node%d, rebuilt after %s, did not catch up: %w", i, what, err)
	}
	return nil
}

// checkSays is what byzlog node check finds damaged in a stopped node.
func checkSays(home string) string {
	var found []string
	for _, r := range nodecheck.Check(home, filepath.Join(home, "app")) {
		if r.Err != nil {
			found = append(found, fmt.Sprintf("%s: %.200s", r.File, r.Err))
		}
	}
	if len(found) == 0 {
		return "nothing damaged"
	}
	return strings.Join(found, "; ")
}

// haltMessage says whether a halted node's logs name file, quoting the
// last line that does (or the logs' last error line).
func haltMessage(home, file string) string {
	var last string
	for _, log := range []string{"app.log", "cometbft.log"} {
		b, err := os.ReadFile(filepath.Join(home, log))
		if err != nil {
			continue
		}
		lines := strings.Split(string(b[max(0, len(b)-64<<10):]), "\n")
		for _, l := range slices.Backward(lines) {
			if file != "" && strings.Contains(l, file) {
				return fmt.Sprintf("%s names the file: %.300s", log, l)
			}
			if last == "" && (strings.Contains(l, "rror") || strings.Contains(l, "anic") || strings.Contains(l, "orrupt")) {
				last = fmt.Sprintf("%s: %.300s", log, l)
			}
		}
	}
	if last == "" {
		return "no log names the file"
	}
	return "no log names the file; last error " + last
}
