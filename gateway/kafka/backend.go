package kafka

import (
	"context"
	"crypto/ed25519"

	"github.com/byzlog/byzlog/gateway"
	"github.com/byzlog/byzlog/gateway/kafka/sasl"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Backend is what the face needs of the gateway; *gateway.Gateway is one.
type Backend interface {
	ChainID() string
	Produce(ctx context.Context, batch *byzlogv1.SignedBatch, ack byzlogv1.Ack) (*byzlogv1.Receipt, error)
	// Submit returns once the batch's place among its producer's batches
	// is fixed; the result's Wait gives the answer.
	Submit(ctx context.Context, batch *byzlogv1.SignedBatch, ack byzlogv1.Ack) (*gateway.Submitted, error)
	NextSequence(ctx context.Context, key ed25519.PublicKey, topic string, partition uint32) (uint64, error)
	Topics(ctx context.Context) ([]*byzlogv1.TopicInfo, error)
	Records(ctx context.Context, req *byzlogv1.RecordsRequest) (*byzlogv1.RecordsResponse, error)
	// Limits are the chain's limits.
	Limits(ctx context.Context) (*byzlogv1.Limits, error)
	// Height is the highest block a healthy node has.
	Height() int64
	Group(ctx context.Context, group string) (*byzlogv1.GroupOffsets, error)
	Nonce(ctx context.Context, key ed25519.PublicKey) (uint64, error)
	// CommitOffsets and Admin wait for the commit; accepted (may be nil)
	// is called when a node's mempool has taken the transaction.
	CommitOffsets(ctx context.Context, req *byzlogv1.CommitOffsets, accepted func()) (gateway.Committed, error)
	Admin(ctx context.Context, req *byzlogv1.AdminRequest, accepted func()) (gateway.Committed, error)
}

var _ Backend = (*gateway.Gateway)(nil)

// Principal is who a connection acts as: the key that signs its batches.
type Principal struct {
	Name  string
	Key   ed25519.PrivateKey
	Admin bool
}

// Authenticator runs SASL exchanges (gateway/kafka/sasl is one).
type Authenticator interface {
	// Mechanisms lists the SASL mechanisms offered, in a fixed order.
	Mechanisms() []string
	// Start begins an exchange with mechanism.
	Start(mechanism string) (Session, error)
}

// Session is one SASL exchange.
type Session interface {
	// Step takes the client's next message and returns the reply; done
	// says the exchange is over.
	Step(msg []byte) (reply []byte, done bool, err error)
	// Principal is the authenticated principal once done without error.
	Principal() Principal
}

// SASL authenticates against a users file.
func SASL(u *sasl.Users) Authenticator { return saslUsers{u} }

type saslUsers struct{ u *sasl.Users }

func (s saslUsers) Mechanisms() []string { return s.u.Mechanisms() }

func (s saslUsers) Start(mechanism string) (Session, error) {
	sess, err := s.u.Start(mechanism)
	if err != nil {
		return nil, err
	}
	return saslSession{sess}, nil
}

type saslSession struct{ s sasl.Session }

func (s saslSession) Step(msg []byte) ([]byte, bool, error) { return s.s.Step(msg) }

func (s saslSession) Principal() Principal {
	u := s.s.User()
	return Principal{Name: u.Name, Key: u.Key, Admin: u.Admin}
}
