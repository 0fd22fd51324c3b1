package tamper

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/tlsconf"
)

// GatewayModes are the lies of the lying-gateway nemesis (issue 14): a
// gateway that invents, alters and fakes receipts and replays others'
// batches. "" tells none.
var GatewayModes = []string{InventReceipt, FakeDuplicate, AlterOffset, Rebundle}

// The modes of a GatewayProxy.
const (
	// InventReceipt drops every batch and answers it committed, with the
	// last genuine receipt's height, tx and proof (another batch's) and
	// offsets just past it: records acknowledged that were never written.
	InventReceipt = "invent-receipt"
	// AlterOffset forwards every batch and moves its receipt's offset one
	// on, proof untouched: a receipt pointing at another record.
	AlterOffset = "alter-offset"
	// FakeDuplicate drops every batch and answers it a duplicate of the
	// last genuine receipt (another batch's write).
	FakeDuplicate = "fake-duplicate"
	// Rebundle forwards every batch and sends the previous one it saw
	// (another producer's, usually) again in its own request: the chain
	// must answer the replay as a duplicate and append nothing.
	Rebundle = "rebundle"
	// FutureNonce answers GetNonce with a nonce 5 past the key's next, the
	// rest of the answer (the proof of the nonce before the real one)
	// untouched, and keeps every admin request it is then sent without
	// forwarding it: the signed requests for future nonces a gateway would
	// collect to play later. It lies to admin clients, not producers, so
	// it is not in GatewayModes.
	FutureNonce = "future-nonce"
	// OlderLatest answers GetLatest with the first answer it relayed for
	// the same key: a true proof of an older height, hiding later writes
	// (the client's freshness bounds catch it).
	OlderLatest = "older-latest"
	// OmitLatest answers GetLatest with the key's index entry and record
	// left out: "no such key" for a key that has a value (the key tree's
	// proof catches it).
	OmitLatest = "omit-latest"
	// LowProducerState answers GetProducerState with next sequence 0, in
	// the gateway's number and in its proof's entry: a producer that
	// believed it would sign sequences the chain has used (the proof
	// catches it).
	LowProducerState = "low-producer-state"
)

// GetProducerState forwards, or lies per LowProducerState.
func (p *GatewayProxy) GetProducerState(ctx context.Context, req *byzlogv1.ProducerRequest) (*byzlogv1.ProducerState, error) {
	resp, err := p.Up.GetProducerState(ctx, req)
	if err != nil || p.mode.Load().(string) != LowProducerState {
		return resp, err
	}
	resp = proto.Clone(resp).(*byzlogv1.ProducerState)
	resp.NextSequence = 0
	if es := resp.GetProof().GetEntries(); len(es) == 1 {
		es[0].Value, _ = proto.Marshal(&byzlogv1.ProducerState{})
	}
	p.hit(LowProducerState)
	return resp, nil
}

// maxRemembered bounds the keys whose first GetLatest answer a proxy keeps.
const maxRemembered = 10000

// GetLatest forwards or lies per OlderLatest and OmitLatest; it
// remembers the first answer for each key (up to maxRemembered keys) in
// every mode.
func (p *GatewayProxy) GetLatest(ctx context.Context, req *byzlogv1.LatestRequest) (*byzlogv1.LatestProof, error) {
	resp, err := p.Up.GetLatest(ctx, req)
	if err != nil {
		return resp, err
	}
	k := fmt.Sprintf("%s\x00%d\x00%x", req.Topic, req.Partition, req.Key)
	p.mu.Lock()
	first, seen := p.latest[k]
	if !seen && len(p.latest) < maxRemembered {
		if p.latest == nil {
			p.latest = map[string]*byzlogv1.LatestProof{}
		}
		p.latest[k] = resp
	}
	p.mu.Unlock()
	switch p.mode.Load().(string) {
	case OlderLatest:
		if seen {
			p.hit(OlderLatest)
			return first, nil
		}
	case OmitLatest:
		resp = proto.Clone(resp).(*byzlogv1.LatestProof)
		if es := resp.GetState().GetEntries(); len(es) == 3 {
			es[2].Value, resp.Record = nil, nil
			p.hit(OmitLatest)
		}
	}
	return resp, nil
}

