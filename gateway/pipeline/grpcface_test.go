package pipeline_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/byzlog/byzlog/gateway/grpcface"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// serviceClient serves a gateway over c on loopback and returns a client
// of it: the service's argument checks and error mapping as a client
// sees them, over the wire.
func serviceClient(t *testing.T, c *pipeline.TestChain) byzlogv1.GatewayClient {
	t.Helper()
	g := pipeline.StartGatewayOn(t, c, func(cfg *pipeline.Config) { cfg.Waits.TopicMissWait = 10 * time.Millisecond })
	srv, _ := grpcface.NewServer(grpcface.Over(g), g.Config().GRPC)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return byzlogv1.NewGatewayClient(conn)
}

func TestService(t *testing.T) {
	c := pipeline.NewTestChain(t, pipeline.StartTopics()...)
	pipeline.RunTestChain(t, c)
	gc := serviceClient(t, c)
	p, stranger := pipeline.NewTestProducer("service"), pipeline.NewTestProducer("stranger")
	badSig := p.OneRecord(t, "t", 0, "v")
	badSig.Signature[0] ^= 1
	offsets, err := p.CommitOffsets(0, "group", false, &byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	badOffsets, err := p.CommitOffsets(1, "group", false, &byzlogv1.PartitionOffset{Topic: "t", Partition: 0, Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	badOffsets.Signature = []byte("not a signature")
	create, err := stranger.Admin(0, &byzlogv1.CreateTopic{Name: "u", Config: &byzlogv1.TopicConfig{Partitions: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
		code codes.Code
		msg  string
	}{
		{"produce", func(ctx context.Context) error {
			resp, err := gc.Produce(ctx, &byzlogv1.ProduceRequest{RequestId: 7, Batch: p.OneRecord(t, "t", 0, "v")})
			if err == nil && (resp.RequestId != 7 || resp.Receipt.GetAck() != byzlogv1.Ack_ACK_COMMIT) {
				return status.Errorf(codes.Unknown, "response %v: want request id 7 and a commit receipt (ack unspecified means commit)", resp)
			}
			return err
		}, codes.OK, ""},
		{"produce without a batch", func(ctx context.Context) error {
			_, err := gc.Produce(ctx, &byzlogv1.ProduceRequest{})
			return err
		}, codes.InvalidArgument, "request carries no batch"},
		{"produce with a bad signature", func(ctx context.Context) error {
			_, err := gc.Produce(ctx, &byzlogv1.ProduceRequest{Batch: badSig})
			return err
		}, codes.InvalidArgument, "signature"},
		{"produce to an unknown topic", func(ctx context.Context) error {
			_, err := gc.Produce(ctx, &byzlogv1.ProduceRequest{Batch: p.OneRecord(t, "nope", 0, "v")})
			return err
		}, codes.NotFound, "does not exist"},
		{"produce a gap", func(ctx context.Context) error {
			_, err := gc.Produce(ctx, &byzlogv1.ProduceRequest{Batch: p.OneRecord(t, "t", 1000, "v")})
			return err
		}, codes.FailedPrecondition, "expected sequence 1"},
		{"produce, cancelled", func(context.Context) error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := gc.Produce(ctx, &byzlogv1.ProduceRequest{Batch: p.OneRecord(t, "t", 1, "v")})
			return err
		}, codes.Canceled, ""},
		{"admin by a key that is not the admin", func(ctx context.Context) error {
			_, err := gc.Admin(ctx, create)
			return err
		}, codes.PermissionDenied, ""},
		{"admin request without a signature", func(ctx context.Context) error {
			_, err := gc.Admin(ctx, &byzlogv1.AdminRequest{})
			return err
		}, codes.InvalidArgument, ""},
		{"commit offsets", func(ctx context.Context) error {
			resp, err := gc.CommitOffsets(ctx, offsets)
			if err == nil && resp.Height <= 0 {
				return status.Errorf(codes.Unknown, "response %v: want its height", resp)
			}
			return err
		}, codes.OK, ""},
		{"commit offsets with a bad signature", func(ctx context.Context) error {
			_, err := gc.CommitOffsets(ctx, badOffsets)
			return err
		}, codes.InvalidArgument, ""},
		{"describe a topic", func(ctx context.Context) error {
			resp, err := gc.DescribeTopic(ctx, &byzlogv1.DescribeTopicRequest{Name: "t"})
			if err == nil && resp.Topic.GetConfig().GetPartitions() != 2 {
				return status.Errorf(codes.Unknown, "topic %v: want 2 partitions", resp.Topic)
			}
			return err
		}, codes.OK, ""},
		{"describe an unknown topic", func(ctx context.Context) error {
			_, err := gc.DescribeTopic(ctx, &byzlogv1.DescribeTopicRequest{Name: "nope"})
			return err
		}, codes.NotFound, ""},
		{"list topics", func(ctx context.Context) error {
			resp, err := gc.ListTopics(ctx, &byzlogv1.ListTopicsRequest{})
			if err == nil && len(resp.Topics) != 2 {
				return status.Errorf(codes.Unknown, "%d topics, want 2", len(resp.Topics))
			}
			return err
		}, codes.OK, ""},
		{"producer state", func(ctx context.Context) error {
			resp, err := gc.GetProducerState(ctx, &byzlogv1.ProducerRequest{ProducerKey: stranger.PublicKey(), Topic: "t"})
			if err == nil && resp.NextSequence != 0 {
				return status.Errorf(codes.Unknown, "next sequence %d, want 0", resp.NextSequence)
			}
			return err
		}, codes.OK, ""},
		{"producer state, proven", func(ctx context.Context) error {
			resp, err := gc.GetProducerState(ctx, &byzlogv1.ProducerRequest{ProducerKey: stranger.PublicKey(), Topic: "t", Prove: true})
			if err == nil && (resp.GetProof().GetHeight() <= 0 || len(resp.GetProof().GetEntries()) != 1) {
				return status.Errorf(codes.Unknown, "proof %v: want one entry at a height", resp.GetProof())
			}
			return err
		}, codes.OK, ""},
		{"light block at a negative height", func(ctx context.Context) error {
			_, err := gc.GetLightBlock(ctx, &byzlogv1.LightBlockRequest{Height: -1})
			return err
		}, codes.InvalidArgument, "want 0 (the latest) or a height"},
		{"light block no node serves", func(ctx context.Context) error {
			_, err := gc.GetLightBlock(ctx, &byzlogv1.LightBlockRequest{Height: 1})
			return err
		}, codes.Unavailable, "no node served"},
		{"health", func(ctx context.Context) error {
			resp, err := gc.Health(ctx, &byzlogv1.HealthRequest{})
			if err == nil && (resp.ChainId != pipeline.TestChainID || len(resp.Nodes) != 1 || !resp.Nodes[0].Healthy) {
				return status.Errorf(codes.Unknown, "health %v: want the chain and one healthy node", resp)
			}
			return err
		}, codes.OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := tc.call(ctx)
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Errorf("%s = %s %q, want %s mentioning %q", tc.name, st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
}

// TestServiceProduceStream: each answer carries its request's id, and an
// error travels in the answer (its code and message), not as the
// stream's end.
func TestServiceProduceStream(t *testing.T) {
	c := pipeline.NewTestChain(t, pipeline.StartTopics()...)
	pipeline.RunTestChain(t, c)
	gc := serviceClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := gc.ProduceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.NewTestProducer("stream")
	reqs := []*byzlogv1.ProduceRequest{
		{RequestId: 1, Batch: p.OneRecord(t, "t", 0, "v")},
		{RequestId: 2},
		{RequestId: 3, Batch: p.OneRecord(t, "nope", 0, "v")},
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*byzlogv1.ProduceResponse{}
	for range reqs {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv = %v", err)
		}
		got[resp.RequestId] = resp
	}
	for _, tc := range []struct {
		id   uint64
		code codes.Code
	}{{1, codes.OK}, {2, codes.InvalidArgument}, {3, codes.NotFound}} {
		r := got[tc.id]
		if r == nil || codes.Code(r.ErrorCode) != tc.code || (tc.code == codes.OK) != (r.Receipt != nil) {
			t.Errorf("answer to request %d = %v, want code %s", tc.id, r, tc.code)
		}
	}
}
