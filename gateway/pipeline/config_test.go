package pipeline

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		c := Default()
		c.Nodes.Addrs = []string{"http://127.0.0.1:26657"}
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v, want nil", err)
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.PendingTimeout = c.CommitTimeout }, "pending_timeout"},
		{func(c *Config) { c.MaxProducerQueuedBytes = 10 }, "max_producer_queued_bytes"},
		{func(c *Config) { c.MaxProducerQueuedBytes = c.MaxQueuedBytes + 1 }, "max_producer_queued_bytes"},
		{func(c *Config) { c.MaxProducerQueuedBatches = 0 }, "max_producer_queued_batches"},
		{func(c *Config) { c.HTTP.MaxBodyBytes = 0 }, "http.max_body_bytes"},
		{func(c *Config) { c.HTTP.MaxConcurrent = 0 }, "http.max_concurrent"},
		{func(c *Config) { c.HTTP.ReadTimeout = 0 }, "http.read_timeout"},
		{func(c *Config) { c.HTTP.WriteTimeout = 10 * time.Second }, "http.write_timeout"},
		{func(c *Config) { c.HTTP.MaxHeaderBytes = 1 }, "http.max_header_bytes"},
		{func(c *Config) { c.GRPC.MaxConcurrentStreams = 0 }, "grpc.max_concurrent_streams"},
		{func(c *Config) { c.GRPC.KeepaliveMinTime = 0 }, "grpc.keepalive_min_time"},
		{func(c *Config) { c.Nodes.MaxResponseBytes = 100 }, "max_response_bytes"},
		{func(c *Config) { c.Nodes.Addrs = []string{"http://10.0.0.5:26657"} }, "set insecure"},
		{func(c *Config) { c.Nodes.Addrs = []string{"ftp://x"} }, "nodes: addrs"},
		{func(c *Config) { c.Waits.StartRetry = 0 }, "waits.start_retry"},
		{func(c *Config) { c.Waits.BroadcastTimeout = -1 }, "waits.broadcast_timeout"},
		{func(c *Config) { c.Waits.FollowTimeout = 0 }, "waits.follow_timeout"},
		{func(c *Config) { c.Waits.LookupTimeout = 0 }, "waits.lookup_timeout"},
		{func(c *Config) { c.Waits.QueryRounds = 0 }, "waits.query_rounds"},
		{func(c *Config) { c.Waits.QueryRetry = 0 }, "waits.query_retry"},
		{func(c *Config) { c.Waits.CatchUpTimeout = 0 }, "waits.catch_up_timeout"},
		{func(c *Config) { c.Waits.CatchUpCallTimeout = 3 * time.Second }, "waits.catch_up_call_timeout"},
		{func(c *Config) { c.Waits.CatchUpPoll = 0 }, "waits.catch_up_poll"},
		{func(c *Config) { c.Waits.TopicMissRefresh = 0 }, "waits.topic_miss_refresh"},
		{func(c *Config) { c.Waits.TopicMissWait = 0 }, "waits.topic_miss_wait"},
		{func(c *Config) { c.Waits.GapWait = 0 }, "waits.gap_wait"},
		{func(c *Config) { c.GRPC.KeepaliveTime = 0 }, "grpc.keepalive_time"},
		{func(c *Config) { c.GRPC.KeepaliveTimeout = 0 }, "grpc.keepalive_timeout"},
		{func(c *Config) { c.GRPC.HealthInterval = 0 }, "grpc.health_interval"},
		{func(c *Config) { c.StartTimeout = -1 }, "start_timeout"},
	} {
		c := valid()
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "--") {
			t.Errorf("Validate() = %v, which names a CLI flag; want the setting", err)
		}
	}
}
