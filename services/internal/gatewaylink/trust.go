package gatewaylink

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/byzlog/byzlog/gateway/client"
)

// LocalnetGenesis is the genesis of `make run`'s localnet: the default
// root of trust, so the quick start verifies receipts without a flag.
const LocalnetGenesis = "run/localnet/node0/config/genesis.json"

// Trust are the client's root of trust: it never learns the chain
// from a gateway.
type Trust struct {
	Genesis     string
	chainID     string
	trustHeight int64
	trustHash   string
	noVerify    bool
}

// Add adds --genesis (defaulting to the localnet's), --chain-id,
// --trust-height, --trust-hash and --no-verify.
func (t *Trust) Add(f *pflag.FlagSet) {
	t.Genesis = LocalnetGenesis
	f.StringVar(&t.Genesis, "genesis", t.Genesis, "the chain's genesis.json: the chain id and the root of trust receipts are verified from")
	f.StringVar(&t.chainID, "chain-id", "", "with --trust-height and --trust-hash, or with --no-verify: the chain id (instead of --genesis)")
	f.Int64Var(&t.trustHeight, "trust-height", 0, "root of trust: a header's height (with --trust-hash and --chain-id, instead of --genesis)")
	f.StringVar(&t.trustHash, "trust-hash", "", "root of trust: the hex hash of the header at --trust-height")
	f.BoolVar(&t.noVerify, "no-verify", false, "take receipts on the gateway's word, unverified (a lying gateway can acknowledge dropped records); the chain id still comes from --genesis or --chain-id")
}

// Root builds the client's Trust from the flags.
func (t *Trust) Root(f *pflag.FlagSet) (client.Trust, error) {
	byHash := t.trustHeight != 0 || t.trustHash != ""
	switch {
	case byHash && f.Changed("genesis"):
		return client.Trust{}, errors.New("give either --genesis or --trust-height with --trust-hash, not both")
	case byHash && (t.trustHeight <= 0 || t.trustHash == "" || t.chainID == ""):
		return client.Trust{}, errors.New("--trust-height needs --trust-hash and --chain-id")
	case byHash:
		tr, err := client.TrustHeader(t.chainID, t.trustHeight, t.trustHash)
		if err != nil {
			return client.Trust{}, fmt.Errorf("--trust-hash: %w", err)
		}
		if t.noVerify {
			return client.TrustGateway(t.chainID), nil
		}
		return tr, nil
	case t.noVerify && t.chainID != "" && !f.Changed("genesis"):
		return client.TrustGateway(t.chainID), nil
	}
	tr, err := client.TrustGenesis(t.Genesis)
	if err != nil {
		return client.Trust{}, fmt.Errorf("--genesis: %w (give the chain's genesis.json, or --chain-id with --trust-height and --trust-hash)", err)
	}
	if t.chainID != "" && t.chainID != tr.ChainID() {
		return client.Trust{}, fmt.Errorf("--chain-id %q, but --genesis is of chain %q", t.chainID, tr.ChainID())
	}
	if t.noVerify {
		return client.TrustGateway(tr.ChainID()), nil
	}
	return tr, nil
}
