package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/protos/wire"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// pruneRetainBlocks is the apps' --retain-blocks under prune-indexer; they
// keep one snapshot (--snapshot-keep 1), so the oldest snapshot holds
// pruning back at most one snapshot interval.
const pruneRetainBlocks = 100

// pruneIndexer turns pruning on (every validator restarted in turn, the
// first time), kills the indexer, and returns the heal: once the chain has
// moved far enough on that the indexer's last report is what holds every
// node's pruning back (without it they would prune past where it stopped),
// every node must still serve the blocks after that report; then the
// indexer starts again.
func pruneIndexer(ctx context.Context, c *Cluster) (string, func(context.Context) error, error) {
	if c.Net.Config().RetainBlocks == 0 {
		c.Net.SetRetainBlocks(pruneRetainBlocks)
		c.Net.SetSnapshotKeep(1)
		for i := 0; i < c.validators(); i++ {
			if err := restartCaughtUp(ctx, c, i, c.Net.Config().App); err != nil {
				return "", nil, err
			}
		}
		c.note(fmt.Sprintf("every validator restarted with --retain-blocks %d --snapshot-keep 1", pruneRetainBlocks))
	}
	// Until the indexer has reported and a snapshot exists, nothing would
	// be pruned: wait for both (a young chain, when run alone).
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p, err := nodePruning(ctx, c, 0)
		if err != nil {
			return "", nil, err
		}
		if p.OldestSnapshot > 0 && len(p.Indexers) > 0 && p.Indexers[0].PublishedHeight > 0 {
			break
		}
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("after 3 minutes node0 has no snapshot or no indexer report yet: %v", p)
		}
		sleep(ctx, time.Second)
	}
	if err := c.Net.Kill(c.Services, localnet.IndexerName); err != nil {
		return "", nil, err
	}
	killedAt := maxCommitted(ctx, c)
	heal := func(ctx context.Context) error {
		if err := waitHeldByIndexer(ctx, c, killedAt); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := c.Net.WaitHeight(wctx, c.allNodes(), maxCommitted(ctx, c)+3, io.Discard)
		cancel()
		if err != nil {
			return err
		}
		if err := checkKeptForIndexer(ctx, c, killedAt); err != nil {
			return err
		}
		return c.Net.Start(ctx, c.Services, localnet.IndexerName)
	}
	return "indexer", heal, nil
}

// waitHeldByIndexer waits until every node's pruning is held by the
// stopped indexer alone (its retained blocks and its snapshot would let it
// prune past), so that a few blocks more make it act on that at a commit.
func waitHeldByIndexer(ctx context.Context, c *Cluster, killedAt int64) error {
	held := func() (bool, error) {
		for i := 0; i < c.validators(); i++ {
			p, err := nodePruning(ctx, c, i)
			if err != nil {
				return false, err
			}
			if p.HeldBy != "indexer "+localnet.IndexerID {
				return false, nil
			}
		}
		return true, nil
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		ok, err := held()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			p, _ := nodePruning(ctx, c, 0)
			return fmt.Errorf("4 minutes after the indexer stopped at %d, the nodes' pruning is still not held by it alone (node0: %v)", killedAt, p)
		}
		sleep(ctx, time.Second)
	}
}

