//go:build !failpoints

package failpoint

// Enabled reports whether this binary has failpoints compiled in.
const Enabled = false

// Crash does nothing without the failpoints build tag.
func Crash(string, int64) {}

// Value reports no failpoint without the failpoints build tag.
func Value(string) (string, bool) { return "", false }

// Delay does nothing without the failpoints build tag.
func Delay(string) {}

// Hit reports nothing without the failpoints build tag.
func Hit(string, int64) bool { return false }
