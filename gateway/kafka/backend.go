package kafka

import (
	"context"
	"crypto/ed25519"

	"github.com/byzlog/byzlog/gateway/kafka/sasl"
	"github.com/byzlog/byzlog/gateway/pipeline"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Backend is what the face needs of the gateway, in five small parts a
// request kind each uses: Over(g) makes one of a *pipeline.Gateway.
type Backend struct {
	// ChainID is the chain the face signs for (the gateway learns it from
	// its nodes, so it is asked each time).
	ChainID func() string
	Log     Log
	Reads   Reads
	Groups  Groups
	Admin   Admin
	// Txns is nil where Kafka transactions are not served.
	Txns Txns
}

// Over is the Backend of a gateway: every part is g.
func Over(g *pipeline.Gateway) Backend {
	return Backend{ChainID: g.ChainID, Log: g, Reads: g, Groups: g, Admin: g, Txns: g}
}

// Log appends batches (Produce and the large-record chunks).
type Log interface {
	// Submit returns once the batch's place among its producer's batches
	// is fixed; the result's Wait gives the answer.
	Submit(ctx context.Context, batch *byzlogv1.SignedBatch, ack byzlogv1.Ack) (*pipeline.Submitted, error)
	Produce(ctx context.Context, batch *byzlogv1.SignedBatch, ack byzlogv1.Ack) (*byzlogv1.Receipt, error)
	NextSequence(ctx context.Context, key ed25519.PublicKey, topic string, partition uint32) (uint64, error)
}

// Reads answers what the chain holds (Metadata, Fetch, ListOffsets).
type Reads interface {
	Topics(ctx context.Context) ([]*byzlogv1.TopicInfo, error)
	Records(ctx context.Context, req *byzlogv1.RecordsRequest) (*byzlogv1.RecordsResponse, error)
	// Limits are the chain's limits.
	Limits(ctx context.Context) (*byzlogv1.Limits, error)
	// Height is the highest block a healthy node has.
	Height() int64
}

// Groups reads and commits consumer-group offsets.
type Groups interface {
	Group(ctx context.Context, group string) (*byzlogv1.GroupOffsets, error)
	// Groups lists a page of the groups with committed offsets, from after
	// startAfter (limit 0: the chain's default page).
	Groups(ctx context.Context, startAfter string, limit uint32) (*byzlogv1.GroupList, error)
	// Rules is the chain's rules version in force.
	Rules(ctx context.Context) (*byzlogv1.Rules, error)
	Nonce(ctx context.Context, key ed25519.PublicKey) (uint64, error)
	// CommitOffsets waits for the commit; accepted (may be nil) is called
	// when a node's mempool has taken the transaction.
	CommitOffsets(ctx context.Context, req *byzlogv1.CommitOffsets, accepted func()) (pipeline.Committed, error)
}

// Admin submits admin requests (CreateTopics, DeleteTopics) and waits for
// the commit; accepted (may be nil) is called when a node's mempool has
// taken the transaction.
type Admin interface {
	Admin(ctx context.Context, req *byzlogv1.AdminRequest, accepted func()) (pipeline.Committed, error)
}

// Txns submits Kafka transaction steps and reads transactional ids and
// their producers' sequences.
type Txns interface {
	// Txn waits for the step's commit; accepted (may be nil) is called
	// when a node's mempool has taken the transaction.
	Txn(ctx context.Context, req *byzlogv1.TxnRequest, accepted func()) (pipeline.Committed, error)
	Txns(ctx context.Context, req *byzlogv1.TxnsRequest) (*byzlogv1.TxnList, error)
	// ProducerState is the next sequence of a producer in a partition
	// (req.Kafka names a Kafka producer id and epoch), as f+1 nodes agree.
	ProducerState(ctx context.Context, req *byzlogv1.ProducerRequest) (uint64, error)
}

var (
	_ Txns   = (*pipeline.Gateway)(nil)
	_ Log    = (*pipeline.Gateway)(nil)
	_ Reads  = (*pipeline.Gateway)(nil)
	_ Groups = (*pipeline.Gateway)(nil)
	_ Admin  = (*pipeline.Gateway)(nil)
)

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

// Describe lists the users file's users and their SCRAM iterations.
func (s saslUsers) Describe() []sasl.Described { return s.u.Describe() }

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
