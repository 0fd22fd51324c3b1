package client

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	cmttypes "github.com/cometbft/cometbft/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/chain/receipt"
	"github.com/byzlog/byzlog/protos/wire"
)

// Admin changes topics, admins and validators with admin keys: one for
// creating and updating topics, the admin set's threshold of them
// (WithCosigners, or Cosign for keys held elsewhere) for the rest.
type Admin struct {
	conn      *grpc.ClientConn
	gw        byzlogv1.GatewayClient
	key       ed25519.PrivateKey
	cosigners []ed25519.PrivateKey
	trust     Trust
	verify    *receipt.Verifier // nil: commits are taken on the gateway's word
}

// adminWait bounds how long the admin client waits for a header to appear.
const adminWait = 30 * time.Second

// NewAdmin connects to one gateway. trust names the chain requests are
// signed for and, unless it is TrustGateway, the root of trust each
// commit is verified from: the request's transaction and its result must
// be in a block whose header the admin's light client verified. Of opts,
// only the transport options (WithTLS, WithInsecure) and WithCosigners
// apply.
func NewAdmin(gateway string, key ed25519.PrivateKey, trust Trust, opts ...Option) (*Admin, error) {
	c, err := dialOne("byzlog admin", gateway, trust, opts)
	if err != nil {
		return nil, err
	}
	return &Admin{conn: c.conn, gw: c.gw, key: key, cosigners: c.opts.cosigners, trust: trust, verify: c.verify}, nil
}

// oneGateway is a connection to one gateway with a verifier of its
// headers (nil for a Trust that does not verify).
type oneGateway struct {
	conn   *grpc.ClientConn
	gw     byzlogv1.GatewayClient
	verify *receipt.Verifier
	opts   options
}

// dialOne connects who (for messages) to gateway with opts' transport.
func dialOne(who, gateway string, trust Trust, opts []Option) (oneGateway, error) {
	if err := trust.Validate(who); err != nil {
		return oneGateway{}, err
	}
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if o.insecure && o.tls != nil {
		return oneGateway{}, fmt.Errorf("%s: WithInsecure and WithTLS: choose one", who)
	}
	c, err := grpc.NewClient(gateway, o.dialCreds())
	if err != nil {
		return oneGateway{}, fmt.Errorf("gateway %s: %w", gateway, err)
	}
	gw := byzlogv1.NewGatewayClient(c)
	v, err := receipt.NewVerifier(trust, []byzlogv1.GatewayClient{gw}, adminWait)
	if err != nil {
		_ = c.Close()
		return oneGateway{}, err
	}
	return oneGateway{conn: c, gw: gw, verify: v, opts: o}, nil
}

// Gateway is the admin's gateway client, for read calls.
func (a *Admin) Gateway() byzlogv1.GatewayClient { return a.gw }

// Close closes the connection.
func (a *Admin) Close() error { return a.conn.Close() }

// AdminExpiryBlocks is how many blocks past the chain's height an admin
// request stays valid (receipt.ExpiryBlocks). With verification on, the
// height is one whose header the admin's light client verified, so a
// gateway cannot stretch the window.
const AdminExpiryBlocks = receipt.ExpiryBlocks

// CreateTopic creates a topic and returns the height that committed it.
func (a *Admin) CreateTopic(ctx context.Context, name string, cfg *byzlogv1.TopicConfig) (int64, error) {
	return a.do(ctx, &byzlogv1.CreateTopic{Name: name, Config: cfg})
}

// UpdateTopic replaces a topic's config (partitions may only grow).
func (a *Admin) UpdateTopic(ctx context.Context, name string, cfg *byzlogv1.TopicConfig) (int64, error) {
	return a.do(ctx, &byzlogv1.UpdateTopic{Name: name, Config: cfg})
}

// DeleteTopic deletes a topic and its records (threshold).
func (a *Admin) DeleteTopic(ctx context.Context, name string) (int64, error) {
	return a.do(ctx, &byzlogv1.DeleteTopic{Name: name})
}

// SetValidator adds a validator (its ed25519 consensus public key), changes
// its power or, with power 0, removes it (threshold). CometBFT applies it
// two blocks after the returned height.
func (a *Admin) SetValidator(ctx context.Context, pubKey []byte, power int64) (int64, error) {
	return a.do(ctx, &byzlogv1.SetValidator{PubKey: pubKey, Power: power})
}

