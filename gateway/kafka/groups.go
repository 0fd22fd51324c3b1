package kafka

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Consumer groups follow Kafka's classic protocol. Membership lives in the
// coordinator gateway's memory, as a Kafka coordinator keeps it in memory:
// losing it costs a rebalance (clients find the next coordinator and join
// again). Committed offsets live on the chain (commit.go), so they survive
// any gateway. The assignment itself is the group leader's (a client):
// the coordinator picks a protocol every member offers and relays.

// Group bounds.
const (
	maxGroups          = 10000
	maxGroupMembers    = 1000
	minSessionTimeout  = 1 * time.Second
	maxSessionTimeout  = 5 * time.Minute
	maxRebalanceWait   = 5 * time.Minute
	defaultRebalanceMs = 60000
)

type groupState int

const (
	groupEmpty groupState = iota
	groupPreparing
	groupCompleting
	groupStable
)

// groups is one gateway's coordinator.
type groups struct {
	mu sync.Mutex
	m  map[string]*group
	// initialDelay is Kafka's group.initial.rebalance.delay.ms: the first
	// join phase of an empty group waits this long for more members, again
	// each time one joins, up to the rebalance timeout, so that members
	// starting together share the first generation instead of a second
	// rebalance moving partitions while they are processed.
	initialDelay time.Duration
}

type group struct {
	name       string
	state      groupState
	generation int32
	protoType  string
	protocol   string
	leader     string
	members    map[string]*member
	pending    map[string]bool // ids given with MEMBER_ID_REQUIRED, not yet joined
	rebalance  *time.Timer     // ends a join phase when not every member rejoined
	// delayed: the join phase is an empty group's first, which waits
	// initialDelay for more members (prepare).
	delayed bool
	// instances maps each static member's group.instance.id to its member
	// id (KIP-345).
	instances map[string]string
	// syncWaiters wait for the leader's assignment of this generation.
	syncWaiters map[string]chan syncAnswer
}

// memberClient is a member's client id and host, as Kafka shows them.
type memberClient struct{ id, host string }

type member struct {
	id               string
	client           memberClient
	instance         string // group.instance.id of a static member; "" if dynamic
	protocols        []kmsg.JoinGroupRequestProtocol
	session          time.Duration
	rebalanceTimeout time.Duration
	expiry           *time.Timer
	assignment       []byte
	// join is where the join in progress is answered; nil once answered.
	join chan *kmsg.JoinGroupResponse
	ver  int16
}

type syncAnswer struct {
	code       int16
	assignment []byte
}

func newGroups(initialDelay time.Duration) *groups {
	return &groups{m: map[string]*group{}, initialDelay: initialDelay}
}

func newMemberID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "byzlog-" + hex.EncodeToString(b[:])
}

// join handles JoinGroup: a new member without an id (v4+) is given one
// and told to join again (MEMBER_ID_REQUIRED); otherwise the member joins
// the next generation, answered once every member has rejoined or the
// rebalance timeout has passed.
func (gs *groups) join(ctx context.Context, r *kmsg.JoinGroupRequest, client memberClient) *kmsg.JoinGroupResponse {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	session, rebalance, bad := joinTimeouts(r)
	if bad != nil {
		resp.ErrorCode = bad.Code
		return resp
	}
	gs.mu.Lock()
	g, code := gs.groupToJoin(r)
	if code != 0 {
		gs.mu.Unlock()
		resp.ErrorCode = code
		return resp
	}
	id := r.MemberID
	instance := ""
	if r.InstanceID != nil {
		instance = *r.InstanceID
	}
	if known, ok := g.instances[instance]; ok && instance != "" {
		switch {
		case id != "" && id != known:
			// Another process with this instance id took its place.
			gs.mu.Unlock()
			resp.ErrorCode = kerr.FencedInstanceID.Code
			return resp
		case id == "":
			// A static member back after a restart: it takes its old
			// place, without a rebalance if nothing changed.
			return gs.rejoinStatic(ctx, g, known, r, session, rebalance, client)
		}
	}
	newStatic := id == "" && instance != "" && g.instances[instance] == ""
	if newStatic {
		id = newMemberID() // a new static member skips the two-step join (KIP-345)
	}
	switch {
	case id == "" && r.Version >= 4:
		// Kafka's two-step join (KIP-394): the member learns its id first.
		id = newMemberID()
		if len(g.pending) >= maxGroupMembers {
			g.pending = nil
		}
		if g.pending == nil {
			g.pending = map[string]bool{}
		}
		g.pending[id] = true
		gs.mu.Unlock()
		resp.MemberID, resp.ErrorCode = id, kerr.MemberIDRequired.Code
		return resp
	case id == "":
		id = newMemberID()
	case g.members[id] == nil && !g.pending[id] && !newStatic:
		// Not a member here (its state may have gone with another
		// coordinator): it joins again without an id.
		gs.mu.Unlock()
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp
	}
	delete(g.pending, id)
	m, code := g.memberToJoin(id, instance)
	if code != 0 {
		gs.mu.Unlock()
		resp.ErrorCode = code
		return resp
	}
	g.protoType = r.ProtocolType
	m.protocols, m.session, m.rebalanceTimeout, m.ver, m.client = r.Protocols, session, rebalance, r.Version, client
	if m.join != nil {
		m.join <- joinError(m.ver, kerr.RebalanceInProgress)
	}
	gs.touch(g, m)
	return gs.joinPhase(ctx, g, m)
}

