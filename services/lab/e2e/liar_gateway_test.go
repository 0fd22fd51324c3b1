//go:build e2e

package e2e

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
	"github.com/byzlog/byzlog/services/lab/tamper"
)

// TestLyingGatewayIsCaught is issue 14's fourth finding from the producer's
// side: a malicious gateway could invent receipts for batches it dropped,
// move a receipt's offsets, or answer a batch as a duplicate of another's
// write. A producer that verifies receipts refuses every one of those lies
// (ErrUnverified, nothing acknowledged), and what it did acknowledge is on
// the chain at its offsets, once. A producer that takes the gateway's word
// (TrustGateway) is shown the invented receipt as a success: the lie this
// test would miss if the proxy stopped lying.
func TestLyingGatewayIsCaught(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	n, _ := startNet(ctx, t, 7500)
	gw := startGateway(t, n, fmt.Sprintf("127.0.0.1:%d", n.Config().BasePort+900))
	const topic = "liar"
	createTopicVia(ctx, t, n, gw.addr, topic, 1)
	serve, err := n.GatewayServerTLS(localnet.Services{})
	if err != nil {
		t.Fatal(err)
	}
	px, err := tamper.StartGateway("127.0.0.1:0", gw.addr, serve, gwTLS(t, n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })

	trust := trustOf(t, n)
	acked := map[uint64]string{} // offset -> value, of verified receipts
	produce := func(p *client.Producer, value string) (client.Receipt, error) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return p.ProduceSync(pctx, &client.Record{Topic: topic, Value: []byte(value)})
	}
	for _, mode := range tamper.GatewayModes {
		p, err := client.NewProducer(ctx, client.WithTrust(trust), client.WithGateways(px.Addr()), client.WithRequestTimeout(5*time.Second), tlsOpt(t, n))
		if err != nil {
			t.Fatal(err)
		}
		px.SetMode("")
		for i := range 3 {
			v := fmt.Sprintf("%s-honest-%d", mode, i)
			rc, err := produce(p, v)
			if err != nil || !rc.Verified {
				t.Fatalf("%s: honest produce through the proxy = %+v, %v; want a verified receipt", mode, rc, err)
			}
			acked[rc.Offset] = v
		}
		before := px.Count(mode)
		px.SetMode(mode)
		refused := 0
		for i := range 3 {
			v := fmt.Sprintf("%s-lie-%d", mode, i)
			rc, err := produce(p, v)
			switch {
			case err == nil && rc.Verified:
				acked[rc.Offset] = v
			case errors.Is(err, client.ErrUnverified):
				refused++
			default:
				t.Errorf("%s: produce = %+v, %v; want a verified receipt or ErrUnverified", mode, rc, err)
			}
		}
		px.SetMode("")
		lies := px.Count(mode) - before
		if lies == 0 {
			t.Fatalf("%s: the proxy told no lie", mode)
		}
		if mode == tamper.Rebundle {
			if refused != 0 {
				t.Errorf("%s: %d receipts refused; the replays are the gateway's, the producer's own batches commit", mode, refused)
			}
		} else if refused != 3 {
			t.Errorf("%s: %d of 3 lying receipts refused", mode, refused)
		}
		t.Logf("%s: the proxy lied %d times; the producer refused %d receipts", mode, lies, refused)
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// What the producers acknowledged is on the chain, at its offset, and
	// no value is there twice (the replays appended nothing).
	log := readTopic(ctx, t, n, topic)
	seen := map[string]int{}
	for _, r := range log {
		seen[string(r.Value)]++
	}
	for off, v := range acked {
		if off >= uint64(len(log)) || string(log[off].Value) != v {
			t.Errorf("acknowledged %q at offset %d, which the chain does not hold", v, off)
		}
	}
	for v, k := range seen {
		if k > 1 {
			t.Errorf("%q is on the chain %d times", v, k)
		}
	}
	t.Logf("the chain holds %d records; all %d acknowledged at their offsets, none twice", len(log), len(acked))

	// An admin client is shown a nonce ahead of the key's next. Verifying,
	// it signs nothing (the proof is of the nonce before the real one); on
	// the gateway's word it signs a request the gateway keeps, to play it
	// once the key's nonce gets there. Honest, the proof checks.
	adminKey, err := n.AdminKey()
	if err != nil {
		t.Fatal(err)
	}
	createVia := func(tr client.Trust, name string) error {
		adm, err := client.NewAdmin(px.Addr(), adminKey, tr, tlsOpt(t, n))
		if err != nil {
			t.Fatal(err)
		}
		defer adm.Close()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err = adm.CreateTopic(actx, name, &byzlogv1.TopicConfig{Partitions: 1})
		return err
	}
	if err := createVia(trust, "through-the-proxy"); err != nil {
		t.Fatalf("admin request through the honest proxy, nonce checked: %v", err)
	}
	px.SetMode(tamper.FutureNonce)
	if err := createVia(trust, "kept-verified"); !errors.Is(err, client.ErrUnverified) {
		t.Fatalf("verifying admin shown a future nonce: %v; want ErrUnverified", err)
	}
	if px.Count(tamper.FutureNonce) == 0 {
		t.Fatal("the proxy told no nonce lie")
	}
	if k := px.Kept(); len(k) != 0 {
		t.Fatalf("the verifying admin signed %d requests for a future nonce", len(k))
	}
	if err := createVia(client.TrustGateway(trust.ChainID()), "kept"); err == nil {
		t.Fatal("the proxy forwarded the request it should keep")
	}
	px.SetMode("")
	k := px.Kept()
	if len(k) != 1 {
		t.Fatalf("the unverifying admin signed %d requests for the proxy to keep; want 1", len(k))
	}
	var body byzlogv1.AdminBody
	if err := proto.Unmarshal(k[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	t.Logf("on the gateway's word the admin signed nonce %d, 5 ahead, for the gateway to keep; verifying, it signed none", body.Nonce)

	// A producer that starts again with its key asks where it stands. A
	// gateway that says sequence 0 where the key has written 3 batches
	// would have it sign used sequences: verifying, the producer refuses
	// the proof and takes the next gateway's, and its record commits; on
	// the gateway's word it signs sequence 0, which the chain refuses.
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := client.NewProducer(ctx, client.WithTrust(trust), client.WithKey(key), client.WithGateways(gw.addr), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := produce(first, fmt.Sprintf("before-restart-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	px.SetMode(tamper.LowProducerState)
	again, err := client.NewProducer(ctx, client.WithTrust(trust), client.WithKey(key), client.WithGateways(px.Addr(), gw.addr), client.WithRequestTimeout(5*time.Second), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	if rc, err := produce(again, "after-restart"); err != nil || !rc.Verified {
		t.Fatalf("verifying producer shown sequence 0 by one of two gateways: %+v, %v; want a verified receipt", rc, err)
	}
	if px.Count(tamper.LowProducerState) == 0 {
		t.Fatal("the proxy told no producer-state lie")
	}
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}
	believer, err := client.NewProducer(ctx, client.WithTrust(client.TrustGateway(trust.ChainID())), client.WithKey(key), client.WithGateways(px.Addr()), client.WithRequestTimeout(5*time.Second), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	_, believed := produce(believer, "believed-sequence")
	_ = believer.Close(ctx)
	px.SetMode("")
	if believed == nil {
		t.Fatal("a producer on the gateway's word, shown sequence 0, had its record committed: the lie did not bite")
	}
	t.Logf("shown sequence 0 after 3 batches: verifying, the producer refused the proof and wrote at the right sequence; on the gateway's word: %v", believed)

	// The lie verification stops: a producer on the gateway's word takes
	// an invented receipt for a record that was never written.
	p, err := client.NewProducer(ctx, client.WithTrust(client.TrustGateway(trust.ChainID())), client.WithGateways(px.Addr()), tlsOpt(t, n))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close(ctx) }()
	px.SetMode(tamper.InventReceipt)
	defer px.SetMode("")
	rc, err := produce(p, "believed")
	if err != nil || rc.Verified {
		t.Fatalf("unverified produce through an inventing gateway = %+v, %v; want an unverified success", rc, err)
	}
	for _, r := range readTopic(ctx, t, n, topic) {
		if string(r.Value) == "believed" {
			t.Fatalf("the inventing gateway wrote the record after all (offset %d)", r.Offset)
		}
	}
	t.Logf("without verification the invented receipt (offset %d) was taken for a record the chain never wrote", rc.Offset)
}

// readTopic reads partition 0 of topic from node 0 (at most 1000 records).
func readTopic(ctx context.Context, t *testing.T, n *localnet.Net, topic string) []*byzlogv1.StoredRecord {
	t.Helper()
	c, err := n.Client(0)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := proto.Marshal(&byzlogv1.RecordsRequest{Topic: topic})
	q, err := c.ABCIQuery(ctx, wire.PathRecords, req)
	if err != nil || q.Response.Code != 0 {
		t.Fatalf("records of %s: %v %s", topic, err, q.Response.Log)
	}
	var resp byzlogv1.RecordsResponse
	if err := proto.Unmarshal(q.Response.Value, &resp); err != nil {
		t.Fatal(err)
	}
	out := make([]*byzlogv1.StoredRecord, len(resp.Records))
	for i, b := range resp.Records {
		out[i] = &byzlogv1.StoredRecord{}
		if err := proto.Unmarshal(b, out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
