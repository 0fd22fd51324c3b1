package receipt

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// sdkPackages are linked into an SDK user's program: this package and
// the SDKs, which live in other modules of the workspace.
var sdkPackages = []string{
	"github.com/byzlog/byzlog/protos/chain/receipt",
	"github.com/byzlog/byzlog/gateway/client",
	"github.com/byzlog/byzlog/indexer/consumer",
}

// forbidden are what no SDK may link, with their subpackages: storage
// engines, and CometBFT's light client, RPC, node, consensus and store
// (they bring a database with them). Issue 46.
var forbidden = []string{
	"github.com/cometbft/cometbft-db",
	"github.com/syndtr/goleveldb",
	"github.com/cockroachdb/pebble",
	"github.com/dgraph-io/badger",
	"github.com/linxGnu/grocksdb",
	"go.etcd.io/bbolt",
	"github.com/cometbft/cometbft/light",
	"github.com/cometbft/cometbft/rpc",
	"github.com/cometbft/cometbft/config",
	"github.com/cometbft/cometbft/p2p",
	"github.com/cometbft/cometbft/node",
	"github.com/cometbft/cometbft/consensus",
	"github.com/cometbft/cometbft/store",
	"github.com/cometbft/cometbft/state",
}

// allowed are subpackages of forbidden ones an SDK may link: the light
// provider interface and its errors import only CometBFT's types.
var allowed = []string{"github.com/cometbft/cometbft/light/provider"}

func isForbidden(pkg string) bool {
	if slices.Contains(allowed, pkg) {
		return false
	}
	for _, f := range forbidden {
		if pkg == f || strings.HasPrefix(pkg, f+"/") {
			return true
		}
	}
	return false
}

// TestSDKsStayLean fails when an SDK package links a forbidden package,
// and names the imports that bring it. Outside the workspace only this
// package can be listed; make verify-sdk-example builds the SDKs as a
// user's module does.
func TestSDKsStayLean(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		// go test runs the test, so the toolchain is here even off PATH.
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, serr := os.Stat(goCmd); serr != nil {
			t.Fatalf("no go command to list the packages with: %v; %v", err, serr)
		}
	}
	roots := sdkPackages
	if out, err := exec.Command(goCmd, "env", "GOWORK").Output(); err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "off" {
		roots = roots[:1]
		t.Logf("not in the workspace: listing %s alone", roots[0])
	}
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}, roots...)
	out, err := exec.Command(goCmd, args...).Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	for _, root := range roots {
		paths := reachable(imports, root)
		var bad []string
		for pkg := range paths {
			if isForbidden(pkg) {
				bad = append(bad, pkg)
			}
		}
		slices.Sort(bad)
		for _, pkg := range bad {
			t.Errorf("%s links %s, through %s", root, pkg, strings.Join(paths[pkg], " -> "))
		}
	}
}

// reachable returns the packages root imports, directly or not, each with
// the shortest chain of imports from root to it; what a forbidden package
// imports is left out, so that each is named once, where it comes in.
func reachable(imports map[string][]string, root string) map[string][]string {
	paths := map[string][]string{root: {root}}
	queue := []string{root}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		if isForbidden(pkg) {
			continue
		}
		for _, imp := range imports[pkg] {
			if _, seen := paths[imp]; !seen {
				paths[imp] = append(slices.Clone(paths[pkg]), imp)
				queue = append(queue, imp)
			}
		}
	}
	return paths
}