// groupToJoin is the group r joins, made if there is none yet, or the
// error code that refuses the join: too many groups, or a protocol type
// other than its members'. Called with gs.mu held.
func (gs *groups) groupToJoin(r *kmsg.JoinGroupRequest) (*group, int16) {
	g := gs.m[r.Group]
	if g == nil {
		if len(gs.m) >= maxGroups {
			return nil, kerr.CoordinatorNotAvailable.Code
		}
		g = &group{name: r.Group, members: map[string]*member{}}
		gs.m[r.Group] = g
	}
	if g.protoType != "" && g.protoType != r.ProtocolType && len(g.members) > 0 {
		return nil, kerr.InconsistentGroupProtocol.Code
	}
	return g, 0
}

// memberToJoin is g's member id, added (with its static instance id, if
// any) if it is not one yet, or GROUP_MAX_SIZE_REACHED's code when g is
// full. Called with the groups' lock held.
func (g *group) memberToJoin(id, instance string) (*member, int16) {
	m := g.members[id]
	if m != nil {
		return m, 0
	}
	if len(g.members) >= maxGroupMembers {
		return nil, kerr.GroupMaxSizeReached.Code
	}
	m = &member{id: id, instance: instance}
	g.members[id] = m
	if instance != "" {
		if g.instances == nil {
			g.instances = map[string]string{}
		}
		g.instances[instance] = id
	}
	return m, 0
}

// rejoinStatic takes a static member back under a new member id in the
// place of its old one, known (KIP-345): a stable group whose member offers
// the same protocols answers at once with the current generation and no
// rebalance, so the member's SyncGroup gets its old assignment; otherwise
// the member joins the next generation. Called with gs.mu held; unlocks it.
func (gs *groups) rejoinStatic(ctx context.Context, g *group, known string, r *kmsg.JoinGroupRequest, session, rebalance time.Duration, client memberClient) *kmsg.JoinGroupResponse {
	m := g.members[known]
	if m.join != nil {
		m.join <- joinError(m.ver, kerr.FencedInstanceID)
		m.join = nil
	}
	if w := g.syncWaiters[known]; w != nil {
		w <- syncAnswer{code: kerr.FencedInstanceID.Code}
		delete(g.syncWaiters, known)
	}
	delete(g.members, known)
	m.id = newMemberID()
	g.members[m.id], g.instances[m.instance] = m, m.id
	if g.leader == known {
		g.leader = m.id
	}
	same := sameProtocols(m.protocols, r.Protocols)
	m.protocols, m.session, m.rebalanceTimeout, m.ver, m.client = r.Protocols, session, rebalance, r.Version, client
	gs.touch(g, m)
	if g.state == groupStable && same {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.Version = r.Version
		resp.Generation, resp.Protocol, resp.LeaderID, resp.MemberID = g.generation, kmsg.StringPtr(g.protocol), g.leader, m.id
		pt := g.protoType
		resp.ProtocolType = &pt
		if m.id == g.leader {
			resp.Members = groupMembers(g)
		}
		gs.mu.Unlock()
		return resp
	}
	return gs.joinPhase(ctx, g, m)
}