// checkKeptForIndexer checks that no node prunes, or has pruned, past the
// stopped indexer's published height. The mark is read now: the indexer's
// last report may have committed after it was killed.
func checkKeptForIndexer(ctx context.Context, c *Cluster, killedAt int64) error {
	var published int64 = -1
	for i := 0; i < c.validators(); i++ {
		p, err := nodePruning(ctx, c, i)
		if err != nil {
			return err
		}
		for _, x := range p.Indexers {
			if x.Name == localnet.IndexerID {
				published = x.PublishedHeight
			}
		}
		if published < 0 {
			return fmt.Errorf("node%d: the network's indexer is not registered (%v)", i, p)
		}
		if p.RetainHeight > published {
			return fmt.Errorf("node%d prunes below %d, past the stopped indexer's published height %d (%s)", i, p.RetainHeight, published, p.HeldBy)
		}
		earliest, err := earliestHeight(ctx, c.Net, i)
		if err != nil {
			return err
		}
		if earliest > published {
			return fmt.Errorf("node%d's earliest block is %d, past the stopped indexer's published height %d", i, earliest, published)
		}
		c.note(fmt.Sprintf("node%d at %d keeps blocks from %d (held by %s, indexer stopped at %d, published %d; earliest block %d)", i, p.Height, p.RetainHeight, p.HeldBy, killedAt, published, earliest))
	}
	return nil
}

