// Package grpcface is the gateway's gRPC face: the byzlog.v1.Gateway
// service, the standard health service and reflection, over the produce
// pipeline (package pipeline) through the small interfaces below, which it
// owns. It turns the pipeline's errors into gRPC statuses and decides
// nothing itself: no admission, no signing, no chain reads of its own.
package grpcface

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/nodes"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// maxStreamInFlight bounds the batches one ProduceStream has waiting; past
// it the gateway stops reading the stream, which pushes back on the client.
const maxStreamInFlight = 1024

// Writer takes batches, admin requests and offset commits to the chain.
type Writer interface {
	Produce(ctx context.Context, batch *byzlogv1.SignedBatch, ack byzlogv1.Ack) (*byzlogv1.Receipt, error)
	Admin(ctx context.Context, req *byzlogv1.AdminRequest, accepted func()) (pipeline.Committed, error)
	CommitOffsets(ctx context.Context, req *byzlogv1.CommitOffsets, accepted func()) (pipeline.Committed, error)
	Txn(ctx context.Context, req *byzlogv1.TxnRequest, accepted func()) (pipeline.Committed, error)
}

// Reader answers from committed state, as f+1 nodes agree.
type Reader interface {
	Query(ctx context.Context, path string, req, resp proto.Message) error
	Topics(ctx context.Context) ([]*byzlogv1.TopicInfo, error)
	Group(ctx context.Context, group string) (*byzlogv1.GroupOffsets, error)
	ProducerState(ctx context.Context, req *byzlogv1.ProducerRequest) (uint64, error)
	ProducerProof(ctx context.Context, req *byzlogv1.ProducerRequest) (*byzlogv1.StateProof, error)
	NonceProof(ctx context.Context, req *byzlogv1.NonceRequest) (*byzlogv1.NonceResponse, error)
}

// Chain reports the nodes and relays light blocks.
type Chain interface {
	ChainID() string
	Health() ([]nodes.Health, int64)
	LightBlock(ctx context.Context, height int64) (*cmttypes.LightBlock, error)
}

// Backend is what the face needs of the gateway; Over(g) makes one.
type Backend struct {
	Writer
	Reader
	Chain
}

// Over is the Backend of a gateway: every part is g.
func Over(g *pipeline.Gateway) Backend { return Backend{Writer: g, Reader: g, Chain: g} }

// Service is the gRPC face of a gateway.
type Service struct {
	byzlogv1.UnimplementedGatewayServer
	g Backend
}

// NewService is the service over b (the HTTP face serves it too).
func NewService(b Backend) *Service { return &Service{g: b} }

var _ byzlogv1.GatewayServer = (*Service)(nil)

// NewServer returns a gRPC server with the gateway service, the standard
// health service (SERVING while a CometBFT node is healthy) and reflection.
// It is bounded by c (message size, calls per connection, keepalive
// enforcement, idle connections, handshake time); opts come after and may
// override them.
func NewServer(b Backend, c pipeline.GRPCConfig, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	bounds := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.MaxRecvMsgBytes),
		grpc.MaxConcurrentStreams(c.MaxConcurrentStreams),
		grpc.ConnectionTimeout(c.ConnectionTimeout),
		// A client pinging faster than KeepaliveMinTime is sent GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: c.MaxConnectionIdle, Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout}),
	}
	srv := grpc.NewServer(append(bounds, opts...)...)
	byzlogv1.RegisterGatewayServer(srv, NewService(b))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs
}

// WatchHealth keeps the gRPC health status in step with the nodes, looking
// every interval, until ctx is done.
func WatchHealth(ctx context.Context, g Chain, every time.Duration, hs *health.Server) {
	set := func() {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if _, top := g.Health(); top > 0 {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", st)
		hs.SetServingStatus(byzlogv1.Gateway_ServiceDesc.ServiceName, st)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		set()
		select {
		case <-ctx.Done():
			hs.Shutdown()
			return
		case <-t.C:
		}
	}
}

// Produce submits one signed batch.
func (s *Service) Produce(ctx context.Context, req *byzlogv1.ProduceRequest) (*byzlogv1.ProduceResponse, error) {
	rc, err := s.g.Produce(ctx, req.GetBatch(), req.GetAck())
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return &byzlogv1.ProduceResponse{RequestId: req.GetRequestId(), Receipt: rc}, nil
}

// ProduceStream carries many batches; each answer arrives when its batch
// reaches the requested ack, matched by request_id.
func (s *Service) ProduceStream(stream byzlogv1.Gateway_ProduceStreamServer) error {
	ctx := stream.Context()
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxStreamInFlight)
	var sendErr error // the first failed send; later answers are dropped
	defer wg.Wait()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// The client is done sending: its answers still go out, and a
			// send that failed fails the stream.
			wg.Wait()
			sendMu.Lock()
			defer sendMu.Unlock()
			return sendErr
		}
		if err != nil {
			return err
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			resp := &byzlogv1.ProduceResponse{RequestId: req.GetRequestId()}
			rc, err := s.g.Produce(ctx, req.GetBatch(), req.GetAck())
			if err != nil {
				st := pipeline.GRPCStatus(err)
				resp.ErrorCode, resp.ErrorMessage = uint32(st.Code()), st.Message()
			} else {
				resp.Receipt = rc
			}
			sendMu.Lock()
			defer sendMu.Unlock()
			if sendErr == nil {
				sendErr = stream.Send(resp)
			}
		}()
	}
}

