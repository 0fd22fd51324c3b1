package kafka

import (
	"context"
	"errors"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Group administration, as Kafka's consumer-groups tool and consoles use
// it. A group is known to the chain once it has committed offsets, and to
// its coordinator's memory while it has members: ListGroups answers the
// groups this gateway coordinates from both (an admin client asks every
// broker and merges, so each group is listed once, by its coordinator),
// DescribeGroups its members. DeleteGroups and OffsetDelete sign the
// deletion with the connection's key, which must own the group (the key
// that committed its offsets), and need rules version 6 (the chain ignores
// the deletion flag before).

// maxListedGroups bounds the chain's groups one ListGroups reads.
const maxListedGroups = 100_000

// Kafka's group states, as ListGroups and DescribeGroups name them.
var stateNames = map[groupState]string{
	groupEmpty: "Empty", groupPreparing: "PreparingRebalance", groupCompleting: "CompletingRebalance", groupStable: "Stable",
}

// groupView is what DescribeGroups shows of a group in memory.
type groupView struct {
	state     string
	protoType string
	protocol  string
	members   []kmsg.DescribeGroupsResponseGroupMember
	// topics the members subscribe to (the consumer protocol's metadata).
	topics map[string]bool
}

// view is group name as this coordinator holds it; false when it holds
// no member of it.
func (gs *groups) view(name string) (groupView, bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[name]
	if g == nil || len(g.members) == 0 {
		return groupView{}, false
	}
	v := groupView{state: stateNames[g.state], protoType: g.protoType, protocol: g.protocol, topics: map[string]bool{}}
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := g.members[id]
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.MemberAssignment, dm.ClientID, dm.ClientHost = id, m.assignment, m.client.id, m.client.host
		if m.instance != "" {
			dm.InstanceID = kmsg.StringPtr(m.instance)
		}
		for _, p := range m.protocols {
			if p.Name == g.protocol || (g.protocol == "" && dm.ProtocolMetadata == nil) {
				dm.ProtocolMetadata = p.Metadata
			}
			var meta kmsg.ConsumerMemberMetadata
			if g.protoType == "consumer" && meta.ReadFrom(p.Metadata) == nil {
				for _, t := range meta.Topics {
					v.topics[t] = true
				}
			}
		}
		v.members = append(v.members, dm)
	}
	return v, true
}

// names lists the groups with members in this coordinator's memory.
func (gs *groups) names() []string {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	var out []string
	for name, g := range gs.m {
		if len(g.members) > 0 {
			out = append(out, name)
		}
	}
	return out
}

// forget drops an empty group from memory once the chain deleted it.
func (gs *groups) forget(name string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g := gs.m[name]; g != nil && len(g.members) == 0 {
		delete(gs.m, name)
	}
}

// chainGroups lists the groups with committed offsets, as f+1 nodes agree.
func (c *conn) chainGroups(ctx context.Context) ([]string, error) {
	var out []string
	after := ""
	for len(out) < maxListedGroups {
		list, err := c.s.b.Groups.Groups(ctx, after, 0)
		if err != nil {
			return nil, err
		}
		for _, g := range list.Groups {
			out = append(out, g.Group)
		}
		if !list.More || len(list.Groups) == 0 {
			break
		}
		after = list.Groups[len(list.Groups)-1].Group
	}
	return out, nil
}

func (c *conn) listGroups(ctx context.Context, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	onChain, err := c.chainGroups(ctx)
	if err != nil {
		c.log.Debug().Err(err).Msg("kafka list groups: reading the chain's groups failed")
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	seen := map[string]bool{}
	for _, name := range append(c.s.groups.names(), onChain...) {
		if seen[name] || !c.coordinates(ctx, name) {
			continue
		}
		seen[name] = true
		g := kmsg.NewListGroupsResponseGroup()
		g.Group, g.ProtocolType, g.GroupState = name, "consumer", "Empty"
		if v, ok := c.s.groups.view(name); ok {
			g.ProtocolType, g.GroupState = v.protoType, v.state
		}
		if len(r.StatesFilter) > 0 && !slices.Contains(r.StatesFilter, g.GroupState) {
			continue
		}
		resp.Groups = append(resp.Groups, g)
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].Group < resp.Groups[j].Group })
	return resp
}

