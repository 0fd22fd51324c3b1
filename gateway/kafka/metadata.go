package kafka

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// topicCache holds the topic list for TopicsTTL, so Metadata and Produce
// cost no query each.
type topicCache struct {
	b   Reads
	ttl time.Duration

	mu      sync.Mutex
	fetched time.Time
	topics  map[string]*byzlogv1.TopicInfo
	order   []string
}

// get returns the topics, from the cache when it is fresh or refresh is
// false.
func (t *topicCache) get(ctx context.Context, refresh bool) (map[string]*byzlogv1.TopicInfo, []string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.topics != nil && (!refresh || time.Since(t.fetched) < t.ttl) {
		return t.topics, t.order, nil
	}
	list, err := t.b.Topics(ctx)
	if err != nil {
		if t.topics != nil {
			return t.topics, t.order, nil // stale beats none
		}
		return nil, nil, err
	}
	t.topics, t.order, t.fetched = map[string]*byzlogv1.TopicInfo{}, nil, time.Now()
	for _, ti := range list {
		t.topics[ti.Name] = ti
		t.order = append(t.order, ti.Name)
	}
	return t.topics, t.order, nil
}

// expire makes the next get read the chain.
func (t *topicCache) expire() {
	t.mu.Lock()
	t.fetched = time.Time{}
	t.mu.Unlock()
}

// partitions of topic; 0 when it does not exist.
func (t *topicCache) partitions(ctx context.Context, topic string) (uint32, error) {
	topics, _, err := t.get(ctx, true)
	if err != nil {
		return 0, err
	}
	if ti := topics[topic]; ti != nil {
		return ti.GetConfig().GetPartitions(), nil
	}
	return 0, nil
}

// leader is partition p's broker: the gateways share partitions round
// robin, though any gateway takes any write.
func (s *Server) leader(p int32) int32 { return s.brokers[int(p)%len(s.brokers)].NodeID }

// offsetsTopic is Kafka's internal topic of committed offsets. byzlog
// keeps them on the chain (OffsetCommit, OffsetFetch) and has no such
// topic, but Metadata lists it, internal and empty, as Kafka does: clients
// that list or match topics skip internal ones by it (franz-go's regex
// consumers, kcat -L). Fetching it finds no topic.
const offsetsTopic = "__consumer_offsets"

func (c *conn) metadata(ctx context.Context, r *kmsg.MetadataRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	for _, b := range c.s.brokers {
		resp.Brokers = append(resp.Brokers, kmsg.MetadataResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port})
	}
	chain := c.s.b.ChainID()
	resp.ClusterID = &chain
	resp.ControllerID = c.s.brokers[0].NodeID
	topics, order, err := c.s.topics.get(ctx, true)
	names := order
	if topics[offsetsTopic] == nil {
		names = append(slices.Clip(names), offsetsTopic)
	}
	if r.Topics != nil {
		names = names[:0:0]
		for _, t := range r.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
	}
	for _, name := range names {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = kmsg.StringPtr(name)
		ti := topics[name]
		switch {
		case name == offsetsTopic && ti == nil:
			mt.IsInternal, mt.Partitions = true, c.s.partitionsMetadata(1)
		case wire.CheckTopicName(name) != nil:
			// Refused at once: a client would wait for an unknown topic
			// to appear.
			mt.ErrorCode = kerr.InvalidTopicException.Code
		case err != nil:
			mt.ErrorCode = kerr.LeaderNotAvailable.Code
		case ti == nil && c.s.autoCreate(name, r.Version < 4 || r.AllowAutoTopicCreation):
			mt.ErrorCode = kerr.LeaderNotAvailable.Code // being created: ask again
		case ti == nil:
			mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		default:
			mt.TopicID = topicID(chain, ti)
			mt.Partitions = c.s.partitionsMetadata(ti.GetConfig().GetPartitions())
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

func (s *Server) partitionsMetadata(n uint32) []kmsg.MetadataResponseTopicPartition {
	all := make([]int32, len(s.brokers))
	for i, b := range s.brokers {
		all[i] = b.NodeID
	}
	out := make([]kmsg.MetadataResponseTopicPartition, n)
	for p := range out {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = int32(p)
		mp.Leader = s.leader(int32(p))
		mp.Replicas, mp.ISR = all, all
		out[p] = mp
	}
	return out
}

// topicID is the Kafka topic id of one incarnation of a topic: a hash of
// the chain, the name and the height that created it, so every gateway
// answers the same id for it, and a topic deleted and created again gets
// a new one (librdkafka forgets partitions only when the id changes).
// Never all zero: Kafka's null id.
func topicID(chain string, ti *byzlogv1.TopicInfo) [16]byte {
	h := sha256.New()
	fmt.Fprintf(h, "byzlog.topic-id\x00%s\x00%s\x00%d", chain, ti.GetName(), ti.GetCreatedHeight())
	var id [16]byte
	copy(id[:], h.Sum(nil))
	if id == ([16]byte{}) {
		id[15] = 1
	}
	return id
}

// describeCluster lists the gateways as the brokers, as Metadata does.
func (c *conn) describeCluster(r *kmsg.DescribeClusterRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.ClusterID, resp.ControllerID = c.s.b.ChainID(), c.s.brokers[0].NodeID
	for _, b := range c.s.brokers {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port = b.NodeID, b.Host, b.Port
		resp.Brokers = append(resp.Brokers, rb)
	}
	return resp
}

// logDir is the one log directory a gateway describes: every validator
// holds every partition, so the sizes are the chain's, as f+1 nodes agree.
const logDir = "chain"

// describeLogDirs answers each partition's size on the chain (the stored
// bytes of its records), as one directory of every broker.
func (c *conn) describeLogDirs(ctx context.Context, r *kmsg.DescribeLogDirsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir, dir.TotalBytes, dir.UsableBytes = logDir, -1, -1
	topics, order, err := c.s.topics.get(ctx, true)
	if err != nil {
		dir.ErrorCode = kerr.KafkaStorageError.Code
		resp.Dirs = append(resp.Dirs, dir)
		return resp
	}
	want := map[string][]int32{}
	if r.Topics != nil {
		order = order[:0:0]
		for _, t := range r.Topics {
			if _, ok := want[t.Topic]; !ok {
				order = append(order, t.Topic)
			}
			want[t.Topic] = append(want[t.Topic], t.Partitions...)
		}
	}
	for _, name := range order {
		ti := topics[name]
		if ti == nil {
			continue
		}
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = name
		for _, p := range ti.Partitions {
			if r.Topics != nil && !slices.Contains(want[name], int32(p.Partition)) {
				continue
			}
			dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			dp.Partition, dp.Size = int32(p.Partition), int64(p.SizeBytes)
			dt.Partitions = append(dt.Partitions, dp)
		}
		dir.Topics = append(dir.Topics, dt)
	}
	resp.Dirs = append(resp.Dirs, dir)
	return resp
}

// offsetForLeaderEpoch answers with epoch 0 and the high watermark: a
// partition's log never truncates and its leader epoch never changes
// (Metadata advertises none), so a client that checks finds nothing to
// truncate.
func (c *conn) offsetForLeaderEpoch(ctx context.Context, r *kmsg.OffsetForLeaderEpochRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range r.Topics {
		t := kmsg.NewOffsetForLeaderEpochResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			p.Partition, p.LeaderEpoch, p.EndOffset = rp.Partition, 0, -1
			if info, err := c.partitionInfo(ctx, rt.Topic, rp.Partition); err != nil {
				p.ErrorCode = kafkaError(err).Code
			} else {
				p.EndOffset = int64(info.NextOffset)
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}
