//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDeployments checks deployments/ without a Docker engine or a cluster:
// the Dockerfile, docker-compose.yml (loaded by compose-go, the library behind
// `docker compose config`), the Kubernetes manifests (decoded strictly into
// k8s.io/api types, so an unknown field fails) and init-cluster.sh, which it
// runs. Every command line of byzlog-app, byzlog-gateway, byzlog-indexer,
// cometbft, nats-server and init-cluster.sh is read with the flags the real
// binary's --help lists; then the addresses those flags name must lead to the
// right process and port, the state they name must be on a persistent
// volume, and the health checks must probe endpoints that exist.
func TestDeployments(t *testing.T) {
	bin := binDir(t)
	for _, name := range []string{"byzlog-gateway", "byzlog-indexer", "nats-server"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Fatalf("%s not found in %s (BYZLOG_BIN): run `make build` first: %v", name, bin, err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{root: root, dep: filepath.Join(root, "deployments"), bin: bin, helps: map[string]helpFlags{}}
	d.df = parseDockerfile(t, filepath.Join(d.dep, "docker", "Dockerfile"))
	d.pins = readPins(t, root)

	t.Run("dockerfile", d.checkDockerfile)
	t.Run("compose", d.checkCompose)
	t.Run("k8s", d.checkK8s)
}

// deployment is what the checks share.
type deployment struct {
	root, dep, bin string
	helps          map[string]helpFlags
	df             *dockerfile
	pins           pins
}

// pins are the versions the Makefile and go.work declare.
type pins struct {
	cometbft, nats, goVersion string // "v0.40.0", "2.15.2", "1.26"
}

func readPins(t *testing.T, root string) pins {
	t.Helper()
	find := func(file, pattern string) string {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(pattern).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no match for %s", file, pattern)
		}
		return string(m[1])
	}
	return pins{
		// The Makefile takes CometBFT's version from abciapp/go.mod.
		cometbft:  find("abciapp/go.mod", `(?m)^\s*github\.com/cometbft/cometbft (v\S+)`),
		nats:      strings.TrimPrefix(find("Makefile", `(?m)^NATS_SERVER_VERSION\s*:=\s*(\S+)`), "v"),
		goVersion: find("go.work", `(?m)^go (\d+\.\d+)`),
	}
}
