package indexer

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/indexer/verify"
	"github.com/byzlog/byzlog/protos/wire"
)

// Progress reports. An indexer registered on the chain (SetIndexer, or
// genesis "indexers") signs, every ProgressInterval, the height it has
// published through with its ProgressKey and sends it to the nodes: they
// prune no block above it (core.RetainHeight), so an indexer that stops
// finds every block it needs when it comes back. The height reported is the
// one JetStream acknowledged ProgressDelay ago, not the newest: a NATS
// server that loses its power loses what it had not synced yet, and the
// indexer publishes those blocks again from the chain (package reconcile), so
// they must still be there.
//
// With each report the indexer also keeps the header it reported, signed
// with the same key, in its cursor bucket (root.<chain-id>.<id>): a restart
// takes it as its root of trust (SavedRoot) instead of genesis, whose
// height-1 header pruned nodes no longer serve.

// progressSample is the acknowledged height at a time.
type progressSample struct {
	at     time.Time
	height int64
}

// reportProgress sends progress reports until ctx ends.
func (i *Indexer) reportProgress(ctx context.Context, kv jetstream.KeyValue) {
	signer := wire.NewSigner(i.cfg.ProgressKey, i.cfg.ChainID)
	tick := time.NewTicker(i.cfg.ProgressInterval)
	defer tick.Stop()
	var samples []progressSample
	var reported int64
	for {
		now := time.Now()
		samples = append(samples, progressSample{now, i.acked.Load()})
		// The newest sample at least ProgressDelay old is what may be
		// reported; older ones are no longer needed.
		k := -1
		for j, s := range samples {
			if now.Sub(s.at) >= i.cfg.ProgressDelay {
				k = j
			}
		}
		if k >= 0 {
			h := samples[k].height
			samples = samples[k:]
			if h > reported && h > 0 {
				if err := i.report(ctx, signer, kv, h); err != nil {
					if ctx.Err() != nil {
						return
					}
					i.log.Warn().Err(err).Int64("published_height", h).Msg("could not report progress; will try again")
				} else {
					reported = h
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// report saves the signed root at h and sends the report of h to the
// first node that takes it.
func (i *Indexer) report(ctx context.Context, signer *wire.Signer, kv jetstream.KeyValue, h int64) error {
	lb, err := i.v.Header(ctx, h)
	if err != nil {
		return err
	}
	if err := saveRoot(ctx, kv, i.cfg, verify.Trust{Height: h, Hash: lb.Hash()}); err != nil {
		return fmt.Errorf("save the root of trust: %w", err)
	}
	tx, err := signer.ProgressTx(h)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range i.v.Nodes() {
		res, err := n.RPC.BroadcastTxSync(ctx, tx)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", n.Addr, err))
			continue
		case res.Code == uint32(wire.CodeBadProgress):
			// The chain has a later report (an earlier run's): nothing to do.
			i.log.Debug().Str("node", n.Addr).Str("log", res.Log).Msg("progress reported already")
		case res.Code != 0:
			// A refusal is the same on every honest node: say it and stop.
			return fmt.Errorf("%s refused the report: %s: %s", n.Addr, wire.Code(res.Code), res.Log)
		}
		i.m.progress.Set(float64(h))
		i.log.Debug().Int64("published_height", h).Str("node", n.Addr).Msg("progress reported")
		return nil
	}
	return errors.Join(errs...)
}

// savedRoot is the signed root of trust kept in the cursor bucket.
type savedRoot struct {
	ChainID   string `json:"chain_id"`
	Height    int64  `json:"height"`
	Hash      string `json:"hash"`
	Signature string `json:"signature"`
}

func rootKey(chainID, id string) string { return "root." + chainID + "." + id }

func rootBody(chainID string, t verify.Trust) []byte {
	return []byte("byzlog indexer root\x00" + chainID + "\x00" + strconv.FormatInt(t.Height, 10) + "\x00" + hex.EncodeToString(t.Hash))
}

func saveRoot(ctx context.Context, kv jetstream.KeyValue, cfg Config, t verify.Trust) error {
	sig := ed25519.Sign(cfg.ProgressKey, rootBody(cfg.ChainID, t))
	b, err := json.Marshal(savedRoot{ChainID: cfg.ChainID, Height: t.Height, Hash: hex.EncodeToString(t.Hash), Signature: hex.EncodeToString(sig)})
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, rootKey(cfg.ChainID, cfg.ID), b)
	return err
}

// SavedRoot reads the root of trust the indexer id saved with its last
// progress report, checked against key (its progress key's public half):
// NATS holds it, and a NATS that lies cannot forge one. ok is false when
// there is none.
func SavedRoot(ctx context.Context, nc *nats.Conn, chainID, id string, key ed25519.PublicKey) (t verify.Trust, ok bool, err error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return verify.Trust{}, false, err
	}
	kv, err := js.KeyValue(ctx, layout.CursorBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return verify.Trust{}, false, nil
	}
	if err != nil {
		return verify.Trust{}, false, fmt.Errorf("cursor bucket %s: %w", layout.CursorBucket, err)
	}
	e, err := kv.Get(ctx, rootKey(chainID, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return verify.Trust{}, false, nil
	}
	if err != nil {
		return verify.Trust{}, false, fmt.Errorf("read %s: %w", rootKey(chainID, id), err)
	}
	var r savedRoot
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return verify.Trust{}, false, fmt.Errorf("%s holds %.64q: %v", rootKey(chainID, id), e.Value(), err)
	}
	hash, herr := hex.DecodeString(r.Hash)
	sig, serr := hex.DecodeString(r.Signature)
	t = verify.Trust{Height: r.Height, Hash: hash}
	if herr != nil || serr != nil || len(hash) != 32 || r.ChainID != chainID || r.Height < 1 || !wire.Verify(key, rootBody(chainID, t), sig) {
		return verify.Trust{}, false, fmt.Errorf("%s is not a root of chain %s signed by the progress key %x: someone with write access to NATS changed it; delete it to start from genesis", rootKey(chainID, id), chainID, key)
	}
	return t, true, nil
}
