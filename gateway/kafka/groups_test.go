package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func joinReq(group, member string, protocols ...string) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version, r.Group, r.MemberID, r.ProtocolType = 5, group, member, "consumer"
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10000, 2000
	for _, p := range protocols {
		r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: []byte(member + "/" + p)})
	}
	return r
}

// joinTwice is Kafka's two-step join: ask for an id, then join with it.
func joinTwice(t *testing.T, gs *groups, group string, protocols ...string) (*kmsg.JoinGroupResponse, string) {
	t.Helper()
	first := gs.join(context.Background(), joinReq(group, "", protocols...), memberClient{})
	if first.ErrorCode != kerr.MemberIDRequired.Code || first.MemberID == "" {
		t.Fatalf("first join = code %d id %q, want MEMBER_ID_REQUIRED with an id", first.ErrorCode, first.MemberID)
	}
	return gs.join(context.Background(), joinReq(group, first.MemberID, protocols...), memberClient{}), first.MemberID
}

func TestGroupLifecycle(t *testing.T) {
	gs := newGroups(0)
	// One member: its join completes generation 1 at once, as leader.
	a, aID := joinTwice(t, gs, "g", "range", "roundrobin")
	if a.ErrorCode != 0 || a.Generation != 1 || a.LeaderID != aID || *a.Protocol != "range" || len(a.Members) != 1 {
		t.Fatalf("join = %+v, want generation 1 led by %s with range", a, aID)
	}
	syncG := func(id string, gen int32, assign map[string]string) *kmsg.SyncGroupResponse {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.MemberID, r.Generation = "g", id, gen
		for m, v := range assign {
			r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m, MemberAssignment: []byte(v)})
		}
		return gs.sync(context.Background(), r)
	}
	if s := syncG(aID, 1, map[string]string{aID: "all"}); s.ErrorCode != 0 || string(s.MemberAssignment) != "all" {
		t.Fatalf("leader sync = %+v", s)
	}
	hb := func(id string, gen int32) int16 {
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.MemberID, r.Generation = "g", id, gen
		return gs.heartbeat(r).ErrorCode
	}
	if c := hb(aID, 1); c != 0 {
		t.Fatalf("heartbeat = %d", c)
	}
	if c := hb(aID, 7); c != kerr.IllegalGeneration.Code {
		t.Fatalf("heartbeat of another generation = %d, want ILLEGAL_GENERATION", c)
	}
	if c := hb("stranger", 1); c != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of a stranger = %d, want UNKNOWN_MEMBER_ID", c)
	}

	// A second member (offering roundrobin only) starts a rebalance: the
	// first hears REBALANCE_IN_PROGRESS and rejoins; both get generation 2
	// with the protocol both offer.
	var wg sync.WaitGroup
	var b *kmsg.JoinGroupResponse
	var bID string
	wg.Add(1)
	go func() { defer wg.Done(); b, bID = joinTwice(t, gs, "g", "roundrobin") }()
	deadline := time.Now().Add(5 * time.Second)
	for hb(aID, 1) != kerr.RebalanceInProgress.Code {
		if time.Now().After(deadline) {
			t.Fatal("the first member never heard of the rebalance")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a = gs.join(context.Background(), joinReq("g", aID, "range", "roundrobin"), memberClient{})
	wg.Wait()
	if a.Generation != 2 || b.Generation != 2 || *a.Protocol != "roundrobin" || a.LeaderID != b.LeaderID {
		t.Fatalf("rejoin = gen %d/%d protocol %s leader %s/%s, want generation 2 with roundrobin and one leader", a.Generation, b.Generation, *a.Protocol, a.LeaderID, b.LeaderID)
	}
	leader, follower := aID, bID
	if a.LeaderID == bID {
		leader, follower = bID, aID
	}
	got := make(chan *kmsg.SyncGroupResponse, 1)
	go func() { got <- syncG(follower, 2, nil) }()
	syncG(leader, 2, map[string]string{leader: "p0", follower: "p1"})
	if s := <-got; s.ErrorCode != 0 || string(s.MemberAssignment) != "p1" {
		t.Fatalf("follower sync = %+v, want p1", s)
	}

	// The follower leaves: the leader rejoins alone into generation 3.
	lr := kmsg.NewPtrLeaveGroupRequest()
	lr.Version, lr.Group, lr.Members = 3, "g", []kmsg.LeaveGroupRequestMember{{MemberID: follower}}
	if resp := gs.leave(lr); resp.ErrorCode != 0 || resp.Members[0].ErrorCode != 0 {
		t.Fatalf("leave = %+v", resp)
	}
	if j := gs.join(context.Background(), joinReq("g", leader, "range", "roundrobin"), memberClient{}); j.Generation != 3 || len(j.Members) != 1 {
		t.Fatalf("join after leave = gen %d with %d members, want 3 with 1", j.Generation, len(j.Members))
	}
}

func TestGroupJoinRefusals(t *testing.T) {
	gs := newGroups(0)
	bad := joinReq("g", "", "range")
	bad.SessionTimeoutMillis = 10
	if r := gs.join(context.Background(), bad, memberClient{}); r.ErrorCode != kerr.InvalidSessionTimeout.Code {
		t.Errorf("session timeout 10 ms = %d, want INVALID_SESSION_TIMEOUT", r.ErrorCode)
	}
	if r := gs.join(context.Background(), joinReq("g", ""), memberClient{}); r.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Errorf("no protocols = %d, want INCONSISTENT_GROUP_PROTOCOL", r.ErrorCode)
	}
	joinTwice(t, gs, "g", "range")
	if r := gs.join(context.Background(), joinReq("g", "made-up", "range"), memberClient{}); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Errorf("join with an id never given = %d, want UNKNOWN_MEMBER_ID", r.ErrorCode)
	}
}

