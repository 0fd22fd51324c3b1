//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

var terms = func() []term {
	t, err := parse(os.Getenv(EnvVar))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return t
}()

// Enabled reports whether this binary has failpoints compiled in.
const Enabled = true

// Crash kills the process with SIGKILL, as a power cut would, if the
// failpoint name is set for height.
func Crash(name string, height int64) {
	for _, t := range terms {
		if t.name == name && (t.height == 0 || t.height == height) {
			fmt.Fprintf(os.Stderr, "failpoint %s at height %d: crashing\n", name, height)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns
		}
	}
}

// Value returns the value of a set failpoint.
func Value(name string) (string, bool) {
	for _, t := range terms {
		if t.name == name {
			return t.value, true
		}
	}
	return "", false
}

// Delay sleeps for the failpoint's value in milliseconds, if it is set
// (parse checked the value).
func Delay(name string) {
	if v, ok := Value(name); ok {
		ms, _ := strconv.Atoi(v)
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
}

// Hit reports whether the failpoint name is set for height.
func Hit(name string, height int64) bool {
	for _, t := range terms {
		if t.name == name && (t.height == 0 || t.height == height) {
			return true
		}
	}
	return false
}