// joinPhase enters m into the group's join phase and waits for its answer.
// Called with gs.mu held; unlocks it.
func (gs *groups) joinPhase(ctx context.Context, g *group, m *member) *kmsg.JoinGroupResponse {
	answer := make(chan *kmsg.JoinGroupResponse, 1)
	m.join = answer
	ver := m.ver
	gs.prepare(g)
	gs.maybeComplete(g)
	gs.mu.Unlock()
	select {
	case a := <-answer:
		return a
	case <-ctx.Done():
		return joinError(ver, kerr.RebalanceInProgress)
	}
}

// sameProtocols reports whether a member offers the same protocols, with
// the same metadata, in the same order.
func sameProtocols(a, b []kmsg.JoinGroupRequestProtocol) bool {
	return slices.EqualFunc(a, b, func(x, y kmsg.JoinGroupRequestProtocol) bool {
		return x.Name == y.Name && bytes.Equal(x.Metadata, y.Metadata)
	})
}

// fenced reports whether a request naming instance comes from a member
// that is not the one the instance id now belongs to.
func (g *group) fenced(instance *string, id string) bool {
	if instance == nil || *instance == "" {
		return false
	}
	known, ok := g.instances[*instance]
	return ok && known != id
}

// fenced is group.fenced for the group named, if there is one. Held: gs.mu.
func (gs *groups) fenced(name string, instance *string, id string) bool {
	g := gs.m[name]
	return g != nil && g.fenced(instance, id)
}

// joinTimeouts are a join's session and rebalance timeouts, or why the
// join is refused.
func joinTimeouts(r *kmsg.JoinGroupRequest) (time.Duration, time.Duration, *kerr.Error) {
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	rebalanceMs := r.RebalanceTimeoutMillis
	if r.Version == 0 || rebalanceMs <= 0 {
		rebalanceMs = defaultRebalanceMs
	}
	rebalance := min(time.Duration(rebalanceMs)*time.Millisecond, maxRebalanceWait)
	switch {
	case session < minSessionTimeout || session > maxSessionTimeout:
		return 0, 0, kerr.InvalidSessionTimeout
	case len(r.Protocols) == 0 || r.ProtocolType == "":
		return 0, 0, kerr.InconsistentGroupProtocol
	}
	return session, rebalance, nil
}

func joinError(ver int16, e *kerr.Error) *kmsg.JoinGroupResponse {
	r := kmsg.NewPtrJoinGroupResponse()
	r.Version, r.ErrorCode = ver, e.Code
	return r
}

// prepare starts a join phase unless one runs: members have until the
// longest rebalance timeout to rejoin. Held: gs.mu.
func (gs *groups) prepare(g *group) {
	if g.state == groupPreparing {
		return
	}
	for _, w := range g.syncWaiters {
		w <- syncAnswer{code: kerr.RebalanceInProgress.Code}
	}
	g.syncWaiters = nil
	wasEmpty := g.state == groupEmpty
	g.state = groupPreparing
	wait := time.Duration(0)
	for _, m := range g.members {
		wait = max(wait, m.rebalanceTimeout)
	}
	if wasEmpty && gs.initialDelay > 0 {
		gs.delayJoin(g, time.Now().Add(wait), len(g.members))
		return
	}
	g.rebalance = time.AfterFunc(wait, func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		if g.state != groupPreparing {
			return
		}
		for id, m := range g.members {
			if m.join == nil {
				gs.remove(g, id)
			}
		}
		gs.complete(g)
	})
}

