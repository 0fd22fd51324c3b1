package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/byzlog/byzlog/indexer/layout"
	"github.com/byzlog/byzlog/services/internal/localnet"
	"github.com/byzlog/byzlog/services/lab/powerfs"
)

// Disks are the cluster's power-loss file systems (powerfs), by what they
// hold: "node0".. (a validator's CometBFT home and app data) and "nats"
// (the JetStream store).
type Disks map[string]*powerfs.FS

// natsDisk is the JetStream store's disk.
const natsDisk = "nats"

// MountDisks moves each validator's home and the NATS JetStream store of
// n onto a powerfs backed by a directory under backing. Call it after
// n.Create and before anything starts.
func MountDisks(n *localnet.Net, backing string) (d Disks, err error) {
	d = Disks{}
	defer func() {
		if err != nil {
			_ = d.Unmount()
		}
	}()
	mount := func(name, dir string) error {
		under := filepath.Join(backing, name)
		if err := os.MkdirAll(filepath.Dir(under), 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(dir); err == nil {
			if err := os.Rename(dir, under); err != nil {
				return err
			}
		} else if err := os.MkdirAll(under, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		fs, err := powerfs.Mount(under, dir)
		if err != nil {
			return err
		}
		d[name] = fs
		return nil
	}
	for i := 0; i < n.Config().Validators; i++ {
		if err := mount(fmt.Sprintf("node%d", i), n.Home(i)); err != nil {
			return d, fmt.Errorf("put node%d on powerfs: %w", i, err)
		}
	}
	if err := mount(natsDisk, n.NATSStoreDir()); err != nil {
		return d, fmt.Errorf("put the JetStream store on powerfs: %w", err)
	}
	return d, nil
}

// Unmount unmounts every disk (the processes on them must be stopped).
func (d Disks) Unmount() error {
	var errs []error
	for name, fs := range d {
		if err := fs.Unmount(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// powerLoss drops the unsynced writes of the named disks, at once.
func (c *Cluster) powerLoss(names ...string) (string, error) {
	if c.Disks == nil {
		return "", errors.New("the cluster's disks are not on powerfs")
	}
	var mu sync.Mutex
	var errs []error
	what := ""
	var wg sync.WaitGroup
	for _, name := range names {
		fs := c.Disks[name]
		if fs == nil {
			return "", fmt.Errorf("no powerfs disk %q", name)
		}
		wg.Go(func() {
			files, err := fs.PowerLoss()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			what += fmt.Sprintf(" %s:%d", name, files)
		})
	}
	wg.Wait()
	return "unsynced files lost" + what, errors.Join(errs...)
}

// killNodes kills validators' cometbft and app, all at once.
func (c *Cluster) killNodes(nodes []int) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for k, i := range nodes {
		wg.Go(func() { errs[k] = c.Net.KillNode(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// powerFail cuts the power of validators nodes: killed at once, their
// unsynced writes dropped; heal starts them again.
func powerFail(ctx context.Context, c *Cluster, nodes []int) (string, func(context.Context) error, error) {
	if err := c.killNodes(nodes); err != nil {
		return "", nil, err
	}
	names := make([]string, len(nodes))
	for k, i := range nodes {
		names[k] = fmt.Sprintf("node%d", i)
	}
	lost, err := c.powerLoss(names...)
	if err != nil {
		return "", nil, err
	}
	c.note(lost)
	return fmt.Sprint(names), func(ctx context.Context) error {
		for _, i := range nodes {
			if err := c.Net.StartNode(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// streamHeld is how many messages the stream of the phase's topic holds,
// as NATS's indexer user reads it: what a power loss of NATS cost is the
// difference before and after, whatever the indexer then publishes again.
func streamHeld(ctx context.Context, c *Cluster) (uint64, error) {
	opts, err := c.Net.NATSOptions(c.Services, localnet.NATSIndexerUser)
	if err != nil {
		return 0, err
	}
	nc, err := nats.Connect(c.Services.NATSURL(), append(opts, nats.MaxReconnects(0))...)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, layout.StreamName(c.topic))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.Msgs, nil
}

// powerNATS cuts NATS's power and restarts it; the note says how many
// acknowledged messages the topic's stream lost, read straight after the
// restart (before the indexer can publish them again).
func powerNATS(ctx context.Context, c *Cluster) (string, func(context.Context) error, error) {
	before, berr := streamHeld(ctx, c)
	if err := c.Net.Kill(c.Services, localnet.NATSName); err != nil {
		return "", nil, err
	}
	lost, err := c.powerLoss(natsDisk)
	if err != nil {
		return "", nil, err
	}
	return localnet.NATSName, func(ctx context.Context) error {
		if err := c.Net.Start(ctx, c.Services, localnet.NATSName); err != nil {
			return err
		}
		after, aerr := streamHeld(ctx, c)
		if err := errors.Join(berr, aerr); err != nil {
			c.note(fmt.Sprintf("%s; stream not read: %v", lost, err))
			return nil
		}
		c.note(fmt.Sprintf("%s; stream %s held %d messages before, %d after the restart", lost, layout.StreamName(c.topic), before, after))
		return nil
	}, nil
}
