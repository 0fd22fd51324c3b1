package attack

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/byzlog/byzlog/services/lab/chaos"
)

// Row is one attack's result.
type Row struct {
	Attack string `json:"attack"`
	// Crashed names every process of the cluster that died during the
	// phase ("node2/byzlog-app", "gateway0").
	Crashed []string `json:"crashed"`
	// Rate is the honest records acknowledged per second of load, counted
	// in the window shifted by the median receipt time (chaos
	// Row.AckedShifted); Ratio is Rate over the no-attack phase's.
	Rate  float64 `json:"honest_records_per_s"`
	Ratio float64 `json:"ratio"`
	// Chaos is the phase as the chaos suite saw it: sends, outcomes,
	// receipt latencies and the checker's report.
	Chaos chaos.Row `json:"chaos"`
	// Stats is what the attacker sent and what came of it.
	Stats Stats `json:"attacker"`
	// Unauthorized: the attacker had no right to any of its sends
	// (Attack.Unauthorized), so none may be accepted.
	Unauthorized bool `json:"unauthorized,omitempty"`
	// Misses says how the row missed its goal; empty when it met it.
	Misses []string `json:"misses,omitempty"`
}

// Crashes counts the processes that died; AppCrashes and NodeCrashes
// those that were byzlog-app and cometbft, OtherCrashes the services.
func (r Row) Crashes() int { return len(r.Crashed) }

// AppCrashes is how many byzlog-app processes died.
func (r Row) AppCrashes() int { return r.count("/byzlog-app") }

// NodeCrashes is how many cometbft processes died.
func (r Row) NodeCrashes() int { return r.count("/cometbft") }

// OtherCrashes is how many gateways, indexers or NATS servers died.
func (r Row) OtherCrashes() int { return r.Crashes() - r.AppCrashes() - r.NodeCrashes() }

func (r Row) count(suffix string) int {
	n := 0
	for _, name := range r.Crashed {
		if strings.HasSuffix(name, suffix) {
			n++
		}
	}
	return n
}

// Anomalies is the sum of the checker's anomaly counts.
func (r Row) Anomalies() int {
	n := 0
	for _, c := range chaos.Categories {
		n += r.Chaos.Report.Counts[c]
	}
	return n
}

// Evaluate says how r misses the goal of every row — no process died, no
// anomaly, the phase ran whole, honest throughput at least minRatio of the
// baseline's (baseRate) — one phrase per miss; none when it met it.
func Evaluate(r Row, baseRate, minRatio float64) []string {
	var misses []string
	if len(r.Crashed) > 0 {
		misses = append(misses, fmt.Sprintf("%d processes died (%s)", len(r.Crashed), strings.Join(r.Crashed, ", ")))
	}
	if n := r.Anomalies(); n > 0 {
		var parts []string
		for _, c := range chaos.Categories {
			if k := r.Chaos.Report.Counts[c]; k > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", c, k))
			}
		}
		misses = append(misses, fmt.Sprintf("%d anomalies (%s)", n, strings.Join(parts, ", ")))
	}
	switch {
	case baseRate <= 0:
		misses = append(misses, "the no-attack phase acknowledged nothing: no throughput to compare with")
	case r.Rate/baseRate < minRatio:
		misses = append(misses, fmt.Sprintf("honest throughput %.2f× the no-attack phase's (%.0f of %.0f records/s), want at least %.2f×", r.Rate/baseRate, r.Rate, baseRate, minRatio))
	}
	if len(r.Chaos.Errors) > 0 {
		misses = append(misses, fmt.Sprintf("the phase did not run whole (%d run errors)", len(r.Chaos.Errors)))
	}
	if r.Unauthorized && r.Stats.Accepted > 0 {
		misses = append(misses, fmt.Sprintf("%d of %d sends accepted from an identity with no right to any of them", r.Stats.Accepted, r.Stats.Sent))
	}
	return misses
}

// WriteTable prints one line per row — crashes, honest throughput and its
// ratio, receipt p99, each anomaly's count, the verdict — then what each
// attacker sent and how each row missed its goal.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"attack", "app crashes", "node crashes", "other crashes", "sends", "acked", "honest rec/s", "ratio", "p99 receipt", "unknown"}
	head = append(head, chaos.Categories...)
	head = append(head, "goal")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		goal := "ok"
		if len(r.Misses) > 0 {
			goal = "MISS"
		}
		cells := []string{r.Attack, fmt.Sprint(r.AppCrashes()), fmt.Sprint(r.NodeCrashes()), fmt.Sprint(r.OtherCrashes()),
			fmt.Sprint(r.Chaos.Report.Sends), fmt.Sprint(r.Chaos.Report.Acked), fmt.Sprintf("%.0f", r.Rate), fmt.Sprintf("%.2f", r.Ratio),
			r.Chaos.ReceiptP99.Round(time.Millisecond).String(), fmt.Sprint(r.Chaos.Report.Unknown)}
		for _, c := range chaos.Categories {
			cells = append(cells, fmt.Sprint(r.Chaos.Report.Counts[c]))
		}
		cells = append(cells, goal)
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		s := r.Stats
		line := fmt.Sprintf("%s: the attacker sent %d (%s), %d accepted", r.Attack, s.Sent, mib(s.Bytes), s.Accepted)
		if sum := s.summary(); sum != "" {
			line += "; " + sum
		}
		if len(s.Notes) > 0 {
			line += "; " + strings.Join(s.Notes, "; ")
		}
		if r.Attack == Baseline.Name {
			line = fmt.Sprintf("%s: no attacker", r.Attack)
		}
		fmt.Fprintln(w, line)
	}
	for _, r := range rows {
		if len(r.Misses) > 0 {
			fmt.Fprintf(w, "\n%s missed its goal:\n  %s\n", r.Attack, strings.Join(r.Misses, "\n  "))
		}
		if s := r.Chaos.Report.Summary(); s != "" {
			fmt.Fprintf(w, "%s anomalies:\n%s", r.Attack, s)
		}
		if len(r.Chaos.Errors) > 0 {
			fmt.Fprintf(w, "%s run errors:\n  %s\n", r.Attack, strings.Join(r.Chaos.Errors, "\n  "))
		}
	}
	return nil
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// ErrMissed is returned when a row missed its goal.
var ErrMissed = errors.New("attack: rows missed their goal")

// Missed names the rows that missed their goal.
func Missed(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if len(r.Misses) > 0 {
			out = append(out, r.Attack)
		}
	}
	return out
}
