package kafka

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// CreateTopics, DeleteTopics, CreatePartitions and the config changes
// become admin requests signed with the principal's key, for principals the
// users file marks admin (the chain then checks the key is a genesis
// admin). Others are refused with TOPIC_AUTHORIZATION_FAILED. The
// replication factor is not the client's to choose: every validator holds
// every partition. Topic configs: configs.go.

// maxAdminAtOnce bounds the topics of one CreateTopics or DeleteTopics
// request in progress at once. They are signed with consecutive nonces and
// go into the mempool without waiting for each other's block (nonces.use),
// so a hundred topics take a block or two, not a hundred. What the chain
// would refuse at once (a topic that exists, or does not) is answered
// before signing, from the chain's topics read at the request's start: a
// refused transaction leaves a gap in the key's nonces that the ones after
// it wait on.
const maxAdminAtOnce = 64

// each runs f(i) for i in 0..n-1, maxAdminAtOnce at a time.
func each(n int, f func(i int)) {
	slots := make(chan struct{}, maxAdminAtOnce)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			f(i)
		})
	}
	wg.Wait()
}

// createTopics checks each topic of r as Kafka would, then creates those
// that pass: all in one transaction (CreateTopics, chunks of
// wire.MaxCreateTopics) on a chain at rules version 7 on, each in its own
// before. A topic named twice in r is INVALID_REQUEST, as in Kafka.
func (c *conn) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	c.s.topics.expire()
	_, _, _ = c.s.topics.get(ctx, true) // the chain's topics as the request starts
	resp.Topics = make([]kmsg.CreateTopicsResponseTopic, len(r.Topics))
	fail := func(i int, code *kerr.Error, err error) {
		resp.Topics[i].ErrorCode, resp.Topics[i].ErrorMessage = code.Code, message(err)
	}
	named := make(map[string]int, len(r.Topics))
	for i, t := range r.Topics {
		rt := &resp.Topics[i]
		*rt = kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.Topic, t.NumPartitions, int16(len(c.s.brokers))
		named[t.Topic]++
	}
	cfgs := make([]*byzlogv1.TopicConfig, len(r.Topics))
	each(len(r.Topics), func(i int) {
		t := r.Topics[i]
		if named[t.Topic] > 1 {
			fail(i, kerr.InvalidRequest, fmt.Errorf("topic %s is named %d times in one request", wire.Quote(t.Topic), named[t.Topic]))
			return
		}
		cfg, code, err := c.checkCreateTopic(ctx, t)
		if code != nil {
			fail(i, code, err)
			return
		}
		cfgs[i] = cfg
	})
	if !r.ValidateOnly {
		c.create(ctx, r, cfgs, fail)
	}
	if r.Version < 5 {
		return resp
	}
	// v5 on answers the topics' configs, as created.
	l, err := c.s.b.Reads.Limits(ctx)
	if err != nil {
		return resp
	}
	for i, cfg := range cfgs {
		if rt := &resp.Topics[i]; cfg != nil && rt.ErrorCode == 0 {
			for _, d := range describeTopic(cfg, l, nil, false) {
				rt.Configs = append(rt.Configs, kmsg.CreateTopicsResponseTopicConfig{Name: d.Name, Value: d.Value, Source: int8(d.Source)})
			}
		}
	}
	return resp
}

