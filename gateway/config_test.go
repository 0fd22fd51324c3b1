package gateway

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
	} {
		c := valid()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
		}
	}
}
