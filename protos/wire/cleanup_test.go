package wire

import (
	"testing"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

func TestCleanupPolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want byzlogv1.CleanupPolicy
		name string
	}{
		{"delete", byzlogv1.CleanupPolicy_CLEANUP_DELETE, "delete"},
		{"compact", byzlogv1.CleanupPolicy_CLEANUP_COMPACT, "compact"},
		{"compact,delete", byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE, "compact,delete"},
		{" delete , compact", byzlogv1.CleanupPolicy_CLEANUP_COMPACT_DELETE, "compact,delete"},
	} {
		got, err := ParseCleanupPolicy(tc.in)
		if err != nil || got != tc.want || CleanupPolicyName(got) != tc.name {
			t.Errorf("ParseCleanupPolicy(%q) = %v, %v (named %q); want %v, %q", tc.in, got, err, CleanupPolicyName(got), tc.want, tc.name)
		}
	}
	for _, bad := range []string{"", "compress", "compact,,delete"} {
		if _, err := ParseCleanupPolicy(bad); err == nil {
			t.Errorf("ParseCleanupPolicy(%q) took it", bad)
		}
	}
	neg, set := int64(-1), int64(5)
	for _, tc := range []struct {
		c    *byzlogv1.TopicConfig
		want int64
	}{{nil, DefaultDeleteRetentionMs}, {&byzlogv1.TopicConfig{}, DefaultDeleteRetentionMs}, {&byzlogv1.TopicConfig{DeleteRetentionMs: &neg}, DefaultDeleteRetentionMs}, {&byzlogv1.TopicConfig{DeleteRetentionMs: &set}, 5}} {
		if got := DeleteRetentionMs(tc.c); got != tc.want {
			t.Errorf("DeleteRetentionMs(%v) = %d, want %d", tc.c, got, tc.want)
		}
	}
}