// create creates the topics of r that have a config in cfgs, reporting
// each one the chain refuses to fail.
func (c *conn) create(ctx context.Context, r *kmsg.CreateTopicsRequest, cfgs []*byzlogv1.TopicConfig, fail func(int, *kerr.Error, error)) {
	var todo []int
	for i, cfg := range cfgs {
		if cfg != nil {
			todo = append(todo, i)
		}
	}
	rules, err := c.s.b.Groups.Rules(ctx)
	if len(todo) < 2 || err != nil || rules.GetVersion() < core.CreateTopicsRulesVersion {
		each(len(todo), func(j int) {
			i := todo[j]
			if err := c.admin(ctx, &byzlogv1.CreateTopic{Name: r.Topics[i].Topic, Config: cfgs[i]}); err != nil {
				fail(i, adminError(err), err)
			}
		})
		return
	}
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), wire.MaxCreateTopics)]
		todo = todo[len(chunk):]
		op := &byzlogv1.CreateTopics{}
		for _, i := range chunk {
			op.Topics = append(op.Topics, &byzlogv1.CreateTopic{Name: r.Topics[i].Topic, Config: cfgs[i]})
		}
		if err := c.admin(ctx, op); err != nil {
			for _, i := range chunk {
				fail(i, adminError(err), err)
			}
		}
	}
}

// checkCreateTopic checks topic t as CreateTopics would create it, and
// returns its config.
func (c *conn) checkCreateTopic(ctx context.Context, t kmsg.CreateTopicsRequestTopic) (*byzlogv1.TopicConfig, *kerr.Error, error) {
	if !c.principal.Admin {
		return nil, kerr.TopicAuthorizationFailed, c.errNotAdmin()
	}
	if err := wire.CheckTopicName(t.Topic); err != nil {
		return nil, kerr.InvalidTopicException, err
	}
	parts := t.NumPartitions
	if len(t.ReplicaAssignment) > 0 {
		// Every validator holds every partition: an assignment of known
		// brokers is taken and has no effect, as Kafka takes one.
		if parts != -1 || t.ReplicationFactor != -1 {
			return nil, kerr.InvalidRequest, errors.New("a replica assignment comes with partitions and replication factor -1, as in Kafka")
		}
		byPartition := make([][]int32, len(t.ReplicaAssignment))
		for _, a := range t.ReplicaAssignment {
			if a.Partition < 0 || int(a.Partition) >= len(byPartition) || byPartition[a.Partition] != nil {
				return nil, kerr.InvalidReplicaAssignment, fmt.Errorf("replica assignment of partition %d: want each of partitions 0..%d once", a.Partition, len(byPartition)-1)
			}
			byPartition[a.Partition] = a.Replicas
		}
		if err := c.s.checkAssignment(byPartition); err != nil {
			return nil, kerr.InvalidReplicaAssignment, err
		}
		parts = int32(len(byPartition))
	}
	if parts == -1 {
		parts = 1 // Kafka's num.partitions default
	}
	if parts <= 0 {
		return nil, kerr.InvalidPartitions, fmt.Errorf("%d partitions: want at least 1", parts)
	}
	cfg := &byzlogv1.TopicConfig{Partitions: uint32(parts)}
	l, err := c.s.b.Reads.Limits(ctx)
	if err != nil {
		return nil, kafkaError(err), err
	}
	for _, kv := range t.Configs {
		if err := setConfig(cfg, kv.Name, kv.Value, l); err != nil {
			return nil, kerr.InvalidConfig, err
		}
	}
	if err := c.compactionServed(ctx, cfg); err != nil {
		return nil, kerr.InvalidConfig, err
	}
	if parts > int32(l.GetMaxPartitions()) {
		return nil, kerr.InvalidPartitions, fmt.Errorf("%d partitions: the chain allows at most %d a topic", parts, l.GetMaxPartitions())
	}
	if ti := c.topicInfo(ctx, t.Topic); ti != nil {
		return nil, kerr.TopicAlreadyExists, fmt.Errorf("topic %s exists (created at height %d)", wire.Quote(t.Topic), ti.GetCreatedHeight())
	}
	return cfg, nil, nil
}

