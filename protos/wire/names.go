package wire

import (
	"fmt"
	"unicode/utf8"
)

// MaxTopicName is Kafka's limit on topic name length.
const MaxTopicName = 249

// MaxGroupName bounds consumer group names, in bytes.
const MaxGroupName = 255

// CheckTopicName says what is wrong with a topic name, or nil: 1 to
// MaxTopicName characters of a-z, A-Z, 0-9, '.', '_' and '-', not "." or
// "..", as Kafka's rule.
func CheckTopicName(name string) error {
	if name == "" || len(name) > MaxTopicName {
		return fmt.Errorf("topic name %s must be 1 to %d characters", Quote(name), MaxTopicName)
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("topic name %s has %q: use only a-z, A-Z, 0-9, '.', '_' and '-'", Quote(name), c)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("topic name %q is reserved", name)
	}
	return nil
}

// CheckGroupName says what is wrong with a consumer group name, or nil: 1
// to MaxGroupName bytes of UTF-8 without NUL.
func CheckGroupName(group string) error {
	if group == "" || len(group) > MaxGroupName || !utf8.ValidString(group) {
		return fmt.Errorf("group name must be 1 to %d bytes of UTF-8", MaxGroupName)
	}
	for _, c := range []byte(group) {
		if c == 0 {
			return fmt.Errorf("group name %s holds a NUL byte", Quote(group))
		}
	}
	return nil
}

// Quote quotes s for a message, cut to its first 64 bytes: messages about
// untrusted names stay small.
func Quote(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", s[:64], len(s))
	}
	return fmt.Sprintf("%q", s)
}
