//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type dfStage struct {
	name, base string
	line       int
	parent     *dfStage
	entrypoint []string
	cmd        []string
	health     []string
	hasEntry   bool
	hasCmd     bool
	hasHealth  bool
	expose     []int
	user       string
	runs       []string
	copies     [][]string // sources from the build context
	copiesFrom [][2]string
}

func (s *dfStage) Entrypoint() []string {
	for x := s; x != nil; x = x.parent {
		if x.hasEntry {
			return x.entrypoint
		}
	}
	return nil
}

// Cmd follows Docker: an ENTRYPOINT set after the last CMD clears it.
func (s *dfStage) Cmd() []string {
	for x := s; x != nil; x = x.parent {
		if x.hasCmd {
			return x.cmd
		}
		if x.hasEntry {
			return nil
		}
	}
	return nil
}

func (s *dfStage) Health() []string {
	for x := s; x != nil; x = x.parent {
		if x.hasHealth {
			return x.health
		}
	}
	return nil
}

func (s *dfStage) User() string {
	for x := s; x != nil; x = x.parent {
		if x.user != "" {
			return x.user
		}
	}
	return ""
}

func (s *dfStage) Expose() map[int]bool {
	ports := map[int]bool{}
	for x := s; x != nil; x = x.parent {
		for _, p := range x.expose {
			ports[p] = true
		}
	}
	return ports
}

func (s *dfStage) Runs() string {
	var all []string
	for x := s; x != nil; x = x.parent {
		all = append(all, x.runs...)
	}
	return strings.Join(all, "\n")
}

func (s *dfStage) copiesContext(src string) bool {
	for x := s; x != nil; x = x.parent {
		for _, c := range x.copies {
			if slices.Contains(c, src) {
				return true
			}
		}
	}
	return false
}

type dockerfile struct {
	path   string
	args   map[string]string // ARGs before the first FROM, with their defaults
	stages []*dfStage
	byName map[string]*dfStage
}

