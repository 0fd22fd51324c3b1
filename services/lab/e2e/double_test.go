//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/lab/tamper"
)

// liar is a gateway test double in front of a real gateway that drops,
// duplicates, delays (reorders) and alters the batches it is given, by a
// fixed pattern over the requests it sees.
type liar struct {
	tamper.Relay                          // the calls it does not lie in
	n                                     atomic.Int64
	dropped, duplicated, delayed, altered atomic.Int64
}

func (l *liar) Produce(ctx context.Context, req *byzlogv1.ProduceRequest) (*byzlogv1.ProduceResponse, error) {
	switch i := l.n.Add(1); {
	case i%11 == 0: // alter one byte of the signed body
		l.altered.Add(1)
		req = proto.Clone(req).(*byzlogv1.ProduceRequest)
		req.Batch.Body[len(req.Batch.Body)-1] ^= 0x55
	case i%7 == 0: // drop: never answer
		l.dropped.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	case i%5 == 0: // duplicate: forward twice, answer the second
		l.duplicated.Add(1)
		if _, err := l.Up.Produce(ctx, req); err != nil {
			return nil, err
		}
	case i%3 == 0: // reorder: hold it back while later requests overtake it
		l.delayed.Add(1)
		time.Sleep(300 * time.Millisecond)
	}
	return l.Up.Produce(ctx, req)
}

// TestLyingGateway: whatever a gateway does to signed batches, the log
// holds each record at most once, exactly where its receipt says, altered
// batches are refused for their signature, and dropped ones are retried.
func TestLyingGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 4000)
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", n.Config().BasePort+900))
	createTopicVia(ctx, t, n, gw.addr, "lies", 3)
	if err := waitHeight(ctx, t, n, []int{0, 1, 2, 3}, maxHeight(ctx, n, []int{0, 1, 2, 3})+1); err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(gw.addr, grpc.WithTransportCredentials(credentials.NewTLS(gwTLS(t, n))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	l := &liar{Relay: tamper.Relay{Up: byzlogv1.NewGatewayClient(conn)}}
	srv := grpc.NewServer()
	byzlogv1.RegisterGatewayServer(srv, l)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	// The double serves plaintext on loopback: the lies are its answers.
	p, err := client.NewProducer(ctx, client.WithTrust(trustOf(t, n)), client.WithGateways(ln.Addr().String()), client.WithRequestTimeout(3*time.Second), client.WithInsecure(),
		client.WithBatchRecords(10), client.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const total = 600
	futs := make([]*client.Future, total)
	for i := range futs {
		futs[i] = p.Produce(ctx, &client.Record{Topic: "lies", Key: []byte(fmt.Sprint("k", i%9)), Value: []byte(fmt.Sprint("v", i))})
		if i%50 == 49 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Minute)
	defer ccancel()
	go func() {
		for cctx.Err() == nil {
			time.Sleep(10 * time.Second)
			done := 0
			for _, f := range futs {
				select {
				case <-f.Done():
					done++
				default:
				}
			}
			t.Logf("progress: %d of %d records resolved; double saw %d requests (dropped %d, duplicated %d, delayed %d, altered %d)",
				done, total, l.n.Load(), l.dropped.Load(), l.duplicated.Load(), l.delayed.Load(), l.altered.Load())
		}
	}()
	if err := p.Close(cctx); err != nil {
		t.Fatal(err)
	}

	acked := map[string][2]uint64{}
	refused := map[string]bool{}
	for i, f := range futs {
		r, err := f.Wait(ctx)
		v := fmt.Sprint("v", i)
		switch {
		case err == nil:
			acked[v] = [2]uint64{uint64(r.Partition), r.Offset}
		case strings.Contains(err.Error(), "bad_signature"):
			refused[v] = true
		default:
			t.Fatalf("record %s: %v (only altered batches may fail, for their signature)", v, err)
		}
	}
	t.Logf("the double saw %d requests: dropped %d, duplicated %d, delayed %d, altered %d; %d records acknowledged, %d refused for a bad signature",
		l.n.Load(), l.dropped.Load(), l.duplicated.Load(), l.delayed.Load(), l.altered.Load(), len(acked), len(refused))
	if l.dropped.Load() == 0 || l.duplicated.Load() == 0 || l.altered.Load() == 0 || len(refused) == 0 {
		t.Fatal("the double did not exercise every kind of lie")
	}
	var top int64
	for _, f := range futs {
		if r, err := f.Wait(ctx); err == nil {
			top = max(top, r.Height)
		}
	}
	if err := waitHeight(ctx, t, n, []int{0, 1, 2, 3}, top); err != nil {
		t.Fatal(err)
	}
	for node := 0; node < 4; node++ {
		seen := 0
		for part := uint32(0); part < 3; part++ {
			for j, r := range readPartition(ctx, t, n, node, "lies", part) {
				v := string(r.Value)
				w, ok := acked[v]
				if refused[v] || !ok || w != [2]uint64{uint64(part), uint64(j)} {
					t.Fatalf("node%d: %q at %d@%d; acknowledged at %v (%v), refused %v", node, v, part, j, w, ok, refused[v])
				}
				seen++
			}
		}
		if seen != len(acked) {
			t.Fatalf("node%d holds %d records, %d were acknowledged", node, seen, len(acked))
		}
	}
	t.Logf("every acknowledged record is on all 4 validators once, at its receipt's offset; no altered record was committed")
}