// delayJoin waits initialDelay for more members of an empty group's first
// join phase, and again while they keep coming (each arrival after the
// last wait), until deadline; then the phase completes with the members
// that joined. Held: gs.mu.
func (gs *groups) delayJoin(g *group, deadline time.Time, joined int) {
	g.delayed = true
	wait := min(gs.initialDelay, time.Until(deadline))
	g.rebalance = time.AfterFunc(max(wait, 0), func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		if g.state != groupPreparing || !g.delayed {
			return
		}
		if n := len(g.members); n > joined && time.Now().Before(deadline) {
			gs.delayJoin(g, deadline, n)
			return
		}
		g.delayed = false
		for id, m := range g.members {
			if m.join == nil {
				gs.remove(g, id)
			}
		}
		gs.complete(g)
	})
}

// maybeComplete ends the join phase once every member has rejoined (an
// empty group's first waits out its delay: delayJoin).
func (gs *groups) maybeComplete(g *group) {
	if g.state != groupPreparing || g.delayed {
		return
	}
	for _, m := range g.members {
		if m.join == nil {
			return
		}
	}
	gs.complete(g)
}

// complete starts the next generation and answers every join: the leader
// gets the members and their metadata for the protocol picked.
func (gs *groups) complete(g *group) {
	if g.rebalance != nil {
		g.rebalance.Stop()
	}
	g.delayed = false
	if len(g.members) == 0 {
		g.state = groupEmpty
		if gs.m[g.name] == g {
			delete(gs.m, g.name) // its timers find it gone and do nothing
		}
		return
	}
	g.generation++
	g.state = groupCompleting
	g.syncWaiters = map[string]chan syncAnswer{}
	if g.members[g.leader] == nil {
		g.leader = ""
		for id := range g.members {
			if g.leader == "" || id < g.leader {
				g.leader = id
			}
		}
	}
	g.protocol = pickProtocol(g.members[g.leader], g.members)
	for _, m := range g.members {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.Version = m.ver
		if g.protocol == "" {
			resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		} else {
			resp.Generation, resp.Protocol, resp.LeaderID, resp.MemberID = g.generation, kmsg.StringPtr(g.protocol), g.leader, m.id
			pt := g.protoType
			resp.ProtocolType = &pt
			if m.id == g.leader {
				resp.Members = groupMembers(g)
			}
		}
		m.join <- resp
		m.join = nil
	}
}

// pickProtocol is the leader's most preferred protocol every member offers.
func pickProtocol(leader *member, members map[string]*member) string {
	for _, p := range leader.protocols {
		all := true
		for _, m := range members {
			found := false
			for _, q := range m.protocols {
				found = found || q.Name == p.Name
			}
			all = all && found
		}
		if all {
			return p.Name
		}
	}
	return ""
}

func groupMembers(g *group) []kmsg.JoinGroupResponseMember {
	var out []kmsg.JoinGroupResponseMember
	for _, m := range g.members {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		for _, p := range m.protocols {
			if p.Name == g.protocol {
				jm.ProtocolMetadata = p.Metadata
			}
		}
		out = append(out, jm)
	}
	return out
}

// touch restarts member m's session timer: a member that sends nothing for
// its session timeout leaves, and the group rebalances.
func (gs *groups) touch(g *group, m *member) {
	if m.expiry != nil {
		m.expiry.Stop()
	}
	id := m.id
	m.expiry = time.AfterFunc(m.session, func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		if g.members[id] != m || m.join != nil {
			return
		}
		gs.remove(g, id)
		gs.prepare(g)
		gs.maybeComplete(g)
	})
}

// remove drops a member. Held: gs.mu.
func (gs *groups) remove(g *group, id string) {
	m := g.members[id]
	if m == nil {
		return
	}
	if m.expiry != nil {
		m.expiry.Stop()
	}
	if m.join != nil {
		m.join <- joinError(m.ver, kerr.UnknownMemberID)
	}
	delete(g.members, id)
	if m.instance != "" && g.instances[m.instance] == id {
		delete(g.instances, m.instance)
	}
	if w := g.syncWaiters[id]; w != nil {
		w <- syncAnswer{code: kerr.RebalanceInProgress.Code}
		delete(g.syncWaiters, id)
	}
	if len(g.members) == 0 && g.state != groupPreparing {
		g.state = groupEmpty
	}
}