// SetAdmins replaces the admin set and its threshold (threshold).
func (a *Admin) SetAdmins(ctx context.Context, keys [][]byte, threshold uint32) (int64, error) {
	return a.do(ctx, &byzlogv1.SetAdmins{Admins: keys, Threshold: threshold})
}

// SetIndexer registers an indexer (its progress key's public half) under
// name, or with remove unregisters it (threshold): pruning nodes keep every
// block a registered indexer has not reported published.
func (a *Admin) SetIndexer(ctx context.Context, pubKey []byte, name string, remove bool) (int64, error) {
	return a.do(ctx, &byzlogv1.SetIndexer{PubKey: pubKey, Name: name, Remove: remove})
}

// do signs op with the key's next nonce and submits it; a stale or raced
// nonce is read again, up to five times.
func (a *Admin) do(ctx context.Context, op proto.Message) (int64, error) {
	for attempt := 0; ; attempt++ {
		req, err := a.Sign(ctx, op)
		if err != nil {
			return 0, err
		}
		h, err := a.Submit(ctx, req)
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
		return h, err
	}
}

// Sign signs op with the key's next nonce, read from the chain (and, when
// verifying, checked against the committed transaction that used the one
// before), valid for AdminExpiryBlocks, and cosigns it with WithCosigners'
// keys. The request may be cosigned elsewhere (Cosign) and then submitted.
func (a *Admin) Sign(ctx context.Context, op proto.Message) (*byzlogv1.AdminRequest, error) {
	s := wire.NewSigner(a.key, a.trust.ChainID())
	expiry, err := receipt.Expiry(ctx, a.gw, a.verify, a.trust.ChainID())
	if err != nil {
		return nil, err
	}
	n, err := a.gw.GetNonce(ctx, &byzlogv1.NonceRequest{Key: s.PublicKey()})
	if err != nil {
		return nil, fmt.Errorf("read the admin key's nonce: %w", err)
	}
	if a.verify != nil {
		// Signed only for a nonce shown used up to the one before: a
		// gateway cannot collect requests for future nonces to replay.
		if err := a.verify.Nonce(ctx, s.PublicKey(), n); err != nil {
			return nil, fmt.Errorf("the gateway's nonce for the admin key: %w", err)
		}
	}
	req, err := s.AdminUntil(n.NextNonce, expiry, op)
	if err != nil {
		return nil, err
	}
	for _, k := range a.cosigners {
		wire.NewSigner(k, a.trust.ChainID()).Cosign(req)
	}
	return req, nil
}

// Cosign adds key's signature to a request another admin signed, after
// checking that it is for this chain, so that an admin never signs a body
// blind: the caller shows Describe's words first.
func Cosign(req *byzlogv1.AdminRequest, key ed25519.PrivateKey, chainID string) error {
	var body byzlogv1.AdminBody
	if err := proto.Unmarshal(req.Body, &body); err != nil {
		return fmt.Errorf("the request's body is not an AdminBody: %w", err)
	}
	if body.ChainId != chainID {
		return fmt.Errorf("the request is for chain %q, not %q", body.ChainId, chainID)
	}
	if !wire.Verify(req.AdminKey, req.Body, req.Signature) {
		return fmt.Errorf("the request's own signature does not verify: it was changed after signing")
	}
	wire.NewSigner(key, chainID).Cosign(req)
	return nil
}

