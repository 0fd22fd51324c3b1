//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const initScript = "init-cluster.sh"

// flagSpec is one flag as --help lists it.
type flagSpec struct {
	name  string // the longest spelling without dashes: "data-dir", "jetstream"
	value bool   // takes a value
	def   string // the default --help states, "" when none
}

// helpFlags maps every spelling ("--data-dir", "-js") to its flag.
type helpFlags map[string]*flagSpec

var (
	reFlagToken = regexp.MustCompile(`-{1,2}[A-Za-z][A-Za-z0-9_.\-]*`)
	reColumns   = regexp.MustCompile(`\s{2,}`)
	reDefault   = regexp.MustCompile(`\(default:? "?([^")]*)"?\)\s*$`)
)

// parseHelp reads the flag lines of cobra's and nats-server's --help: an
// indented line starting with a dash, spellings and a value placeholder in the
// first column, the description after two spaces.
func parseHelp(text string) helpFlags {
	flags := helpFlags{}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == line || !strings.HasPrefix(trimmed, "-") {
			continue
		}
		cols := reColumns.Split(trimmed, 2)
		locs := reFlagToken.FindAllStringIndex(cols[0], -1)
		if len(locs) == 0 {
			continue
		}
		spec := &flagSpec{value: strings.TrimSpace(cols[0][locs[len(locs)-1][1]:]) != ""}
		for _, l := range locs {
			tok := cols[0][l[0]:l[1]]
			if n := strings.TrimLeft(tok, "-"); len(n) > len(spec.name) {
				spec.name = n
			}
			flags[tok] = spec
		}
		if len(cols) == 2 {
			if m := reDefault.FindStringSubmatch(cols[1]); m != nil {
				spec.def = m[1]
			}
		}
	}
	return flags
}

func (d *deployment) help(t *testing.T, binary, sub string) helpFlags {
	t.Helper()
	key := binary + " " + sub
	if h, ok := d.helps[key]; ok {
		return h
	}
	var cmd *exec.Cmd
	if binary == initScript {
		cmd = exec.Command("bash", filepath.Join(d.dep, initScript), "--help")
	} else {
		var args []string
		if sub != "" {
			args = append(args, sub)
		}
		cmd = exec.Command(filepath.Join(d.bin, binary), append(args, "--help")...)
	}
	out, _ := cmd.CombinedOutput() // nats-server's --help exits non-zero
	h := parseHelp(string(out))
	if len(h) == 0 {
		t.Fatalf("`%s` lists no flags:\n%s", strings.Join(cmd.Args, " "), out)
	}
	d.helps[key] = h
	return h
}

var knownBinaries = []string{"byzlog", "byzlog-app", "byzlog-gateway", "byzlog-indexer", "cometbft", "nats-server", initScript}

// invocation is a command line read with its binary's real flags.
type invocation struct {
	sub   string            // the subcommand (cometbft start, byzlog consume)
	flags map[string]string // canonical name -> value given, else --help's default
	given map[string]bool
}

// invoke reads args with binary's --help and reports every flag it lacks.
func (d *deployment) invoke(t *testing.T, where, binary string, args []string) *invocation {
	t.Helper()
	inv := &invocation{flags: map[string]string{}, given: map[string]bool{}}
	if (binary == "cometbft" || binary == "byzlog") && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		inv.sub, args = args[0], args[1:]
	}
	spec := d.help(t, binary, inv.sub)
	name := strings.TrimSpace(binary + " " + inv.sub)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue // a positional argument
		}
		flag, value, hasValue := strings.Cut(a, "=")
		f := spec[flag]
		if f == nil {
			t.Errorf("%s: `%s` has no flag %s (see `%s --help`)", where, name, flag, name)
			continue
		}
		switch {
		case f.value && !hasValue:
			if i+1 == len(args) {
				t.Errorf("%s: %s %s needs a value", where, name, flag)
				continue
			}
			i++
			value = args[i]
		case !f.value && !hasValue:
			value = "true"
		}
		inv.flags[f.name], inv.given[f.name] = value, true
	}
	for _, f := range spec {
		if _, ok := inv.flags[f.name]; !ok && f.def != "" {
			inv.flags[f.name] = f.def
		}
	}
	return inv
}
