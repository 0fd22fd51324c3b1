package pipeline

import (
	"testing"
	"time"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// TestChainID is the chain id of StartTestGateway's chain.
const TestChainID = testChainID

// StartTestGateway runs a gateway over a one-node test chain (byzlog's real
// state machine on an in-memory store, a block every 20 ms) with topics,
// for the faces' tests in other packages, until the test ends.
func StartTestGateway(t *testing.T, topics ...*byzlogv1.TopicState) *Gateway {
	t.Helper()
	c := newTestChain(t, topics...)
	runChain(t, c)
	return startGateway(t, c, nil)
}

// StartTestGateways runs n gateways over one test chain with topics, as
// StartTestGateway does one.
func StartTestGateways(t *testing.T, n int, topics ...*byzlogv1.TopicState) []*Gateway {
	t.Helper()
	c := newTestChain(t, topics...)
	runChain(t, c)
	gs := make([]*Gateway, n)
	for i := range gs {
		gs[i] = startGateway(t, c, nil)
	}
	return gs
}

// The faces' tests (grpcface_test.go, httpface_test.go, kafka_*_test.go)
// run in package pipeline_test, on the test chain below.

// TestAdminKey is the test chain's genesis admin key.
var TestAdminKey = testAdminKey

// TestChain is the in-memory test chain (chain_test.go).
type TestChain = testChain

// NewTestChain is a one-node test chain holding topics.
func NewTestChain(t *testing.T, topics ...*byzlogv1.TopicState) *TestChain {
	return newTestChain(t, topics...)
}

// Height is the test chain's last block.
func (c *TestChain) Height() int64 { return c.height() }

// CommittedTxs counts the transactions of every block so far.
func (c *TestChain) CommittedTxs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, b := range c.blocks {
		n += len(b.Data.Txs)
	}
	return n
}

// RunTestChain makes a block every 20 ms until the test ends.
func RunTestChain(t *testing.T, c *TestChain) { runChain(t, c) }

// StartGatewayOn runs a gateway over c, its config changed by edit (may be
// nil), until the test ends.
func StartGatewayOn(t *testing.T, c *TestChain, edit func(*Config)) *Gateway {
	return startGateway(t, c, edit)
}

// Freeze stops (on) or resumes the chain's blocks.
func (c *testChain) Freeze(on bool) { c.freeze(on) }

// MempoolLen is how many transactions wait for a block.
func (c *testChain) MempoolLen() int { return c.mempoolLen() }

// TestProducer signs batches with a key named for the test.
type TestProducer = testProducer

// NewTestProducer is a producer whose key is derived from name.
func NewTestProducer(name string) TestProducer { return newTestProducer(name) }

// OneRecord is a signed one-record batch.
func (p testProducer) OneRecord(t *testing.T, topic string, seq uint64, value string) *byzlogv1.SignedBatch {
	return p.batch(t, topic, seq, value)
}

// StartTopics are the topics the tests start with.
func StartTopics() []*byzlogv1.TopicState { return testTopics() }

// WaitFor polls cond until it holds or d passes.
func WaitFor(d time.Duration, cond func() bool) bool { return waitFor(d, cond) }