func (c *conn) describeGroups(ctx context.Context, r *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, name := range r.Groups {
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group = name
		switch v, ok := c.s.groups.view(name); {
		case !c.coordinates(ctx, name):
			g.ErrorCode = kerr.NotCoordinator.Code
		case ok:
			g.State, g.ProtocolType, g.Protocol, g.Members = v.state, v.protoType, v.protocol, v.members
		default:
			// No member: Empty if it has committed offsets, else Dead, as
			// Kafka describes a group it does not know.
			_, err := c.s.b.Groups.Group(ctx, name)
			var re *pipeline.RejectedError
			switch {
			case err == nil:
				g.State, g.ProtocolType = "Empty", "consumer"
			case errors.As(err, &re) && re.Code == wire.CodeNotFound:
				g.State = "Dead"
			default:
				g.ErrorCode = kerr.CoordinatorLoadInProgress.Code
			}
		}
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}

func (c *conn) deleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range r.Groups {
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group = name
		if code := c.groupDeletable(ctx, name); code != nil {
			g.ErrorCode = code.Code
		} else if err := c.deleteOffsets(ctx, name, nil); err != nil {
			c.log.Info().Err(err).Str("group", name).Msg("kafka delete group failed")
			g.ErrorCode = deleteError(err).Code
		} else {
			c.s.groups.forget(name)
		}
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}

// groupDeletable refuses what Kafka refuses before deleting a group or its
// offsets: another coordinator's group, a group with members, a chain
// that would not read the deletion.
func (c *conn) groupDeletable(ctx context.Context, name string) *kerr.Error {
	if err := wire.CheckGroupName(name); err != nil {
		return kerr.InvalidGroupID
	}
	if !c.coordinates(ctx, name) {
		return kerr.NotCoordinator
	}
	if _, ok := c.s.groups.view(name); ok {
		return kerr.NonEmptyGroup
	}
	return c.canDelete(ctx)
}

// canDelete says whether the chain reads an offset deletion (rules
// version 6 on): before, it would take it for a commit.
func (c *conn) canDelete(ctx context.Context) *kerr.Error {
	rules, err := c.s.b.Groups.Rules(ctx)
	switch {
	case err != nil:
		return kerr.CoordinatorNotAvailable
	case rules.GetVersion() < core.KafkaTopicsRulesVersion:
		return kerr.UnsupportedVersion
	}
	return nil
}

// deleteOffsets signs and submits the deletion of group's offsets in
// partitions (nil: the group) with the connection's key, and waits for
// its commit.
func (c *conn) deleteOffsets(ctx context.Context, group string, partitions []*byzlogv1.PartitionOffset) error {
	return c.s.offsetsTx(ctx, c.principal.Key, nil, func(signer *wire.Signer, nonce uint64) (*byzlogv1.CommitOffsets, error) {
		return signer.DeleteOffsets(nonce, group, partitions...)
	})
}

// deleteError is the Kafka error of a deletion the chain refused.
func deleteError(err error) *kerr.Error {
	var re *pipeline.RejectedError
	if errors.As(err, &re) && re.Code == wire.CodeNotFound {
		return kerr.GroupIDNotFound
	}
	return commitError(err)
}

func (c *conn) offsetDelete(ctx context.Context, r *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	code := func() *kerr.Error {
		if err := wire.CheckGroupName(r.Group); err != nil {
			return kerr.InvalidGroupID
		}
		if !c.coordinates(ctx, r.Group) {
			return kerr.NotCoordinator
		}
		return c.canDelete(ctx)
	}()
	v, active := c.s.groups.view(r.Group)
	var partitions []*byzlogv1.PartitionOffset
	perTopic := map[string]*kerr.Error{}
	for _, t := range r.Topics {
		if active && v.topics[t.Topic] {
			// Kafka keeps the offsets of a topic a live member reads.
			perTopic[t.Topic] = kerr.GroupSubscribedToTopic
			continue
		}
		for _, p := range t.Partitions {
			if p.Partition >= 0 {
				partitions = append(partitions, &byzlogv1.PartitionOffset{Topic: t.Topic, Partition: uint32(p.Partition)})
			}
		}
	}
	if code == nil && len(partitions) > 0 {
		if err := c.deleteOffsets(ctx, r.Group, partitions); err != nil {
			c.log.Info().Err(err).Str("group", r.Group).Msg("kafka offset delete failed")
			code = deleteError(err)
		}
	}
	if code != nil {
		resp.ErrorCode = code.Code
	}
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case perTopic[t.Topic] != nil:
				rp.ErrorCode = perTopic[t.Topic].Code
			case p.Partition < 0:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
