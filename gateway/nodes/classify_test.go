package nodes

import (
	"errors"
	"fmt"
	"testing"

	rpctypes "github.com/cometbft/cometbft/rpc/jsonrpc/types"
)

// TestClassify: the CometBFT errors a broadcast can fail with, as the
// JSON-RPC client and the form path (an *RPCError) give them, and what
// each means.
func TestClassify(t *testing.T) {
	rpcErr := func(data string) error {
		return &rpctypes.RPCError{Code: -32603, Message: "Internal error", Data: data}
	}
	for _, tc := range []struct {
		err  error
		want Failure
	}{
		{rpcErr("tx already exists in cache"), AlreadyHeld},
		{rpcErr("tx already seen"), AlreadyHeld},
		{fmt.Errorf("post broadcast_tx_sync: %w", rpcErr("tx already exists in cache")), AlreadyHeld},
		{rpcErr("mempool is full: number of txs 5000 (max: 5000), total txs bytes 1048576 (max: 1073741824)"), MempoolFull},
		{rpcErr("tx too large. Max size is 1048576, but got 2097152"), Broken},
		{&rpctypes.RPCError{Code: -32600, Message: "Invalid Request"}, Broken},
		{errors.New("post broadcast_tx_sync: dial tcp 127.0.0.1:26657: connect: connection refused"), Broken},
		{errors.New("response too large"), Broken},
		{nil, Broken},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
