package consumer_test

import (
	"context"
	"crypto/ed25519"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/indexer/consumer"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
)

// fakeGateway answers the consumer's gateway calls from memory, with the
// state machine's rules for offset commits: signature, chain, nonce, group
// owner, no moving backwards.
type fakeGateway struct {
	byzlogv1.UnimplementedGatewayServer
	mu      sync.Mutex
	nonces  map[string]uint64
	owners  map[string][]byte
	offsets map[string]map[[2]any]uint64 // group -> (topic, partition) -> offset
	height  int64
	commits int // CommitOffsets calls
	// raceNonce makes the next GetNonce answer stale, as when another
	// commit of the same key lands in between.
	raceNonce bool
}

func startGateway(t *testing.T) (*fakeGateway, string) {
	g := &fakeGateway{nonces: map[string]uint64{}, owners: map[string][]byte{}, offsets: map[string]map[[2]any]uint64{}, height: 100}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	byzlogv1.RegisterGatewayServer(srv, g)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return g, lis.Addr().String()
}

func (g *fakeGateway) Health(context.Context, *byzlogv1.HealthRequest) (*byzlogv1.HealthResponse, error) {
	return &byzlogv1.HealthResponse{ChainId: "test-chain"}, nil
}

func (g *fakeGateway) GetNonce(_ context.Context, req *byzlogv1.NonceRequest) (*byzlogv1.NonceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nonces[string(req.Key)]
	if g.raceNonce {
		g.raceNonce = false
		g.nonces[string(req.Key)]++
	}
	return &byzlogv1.NonceResponse{NextNonce: n}, nil
}

func (g *fakeGateway) CommitOffsets(_ context.Context, req *byzlogv1.CommitOffsets) (*byzlogv1.CommitOffsetsResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.commits++
	var body byzlogv1.CommitOffsetsBody
	if !ed25519.Verify(req.ConsumerKey, req.Body, req.Signature) || proto.Unmarshal(req.Body, &body) != nil || body.ChainId != "test-chain" {
		return nil, status.Error(codes.InvalidArgument, "bad_signature: commit is not signed for test-chain")
	}
	key := string(req.ConsumerKey)
	if body.Nonce != g.nonces[key] {
		return nil, status.Errorf(codes.FailedPrecondition, "bad_nonce: nonce %d, the key's next is %d", body.Nonce, g.nonces[key])
	}
	if o, ok := g.owners[body.Group]; ok && string(o) != key {
		return nil, status.Errorf(codes.PermissionDenied, "not_group_owner: group %q belongs to key %x", body.Group, o)
	}
	have := g.offsets[body.Group]
	for _, po := range body.Offsets {
		if h, ok := have[[2]any{po.Topic, po.Partition}]; ok && po.Offset < h && !body.Rewind {
			return nil, status.Errorf(codes.FailedPrecondition, "offset_backwards: %s/%d would move back from %d to %d", po.Topic, po.Partition, h, po.Offset)
		}
	}
	g.nonces[key]++
	g.owners[body.Group] = req.ConsumerKey
	if have == nil {
		have = map[[2]any]uint64{}
		g.offsets[body.Group] = have
	}
	for _, po := range body.Offsets {
		have[[2]any{po.Topic, po.Partition}] = po.Offset
	}
	g.height++
	return &byzlogv1.CommitOffsetsResponse{Height: g.height}, nil
}

func (g *fakeGateway) GetGroupOffsets(_ context.Context, req *byzlogv1.GroupRequest) (*byzlogv1.GroupOffsets, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	have, ok := g.offsets[req.Group]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "not_found: group %q has committed no offsets", req.Group)
	}
	resp := &byzlogv1.GroupOffsets{Group: req.Group, OwnerKey: g.owners[req.Group]}
	for k, o := range have {
		resp.Offsets = append(resp.Offsets, &byzlogv1.PartitionOffset{Topic: k[0].(string), Partition: k[1].(uint32), Offset: o})
	}
	return resp, nil
}

// set records offsets as if another member had committed them.
func (g *fakeGateway) set(group, topic string, p uint32, offset uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.offsets[group] == nil {
		g.offsets[group] = map[[2]any]uint64{}
	}
	g.offsets[group][[2]any{topic, p}] = offset
}

func (g *fakeGateway) get(group, topic string, p uint32) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.offsets[group][[2]any{topic, p}]
}

func (g *fakeGateway) calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.commits
}