// GatewayProxy is a lying byzlog gateway, for tests and chaos runs: a gRPC
// server that forwards every call to a real gateway and, per mode, lies in
// what it answers Produce. It only listens on the address it is given.
type GatewayProxy struct {
	Relay
	conn *grpc.ClientConn
	srv  *grpc.Server
	lis  net.Listener
	mode atomic.Value // string

	mu   sync.Mutex
	hits map[string]int
	last *byzlogv1.Receipt     // the last genuine ACK_COMMIT receipt
	prev *byzlogv1.SignedBatch // the last batch seen, for Rebundle
	kept []*byzlogv1.AdminRequest
	// latest is the first GetLatest answer per key, for OlderLatest.
	latest map[string]*byzlogv1.LatestProof
}

// StartGateway serves a GatewayProxy on listen (host:port) in front of the
// gateway at target. It serves TLS with serve and reaches target over TLS
// with dial; nil: plaintext.
func StartGateway(listen, target string, serve, dial *tls.Config) (*GatewayProxy, error) {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(tlsconf.Transport(dial, dial == nil)))
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", target, err)
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	var opts []grpc.ServerOption
	if serve != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(serve)))
	}
	p := &GatewayProxy{Relay: Relay{Up: byzlogv1.NewGatewayClient(conn)}, conn: conn, lis: lis, srv: grpc.NewServer(opts...), hits: map[string]int{}}
	p.mode.Store("")
	byzlogv1.RegisterGatewayServer(p.srv, p)
	go func() { _ = p.srv.Serve(lis) }()
	return p, nil
}

// Addr is where the proxy listens.
func (p *GatewayProxy) Addr() string { return p.lis.Addr().String() }

// Close stops the proxy.
func (p *GatewayProxy) Close() error {
	p.srv.Stop()
	return p.conn.Close()
}

// SetMode sets the lie to tell ("" for none).
func (p *GatewayProxy) SetMode(m string) { p.mode.Store(m) }

// Count is how many times the proxy told lie m.
func (p *GatewayProxy) Count(m string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[m]
}

func (p *GatewayProxy) hit(m string) {
	p.mu.Lock()
	p.hits[m]++
	p.mu.Unlock()
}

// Produce forwards or lies, per mode.
func (p *GatewayProxy) Produce(ctx context.Context, req *byzlogv1.ProduceRequest) (*byzlogv1.ProduceResponse, error) {
	mode := p.mode.Load().(string)
	p.mu.Lock()
	last, prev := p.last, p.prev
	p.prev = req.GetBatch()
	p.mu.Unlock()
	if last != nil && (mode == InventReceipt || mode == FakeDuplicate) {
		var body byzlogv1.BatchBody
		_ = proto.Unmarshal(req.GetBatch().GetBody(), &body)
		rc := proto.Clone(last).(*byzlogv1.Receipt)
		rc.Topic, rc.Partition = body.Topic, body.Partition
		if mode == InventReceipt {
			rc.BaseOffset += uint64(last.RecordCount)
			rc.Duplicate = false
		} else {
			rc.Duplicate = true
		}
		p.hit(mode)
		return &byzlogv1.ProduceResponse{RequestId: req.GetRequestId(), Receipt: rc}, nil
	}
	if mode == Rebundle && prev != nil && !proto.Equal(prev, req.GetBatch()) {
		if _, err := p.Up.Produce(ctx, &byzlogv1.ProduceRequest{Batch: prev, Ack: byzlogv1.Ack_ACK_COMMIT}); err == nil {
			p.hit(mode)
		}
	}
	resp, err := p.Up.Produce(ctx, req)
	if err != nil {
		return nil, err
	}
	if rc := resp.GetReceipt(); rc.GetAck() == byzlogv1.Ack_ACK_COMMIT {
		p.mu.Lock()
		p.last = proto.Clone(rc).(*byzlogv1.Receipt)
		p.mu.Unlock()
		if mode == AlterOffset {
			resp = proto.Clone(resp).(*byzlogv1.ProduceResponse)
			resp.Receipt.BaseOffset++
			p.hit(mode)
		}
	}
	return resp, nil
}

