package gateway

import (
	"bytes"
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

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// maxStreamInFlight bounds the batches one ProduceStream has waiting; past
// it the gateway stops reading the stream, which pushes back on the client.
const maxStreamInFlight = 1024

// Service is the gRPC face of a Gateway.
type Service struct {
	byzlogv1.UnimplementedGatewayServer
	g *Gateway
}

var _ byzlogv1.GatewayServer = (*Service)(nil)

// NewGRPCServer returns a gRPC server with the gateway service, the standard
// health service (SERVING while a CometBFT node is healthy) and reflection.
// It is bounded by Config.GRPC (message size, calls per connection,
// keepalive enforcement, idle connections, handshake time); opts come after
// and may override them.
func NewGRPCServer(g *Gateway, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	c := g.cfg.GRPC
	bounds := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.MaxRecvMsgBytes),
		grpc.MaxConcurrentStreams(c.MaxConcurrentStreams),
		grpc.ConnectionTimeout(c.ConnectionTimeout),
		// A client pinging faster than KeepaliveMinTime is sent GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: c.MaxConnectionIdle, Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout}),
	}
	srv := grpc.NewServer(append(bounds, opts...)...)
	byzlogv1.RegisterGatewayServer(srv, &Service{g: g})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs
}

// WatchHealth keeps the gRPC health status in step with the nodes until ctx
// is done.
func WatchHealth(ctx context.Context, g *Gateway, hs *health.Server) {
	set := func() {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if _, top := g.Health(); top > 0 {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", st)
		hs.SetServingStatus(byzlogv1.Gateway_ServiceDesc.ServiceName, st)
	}
	t := time.NewTicker(g.cfg.GRPC.HealthInterval)
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
		return nil, grpcError(err)
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
				st := grpcStatus(err)
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
		return nil, grpcError(err)
	}
	return &byzlogv1.AdminResponse{Height: c.Height, TxIndex: c.TxIndex, Proof: c.Proof}, nil
}

// CommitOffsets forwards a consumer-signed offset commit and waits for its
// commit.
func (s *Service) CommitOffsets(ctx context.Context, req *byzlogv1.CommitOffsets) (*byzlogv1.CommitOffsetsResponse, error) {
	c, err := s.g.CommitOffsets(ctx, req, nil)
	if err != nil {
		return nil, grpcError(err)
	}
	return &byzlogv1.CommitOffsetsResponse{Height: c.Height, TxIndex: c.TxIndex, Proof: c.Proof}, nil
}

// GetGroupOffsets returns a consumer group's committed offsets.
func (s *Service) GetGroupOffsets(ctx context.Context, req *byzlogv1.GroupRequest) (*byzlogv1.GroupOffsets, error) {
	g, err := s.g.Group(ctx, req.GetGroup())
	if err != nil {
		return nil, grpcError(err)
	}
	return g, nil
}

// ListTopics lists the topics in committed state.
func (s *Service) ListTopics(ctx context.Context, _ *byzlogv1.ListTopicsRequest) (*byzlogv1.ListTopicsResponse, error) {
	topics, err := s.g.Topics(ctx)
	if err != nil {
		return nil, grpcError(err)
	}
	return &byzlogv1.ListTopicsResponse{Topics: topics}, nil
}

// DescribeTopic returns one topic with its partitions.
func (s *Service) DescribeTopic(ctx context.Context, req *byzlogv1.DescribeTopicRequest) (*byzlogv1.DescribeTopicResponse, error) {
	var info byzlogv1.TopicInfo
	if err := s.g.Query(ctx, wire.PathTopic, &byzlogv1.TopicRequest{Name: req.GetName()}, &info); err != nil {
		return nil, grpcError(err)
	}
	return &byzlogv1.DescribeTopicResponse{Topic: &info}, nil
}

// GetProducerState returns a producer's next sequence: what f+1 nodes
// agree on, not one node's word. A producer starts from it, and a liar's low
// value would have it re-sign used sequences.
func (s *Service) GetProducerState(ctx context.Context, req *byzlogv1.ProducerRequest) (*byzlogv1.ProducerState, error) {
	next, _, err := s.g.agreedNextSequence(ctx, req, s.g.seenHeight(), "client")
	if err != nil {
		return nil, grpcError(err)
	}
	return &byzlogv1.ProducerState{NextSequence: next}, nil
}

// GetNonce returns a key's next nonce, as f+1 nodes agree on it, with the
// committed transaction that used the nonce before it and its proof: a
// client that signs only nonces shown used up to the one before signs no
// future nonce for a gateway to keep back.
func (s *Service) GetNonce(ctx context.Context, req *byzlogv1.NonceRequest) (*byzlogv1.NonceResponse, error) {
	var n byzlogv1.NonceResponse
	if err := s.g.Query(ctx, wire.PathNonce, req, &n); err != nil {
		return nil, grpcError(err)
	}
	if n.NextNonce == 0 || n.UsedHeight <= 0 {
		return &n, nil
	}
	d, err := s.g.dups.get(ctx, s.g, n.UsedHeight)
	if err != nil {
		if _, lerr := s.g.LightBlock(ctx, n.UsedHeight); errors.Is(lerr, ErrPruned) {
			n.UsedPruned = true
			return &n, nil
		}
		return nil, status.Errorf(codes.Unavailable, "read block %d, which used nonce %d: %v", n.UsedHeight, n.NextNonce-1, err)
	}
	for i, tx := range d.Block.Txs {
		if key, nonce, ok := wire.NonceUse(tx); ok && bytes.Equal(key, req.Key) && nonce == n.NextNonce-1 {
			n.UsedTx, n.UsedTxIndex, n.UsedProof = tx, uint32(i), d.Prove(i, 0, true)
			return &n, nil
		}
	}
	return nil, status.Errorf(codes.Internal, "block %d holds no transaction of this key with nonce %d, which the nodes say it used", n.UsedHeight, n.NextNonce-1)
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

// GetLightBlock relays a light block (see Gateway.LightBlock).
func (s *Service) GetLightBlock(ctx context.Context, req *byzlogv1.LightBlockRequest) (*byzlogv1.LightBlockResponse, error) {
	lb, err := s.g.LightBlock(ctx, req.GetHeight())
	if err != nil {
		return nil, grpcError(err)
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