// Admin forwards an admin-signed request and waits for its commit.
func (s *Service) Admin(ctx context.Context, req *byzlogv1.AdminRequest) (*byzlogv1.AdminResponse, error) {
	c, err := s.g.Admin(ctx, req, nil)
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return &byzlogv1.AdminResponse{Height: c.Height, TxIndex: c.TxIndex, Proof: c.Proof}, nil
}

// CommitOffsets forwards a consumer-signed offset commit and waits for its
// commit.
func (s *Service) CommitOffsets(ctx context.Context, req *byzlogv1.CommitOffsets) (*byzlogv1.CommitOffsetsResponse, error) {
	c, err := s.g.CommitOffsets(ctx, req, nil)
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return &byzlogv1.CommitOffsetsResponse{Height: c.Height, TxIndex: c.TxIndex, Proof: c.Proof}, nil
}

// Txn forwards a producer-signed step of a Kafka transaction and waits for
// its commit.
func (s *Service) Txn(ctx context.Context, req *byzlogv1.TxnRequest) (*byzlogv1.TxnResponse, error) {
	c, err := s.g.Txn(ctx, req, nil)
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return &byzlogv1.TxnResponse{Height: c.Height, TxIndex: c.TxIndex, Proof: c.Proof}, nil
}

// GetGroupOffsets returns a consumer group's committed offsets.
func (s *Service) GetGroupOffsets(ctx context.Context, req *byzlogv1.GroupRequest) (*byzlogv1.GroupOffsets, error) {
	g, err := s.g.Group(ctx, req.GetGroup())
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return g, nil
}

// ListTopics lists the topics in committed state.
func (s *Service) ListTopics(ctx context.Context, _ *byzlogv1.ListTopicsRequest) (*byzlogv1.ListTopicsResponse, error) {
	topics, err := s.g.Topics(ctx)
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return &byzlogv1.ListTopicsResponse{Topics: topics}, nil
}

// DescribeTopic returns one topic with its partitions.
func (s *Service) DescribeTopic(ctx context.Context, req *byzlogv1.DescribeTopicRequest) (*byzlogv1.DescribeTopicResponse, error) {
	var info byzlogv1.TopicInfo
	if err := s.g.Query(ctx, wire.PathTopic, &byzlogv1.TopicRequest{Name: req.GetName()}, &info); err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return &byzlogv1.DescribeTopicResponse{Topic: &info}, nil
}

// GetProducerState returns a producer's next sequence: what f+1 nodes
// agree on, not one node's word. A producer starts from it, and a liar's low
// value would have it re-sign used sequences.
//
// With req.Prove it relays one node's proof of the state instead (rules
// version 10 on), which the producer checks against a header it verified:
// then neither the gateway nor the node need be trusted.
func (s *Service) GetProducerState(ctx context.Context, req *byzlogv1.ProducerRequest) (*byzlogv1.ProducerState, error) {
	if req.GetProve() {
		sp, err := s.g.ProducerProof(ctx, req)
		if err != nil {
			return nil, err
		}
		return &byzlogv1.ProducerState{Proof: sp}, nil
	}
	next, err := s.g.ProducerState(ctx, req)
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return &byzlogv1.ProducerState{NextSequence: next}, nil
}

// GetLatest relays one node's proven answer of a key's latest record in a
// compacted partition: the proof, not the node, is what a client trusts
// (stateproof.VerifyLatest, client.Table).
func (s *Service) GetLatest(ctx context.Context, req *byzlogv1.LatestRequest) (*byzlogv1.LatestProof, error) {
	var lp byzlogv1.LatestProof
	if err := s.g.Query(ctx, wire.PathLatest, req, &lp); err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return &lp, nil
}

// GetNonce returns a key's next nonce, as f+1 nodes agree on it, with the
// committed transaction that used the nonce before it and its proof: a
// client that signs only nonces shown used up to the one before signs no
// future nonce for a gateway to keep back.
func (s *Service) GetNonce(ctx context.Context, req *byzlogv1.NonceRequest) (*byzlogv1.NonceResponse, error) {
	n, err := s.g.NonceProof(ctx, req)
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	return n, nil
}

// Health reports the nodes and the chain.
func (s *Service) Health(context.Context, *byzlogv1.HealthRequest) (*byzlogv1.HealthResponse, error) {
	hs, top := s.g.Health()
	resp := &byzlogv1.HealthResponse{ChainId: s.g.ChainID(), Height: top}
	for _, h := range hs {
		resp.Nodes = append(resp.Nodes, &byzlogv1.NodeHealth{Address: h.Addr, Healthy: h.Healthy, Height: h.Height, Error: h.Err})
	}
	return resp, nil
}

// GetLightBlock relays a light block (see pipeline.Gateway.LightBlock).
func (s *Service) GetLightBlock(ctx context.Context, req *byzlogv1.LightBlockRequest) (*byzlogv1.LightBlockResponse, error) {
	lb, err := s.g.LightBlock(ctx, req.GetHeight())
	if err != nil {
		return nil, pipeline.GRPCError(err)
	}
	pb, err := lb.ToProto()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode light block %d: %v", lb.Height, err)
	}
	b, err := pb.Marshal()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode light block %d: %v", lb.Height, err)
	}
	return &byzlogv1.LightBlockResponse{LightBlock: b}, nil
}
