package gateway

import (
	"testing"

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
