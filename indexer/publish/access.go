package publish

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/byzlog/byzlog/abciapp/core"
	"github.com/byzlog/byzlog/indexer/natsauth"
)

// Authz makes NATS's permissions follow the chain's topic configs: the
// accounts file is rendered (natsauth) into Spec.Conf and Reload has the
// server apply it, before the stream of a topic whose read access changed
// is made. Reload returns once the server runs with the new file.
type Authz struct {
	Spec   natsauth.Spec
	Reload func(context.Context) error
}

// Access is who may read each topic, as the verified blocks say it: kept
// in the cursor bucket beside the cursor, so a restarted indexer renders
// the same permissions before it publishes anything.
type Access struct {
	authz  *Authz // nil: only kept
	kv     jetstream.KeyValue
	key    string
	log    zerolog.Logger
	topics map[string][]ed25519.PublicKey // topic -> readers (empty: open)
}

// accessState is access's value in the bucket.
type accessState struct {
	// Topics maps each topic to its readers' hex keys ([] for open).
	Topics map[string][]string `json:"topics"`
}

// NewAccess loads the topics' read access, or starts from genesis's
// topics when none is kept, and with authz renders it at once.
func NewAccess(ctx context.Context, kv jetstream.KeyValue, cfg Config, log zerolog.Logger) (*Access, error) {
	a := &Access{authz: cfg.Authz, kv: kv, key: "access." + cfg.ChainID + "." + cfg.ID, log: log, topics: map[string][]ed25519.PublicKey{}}
	e, err := kv.Get(ctx, a.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		for _, t := range cfg.GenesisTopics {
			a.topics[t.Name] = readers(t.Config)
		}
	case err != nil:
		return nil, fmt.Errorf("read topic access %s: %w", a.key, err)
	default:
		var st accessState
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			return nil, fmt.Errorf("topic access %s holds %.100q: %w", a.key, e.Value(), err)
		}
		for name, keys := range st.Topics {
			for _, k := range keys {
				b, err := hex.DecodeString(k)
				if err != nil || len(b) != ed25519.PublicKeySize {
					return nil, fmt.Errorf("topic access %s: topic %q reader %q is not a hex ed25519 key", a.key, name, k)
				}
				a.topics[name] = append(a.topics[name], b)
			}
			if a.topics[name] == nil {
				a.topics[name] = []ed25519.PublicKey{}
			}
		}
	}
	if err := a.render(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

func readers(c interface{ GetReaders() [][]byte }) []ed25519.PublicKey {
	out := []ed25519.PublicKey{}
	for _, k := range c.GetReaders() {
		out = append(out, ed25519.PublicKey(k))
	}
	return out
}

// Apply takes a block's topic changes: when one changes who may read, the
// new access is kept and rendered before the block's streams are made.
func (a *Access) Apply(ctx context.Context, changes []core.TopicChange) error {
	changed := false
	for _, c := range changes {
		old, had := a.topics[c.Name]
		switch {
		case c.Deleted && had:
			delete(a.topics, c.Name)
			changed = true
		case c.Deleted:
		case !had || !slices.EqualFunc(old, readers(c.Config), func(x, y ed25519.PublicKey) bool { return x.Equal(y) }):
			a.topics[c.Name] = readers(c.Config)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	st := accessState{Topics: map[string][]string{}}
	for name, keys := range a.topics {
		hx := []string{}
		for _, k := range keys {
			hx = append(hx, hex.EncodeToString(k))
		}
		st.Topics[name] = hx
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if _, err := a.kv.Put(ctx, a.key, b); err != nil {
		return fmt.Errorf("keep topic access %s: %w", a.key, err)
	}
	return a.render(ctx)
}

// render writes the accounts file and has the server reload it.
func (a *Access) render(ctx context.Context) error {
	if a.authz == nil {
		return nil
	}
	ts := make([]natsauth.Topic, 0, len(a.topics))
	restricted := 0
	for name, keys := range a.topics {
		ts = append(ts, natsauth.Topic{Name: name, Readers: keys})
		if len(keys) > 0 {
			restricted++
		}
	}
	if err := natsauth.Write(a.authz.Spec, ts); err != nil {
		return err
	}
	start := time.Now()
	if err := a.authz.Reload(ctx); err != nil {
		return err
	}
	a.log.Info().Int("topics", len(ts)).Int("restricted", restricted).Str("conf", a.authz.Spec.Conf).Dur("reload", time.Since(start)).Msg("NATS permissions follow the topics' readers")
	return nil
}