// check finds a member of a generation, or the error Kafka answers.
func (gs *groups) check(name, id string, generation int32) (*group, *member, *kerr.Error) {
	g := gs.m[name]
	if g == nil || g.members[id] == nil {
		return nil, nil, kerr.UnknownMemberID
	}
	if generation != g.generation {
		return g, g.members[id], kerr.IllegalGeneration
	}
	return g, g.members[id], nil
}

// sync handles SyncGroup: the leader's assignments are kept and every
// member of the generation gets its own.
func (gs *groups) sync(ctx context.Context, r *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	gs.mu.Lock()
	g, m, err := gs.check(r.Group, r.MemberID, r.Generation)
	if gs.fenced(r.Group, r.InstanceID, r.MemberID) {
		err = kerr.FencedInstanceID
	}
	switch {
	case err != nil:
		gs.mu.Unlock()
		resp.ErrorCode = err.Code
		return resp
	case g.state == groupPreparing:
		gs.mu.Unlock()
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp
	}
	gs.touch(g, m)
	resp.Protocol, resp.ProtocolType = kmsg.StringPtr(g.protocol), kmsg.StringPtr(g.protoType)
	if g.state == groupStable {
		resp.MemberAssignment = m.assignment
		gs.mu.Unlock()
		return resp
	}
	if r.MemberID == g.leader {
		for _, a := range r.GroupAssignment {
			if am := g.members[a.MemberID]; am != nil {
				am.assignment = a.MemberAssignment
			}
		}
		g.state = groupStable
		for id, w := range g.syncWaiters {
			w <- syncAnswer{assignment: g.members[id].assignment}
		}
		g.syncWaiters = nil
		resp.MemberAssignment = m.assignment
		gs.mu.Unlock()
		return resp
	}
	w := make(chan syncAnswer, 1)
	g.syncWaiters[m.id] = w
	gs.mu.Unlock()
	select {
	case a := <-w:
		resp.ErrorCode, resp.MemberAssignment = a.code, a.assignment
	case <-ctx.Done():
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	}
	return resp
}

func (gs *groups) heartbeat(r *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g, m, err := gs.check(r.Group, r.MemberID, r.Generation)
	if gs.fenced(r.Group, r.InstanceID, r.MemberID) {
		return fencedHeartbeat(resp)
	}
	if m != nil {
		gs.touch(g, m)
	}
	switch {
	case err != nil:
		resp.ErrorCode = err.Code
	case g.state == groupPreparing:
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	}
	return resp
}

func fencedHeartbeat(resp *kmsg.HeartbeatResponse) *kmsg.HeartbeatResponse {
	resp.ErrorCode = kerr.FencedInstanceID.Code
	return resp
}

func (gs *groups) leave(r *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := []kmsg.LeaveGroupRequestMember{{MemberID: r.MemberID}}
	if r.Version >= 3 {
		leaving = r.Members
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[r.Group]
	for _, l := range leaving {
		id := l.MemberID
		lm := kmsg.NewLeaveGroupResponseMember()
		lm.MemberID, lm.InstanceID = id, l.InstanceID
		if g != nil && id == "" && l.InstanceID != nil {
			id = g.instances[*l.InstanceID] // a static member leaves by its instance id
			lm.MemberID = id
		}
		switch {
		case g != nil && g.fenced(l.InstanceID, id):
			lm.ErrorCode = kerr.FencedInstanceID.Code
		case g == nil || g.members[id] == nil:
			lm.ErrorCode = kerr.UnknownMemberID.Code
		default:
			gs.remove(g, id)
		}
		if lm.ErrorCode != 0 && r.Version < 3 {
			resp.ErrorCode = lm.ErrorCode
		}
		if r.Version >= 3 {
			resp.Members = append(resp.Members, lm)
		}
	}
	if g != nil && len(leaving) > 0 && resp.ErrorCode == 0 {
		gs.prepare(g)
		gs.maybeComplete(g)
	}
	return resp
}

// memberOf says whether id is a member of generation gen, for commits.
func (gs *groups) memberOf(name, id string, gen int32, instance *string) *kerr.Error {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.fenced(name, instance, id) {
		return kerr.FencedInstanceID
	}
	_, _, err := gs.check(name, id, gen)
	return err
}