func (c *conn) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	names := r.TopicNames
	for _, t := range r.Topics {
		if t.Topic != nil {
			names = append(names, *t.Topic)
		}
	}
	resp.Topics = make([]kmsg.DeleteTopicsResponseTopic, len(names))
	c.s.topics.expire()
	_, _, _ = c.s.topics.get(ctx, true) // the chain's topics as the request starts
	each(len(names), func(i int) {
		rt := &resp.Topics[i]
		*rt = kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic = kmsg.StringPtr(names[i])
		var err error
		if !c.principal.Admin {
			err = c.errNotAdmin()
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		} else if c.topicInfo(ctx, names[i]) == nil {
			err = fmt.Errorf("topic %s does not exist", wire.Quote(names[i]))
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		} else if err = c.admin(ctx, &byzlogv1.DeleteTopic{Name: names[i]}); err != nil {
			rt.ErrorCode = adminError(err).Code
		}
		if err != nil {
			rt.ErrorMessage = message(err)
		}
	})
	return resp
}

// admin signs op with the principal's key and the key's next nonce,
// submits it and waits for its commit; the topic cache is refreshed after.
func (c *conn) admin(ctx context.Context, op proto.Message) error {
	return c.s.adminAs(ctx, c.principal.Key, op)
}

// adminAs is admin signed with key.
func (s *Server) adminAs(ctx context.Context, key ed25519.PrivateKey, op proto.Message) error {
	signer := wire.NewSigner(key, s.b.ChainID())
	err := s.nonces.use(ctx, signer.PublicKey(), func(nonce uint64, accepted func()) error {
		req, err := signer.Admin(nonce, op)
		if err != nil {
			return fmt.Errorf("sign admin request: %w", err)
		}
		_, err = s.b.Admin.Admin(ctx, req, accepted)
		return err
	})
	s.topics.expire()
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
		case wire.CodeOffsetOutOfRange:
			return kerr.OffsetOutOfRange
		case wire.CodeUnknownPartition:
			return kerr.UnknownTopicOrPartition
		case wire.CodeUnknownTxKind:
			// A chain before rules version 6 (DeleteRecords).
			return kerr.UnsupportedVersion
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

// errNotAdmin refuses a change by a principal the users file does not mark
// admin.
func (c *conn) errNotAdmin() error {
	return fmt.Errorf("%s is not an admin of this gateway's users file", c.principal.Name)
}

// currentTopic reads a topic's config from the chain (not the cache): a
// change starts from what is committed.
func (c *conn) currentTopic(ctx context.Context, name string) (*byzlogv1.TopicInfo, error) {
	c.s.topics.expire()
	topics, _, err := c.s.topics.get(ctx, true)
	if err != nil {
		return nil, err
	}
	ti := topics[name]
	if ti == nil {
		return nil, fmt.Errorf("topic %s: %w", wire.Quote(name), errUnknownPartition)
	}
	return ti, nil
}

// updateTopic writes cfg as name's config unless validateOnly.
func (c *conn) updateTopic(ctx context.Context, name string, cfg *byzlogv1.TopicConfig, validateOnly bool) (*kerr.Error, error) {
	if validateOnly {
		return nil, nil
	}
	if err := c.admin(ctx, &byzlogv1.UpdateTopic{Name: name, Config: cfg}); err != nil {
		return adminError(err), err
	}
	return nil, nil
}

// describeConfigs answers topic configs (configs.go) and, read-only, the
// few broker settings clients ask for.
func (c *conn) describeConfigs(ctx context.Context, r *kmsg.DescribeConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	l, lerr := c.s.b.Reads.Limits(ctx)
	for _, rr := range r.Resources {
		out := kmsg.NewDescribeConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		var err error
		var code *kerr.Error
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			var ti *byzlogv1.TopicInfo
			topics, _, terr := c.s.topics.get(ctx, true)
			switch {
			case terr != nil || lerr != nil:
				err = errors.Join(terr, lerr)
				code = kafkaError(err)
			case topics[rr.ResourceName] == nil:
				err, code = fmt.Errorf("topic %s does not exist", wire.Quote(rr.ResourceName)), kerr.UnknownTopicOrPartition
			default:
				ti = topics[rr.ResourceName]
				out.Configs = describeTopic(ti.GetConfig(), l, rr.ConfigNames, r.IncludeDocumentation)
			}
		case kmsg.ConfigResourceTypeBroker:
			out.Configs = c.describeBroker(rr.ConfigNames)
		default:
			err, code = fmt.Errorf("resource type %d: byzlog describes topics (2) and brokers (4)", rr.ResourceType), kerr.InvalidRequest
		}
		if err != nil {
			out.ErrorCode, out.ErrorMessage = code.Code, message(err)
		}
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

// describeBroker is a gateway's broker configs, all read-only: they are
// flags of the gateway or rules of the chain.
func (c *conn) describeBroker(names []string) []kmsg.DescribeConfigsResponseResourceConfig {
	var out []kmsg.DescribeConfigsResponseResourceConfig
	for _, kv := range [][2]string{
		{"auto.create.topics.enable", "false"},
		{"compression.type", "producer"},
		{"default.replication.factor", strconv.Itoa(len(c.s.brokers))},
		{"log.message.timestamp.type", "CreateTime"},
		{"num.partitions", "1"},
	} {
		if len(names) > 0 && !slices.Contains(names, kv[0]) {
			continue
		}
		rc := kmsg.NewDescribeConfigsResponseResourceConfig()
		rc.Name, rc.Value, rc.ReadOnly, rc.Source = kv[0], kmsg.StringPtr(kv[1]), true, kmsg.ConfigSourceStaticBrokerConfig
		out = append(out, rc)
	}
	return out
}

// alterConfigs (Kafka's legacy API) replaces a topic's Kafka configs: the
// ones named take their values, the others their defaults. The topic's
// partitions, producers and readers (byzlog's own settings) stay.
func (c *conn) alterConfigs(ctx context.Context, r *kmsg.AlterConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, rr := range r.Resources {
		out := kmsg.NewAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		code, err := c.alterTopic(ctx, rr.ResourceType, rr.ResourceName, r.ValidateOnly, func(cfg *byzlogv1.TopicConfig, l *byzlogv1.Limits) error {
			for _, s := range topicSettings {
				s.reset(cfg)
			}
			for _, kv := range rr.Configs {
				if err := setConfig(cfg, kv.Name, kv.Value, l); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			out.ErrorCode, out.ErrorMessage = code.Code, message(err)
		}
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

// incrementalAlterConfigs sets, deletes (back to the default), appends to
// or subtracts from the named configs of a topic and leaves the others.
func (c *conn) incrementalAlterConfigs(ctx context.Context, r *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range r.Resources {
		out := kmsg.NewIncrementalAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		code, err := c.alterTopic(ctx, rr.ResourceType, rr.ResourceName, r.ValidateOnly, func(cfg *byzlogv1.TopicConfig, l *byzlogv1.Limits) error {
			for _, kv := range rr.Configs {
				switch kv.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					if err := setConfig(cfg, kv.Name, kv.Value, l); err != nil {
						return err
					}
				case kmsg.IncrementalAlterConfigOpDelete:
					if err := setConfig(cfg, kv.Name, nil, l); err != nil {
						return err
					}
				case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
					if err := alterCleanupPolicy(cfg, kv.Name, kv.Value, kv.Op == kmsg.IncrementalAlterConfigOpAppend); err != nil {
						return err
					}
				default:
					return fmt.Errorf("config operation %d: want 0 (set), 1 (delete), 2 (append) or 3 (subtract)", kv.Op)
				}
			}
			return nil
		})
		if err != nil {
			out.ErrorCode, out.ErrorMessage = code.Code, message(err)
		}
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

// alterTopic changes a topic's config with change, on a copy of what the
// chain holds, and writes it unless validateOnly.
func (c *conn) alterTopic(ctx context.Context, typ kmsg.ConfigResourceType, name string, validateOnly bool, change func(*byzlogv1.TopicConfig, *byzlogv1.Limits) error) (*kerr.Error, error) {
	switch {
	case typ == kmsg.ConfigResourceTypeBroker:
		return kerr.InvalidRequest, errors.New("broker configs are the gateway's flags and the chain's rules: change them there, not through Kafka")
	case typ != kmsg.ConfigResourceTypeTopic:
		return kerr.InvalidRequest, fmt.Errorf("resource type %d: byzlog alters topics (2)", typ)
	case !c.principal.Admin:
		return kerr.TopicAuthorizationFailed, c.errNotAdmin()
	}
	ti, err := c.currentTopic(ctx, name)
	if err != nil {
		return kafkaError(err), err
	}
	l, err := c.s.b.Reads.Limits(ctx)
	if err != nil {
		return kafkaError(err), err
	}
	cfg := proto.Clone(ti.GetConfig()).(*byzlogv1.TopicConfig)
	if err := change(cfg, l); err != nil {
		return kerr.InvalidConfig, err
	}
	if err := c.compactionServed(ctx, cfg); err != nil {
		return kerr.InvalidConfig, err
	}
	return c.updateTopic(ctx, name, cfg, validateOnly)
}

// compactionServed refuses a compacted topic on a chain whose rules do not
// compact yet: before CompactRulesVersion a chain takes the setting and
// ignores it, which would leave a client believing its topic compacted.
func (c *conn) compactionServed(ctx context.Context, cfg *byzlogv1.TopicConfig) error {
	if cfg.GetCleanupPolicy() == byzlogv1.CleanupPolicy_CLEANUP_DELETE {
		return nil
	}
	rules, err := c.s.b.Groups.Rules(ctx)
	if err != nil {
		return fmt.Errorf("read the chain's rules version: %w", err)
	}
	if v := rules.GetVersion(); v < core.CompactRulesVersion {
		return fmt.Errorf("cleanup.policy %s: the chain runs rules version %d, and compacts from %d on; an admin schedules the upgrade first", wire.CleanupPolicyName(cfg.CleanupPolicy), v, core.CompactRulesVersion)
	}
	return nil
}

// createPartitions grows topics: the count may only go up (Kafka's rule),
// and replicas are not the client's to assign.
func (c *conn) createPartitions(ctx context.Context, r *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, t := range r.Topics {
		out := kmsg.NewCreatePartitionsResponseTopic()
		out.Topic = t.Topic
		code, err := c.createPartitionsOf(ctx, t, r.ValidateOnly)
		if err != nil {
			out.ErrorCode, out.ErrorMessage = code.Code, message(err)
		}
		resp.Topics = append(resp.Topics, out)
	}
	return resp
}

func (c *conn) createPartitionsOf(ctx context.Context, t kmsg.CreatePartitionsRequestTopic, validateOnly bool) (*kerr.Error, error) {
	if !c.principal.Admin {
		return kerr.TopicAuthorizationFailed, c.errNotAdmin()
	}
	ti, err := c.currentTopic(ctx, t.Topic)
	if err != nil {
		return kafkaError(err), err
	}
	l, err := c.s.b.Reads.Limits(ctx)
	if err != nil {
		return kafkaError(err), err
	}
	have := ti.GetConfig().GetPartitions()
	switch {
	case t.Count < 0 || uint32(t.Count) < have:
		return kerr.InvalidPartitions, fmt.Errorf("topic %s has %d partitions, more than the %d asked: partitions can grow, never shrink", wire.Quote(t.Topic), have, t.Count)
	case uint32(t.Count) == have:
		return kerr.InvalidPartitions, fmt.Errorf("topic %s already has %d partitions", wire.Quote(t.Topic), have)
	case uint32(t.Count) > l.GetMaxPartitions():
		return kerr.InvalidPartitions, fmt.Errorf("%d partitions: the chain allows at most %d a topic", t.Count, l.GetMaxPartitions())
	}
	if len(t.Assignment) > 0 {
		if len(t.Assignment) != int(uint32(t.Count)-have) {
			return kerr.InvalidReplicaAssignment, fmt.Errorf("%d replica assignments for %d new partitions", len(t.Assignment), uint32(t.Count)-have)
		}
		replicas := make([][]int32, len(t.Assignment))
		for i, a := range t.Assignment {
			replicas[i] = a.Replicas
		}
		if err := c.s.checkAssignment(replicas); err != nil {
			return kerr.InvalidReplicaAssignment, err
		}
	}
	cfg := proto.Clone(ti.GetConfig()).(*byzlogv1.TopicConfig)
	cfg.Partitions = uint32(t.Count)
	return c.updateTopic(ctx, t.Topic, cfg, validateOnly)
}

// checkAssignment checks a replica assignment (each partition's replicas)
// names brokers there are, each once a partition. Every validator holds
// every partition, so a good one is taken and changes nothing.
func (s *Server) checkAssignment(replicas [][]int32) error {
	for p, rs := range replicas {
		if len(rs) == 0 {
			return fmt.Errorf("partition %d has no replicas", p)
		}
		seen := map[int32]bool{}
		for _, id := range rs {
			if s.cfg.broker(id) == nil && (len(s.cfg.Brokers) > 0 || id != s.cfg.NodeID) {
				return fmt.Errorf("partition %d: broker %d is not one of this cluster's", p, id)
			}
			if seen[id] {
				return fmt.Errorf("partition %d lists broker %d twice", p, id)
			}
			seen[id] = true
		}
	}
	return nil
}

// deleteRecords moves partitions' log start, as retention does, through
// the chain: an admin request (DeleteRecords) that needs the admin set's
// threshold, as deleting a topic does. Offset -1 is the high watermark.
func (c *conn) deleteRecords(ctx context.Context, r *kmsg.DeleteRecordsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		codes := c.deleteTopicRecords(ctx, t)
		for i, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark = p.Partition, -1
			if codes[i].err != nil {
				rp.ErrorCode = codes[i].err.Code
			} else {
				rp.LowWatermark = codes[i].low
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

type deleted struct {
	low int64
	err *kerr.Error
}

// deleteTopicRecords deletes one topic's records in one admin request; a
// partition Kafka would refuse is answered without it.
func (c *conn) deleteTopicRecords(ctx context.Context, t kmsg.DeleteRecordsRequestTopic) []deleted {
	out := make([]deleted, len(t.Partitions))
	fail := func(code *kerr.Error) []deleted {
		for i := range out {
			if out[i].err == nil {
				out[i].err = code
			}
		}
		return out
	}
	if !c.principal.Admin {
		return fail(kerr.TopicAuthorizationFailed)
	}
	ti, err := c.currentTopic(ctx, t.Topic)
	if err != nil {
		return fail(kafkaError(err))
	}
	parts := map[int32]*byzlogv1.PartitionInfo{}
	for _, p := range ti.Partitions {
		parts[int32(p.Partition)] = p
	}
	op := &byzlogv1.DeleteRecords{Topic: t.Topic}
	seen := map[int32]bool{}
	for i, p := range t.Partitions {
		info := parts[p.Partition]
		before := p.Offset
		if info != nil && before == -1 {
			before = int64(info.NextOffset)
		}
		switch {
		case info == nil:
			out[i].err = kerr.UnknownTopicOrPartition
		case seen[p.Partition]:
			out[i].err = kerr.InvalidRequest
		case before < 0 || uint64(before) > info.NextOffset:
			out[i].err = kerr.OffsetOutOfRange
		default:
			seen[p.Partition] = true
			out[i].low = max(before, int64(info.LogStartOffset))
			op.Partitions = append(op.Partitions, &byzlogv1.DeleteRecordsPartition{Partition: uint32(p.Partition), BeforeOffset: uint64(before)})
		}
	}
	if len(op.Partitions) == 0 {
		return out
	}
	if err := c.admin(ctx, op); err != nil {
		c.log.Info().Err(err).Str("topic", t.Topic).Msg("kafka delete records failed")
		return fail(adminError(err))
	}
	return out
}
