package client

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/indexer/chain"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
)

// Admin changes topics with an admin key listed in genesis.
type Admin struct {
	conn   *grpc.ClientConn
	gw     byzlogv1.GatewayClient
	key    ed25519.PrivateKey
	trust  Trust
	verify *chain.Verifier // nil: commits are taken on the gateway's word
}

// adminWait bounds how long the admin client waits for a header to appear.
const adminWait = 30 * time.Second

// NewAdmin connects to one gateway. trust names the chain requests are
// signed for and, unless it is TrustGateway, the root of trust each
// commit is verified from: the request's transaction and its result must
// be in a block whose header the admin's light client verified. Of opts,
// only the transport options apply (WithTLS, WithInsecure).
func NewAdmin(gateway string, key ed25519.PrivateKey, trust Trust, opts ...Option) (*Admin, error) {
	if err := trust.Validate("byzlog admin"); err != nil {
		return nil, err
	}
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if o.insecure && o.tls != nil {
		return nil, fmt.Errorf("byzlog admin: WithInsecure and WithTLS: choose one")
	}
	c, err := grpc.NewClient(gateway, o.dialCreds())
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", gateway, err)
	}
	gw := byzlogv1.NewGatewayClient(c)
	v, err := chain.NewVerifier(trust, []byzlogv1.GatewayClient{gw}, adminWait)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &Admin{conn: c, gw: gw, key: key, trust: trust, verify: v}, nil
}

// Gateway is the admin's gateway client, for read calls.
func (a *Admin) Gateway() byzlogv1.GatewayClient { return a.gw }

// Close closes the connection.
func (a *Admin) Close() error { return a.conn.Close() }

// AdminExpiryBlocks is how many blocks past the chain's height an admin
// request stays valid (chain.ExpiryBlocks). With verification on, the
// height is one whose header the admin's light client verified, so a
// gateway cannot stretch the window.
const AdminExpiryBlocks = chain.ExpiryBlocks

// CreateTopic creates a topic and returns the height that committed it.
func (a *Admin) CreateTopic(ctx context.Context, name string, cfg *byzlogv1.TopicConfig) (int64, error) {
	return a.do(ctx, &byzlogv1.CreateTopic{Name: name, Config: cfg})
}

// UpdateTopic replaces a topic's config (partitions may only grow).
func (a *Admin) UpdateTopic(ctx context.Context, name string, cfg *byzlogv1.TopicConfig) (int64, error) {
	return a.do(ctx, &byzlogv1.UpdateTopic{Name: name, Config: cfg})
}

// DeleteTopic deletes a topic and its records.
func (a *Admin) DeleteTopic(ctx context.Context, name string) (int64, error) {
	return a.do(ctx, &byzlogv1.DeleteTopic{Name: name})
}

// do signs op with the key's next nonce, read from the chain (and, when
// verifying, checked against the committed transaction that used the one
// before), and submits
// it; a stale or raced nonce is read again, up to five times.
func (a *Admin) do(ctx context.Context, op proto.Message) (int64, error) {
	s := wire.NewSigner(a.key, a.trust.ChainID())
	for attempt := 0; ; attempt++ {
		expiry, err := chain.Expiry(ctx, a.gw, a.verify, a.trust.ChainID())
		if err != nil {
			return 0, err
		}
		n, err := a.gw.GetNonce(ctx, &byzlogv1.NonceRequest{Key: s.PublicKey()})
		if err != nil {
			return 0, fmt.Errorf("read the admin key's nonce: %w", err)
		}
		if a.verify != nil {
			// Signed only for a nonce shown used up to the one before: a
			// gateway cannot collect requests for future nonces to replay.
			if err := a.verify.Nonce(ctx, s.PublicKey(), n); err != nil {
				return 0, fmt.Errorf("the gateway's nonce for the admin key: %w", err)
			}
		}
		req, err := s.AdminUntil(n.NextNonce, expiry, op)
		if err != nil {
			return 0, err
		}
		resp, err := a.gw.Admin(ctx, req)
		if status.Code(err) == codes.FailedPrecondition && attempt < 5 {
			// A nonce read from a node a block behind, or raced by another
			// request of this key: read it again a moment later.
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		if a.verify != nil {
			tx, err := wire.AdminTx(req)
			if err != nil {
				return 0, err
			}
			if err := a.verify.Tx(ctx, tx, resp.GetHeight(), resp.GetTxIndex(), resp.GetProof()); err != nil {
				return 0, fmt.Errorf("the gateway answered committed at height %d: %w", resp.GetHeight(), err)
			}
		}
		return resp.Height, nil
	}
}