// nodePruning is node i's answer to /pruning.
func nodePruning(ctx context.Context, c *Cluster, i int) (*byzlogv1.Pruning, error) {
	cl, err := c.Net.Client(i)
	if err != nil {
		return nil, err
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := cl.ABCIQuery(qctx, wire.PathPruning, nil)
	if err != nil {
		return nil, fmt.Errorf("node%d %s: %w", i, wire.PathPruning, err)
	}
	if res.Response.Code != 0 {
		return nil, fmt.Errorf("node%d %s: %s", i, wire.PathPruning, res.Response.Log)
	}
	var p byzlogv1.Pruning
	if err := proto.Unmarshal(res.Response.Value, &p); err != nil {
		return nil, fmt.Errorf("node%d %s: %w", i, wire.PathPruning, err)
	}
	return &p, nil
}

// restartCaughtUp kills validator i, starts it on app binary bin and waits
// (a minute at most) until it has caught up with the others.
func restartCaughtUp(ctx context.Context, c *Cluster, i int, bin string) error {
	if err := c.Net.KillNode(i); err != nil {
		return err
	}
	if err := c.Net.StartNodeWith(ctx, i, bin, nil); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Net.WaitHeight(wctx, []int{i}, maxCommitted(ctx, c)+1, io.Discard); err != nil {
		return fmt.Errorf("node%d restarted on %s did not catch up: %w", i, bin, err)
	}
	return nil
}

// stateSyncOne wipes validator i and makes it join by state sync; the
// heal starts it and checks that its app restored a snapshot.
func stateSyncOne(ctx context.Context, c *Cluster, i int) (string, func(context.Context) error, error) {
	cfg := c.Net.Config()
	if cfg.SnapshotInterval == 0 {
		return "", nil, fmt.Errorf("statesync-one needs snapshots: the cluster was made with snapshot_interval 0")
	}
	// The first snapshot is served from height interval+StateRootLag.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	err := c.Net.WaitHeight(wctx, c.allNodes(), int64(cfg.SnapshotInterval)+wire.StateRootLag+2, io.Discard)
	cancel()
	if err != nil {
		return "", nil, fmt.Errorf("no snapshot yet: %w", err)
	}
	if err := c.Net.KillNode(i); err != nil {
		return "", nil, err
	}
	if err := c.Net.ResetNode(ctx, i); err != nil {
		return "", nil, err
	}
	if err := c.Net.StateSyncNode(ctx, i); err != nil {
		return "", nil, err
	}
	logPath := filepath.Join(c.Net.Home(i), "app.log")
	var from int64
	if st, err := os.Stat(logPath); err == nil {
		from = st.Size()
	}
	what := fmt.Sprintf("node%d", i)
	return what, func(ctx context.Context) error {
		if err := c.Net.StartNode(ctx, i); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := c.Net.WaitHeight(wctx, []int{i}, maxCommitted(ctx, c)+1, io.Discard); err != nil {
			return fmt.Errorf("%s did not catch up by state sync: %w", what, err)
		}
		b, err := os.ReadFile(logPath)
		if err != nil {
			return err
		}
		if int64(len(b)) < from || !strings.Contains(string(b[from:]), "snapshot restored") {
			return fmt.Errorf("%s caught up without restoring a snapshot (its app log says no \"snapshot restored\")", what)
		}
		c.note(what + " restored a snapshot")
		return nil
	}, nil
}

// joinPower is the fifth validator's power: a quarter of the set's total
// (one genesis validator's share), within the third of the power one block
// may move.
func joinPower(total int64) int64 { return max(1, total/4) }

// setValidatorPower gives the validator key power through the cluster's
// first gateway (power < 0: joinPower of the set's total) and returns the
// height the change committed at.
func setValidatorPower(ctx context.Context, c *Cluster, key []byte, power int64) (int64, error) {
	trust, err := c.Trust()
	if err != nil {
		return 0, err
	}
	transport, err := c.Transport()
	if err != nil {
		return 0, err
	}
	adm, err := client.NewAdmin(c.Services.GatewayAddr(0), c.AdminKey, trust, transport)
	if err != nil {
		return 0, err
	}
	defer adm.Close()
	if power < 0 {
		_, vs, err := adm.Validators(ctx)
		if err != nil {
			return 0, err
		}
		power = joinPower(vs.TotalVotingPower())
	}
	return adm.SetValidator(ctx, key, power)
}

// joinValidator adds a node by state sync, waits for it to catch up, and
// makes it a validator; the heal removes it and stops the node.
func joinValidator(ctx context.Context, c *Cluster) (string, func(context.Context) error, error) {
	if c.Net.Config().SnapshotInterval == 0 {
		return "", nil, fmt.Errorf("join-validator needs snapshots: the cluster was made with snapshot_interval 0")
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	err := c.Net.WaitHeight(wctx, c.allNodes(), int64(c.Net.Config().SnapshotInterval)+wire.StateRootLag+2, io.Discard)
	cancel()
	if err != nil {
		return "", nil, fmt.Errorf("no snapshot yet: %w", err)
	}
	i, err := c.Net.AddNode(ctx)
	if err != nil {
		return "", nil, err
	}
	what := fmt.Sprintf("node%d", i)
	fail := func(err error) (string, func(context.Context) error, error) {
		return "", nil, errors.Join(err, c.Net.RemoveNode(i))
	}
	logPath := filepath.Join(c.Net.Home(i), "app.log")
	var from int64
	if st, err := os.Stat(logPath); err == nil {
		from = st.Size() // a node added before, wiped since
	}
	start := time.Now()
	if err := c.Net.StartNode(ctx, i); err != nil {
		return fail(err)
	}
	wctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	err = c.Net.WaitHeight(wctx, []int{i}, maxCommitted(ctx, c), io.Discard)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("%s did not catch up by state sync: %w", what, err))
	}
	joined := time.Since(start)
	b, err := os.ReadFile(logPath)
	if err != nil || int64(len(b)) < from || !strings.Contains(string(b[from:]), "snapshot restored") {
		return fail(fmt.Errorf("%s caught up without restoring a snapshot (its app log says no \"snapshot restored\")", what))
	}
	key, err := c.Net.ValidatorKey(i)
	if err != nil {
		return fail(err)
	}
	setPower := func(ctx context.Context, power int64) (int64, error) { return setValidatorPower(ctx, c, key, power) }
	h, err := setPower(ctx, -1)
	if err != nil {
		return fail(fmt.Errorf("make %s a validator: %w", what, err))
	}
	c.note(fmt.Sprintf("%s joined by state sync in %s and is a validator from height %d", what, joined.Round(100*time.Millisecond), h+2))
	return what, func(ctx context.Context) error {
		h, err := setPower(ctx, 0)
		if err != nil {
			return fmt.Errorf("remove validator %s: %w", what, err)
		}
		// CometBFT applies it two blocks on; the node stops after.
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = c.Net.WaitHeight(wctx, c.allNodes(), h+3, io.Discard)
		cancel()
		return errors.Join(err, c.Net.RemoveNode(i))
	}, nil
}
