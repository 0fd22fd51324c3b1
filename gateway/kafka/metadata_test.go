package kafka

import (
	"testing"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// TestTopicID: a topic's id depends on the chain, its name and the height
// that created it, so a topic deleted and created again (librdkafka test
// 0107: 10 partitions, then 3) gets a new id, and is never Kafka's null
// id.
func TestTopicID(t *testing.T) {
	a := topicID("c", &byzlogv1.TopicInfo{Name: "t", CreatedHeight: 5})
	for _, tc := range []struct {
		chain string
		ti    *byzlogv1.TopicInfo
		same  bool
	}{
		{"c", &byzlogv1.TopicInfo{Name: "t", CreatedHeight: 5, Config: &byzlogv1.TopicConfig{Partitions: 3}}, true},
		{"c", &byzlogv1.TopicInfo{Name: "t", CreatedHeight: 9}, false},
		{"c", &byzlogv1.TopicInfo{Name: "u", CreatedHeight: 5}, false},
		{"d", &byzlogv1.TopicInfo{Name: "t", CreatedHeight: 5}, false},
	} {
		if got := topicID(tc.chain, tc.ti); (got == a) != tc.same || got == ([16]byte{}) {
			t.Errorf("topicID(%s, %v) = %x, topicID(c, t@5) = %x: want same %v and not zero", tc.chain, tc.ti, got, a, tc.same)
		}
	}
}
