package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/byzlog/byzlog/services/lab/attack"
	"github.com/byzlog/byzlog/services/lab/chaos"
)

type attackOptions struct {
	attacks  []string
	cfg      attack.Config
	basePort int
	out      string
	keep     bool
}

func newAttackCommand() *cobra.Command {
	o := attackOptions{attacks: []string{"all"}, basePort: 29656,
		cfg: attack.Config{Duration: time.Minute, Settle: 60 * time.Second, Seed: 1, MinRatio: 0.8,
			Load: chaos.Workload{Partitions: 4, Producers: 4, Consumers: 2, Rate: 400, InFlight: 2000}}}
	var names []string
	for _, a := range attack.Attacks {
		names = append(names, fmt.Sprintf("  %-19s %s", a.Name, a.Doc))
	}
	cmd := &cobra.Command{
		Use:   "attack",
		Short: "Run Byzantine clients against byzlog and check that no process dies, no record goes wrong and honest throughput holds",
		Long: `Start the cluster byzlog-lab chaos uses (4 validators, NATS, 2 gateways, the
indexer, a lying RPC proxy in front of node0), then run a no-attack phase and
one phase per attack in --attacks, each on a fresh topic for --duration:
honest producers (the SDK, through both gateways) write at --rate, consumers
(through NATS) read every partition from its start, and the attacker runs
from the phase's first second to its last. Afterwards the phase settles,
every validator's log is read back and the history is checked as byzlog-lab
chaos checks it (lost, unseen, duplicate, inconsistent offsets, ...).

Attacks (each bounded in count, bytes and time, aimed only at this loopback
cluster; what they get committed goes to their own topic, attack-junk):
` + strings.Join(names, "\n") + `

One row per phase: processes that died (byzlog-app, cometbft, other), the
honest sends and acknowledgements, honest acknowledged records/s under load
and its ratio to the no-attack phase, the p99 produce→receipt time, and each
anomaly's count. The goal of every row: no process died, no anomaly, the
phase ran whole, and a ratio of at least --min-ratio. It exits 1 if any row
missed it and says how. A process that died is restarted after its phase.
The rows run back to back on the same cluster, so each also shows that what
the attacks before it left behind does no harm; --reset restarts every
validator and gateway between rows instead (what the code before issue 13
needed for its rows to mean anything one by one). With --out
it writes attack.json and attack.txt there. The run directory is removed at
the end unless --keep, or a row missed its goal (its logs stay for reading).

` + testClusterPorts,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			attacks, err := attack.Lookup(o.attacks)
			if err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			return runAttack(cmd.Context(), o, attacks, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.attacks, "attacks", o.attacks, "attacks to run after the no-attack phase, in order (all, or names from the list above)")
	f.DurationVar(&o.cfg.Duration, "duration", o.cfg.Duration, "honest load per phase; the attack runs for all but its first and last second")
	f.DurationVar(&o.cfg.Settle, "settle", o.cfg.Settle, "bound of each wait after the load (outcomes, catch-up, consumers)")
	f.Float64Var(&o.cfg.MinRatio, "min-ratio", o.cfg.MinRatio, "honest throughput each attack must leave, as a share of the no-attack phase's")
	f.Uint64Var(&o.cfg.Seed, "seed", o.cfg.Seed, "seed of the attackers' keys and inputs")
	f.IntVar(&o.cfg.Load.Producers, "producers", o.cfg.Load.Producers, "honest producers, each with its own key")
	f.IntVar(&o.cfg.Load.Consumers, "consumers", o.cfg.Load.Consumers, "honest consumers reading every partition through NATS")
	f.IntVar(&o.cfg.Load.Rate, "rate", o.cfg.Load.Rate, "honest records/s offered over all producers")
	f.IntVar(&o.cfg.Load.InFlight, "in-flight", o.cfg.Load.InFlight, "unresolved records per producer before it waits")
	f.Uint32Var(&o.cfg.Load.Partitions, "partitions", o.cfg.Load.Partitions, "partitions of each phase's topic")
	f.IntVar(&o.basePort, "base-port", o.basePort, "first port of the run's processes (see above)")
	f.StringVar(&o.out, "out", "", "directory for attack.json and attack.txt")
	f.BoolVar(&o.cfg.Reset, "reset", false, "restart every validator and gateway between rows, so nothing an attack leaves behind reaches the next row")
	f.BoolVar(&o.keep, "keep", false, "keep the run directory (data and logs) when every row met its goal")
	return cmd
}

func (o attackOptions) validate() error {
	l := o.cfg.Load
	switch {
	case o.cfg.Duration < 5*time.Second:
		return fmt.Errorf("--duration %s: want at least 5s (the attack runs from the first second to the last)", o.cfg.Duration)
	case o.cfg.Settle < 10*time.Second:
		return fmt.Errorf("--settle %s: want at least 10s (a restarted node needs a few to catch up)", o.cfg.Settle)
	case o.cfg.MinRatio < 0 || o.cfg.MinRatio > 1:
		return fmt.Errorf("--min-ratio %v: want 0..1", o.cfg.MinRatio)
	case l.Producers < 1 || l.Consumers < 0 || l.Rate < l.Producers:
		return fmt.Errorf("--producers %d, --consumers %d, --rate %d: want a producer or more, no negative consumers and a rate of at least 1 record/s per producer",
			l.Producers, l.Consumers, l.Rate)
	case l.InFlight < 1:
		return fmt.Errorf("--in-flight %d: want at least 1", l.InFlight)
	case l.Partitions < 1 || l.Partitions > 64:
		return fmt.Errorf("--partitions %d: want 1..64", l.Partitions)
	case o.basePort < 1024 || o.basePort+1100 > 65000:
		return fmt.Errorf("--base-port %d: want 1024..63900", o.basePort)
	}
	return nil
}

func runAttack(ctx context.Context, o attackOptions, attacks []attack.Attack, out, progress io.Writer) (err error) {
	tc, err := startTestCluster(ctx, "attack", o.basePort, clusterOptions{}, progress)
	if err != nil {
		return err
	}
	defer func() { tc.close(err == nil && !o.keep, progress) }()
	rows, err := attack.Run(ctx, tc.c, attacks, o.cfg, progress)
	if len(rows) > 0 {
		if werr := attack.WriteTable(out, rows); werr != nil {
			return werr
		}
		if o.out != "" {
			if werr := writeRows(o.out, "attack", rows, func(w io.Writer) error { return attack.WriteTable(w, rows) }); werr != nil {
				return werr
			}
		}
	}
	if err != nil {
		return err
	}
	if missed := attack.Missed(rows); len(missed) > 0 {
		return fmt.Errorf("%w: %s (see above)", attack.ErrMissed, strings.Join(missed, ", "))
	}
	return nil
}