// GetNonce forwards or, in FutureNonce, names a nonce ahead.
func (p *GatewayProxy) GetNonce(ctx context.Context, req *byzlogv1.NonceRequest) (*byzlogv1.NonceResponse, error) {
	resp, err := p.Up.GetNonce(ctx, req)
	if err != nil || p.mode.Load().(string) != FutureNonce {
		return resp, err
	}
	resp = proto.Clone(resp).(*byzlogv1.NonceResponse)
	resp.NextNonce += 5
	p.hit(FutureNonce)
	return resp, nil
}

// Admin forwards or, in FutureNonce, keeps the request and answers
// UNAVAILABLE, as a gateway that lost it would.
func (p *GatewayProxy) Admin(ctx context.Context, req *byzlogv1.AdminRequest) (*byzlogv1.AdminResponse, error) {
	if p.mode.Load().(string) != FutureNonce {
		return p.Up.Admin(ctx, req)
	}
	p.mu.Lock()
	p.kept = append(p.kept, req)
	p.mu.Unlock()
	return nil, status.Error(codes.Unavailable, "the lying gateway keeps this request")
}

// Kept returns the admin requests the proxy kept back in FutureNonce.
func (p *GatewayProxy) Kept() []*byzlogv1.AdminRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*byzlogv1.AdminRequest(nil), p.kept...)
}

// ProduceStream is not relayed: the SDK produces with unary calls.
func (p *GatewayProxy) ProduceStream(byzlogv1.Gateway_ProduceStreamServer) error {
	return status.Error(codes.Unimplemented, "the lying gateway relays unary Produce only")
}

// Relay is a byzlog gateway that forwards every unary call to a real one
// as it is. A liar embeds it and overrides what it lies in, so a method
// added to the API is relayed, not answered Unimplemented.
type Relay struct {
	byzlogv1.UnimplementedGatewayServer
	Up byzlogv1.GatewayClient
}

func (r Relay) Produce(ctx context.Context, req *byzlogv1.ProduceRequest) (*byzlogv1.ProduceResponse, error) {
	return r.Up.Produce(ctx, req)
}

func (r Relay) Admin(ctx context.Context, req *byzlogv1.AdminRequest) (*byzlogv1.AdminResponse, error) {
	return r.Up.Admin(ctx, req)
}

func (r Relay) ListTopics(ctx context.Context, req *byzlogv1.ListTopicsRequest) (*byzlogv1.ListTopicsResponse, error) {
	return r.Up.ListTopics(ctx, req)
}

func (r Relay) DescribeTopic(ctx context.Context, req *byzlogv1.DescribeTopicRequest) (*byzlogv1.DescribeTopicResponse, error) {
	return r.Up.DescribeTopic(ctx, req)
}

func (r Relay) GetProducerState(ctx context.Context, req *byzlogv1.ProducerRequest) (*byzlogv1.ProducerState, error) {
	return r.Up.GetProducerState(ctx, req)
}

func (r Relay) GetLatest(ctx context.Context, req *byzlogv1.LatestRequest) (*byzlogv1.LatestProof, error) {
	return r.Up.GetLatest(ctx, req)
}

func (r Relay) GetNonce(ctx context.Context, req *byzlogv1.NonceRequest) (*byzlogv1.NonceResponse, error) {
	return r.Up.GetNonce(ctx, req)
}

func (r Relay) CommitOffsets(ctx context.Context, req *byzlogv1.CommitOffsets) (*byzlogv1.CommitOffsetsResponse, error) {
	return r.Up.CommitOffsets(ctx, req)
}

func (r Relay) GetGroupOffsets(ctx context.Context, req *byzlogv1.GroupRequest) (*byzlogv1.GroupOffsets, error) {
	return r.Up.GetGroupOffsets(ctx, req)
}

func (r Relay) Health(ctx context.Context, req *byzlogv1.HealthRequest) (*byzlogv1.HealthResponse, error) {
	return r.Up.Health(ctx, req)
}

func (r Relay) GetLightBlock(ctx context.Context, req *byzlogv1.LightBlockRequest) (*byzlogv1.LightBlockResponse, error) {
	return r.Up.GetLightBlock(ctx, req)
}