// TestGroupSessionExpiry: a member that stops heartbeating leaves after its
// session timeout.
func TestGroupSessionExpiry(t *testing.T) {
	gs := newGroups(0)
	first := gs.join(context.Background(), joinReq("g", "", "range"), memberClient{})
	r := joinReq("g", first.MemberID, "range")
	r.SessionTimeoutMillis = 1000
	gs.join(context.Background(), r, memberClient{})
	time.Sleep(1500 * time.Millisecond)
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g := gs.m["g"]; g != nil && len(g.members) != 0 {
		t.Fatalf("after the session timeout the group has %d members, want 0", len(g.members))
	}
}

// TestInitialRebalanceDelay: an empty group's first join phase waits the
// initial delay for more members, again for each that arrives, so two
// members that start 150 ms apart share generation 1 instead of the second
// rebalancing the first (librdkafka's tests 0089 and 0122); with no delay
// the first completes alone at once.
func TestInitialRebalanceDelay(t *testing.T) {
	for _, delay := range []time.Duration{300 * time.Millisecond, 0} {
		gs := newGroups(delay)
		start := time.Now()
		var wg sync.WaitGroup
		var a, b *kmsg.JoinGroupResponse
		wg.Go(func() { a, _ = joinTwice(t, gs, "g", "range") })
		time.Sleep(150 * time.Millisecond)
		if delay == 0 {
			wg.Wait() // completed alone already
		}
		wg.Go(func() { b, _ = joinTwice(t, gs, "g", "range") })
		wg.Wait()
		took := time.Since(start)
		switch {
		case delay > 0 && (a.Generation != 1 || b.Generation != 1 || a.ErrorCode != 0 || b.ErrorCode != 0):
			t.Errorf("delay %s: generations %d and %d (codes %d %d), want both in 1", delay, a.Generation, b.Generation, a.ErrorCode, b.ErrorCode)
		case delay > 0 && took < 150*time.Millisecond+delay:
			t.Errorf("delay %s: the phase ended after %s, before the delay after the second member", delay, took)
		case delay == 0 && a.Generation != 1:
			t.Errorf("no delay: the first member's generation is %d, want 1 at once", a.Generation)
		}
	}
}