func TestCommit(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.fill("t", 2, 0, 10)
	gw, addr := startGateway(t)
	_, key, _ := ed25519.GenerateKey(nil)
	c := e.consumer(consumer.WithGateway(addr), consumer.WithGatewayInsecure(), consumer.WithKey(key), consumer.WithTrust(receipt.TrustGateway("test-chain")))
	s := e.subscribe(c, "t", consumer.WithGroup("g"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Kafka's semantics: the offset after the last record read.
	read(t, s, 7) // 0@0..0@3, 1@0..1@2
	gw.mu.Lock()
	gw.raceNonce = true
	gw.mu.Unlock()
	h, err := s.Commit(ctx)
	if err != nil || h != 101 {
		t.Fatalf("Commit = %d, %v, want height 101", h, err)
	}
	if got := [2]uint64{gw.get("g", "t", 0), gw.get("g", "t", 1)}; got != [2]uint64{4, 3} {
		t.Errorf("committed offsets = %v, want [4 3]", got)
	}
	if gw.calls() != 2 {
		t.Errorf("CommitOffsets called %d times, want 2 (a stale nonce is read again)", gw.calls())
	}
	if h, err := s.Commit(ctx); err != nil || h != 0 || gw.calls() != 2 {
		t.Errorf("Commit with nothing new = %d, %v after %d calls, want 0, nil and no call", h, err, gw.calls())
	}

	// Another member committed partition 1 further: only partition 0 moves.
	gw.set("g", "t", 1, 9)
	read(t, s, 2) // 1@3, 0@4
	if _, err := s.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := [2]uint64{gw.get("g", "t", 0), gw.get("g", "t", 1)}; got != [2]uint64{5, 9} {
		t.Errorf("committed offsets = %v, want [5 9]", got)
	}

	// An explicit commit is sent as it is; the chain's refusal comes back.
	calls := gw.calls()
	_, err = c.Commit(ctx, "g", consumer.Offset{Topic: "t", Partition: 0, Offset: 1})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "offset_backwards") || gw.calls() != calls+1 {
		t.Errorf("Commit(backwards) = %v after %d calls, want offset_backwards, not retried", err, gw.calls()-calls)
	}

	// The group belongs to the key that first committed.
	_, other, _ := ed25519.GenerateKey(nil)
	c2 := e.consumer(consumer.WithGateway(addr), consumer.WithGatewayInsecure(), consumer.WithKey(other), consumer.WithTrust(receipt.TrustGateway("test-chain")))
	if _, err := c2.Commit(ctx, "g", consumer.Offset{Topic: "t", Partition: 0, Offset: 8}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Commit with another key = %v, want PermissionDenied", err)
	}
	g, err := c.GroupOffsets(ctx, "g")
	if err != nil || !reflect.DeepEqual(g.Owner, key.Public()) || len(g.Offsets) != 2 {
		t.Errorf("GroupOffsets = %+v, %v, want two offsets owned by the key", g, err)
	}
}

// TestCommitNeedsTrust: the chain id commits are signed for comes from the
// consumer's configuration, never from the gateway.
func TestCommitNeedsTrust(t *testing.T) {
	e := newEnv(t)
	_, addr := startGateway(t)
	_, key, _ := ed25519.GenerateKey(nil)
	c := e.consumer(consumer.WithGateway(addr), consumer.WithGatewayInsecure(), consumer.WithKey(key))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Commit(ctx, "g", consumer.Offset{Topic: "t", Offset: 1}); err == nil || !strings.Contains(err.Error(), "WithTrust") {
		t.Errorf("Commit without WithTrust = %v, want an error naming WithTrust", err)
	}
}

func TestFromCommitted(t *testing.T) {
	e := newEnv(t)
	e.stream("t", false)
	e.fill("t", 3, 0, 10)
	gw, addr := startGateway(t)
	gw.set("h", "t", 0, 3)
	gw.set("h", "t", 1, 8)
	gw.set("h", "other", 2, 9)
	c := e.consumer(consumer.WithGateway(addr), consumer.WithGatewayInsecure())
	for _, tc := range []struct {
		group string
		want  map[uint32][]uint64
	}{
		{"h", map[uint32][]uint64{0: span(3, 10), 1: {8, 9}, 2: span(0, 10)}},
		{"new", map[uint32][]uint64{0: span(0, 10), 1: span(0, 10), 2: span(0, 10)}},
	} {
		s := e.subscribe(c, "t", consumer.WithGroup(tc.group), consumer.FromCommitted())
		n := 0
		for _, o := range tc.want {
			n += len(o)
		}
		if got := byPartition(read(t, s, n)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("group %s from committed offsets read %v, want %v", tc.group, got, tc.want)
		}
		quiet(t, s)
	}
}
