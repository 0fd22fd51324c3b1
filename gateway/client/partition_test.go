package client

import "testing"

// Vectors from Kafka's UtilsTest.testMurmur2.
func TestMurmur2MatchesKafka(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := murmur2([]byte(tt.in)); got != tt.want {
			t.Errorf("murmur2(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
	if got := KafkaPartition([]byte("foobar"), 7); got != uint32((-790332482)&0x7fffffff)%7 {
		t.Errorf("KafkaPartition(foobar, 7) = %d", got)
	}
}
