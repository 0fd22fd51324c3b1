package wire

import (
	"fmt"
	"math"
	"strings"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// DefaultDeleteRetentionMs is a compacted topic's delete_retention_ms when
// unset: Kafka's delete.retention.ms default, a day.
const DefaultDeleteRetentionMs = 86_400_000

// DeleteRetentionMs is how long a compacted topic keeps a passed
// tombstone: the default when unset or out of range (a chain before rules
// version 9 stored any value unchecked).
func DeleteRetentionMs(c *byzlogv1.TopicConfig) int64 {
	if v := c.GetDeleteRetentionMs(); c != nil && c.DeleteRetentionMs != nil && v >= 0 && v <= math.MaxInt64/1_000_000 {
		return v
	}
	return DefaultDeleteRetentionMs
}

// CleanupPolicyName is a cleanup policy as Kafka's cleanup.policy writes
// it: delete, compact or compact,delete.
func CleanupPolicyName(p byzlogv1.CleanupPolicy) string {
	switch p {
	case byzlogv1.CleanupPolicy_CLEANUP_COMPACT:
		return "compact"
	case byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE:
		return "compact,delete"
	}
	return "delete"
}

// ParseCleanupPolicy reads a cleanup.policy list: delete, compact or both,
// in either order.
func ParseCleanupPolicy(v string) (byzlogv1.CleanupPolicy, error) {
	var del, cmp bool
	for p := range strings.SplitSeq(v, ",") {
		switch strings.TrimSpace(p) {
		case "delete":
			del = true
		case "compact":
			cmp = true
		default:
			return 0, fmt.Errorf("cleanup policy %q: want delete, compact or compact,delete", v)
		}
	}
	switch {
	case del && cmp:
		return byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE, nil
	case cmp:
		return byzlogv1.CleanupPolicy_CLEANUP_COMPACT, nil
	}
	return byzlogv1.CleanupPolicy_CLEANUP_DELETE, nil
}
