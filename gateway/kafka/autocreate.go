package kafka

import (
	"context"
	"sync"
	"time"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Auto-creation, as Kafka's auto.create.topics.enable, when the gateway has
// a key for it (Config.AutoCreateKey): a Metadata request that names a
// topic the chain does not have, and allows creation, starts a CreateTopic
// signed with that key and is answered LEADER_NOT_AVAILABLE for it, as
// Kafka answers while it creates one; the client asks again and finds it
// once its block commits. Creations in progress are bounded per gateway.

// maxAutoCreates bounds the topics one gateway creates at once; a Metadata
// request past it gets UNKNOWN_TOPIC_OR_PARTITION for the rest.
const maxAutoCreates = 16

// autoCreateTimeout bounds one creation.
const autoCreateTimeout = 30 * time.Second

// creations are the auto-creations in progress.
type creations struct {
	mu      sync.Mutex
	pending map[string]bool
	// serving is Serve's context: a creation outlives the request that
	// started it, not the server.
	serving context.Context
	wg      sync.WaitGroup
}

// autoCreate starts creating topic unless the face does not auto-create,
// the request does not allow it or too many are in progress; it reports
// whether the topic is being created.
func (s *Server) autoCreate(topic string, allowed bool) bool {
	if s.cfg.AutoCreateKey == nil || !allowed || wire.CheckTopicName(topic) != nil {
		return false
	}
	cr := &s.creating
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.pending[topic] {
		return true
	}
	if len(cr.pending) >= maxAutoCreates || cr.serving == nil {
		return false
	}
	if cr.pending == nil {
		cr.pending = map[string]bool{}
	}
	cr.pending[topic] = true
	cr.wg.Go(func() {
		defer func() {
			cr.mu.Lock()
			delete(cr.pending, topic)
			cr.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(cr.serving, autoCreateTimeout)
		defer cancel()
		op := &byzlogv1.CreateTopic{Name: topic, Config: &byzlogv1.TopicConfig{Partitions: uint32(s.cfg.AutoCreatePartitions)}}
		if err := s.adminAs(ctx, s.cfg.AutoCreateKey, op); err != nil {
			s.log.Info().Err(err).Str("topic", topic).Msg("kafka auto-create failed")
			return
		}
		s.log.Info().Str("topic", topic).Int32("partitions", s.cfg.AutoCreatePartitions).Msg("kafka auto-created a topic")
	})
	return true
}
