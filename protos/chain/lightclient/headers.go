package lightclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cometbft/cometbft/light"
	"github.com/cometbft/cometbft/light/provider"
	"github.com/cometbft/cometbft/light/store"
	dbs "github.com/cometbft/cometbft/light/store/db"
	cmttypes "github.com/cometbft/cometbft/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/protos/chain/receipt"
)

// Config configures Headers.
type Config struct {
	Root receipt.Root
	// TrustingPeriod bounds how old a trusted header may be (CometBFT's
	// light client refuses to verify from one older; default 168h).
	TrustingPeriod time.Duration
	// Sequential verifies every header between the root and the one asked
	// for (the indexer, which reads them all anyway); otherwise the light
	// client skips ahead while a third of the trusted power still signs.
	Sequential bool
	// CrossCheck compares every new header with the other providers, as
	// witnesses (the indexer's, which are independent nodes). Without it
	// each provider is its own witness and the others only take over when
	// it fails: gateways relaying the same nodes are no independent
	// witnesses, and one gateway down must not stop verification. Forks
	// need more than a third of the validators faulty, beyond byzlog's
	// fault model; signatures are checked either way.
	CrossCheck bool
	Log        zerolog.Logger
	// Errors counts the light client's errors and the providers it drops;
	// nil: not counted.
	Errors prometheus.Counter
}

// Headers verifies headers with CometBFT's light client from a root of
// trust. The first provider is the primary, every one in turn taking its
// place when the client gives up on it; with Config.CrossCheck the others
// are its witnesses. Safe for concurrent use; calls are serialized.
type Headers struct {
	cfg       Config
	providers []provider.Provider

	mu      sync.Mutex
	store   store.Store
	lc      *light.Client
	root    receipt.Root // resolved: a height and hash
	trusted bool         // the store holds headers verified from the root
	next    int          // the primary of the next client built
}

// NewHeaders verifies headers served by providers (at least one).
func NewHeaders(cfg Config, providers ...provider.Provider) (*Headers, error) {
	if err := cfg.Root.Validate(); err != nil {
		return nil, err
	}
	if len(providers) == 0 {
		return nil, errors.New("verify headers: no source of light blocks")
	}
	if cfg.TrustingPeriod == 0 {
		cfg.TrustingPeriod = receipt.DefaultTrustingPeriod
	}
	if cfg.Errors == nil {
		cfg.Errors = prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"})
	}
	return &Headers{cfg: cfg, providers: providers, store: dbs.New(newLightDB(), cfg.Root.ChainID)}, nil
}

// Root is the height of the root of trust (0 before a genesis root is
// resolved).
func (h *Headers) Root() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.root.Height != 0 {
		return h.root.Height
	}
	return h.cfg.Root.Height
}

// ChainID is the chain of the root of trust.
func (h *Headers) ChainID() string { return h.cfg.Root.ChainID }

// Verify returns the header at height, verified.
func (h *Headers) Verify(ctx context.Context, height int64) (*cmttypes.LightBlock, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lc, err := h.client(ctx)
	if err != nil {
		return nil, err
	}
	lb, err := lc.VerifyLightBlockAtHeight(ctx, height, time.Now())
	if err != nil {
		// The client drops providers it has given up on; start afresh from
		// the trusted store on the next call.
		h.lc = nil
		return nil, fmt.Errorf("verify header %d: %w", height, err)
	}
	return lb, nil
}

// client returns the light client, building it when there is none.
func (h *Headers) client(ctx context.Context) (*light.Client, error) {
	if h.lc != nil {
		return h.lc, nil
	}
	if h.root.Height == 0 {
		r, err := h.cfg.Root.Resolve(ctx, h.providers)
		if err != nil {
			return nil, err
		}
		h.root = r
	}
	var errs []error
	for i := range h.providers {
		k := (h.next + i) % len(h.providers)
		var witnesses []provider.Provider
		for j, p := range h.providers {
			if j != k && h.cfg.CrossCheck {
				witnesses = append(witnesses, p)
			}
		}
		if len(witnesses) == 0 {
			witnesses = []provider.Provider{h.providers[k]}
		}
		opts := []light.Option{
			light.PruningSize(1000), light.MaxRetryAttempts(2),
			// A lagging witness costs 2×drift + lag of waiting: keep it short.
			light.MaxClockDrift(receipt.MaxClockDrift), light.MaxBlockLag(2 * time.Second),
			light.Logger(lightLogger{log: h.cfg.Log, errors: h.cfg.Errors}),
		}
		if h.cfg.Sequential {
			opts = append(opts, light.SequentialVerification())
		}
		var lc *light.Client
		var err error
		if h.trusted {
			// Rebuilt after the client gave up on its providers: go on from
			// the headers it verified (starting again from the root would
			// roll them back and verify the whole chain again).
			lc, err = light.NewClientFromTrustedStore(h.cfg.Root.ChainID, h.cfg.TrustingPeriod, h.providers[k], witnesses, h.store, opts...)
		} else {
			lc, err = light.NewClient(ctx, h.cfg.Root.ChainID,
				light.TrustOptions{Period: h.cfg.TrustingPeriod, Height: h.root.Height, Hash: h.root.Hash},
				h.providers[k], witnesses, h.store, opts...)
		}
		h.next = (k + 1) % len(h.providers)
		if err == nil {
			h.lc, h.trusted = lc, true
			return lc, nil
		}
		errs = append(errs, fmt.Errorf("primary %s: %w", h.providers[k], err))
		if ctx.Err() != nil {
			break
		}
		h.cfg.Errors.Inc()
		h.cfg.Log.Warn().Str("source", fmt.Sprint(h.providers[k])).Err(err).Msg("light client could not start with this source as primary; trying the next")
	}
	return nil, fmt.Errorf("start the light client: %w", errors.Join(errs...))
}
