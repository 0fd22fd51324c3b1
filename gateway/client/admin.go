package client

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/abciapp/sign"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Admin changes topics with an admin key listed in genesis.
type Admin struct {
	conn *grpc.ClientConn
	gw   byzlogv1.GatewayClient
	key  ed25519.PrivateKey
}

// NewAdmin connects to one gateway.
func NewAdmin(gateway string, key ed25519.PrivateKey) (*Admin, error) {
	c, err := grpc.NewClient(gateway, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", gateway, err)
	}
	return &Admin{conn: c, gw: byzlogv1.NewGatewayClient(c), key: key}, nil
}

// Gateway is the admin's gateway client, for read calls.
func (a *Admin) Gateway() byzlogv1.GatewayClient { return a.gw }

// Close closes the connection.
func (a *Admin) Close() error { return a.conn.Close() }

// AdminExpiryBlocks is how many blocks past the gateway's height an admin
// request stays valid (about a minute at localnet's ~0.5 s blocks): a
// gateway that kept a signed request back cannot play it later than that.
// The height is the gateway's word until receipts verify themselves.
const AdminExpiryBlocks = 120

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

// do signs op with the key's next nonce, read from the chain, and submits
// it; a stale or raced nonce is read again, up to five times.
func (a *Admin) do(ctx context.Context, op proto.Message) (int64, error) {
	hs, err := a.gw.Health(ctx, &byzlogv1.HealthRequest{})
	if err != nil {
		return 0, fmt.Errorf("ask the gateway for its chain: %w", err)
	}
	s := sign.NewSigner(a.key, hs.ChainId)
	for attempt := 0; ; attempt++ {
		n, err := a.gw.GetNonce(ctx, &byzlogv1.NonceRequest{Key: s.PublicKey()})
		if err != nil {
			return 0, fmt.Errorf("read the admin key's nonce: %w", err)
		}
		var expiry int64 // what the gateway says f+1 nodes reached; 0: no expiry
		if hs.Height > 0 {
			expiry = hs.Height + AdminExpiryBlocks
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
		return resp.Height, nil
	}
}
