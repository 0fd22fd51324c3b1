package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// CreateTopics and DeleteTopics become admin requests signed with the
// principal's key, for principals the users file marks admin (the chain
// then checks the key is a genesis admin). Others are refused with
// TOPIC_AUTHORIZATION_FAILED. The replication factor is not the client's
// to choose: every validator holds every partition. max.message.bytes
// becomes the topic's max_record_bytes when below the chain's; at or past
// it the topic keeps the chain's, and larger records are written in chunks
// up to what the face decodes (8 MiB a batch by default).

// topicConfigs maps the Kafka topic configs byzlog keeps.
var topicConfigs = map[string]func(*byzlogv1.TopicConfig, int64) error{
	"retention.ms": func(c *byzlogv1.TopicConfig, v int64) error { c.RetentionMs = max(v, 0); return nil },
	"retention.bytes": func(c *byzlogv1.TopicConfig, v int64) error {
		c.RetentionBytes = max(v, 0)
		return nil
	},
	"max.message.bytes": func(c *byzlogv1.TopicConfig, v int64) error {
		if v <= 0 || v > 1<<31 {
			return fmt.Errorf("max.message.bytes %d out of range", v)
		}
		c.MaxRecordBytes = uint32(v)
		return nil
	},
}

func (c *conn) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, t.NumPartitions, int16(len(c.s.brokers))
		code, err := c.createTopic(ctx, t, r.ValidateOnly)
		if code != nil {
			rt.ErrorCode, rt.ErrorMessage = code.Code, message(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (c *conn) createTopic(ctx context.Context, t kmsg.CreateTopicsRequestTopic, validateOnly bool) (*kerr.Error, error) {
	if !c.principal.Admin {
		return kerr.TopicAuthorizationFailed, fmt.Errorf("%s is not an admin of this gateway's users file", c.principal.Name)
	}
	if err := wire.CheckTopicName(t.Topic); err != nil {
		return kerr.InvalidTopicException, err
	}
	if len(t.ReplicaAssignment) > 0 {
		return kerr.InvalidReplicaAssignment, errors.New("every validator holds every partition: replica assignment is not taken")
	}
	parts := t.NumPartitions
	if parts == -1 {
		parts = 1 // Kafka's num.partitions default
	}
	if parts <= 0 {
		return kerr.InvalidPartitions, fmt.Errorf("%d partitions: want at least 1", parts)
	}
	cfg := &byzlogv1.TopicConfig{Partitions: uint32(parts)}
	for _, kv := range t.Configs {
		set, ok := topicConfigs[kv.Name]
		if !ok || kv.Value == nil {
			continue // a config byzlog does not keep is ignored, as unknown ones are
		}
		v, err := strconv.ParseInt(*kv.Value, 10, 64)
		if err == nil {
			err = set(cfg, v)
		}
		if err != nil {
			return kerr.InvalidConfig, fmt.Errorf("%s=%s: %v", kv.Name, *kv.Value, err)
		}
	}
	if cfg.MaxRecordBytes != 0 {
		// Kafka's max.message.bytes may pass the chain's record bound: the
		// topic then keeps the chain's, and the face writes larger records
		// in chunks (chunks.go).
		l, err := c.s.b.Reads.Limits(ctx)
		if err != nil {
			return kafkaError(err), err
		}
		if cfg.MaxRecordBytes >= l.GetMaxRecordBytes() {
			cfg.MaxRecordBytes = 0
		}
	}
	if validateOnly {
		return nil, nil
	}
	err := c.admin(ctx, &byzlogv1.CreateTopic{Name: t.Topic, Config: cfg})
	if err != nil {
		return adminError(err), err
	}
	return nil, nil
}

func (c *conn) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	names := r.TopicNames
	for _, t := range r.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	for _, name := range names {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic = kmsg.StringPtr(name)
		var err error
		if !c.principal.Admin {
			err = fmt.Errorf("%s is not an admin of this gateway's users file", c.principal.Name)
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		} else if err = c.admin(ctx, &byzlogv1.DeleteTopic{Name: name}); err != nil {
			rt.ErrorCode = adminError(err).Code
		}
		if err != nil {
			rt.ErrorMessage = message(err)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// admin signs op with the principal's key and the key's next nonce,
// submits it and waits for its commit; the topic cache is refreshed after.
func (c *conn) admin(ctx context.Context, op proto.Message) error {
	signer := wire.NewSigner(c.principal.Key, c.s.b.ChainID())
	err := c.s.nonces.use(ctx, signer.PublicKey(), func(nonce uint64, accepted func()) error {
		req, err := signer.Admin(nonce, op)
		if err != nil {
			return fmt.Errorf("sign admin request: %w", err)
		}
		_, err = c.s.b.Admin.Admin(ctx, req, accepted)
		return err
	})
	c.s.topics.expire()
	return err
}

func adminError(err error) *kerr.Error {
	var re *pipeline.RejectedError
	if errors.As(err, &re) {
		switch re.Code {
		case wire.CodeTopicExists:
			return kerr.TopicAlreadyExists
		case wire.CodeUnknownTopic:
			return kerr.UnknownTopicOrPartition
		case wire.CodeNotAdmin:
			return kerr.TopicAuthorizationFailed
		case wire.CodeBadTopicName:
			return kerr.InvalidTopicException
		case wire.CodeBadTopicConfig:
			return kerr.InvalidConfig
		case wire.CodeBelowThreshold:
			// A chain whose admin threshold is above 1: one principal's
			// key cannot delete a topic (byzlog topic delete with
			// several --admin-key, or --sign-only and cosign).
			return kerr.PolicyViolation
		}
		return kerr.InvalidRequest
	}
	return kerr.RequestTimedOut // not committed now: retry
}