// TestStaticMembership: a member with a group.instance.id (KIP-345) joins
// without the two-step join; back after a restart under the same instance
// id, it takes its old place and assignment without a rebalance; the
// process it replaced is fenced; a change of protocols rebalances; it
// leaves by its instance id (librdkafka's test 0102).
func TestStaticMembership(t *testing.T) {
	gs := newGroups(0)
	static := func(member string, protocols ...string) *kmsg.JoinGroupRequest {
		r := joinReq("g", member, protocols...)
		r.InstanceID = kmsg.StringPtr("inst-a")
		return r
	}
	a := gs.join(context.Background(), static("", "range"), memberClient{})
	if a.ErrorCode != 0 || a.Generation != 1 || a.MemberID == "" || a.LeaderID != a.MemberID {
		t.Fatalf("static join = code %d generation %d id %q, want generation 1 at once", a.ErrorCode, a.Generation, a.MemberID)
	}
	first := a.MemberID
	s := kmsg.NewPtrSyncGroupRequest()
	s.Group, s.MemberID, s.Generation = "g", first, 1
	s.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: first, MemberAssignment: []byte("p0")}}
	if r := gs.sync(context.Background(), s); r.ErrorCode != 0 {
		t.Fatalf("sync = %d", r.ErrorCode)
	}

	// Restarted: no rebalance, the same generation and assignment.
	b := gs.join(context.Background(), static("", "range"), memberClient{})
	if b.ErrorCode != 0 || b.Generation != 1 || b.MemberID == first || b.LeaderID != b.MemberID {
		t.Fatalf("static rejoin = code %d generation %d id %q (was %q), want generation 1 under a new id", b.ErrorCode, b.Generation, b.MemberID, first)
	}
	s.MemberID, s.GroupAssignment = b.MemberID, nil
	if r := gs.sync(context.Background(), s); r.ErrorCode != 0 || string(r.MemberAssignment) != "p0" {
		t.Fatalf("sync after the rejoin = code %d assignment %q, want p0", r.ErrorCode, r.MemberAssignment)
	}
	// The process it replaced is fenced.
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = "g", first, 1, kmsg.StringPtr("inst-a")
	if r := gs.heartbeat(hb); r.ErrorCode != kerr.FencedInstanceID.Code {
		t.Fatalf("the old process's heartbeat = %d, want FENCED_INSTANCE_ID", r.ErrorCode)
	}
	if r := gs.join(context.Background(), static(first, "range"), memberClient{}); r.ErrorCode != kerr.FencedInstanceID.Code {
		t.Fatalf("the old process's join = %d, want FENCED_INSTANCE_ID", r.ErrorCode)
	}
	// Other protocols: a rebalance into generation 2.
	c := gs.join(context.Background(), static("", "roundrobin"), memberClient{})
	if c.ErrorCode != 0 || c.Generation != 2 {
		t.Fatalf("rejoin with other protocols = code %d generation %d, want generation 2", c.ErrorCode, c.Generation)
	}
	// It leaves by its instance id; the id is free again.
	l := kmsg.NewPtrLeaveGroupRequest()
	l.Version, l.Group = 3, "g"
	l.Members = []kmsg.LeaveGroupRequestMember{{InstanceID: kmsg.StringPtr("inst-a")}}
	if r := gs.leave(l); r.ErrorCode != 0 || len(r.Members) != 1 || r.Members[0].ErrorCode != 0 || r.Members[0].MemberID != c.MemberID {
		t.Fatalf("leave by instance id = %+v", r)
	}
	if _, ok := gs.view("g"); ok {
		t.Fatal("the group still has a member after its static member left")
	}
}