// parseDockerfile reads the instructions the checks need; ENTRYPOINT, CMD and
// HEALTHCHECK must use the exec form (JSON), so the binary is PID 1 and gets
// SIGTERM.
func parseDockerfile(t *testing.T, file string) *dockerfile {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	df := &dockerfile{path: file, args: map[string]string{}, byName: map[string]*dfStage{}}
	var cur *dfStage
	var logical strings.Builder
	start := 0
	lines := strings.Split(string(b), "\n")
	for i, raw := range lines {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && logical.Len() == 0) {
			continue
		}
		if logical.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(line, `\`) {
			logical.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		logical.WriteString(line)
		instr := logical.String()
		logical.Reset()
		where := fmt.Sprintf("%s:%d", filepath.Base(file), start)
		word, rest, _ := strings.Cut(instr, " ")
		rest = strings.TrimSpace(rest)
		execForm := func(s string) []string {
			var v []string
			if err := json.Unmarshal([]byte(s), &v); err != nil {
				t.Errorf("%s: %s %s: use the exec form [\"binary\", \"arg\"]: %v", where, word, s, err)
			}
			return v
		}
		switch strings.ToUpper(word) {
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			if cur == nil {
				df.args[name] = def
			}
		case "FROM":
			fields := strings.Fields(rest)
			var img, name string
			for j := 0; j < len(fields); j++ {
				switch {
				case strings.HasPrefix(fields[j], "--"):
				case strings.EqualFold(fields[j], "AS") && j+1 < len(fields):
					name = fields[j+1]
					j++
				default:
					img = fields[j]
				}
			}
			cur = &dfStage{name: name, base: img, line: start, parent: df.byName[img]}
			df.stages = append(df.stages, cur)
			if name != "" {
				df.byName[name] = cur
			}
		case "ENTRYPOINT":
			cur.entrypoint, cur.hasEntry = execForm(rest), true
		case "CMD":
			cur.cmd, cur.hasCmd = execForm(rest), true
		case "HEALTHCHECK":
			cur.hasHealth = true
			if _, c, ok := strings.Cut(rest, "CMD "); ok {
				cur.health = execForm(strings.TrimSpace(c))
			}
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Errorf("%s: EXPOSE %s: not a port", where, p)
				}
				cur.expose = append(cur.expose, n)
			}
		case "USER":
			cur.user = rest
		case "RUN":
			cur.runs = append(cur.runs, rest)
		case "COPY", "ADD":
			var from string
			var args []string
			for _, f := range strings.Fields(rest) {
				if v, ok := strings.CutPrefix(f, "--from="); ok {
					from = v
				} else if !strings.HasPrefix(f, "--") {
					args = append(args, f)
				}
			}
			if len(args) < 2 {
				t.Errorf("%s: %s needs a source and a destination", where, word)
				continue
			}
			for _, src := range args[:len(args)-1] {
				if from != "" {
					cur.copiesFrom = append(cur.copiesFrom, [2]string{from, src})
				}
			}
			if from == "" {
				cur.copies = append(cur.copies, args)
			}
		}
	}
	return df
}

// dockerignored says whether the context path p is left out of the build by
// Dockerfile.dockerignore: last matching pattern wins, ! re-includes; the
// patterns used are "**", "dir/", "file" and "**/name/".
func dockerignored(patterns []string, p string) bool {
	ignored := false
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		pat = strings.Trim(strings.TrimPrefix(pat, "!"), "/")
		match := false
		switch {
		case pat == "**":
			match = true
		case strings.HasPrefix(pat, "**/"):
			name := strings.TrimPrefix(pat, "**/")
			parts := strings.Split(p, "/")
			match = slices.Contains(parts, name)
		default:
			match = p == pat || strings.HasPrefix(p, pat+"/")
		}
		if match {
			ignored = !neg
		}
	}
	return ignored
}

func (d *deployment) checkDockerfile(t *testing.T) {
	df := d.df
	if got := df.args["COMETBFT_VERSION"]; got != d.pins.cometbft {
		t.Errorf("Dockerfile: ARG COMETBFT_VERSION=%s, but the Makefile (abciapp/go.mod) pins %s", got, d.pins.cometbft)
	}
	if got := df.args["GO_VERSION"]; got != d.pins.goVersion {
		t.Errorf("Dockerfile: ARG GO_VERSION=%s, but go.work says go %s", got, d.pins.goVersion)
	}
	ignoreFile := df.path + ".dockerignore"
	b, err := os.ReadFile(ignoreFile)
	if err != nil {
		t.Fatalf("%v (BuildKit reads it next to the Dockerfile: without it the whole repository, bin/ and run/ included, is sent)", err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, s := range df.stages {
		for _, c := range s.copies {
			for _, src := range c[:len(c)-1] {
				p := strings.Trim(path.Clean(src), "/")
				if _, err := os.Stat(filepath.Join(d.root, p)); err != nil {
					t.Errorf("Dockerfile stage %s: COPY %s: not in the repository: %v", s.name, src, err)
				}
				if dockerignored(patterns, p) {
					t.Errorf("Dockerfile stage %s: COPY %s, but %s leaves it out of the build context", s.name, src, filepath.Base(ignoreFile))
				}
			}
		}
	}
	for _, s := range df.stages {
		entry := s.Entrypoint()
		if s.name == "" || len(entry) == 0 {
			continue
		}
		where := fmt.Sprintf("Dockerfile target %s", s.name)
		if u := s.User(); u == "" || u == "root" || strings.HasPrefix(u, "0:") || u == "0" {
			t.Errorf("%s: runs as root (USER %q): set a non-root USER", where, u)
		}
		binary := path.Base(entry[0])
		if !slices.Contains(knownBinaries, binary) {
			t.Errorf("%s: ENTRYPOINT %s is none of %v", where, binary, knownBinaries)
			continue
		}
		// The binary must be in the image.
		if !s.copiesContext("deployments/"+binary) && !slices.ContainsFunc(s.copiesFrom, func(c [2]string) bool { return path.Base(c[1]) == binary }) {
			t.Errorf("%s: ENTRYPOINT %s, but the stage copies no %s", where, binary, binary)
		}
		// Its shared libraries must be installed: Debian names librocksdb.so.7.8's package librocksdb7.8.
		for _, cf := range s.copiesFrom {
			name := path.Base(cf[1])
			for _, pkg := range debianLibs(t, filepath.Join(d.bin, name)) {
				if !strings.Contains(s.Runs(), pkg) {
					t.Errorf("%s: %s needs %s at run time: apt-get install it", where, name, pkg)
				}
				if from := df.byName[cf[0]]; from != nil && !strings.Contains(from.Runs(), strings.TrimSuffix(pkg, regexp.MustCompile(`[0-9.]+$`).FindString(pkg))+"-dev") {
					t.Errorf("Dockerfile stage %s builds %s, which links %s: install its -dev package", cf[0], name, pkg)
				}
			}
		}
		c := &container{where: where, binary: binary, declared: s.Expose(), pod: where}
		c.inv = d.invoke(t, where, binary, append(slices.Clone(entry[1:]), s.Cmd()...))
		if h := s.Health(); h != nil {
			if slices.Contains(h, "probe") && !s.copiesContext("deployments/docker/probe") {
				t.Errorf("%s: HEALTHCHECK runs probe, which the image lacks", where)
			}
			pr, err := probeCommand("HEALTHCHECK", h)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			} else {
				c.probes = append(c.probes, pr)
			}
		}
		checkContainer(t, c, nil)
	}
}

// debianLibs lists the Debian packages of the non-base libraries a binary
// links (RocksDB), from ldd.
func debianLibs(t *testing.T, binPath string) []string {
	out, err := exec.Command("ldd", binPath).Output()
	if err != nil {
		t.Logf("ldd %s: %v: runtime libraries not checked", binPath, err)
		return nil
	}
	var pkgs []string
	for _, m := range regexp.MustCompile(`lib(rocksdb)\.so\.(\d+\.\d+)`).FindAllStringSubmatch(string(out), -1) {
		if pkg := "lib" + m[1] + m[2]; !slices.Contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
	}
	return pkgs
}