// Submit sends a signed (and cosigned) request and waits for its commit,
// verifying it when the admin verifies; it returns the height.
func (a *Admin) Submit(ctx context.Context, req *byzlogv1.AdminRequest) (int64, error) {
	resp, err := a.gw.Admin(ctx, req)
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

// Describe says in words what an admin request does, who signed it and
// until when it may commit: what a cosigning admin reads before signing.
func Describe(req *byzlogv1.AdminRequest) (string, error) {
	var body byzlogv1.AdminBody
	if err := proto.Unmarshal(req.Body, &body); err != nil {
		return "", fmt.Errorf("the request's body is not an AdminBody: %w", err)
	}
	var what string
	switch op := body.Op.(type) {
	case *byzlogv1.AdminBody_CreateTopic:
		what = fmt.Sprintf("create topic %q with %d partitions", op.CreateTopic.Name, op.CreateTopic.GetConfig().GetPartitions())
	case *byzlogv1.AdminBody_CreateTopics:
		names := make([]string, len(op.CreateTopics.Topics))
		for i, t := range op.CreateTopics.Topics {
			names[i] = strconv.Quote(t.Name)
		}
		what = fmt.Sprintf("create the %d topics %s, all or none", len(names), strings.Join(names, ", "))
	case *byzlogv1.AdminBody_UpdateTopic:
		what = fmt.Sprintf("update topic %q (%d partitions)", op.UpdateTopic.Name, op.UpdateTopic.GetConfig().GetPartitions())
	case *byzlogv1.AdminBody_DeleteTopic:
		what = fmt.Sprintf("delete topic %q and its records", op.DeleteTopic.Name)
	case *byzlogv1.AdminBody_SetValidator:
		v := op.SetValidator
		if v.Power == 0 {
			what = fmt.Sprintf("remove validator %s", base64.StdEncoding.EncodeToString(v.PubKey))
		} else {
			what = fmt.Sprintf("set validator %s to power %d", base64.StdEncoding.EncodeToString(v.PubKey), v.Power)
		}
	case *byzlogv1.AdminBody_SetAdmins:
		keys := make([]string, len(op.SetAdmins.Admins))
		for i, k := range op.SetAdmins.Admins {
			keys[i] = hex.EncodeToString(k)
		}
		what = fmt.Sprintf("make the admins %s with threshold %d", strings.Join(keys, ", "), op.SetAdmins.Threshold)
	case *byzlogv1.AdminBody_ScheduleUpgrade:
		what = fmt.Sprintf("switch to rules version %d at height %d", op.ScheduleUpgrade.RulesVersion, op.ScheduleUpgrade.Height)
		if op.ScheduleUpgrade.RulesVersion == 0 {
			what = "cancel the scheduled upgrade"
		}
	case *byzlogv1.AdminBody_SetIndexer:
		what = fmt.Sprintf("register indexer %x as %q", op.SetIndexer.PubKey, op.SetIndexer.Name)
		if op.SetIndexer.Remove {
			what = fmt.Sprintf("unregister indexer %x", op.SetIndexer.PubKey)
		}
	default:
		what = "an operation this version does not know"
	}
	signers := []string{hex.EncodeToString(req.AdminKey)}
	for _, c := range req.Cosignatures {
		signers = append(signers, hex.EncodeToString(c.AdminKey))
	}
	expiry := "no expiry"
	if body.ExpiryHeight != 0 {
		expiry = fmt.Sprintf("valid up to height %d", body.ExpiryHeight)
	}
	return fmt.Sprintf("%s on chain %s (nonce %d, %s), signed by %s", what, body.ChainId, body.Nonce, expiry, strings.Join(signers, ", ")), nil
}

// Validators returns the validator set of the latest block, from a light
// block the admin's light client verified (when verifying), and its height.
// Changes committed at height h show from h+2, as CometBFT applies them.
func (a *Admin) Validators(ctx context.Context) (int64, *cmttypes.ValidatorSet, error) {
	resp, err := a.gw.GetLightBlock(ctx, &byzlogv1.LightBlockRequest{})
	if err != nil {
		return 0, nil, fmt.Errorf("latest light block: %w", err)
	}
	var pb cmtproto.LightBlock
	if err := pb.Unmarshal(resp.LightBlock); err != nil {
		return 0, nil, fmt.Errorf("latest light block does not decode: %w", err)
	}
	lb, err := cmttypes.LightBlockFromProto(&pb)
	if err != nil {
		return 0, nil, fmt.Errorf("latest light block: %w", err)
	}
	if err := lb.ValidateBasic(a.trust.ChainID()); err != nil {
		return 0, nil, fmt.Errorf("latest light block: %w", err)
	}
	if a.verify != nil {
		if lb, err = a.verify.Header(ctx, lb.Height); err != nil {
			return 0, nil, err
		}
	}
	return lb.Height, lb.ValidatorSet, nil
}

// Apply signs op (with the cosigners) and submits it, as the typed methods
// do: for a caller that builds operations itself.
func (a *Admin) Apply(ctx context.Context, op proto.Message) (int64, error) { return a.do(ctx, op) }
