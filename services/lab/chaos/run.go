package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/byzlog/byzlog/gateway/client"
	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
	"github.com/byzlog/byzlog/services/internal/localnet"
)

// Phase is one nemesis run under load: faults for Duration, each held for
// Hold with Gap between them.
type Phase struct {
	Nemesis   Nemesis
	Duration  time.Duration
	Hold, Gap time.Duration
	Seed      uint64
	// Settle bounds each wait after the faults: producers' outcomes, the
	// cluster catching up, consumers reaching the log's end.
	Settle time.Duration
	// KafkaSettle bounds the wait for the Kafka producers' outcomes after
	// the load (0: Settle); a send unanswered then is of unknown outcome.
	// The SDK's producers fail over to the other gateway within seconds; a
	// Kafka producer waits for its partition's gateway, which sends a
	// bundle a killed validator dropped again after its commit_timeout
	// (20 s) and answers it failed after its pending_timeout (30 s).
	KafkaSettle time.Duration
}

// kafkaSettle is KafkaSettle, or Settle when it is 0.
func (ph Phase) kafkaSettle() time.Duration {
	if ph.KafkaSettle > 0 {
		return ph.KafkaSettle
	}
	return ph.Settle
}

// Row is one phase's result.
type Row struct {
	Nemesis string `json:"nemesis"`
	Faults  int    `json:"faults"`
	// Done lists what each fault hit ("node2", "gateway0").
	Done   []string `json:"done"`
	Report Report   `json:"report"`
	// Availability is the share of sends acknowledged.
	Availability float64 `json:"availability"`
	// MaxStall is the longest time under load with no acknowledgement;
	// Recovery the time from the last heal until both an acknowledgement
	// and a consumer delivery have happened again (-1: not both did).
	MaxStall time.Duration `json:"max_stall_ns"`
	Recovery time.Duration `json:"recovery_ns"`
	// Load is how long the producers offered records, AckedUnderLoad how
	// many acknowledgements came within it (not while settling after it);
	// ReceiptP50 and ReceiptP99 are produce→receipt times of the
	// acknowledged sends.
	Load           time.Duration `json:"load_ns"`
	AckedUnderLoad int           `json:"acked_under_load"`
	// AckedShifted counts the acknowledgements in a window as long as
	// Load that starts ReceiptP50 after the load did: where the receipts
	// of what was offered under load arrive. A cluster that keeps up at a
	// higher latency loses no count to it (the latency is ReceiptP99's);
	// one that falls behind loses the shortfall.
	AckedShifted int           `json:"acked_shifted"`
	ReceiptP50   time.Duration `json:"receipt_p50_ns"`
	ReceiptP99   time.Duration `json:"receipt_p99_ns"`
	// ConsumerErrors counts what the consumer SDK reported, by kind;
	// SendErrors the errors behind unknown outcomes, by their first words.
	ConsumerErrors map[string]int `json:"consumer_errors"`
	SendErrors     map[string]int `json:"send_errors,omitempty"`
	// Notes are what the faults observed ("the proxy lied 3 times").
	Notes []string `json:"notes,omitempty"`
	// Errors are the run's own failures: a fault that could not be
	// injected or healed, a cluster that did not catch up.
	Errors []string `json:"errors,omitempty"`
}

// Safe reports whether the phase found no anomaly and ran whole.
func (r Row) Safe() bool { return r.Report.Safe() && len(r.Errors) == 0 }

// RunPhase creates the phase's topic, runs the workload while the nemesis
// acts, heals everything, waits for the cluster and the consumers, reads
// every validator's log back and checks the history.
func RunPhase(ctx context.Context, c *Cluster, w Workload, ph Phase, progress io.Writer) (Row, error) {
	c.topic, c.notes, c.snapshots = w.Topic, nil, nil
	trust, err := c.Trust()
	if err != nil {
		return Row{}, err
	}
	transport, err := c.Transport()
	if err != nil {
		return Row{}, err
	}
	row := Row{Nemesis: ph.Nemesis.Name, ConsumerErrors: map[string]int{}}
	if err := createPhaseTopics(ctx, c, w, trust, transport); err != nil {
		return row, err
	}
	startHeight := maxCommitted(ctx, c)
	rec := newRecorder()

	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	consumers, group, txns := startConsumers(cctx, c, w, rec)
	load := runLoad(ctx, c, w, ph, rec, &row, progress)
	checkHealed(ctx, c, ph, &row)

	// The consumers caught up to the log's end, then every validator's
	// log read back: the log only grows, so the read-back holds whatever
	// a consumer was delivered (a send of unknown outcome may still commit
	// late; read first, it would look like a record no validator holds).
	// The group's committed offsets are read once its members stopped and
	// their commits were answered.
	// The transactional pipeline drains (its group's offsets at the
	// input's end) before its processors stop, and its output is read
	// whole after.
	awaitConsumers(ctx, c, w, rec, ph.Settle)
	if txns != nil {
		row.Errors = append(row.Errors, txns.drain(ctx, c, w, load.end, ph.Settle)...)
	}
	stopConsumers()
	consumers.Wait()
	var groupNotes []string
	if group != nil {
		var errs []string
		groupNotes, errs = group.finish(ctx, c, w, rec, ph.Settle)
		row.Errors = append(row.Errors, errs...)
	}
	if txns != nil {
		notes, errs := txns.finish(ctx, c, w, rec, ph.Settle)
		groupNotes = append(groupNotes, notes...)
		row.Errors = append(row.Errors, errs...)
	}
	readBackAll(ctx, c, w, rec, &row)
	if w.CompactKeys > 0 {
		readBackTable(ctx, c, w, rec, &row)
	}
	checkChain(ctx, c, rec, startHeight, &row)
	summarize(c, w, rec, load, groupNotes, &row)
	return row, nil
}

// createPhaseTopics creates the phase's topic and, with a transactional
// pipeline, its output topic, and with a compaction workload its
// compacted topic.
func createPhaseTopics(ctx context.Context, c *Cluster, w Workload, trust client.Trust, transport client.Option) error {
	adm, err := client.NewAdmin(c.Services.GatewayAddr(0), c.AdminKey, trust, transport)
	if err != nil {
		return err
	}
	_, err = adm.CreateTopic(ctx, w.Topic, &byzlogv1.TopicConfig{Partitions: w.Partitions})
	if err == nil && w.TxnProcessors > 0 {
		_, err = adm.CreateTopic(ctx, txnOutputTopic(w), &byzlogv1.TopicConfig{Partitions: txnOutPartitions})
	}
	if err == nil && w.CompactKeys > 0 {
		_, err = adm.CreateTopic(ctx, tableTopic(w), &byzlogv1.TopicConfig{Partitions: 2, CleanupPolicy: byzlogv1.CleanupPolicy_CLEANUP_COMPACT})
	}
	adm.Close()
	if err != nil {
		return fmt.Errorf("create the topics of %s: %w", w.Topic, err)
	}
	return nil
}

// checkChain records into the history the app hashes every validator
// reports for the heights the phase committed, and checks the evidence
// the chain holds for them; what fails is one of the row's errors.
func checkChain(ctx context.Context, c *Cluster, rec *recorder, startHeight int64, row *Row) {
	endHeight := maxCommittedAll(ctx, c)
	if err := appHashes(ctx, c.Net, startHeight, endHeight, rec.h.AppHashes, c.note); err != nil {
		row.Errors = append(row.Errors, err.Error())
	}
	if err := evidence(ctx, c.Net, startHeight, endHeight, &rec.h, c.note); err != nil {
		row.Errors = append(row.Errors, err.Error())
	}
}

// summarize checks the recorded history and fills the row with its
// report, the load's measures, the consumers' errors, the notes and the
// sends of unknown outcome by kind.
func summarize(c *Cluster, w Workload, rec *recorder, load loadTimes, groupNotes []string, row *Row) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	row.Report = Check(rec.h)
	load.measure(row, rec, w.consumers() > 0)
	for k, v := range rec.errs {
		row.ConsumerErrors[k] = v
	}
	row.Notes = append(c.notes, groupNotes...)
	if w.KafkaProducers > 0 {
		row.Notes = append(row.Notes, kafkaSendNote(w, rec, row.Report.RetryDuplicates))
	}
	if n := len(rec.h.TableSends); n > 0 {
		acked := 0
		for _, s := range rec.h.TableSends {
			if s.Outcome == Acked {
				acked++
			}
		}
		row.Notes = append(row.Notes, fmt.Sprintf("compacted topic: %d sends of %d keys (%d acknowledged), %d records left on %d validators", n, w.CompactKeys, acked, len(rec.h.TableReads), len(rec.h.TableClean)))
	}
	row.SendErrors = map[string]int{}
	for _, snd := range rec.h.Sends {
		if snd.Outcome == Unknown {
			row.SendErrors[errorKind(snd.Err)]++
		}
	}
}

// startConsumers starts the workload's consumers, each reading every
// partition from its start until ctx ends, its Kafka consumer group and
// its transactional pipeline (nil: none); they are done when the wait
// group is.
func startConsumers(ctx context.Context, c *Cluster, w Workload, rec *recorder) (*sync.WaitGroup, *kafkaGroup, *txnPipeline) {
	var consumers sync.WaitGroup
	var group *kafkaGroup
	var txns *txnPipeline
	if w.KafkaMembers > 0 {
		group = consumeKafka(ctx, c, w, rec, &consumers)
	}
	if w.TxnProcessors > 0 {
		txns = startTxns(ctx, c, w, rec, &consumers)
	}
	for i := 0; i < w.Consumers; i++ {
		name := fmt.Sprintf("consumer%d", i)
		rec.h.Consumers = append(rec.h.Consumers, name)
		var seq int
		var mu sync.Mutex
		for p := uint32(0); p < w.Partitions; p++ {
			consumers.Add(1)
			go func() { defer consumers.Done(); consume(ctx, c, w, name, p, rec, &seq, &mu) }()
		}
	}
	return &consumers, group, txns
}

// loadTimes is when the load ran and when the nemesis last healed (zero:
// it never did).
type loadTimes struct {
	start, end, lastHeal time.Time
}

// runLoad runs the producers for the phase's duration while the nemesis
// injects and heals faults, and returns once every producer has stopped.
func runLoad(ctx context.Context, c *Cluster, w Workload, ph Phase, rec *recorder, row *Row, progress io.Writer) loadTimes {
	t := loadTimes{start: time.Now()}
	lctx, stopLoad := context.WithTimeout(ctx, ph.Duration)
	defer stopLoad()
	var producers sync.WaitGroup
	prodErrs := make(chan error, w.producers()+1)
	for i := 0; i < w.producers(); i++ {
		producers.Add(1)
		go func() {
			defer producers.Done()
			var err error
			if i < w.Producers {
				err = produce(lctx, c, w, i, ph.Nemesis.Name, rec, ph.Settle)
			} else {
				err = produceKafka(lctx, c, w, i, ph, rec)
			}
			if err != nil {
				prodErrs <- err
			}
		}()
	}
	if w.CompactKeys > 0 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			if err := produceTable(lctx, c, w, ph.Nemesis.Name, rec, ph.Settle); err != nil {
				prodErrs <- err
			}
		}()
	}
	t.lastHeal = runNemesis(ctx, lctx, c, ph, t.start, row, progress)
	<-lctx.Done()
	t.end = time.Now()
	producers.Wait()
	close(prodErrs)
	for err := range prodErrs {
		row.Errors = append(row.Errors, err.Error())
	}
	return t
}

// runNemesis repeats gap, fault, hold, heal until the load (lctx) ends,
// and returns when it last healed. Faults and heals run under ctx, so a
// fault held past the load's end is still healed.
func runNemesis(ctx, lctx context.Context, c *Cluster, ph Phase, loadStart time.Time, row *Row, progress io.Writer) (lastHeal time.Time) {
	rng := rand.New(rand.NewPCG(ph.Seed, 0x6279_7a6c_6f67))
	loadDeadline := loadStart.Add(ph.Duration)
	for round := 0; ; round++ {
		sleep(lctx, ph.Gap)
		if lctx.Err() != nil || time.Until(loadDeadline) < ph.Hold+time.Second {
			break // every fault is healed under load, so recovery shows
		}
		what, heal, err := ph.Nemesis.Inject(ctx, c, round, rng)
		if err != nil {
			row.Errors = append(row.Errors, fmt.Sprintf("fault %d: %v", round, err))
			break
		}
		row.Faults++
		row.Done = append(row.Done, what)
		fmt.Fprintf(progress, "  %s: fault %d on %s (%s)\n", ph.Nemesis.Name, round+1, what, time.Since(loadStart).Round(time.Second))
		sleep(ctx, ph.Hold)
		if err := heal(ctx); err != nil {
			row.Errors = append(row.Errors, fmt.Sprintf("heal %d (%s): %v", round, what, err))
			break
		}
		lastHeal = time.Now()
	}
	return lastHeal
}

// checkHealed records in row what is not back after the faults: a process
// not running, or validators that did not catch up within ph.Settle.
func checkHealed(ctx context.Context, c *Cluster, ph Phase, row *Row) {
	for _, name := range c.ProcessNames() {
		if !c.Net.IsRunning(c.Services, name) {
			row.Errors = append(row.Errors, fmt.Sprintf("%s is not running after the faults were healed", name))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, ph.Settle)
	err := c.Net.WaitHeight(wctx, c.allNodes(), maxCommitted(ctx, c)+1, io.Discard)
	cancel()
	if err != nil {
		row.Errors = append(row.Errors, fmt.Sprintf("the validators did not all catch up within %s: %v", ph.Settle, err))
	}
}

// awaitConsumers waits, up to settle, until every consumer has delivered
// each partition up to the end node 0's log has now.
func awaitConsumers(ctx context.Context, c *Cluster, w Workload, rec *recorder, settle time.Duration) {
	logEnd := map[uint32]uint64{}
	for p := uint32(0); p < w.Partitions; p++ {
		if recs, err := readBack(ctx, c.Net, 0, w.Topic, p); err == nil {
			logEnd[p] = uint64(len(recs))
		}
	}
	deadline := time.Now().Add(settle)
	for w.consumers() > 0 && !caughtUp(rec, logEnd) && time.Now().Before(deadline) {
		sleep(ctx, 250*time.Millisecond)
	}
}

// readBackAll records every validator's log of the topic as observations.
func readBackAll(ctx context.Context, c *Cluster, w Workload, rec *recorder, row *Row) {
	for _, i := range c.allNodes() {
		for p := uint32(0); p < w.Partitions; p++ {
			recs, err := readBack(ctx, c.Net, i, w.Topic, p)
			if err != nil {
				row.Errors = append(row.Errors, err.Error())
				continue
			}
			for _, r := range recs {
				rec.observe(Observation{Observer: fmt.Sprintf("node%d", i), Partition: p, Offset: r.Offset, Value: string(r.Value), Producer: fmt.Sprintf("%x", r.ProducerKey)})
			}
		}
	}
}

// measure fills in row's availability, stalls, recovery and receipt
// times from what rec saw during t (rec's lock held). With consumers,
// recovery needs deliveries back as well as acknowledgements.
func (t loadTimes) measure(row *Row, rec *recorder, consumers bool) {
	if row.Report.Sends > 0 {
		row.Availability = float64(row.Report.Acked) / float64(row.Report.Sends)
	}
	row.MaxStall, row.Recovery = stalls(rec.ackTimes, t.start, t.end, t.lastHeal)
	row.Load = t.end.Sub(t.start)
	for _, at := range rec.ackTimes {
		if !at.Before(t.start) && !at.After(t.end) {
			row.AckedUnderLoad++
		}
	}
	row.ReceiptP50, row.ReceiptP99 = Percentile(rec.ackWaits, 0.50), Percentile(rec.ackWaits, 0.99)
	from, to := t.start.Add(row.ReceiptP50), t.end.Add(row.ReceiptP50)
	for _, at := range rec.ackTimes {
		if !at.Before(from) && !at.After(to) {
			row.AckedShifted++
		}
	}
	if _, polled := stalls(rec.pollTimes, t.start, t.end, t.lastHeal); consumers {
		// Both paths back: acknowledgements and deliveries.
		if polled < 0 || row.Recovery < 0 {
			row.Recovery = -1
		} else {
			row.Recovery = max(row.Recovery, polled)
		}
	}
}

// kafkaSendNote sums up the Kafka producers' sends: how many of the plain
// producers' were acknowledged on their one attempt (held to the
// idempotent producers' rules), how many were retried, the most Produce
// requests in flight on one connection, and the duplicates Kafka allows.
// It reads rec with its lock held.
func kafkaSendNote(w Workload, rec *recorder, retryDuplicates int) string {
	type tally struct{ sends, acked, once, retried int }
	kinds := map[bool]*tally{false: {}, true: {}}
	for _, s := range rec.h.Sends {
		if s.Producer < w.Producers {
			continue // an SDK producer's
		}
		t := kinds[s.Plain]
		t.sends++
		if s.Retried {
			t.retried++
		}
		if s.Outcome == Acked {
			t.acked++
			if !s.Retried {
				t.once++
			}
		}
	}
	p, i := kinds[true], kinds[false]
	return fmt.Sprintf("Kafka producers: plain %d sends, %d acknowledged, %d of them on their one attempt (held to order and once), %d retried; idempotent %d sends, %d acknowledged, %d retried; up to %d Produce requests in flight on one connection (plain), %d (idempotent); failures seen: %s; %d values written twice by a plain producer's retry (Kafka allows it)",
		p.sends, p.acked, p.once, p.retried, i.sends, i.acked, i.retried, rec.kafkaMaxInFlight[true], rec.kafkaMaxInFlight[false], countsOf(rec.kafkaFailures), retryDuplicates)
}

// allNodes lists every validator's index.
func (c *Cluster) allNodes() []int {
	all := make([]int, c.validators())
	for i := range all {
		all[i] = i
	}
	return all
}

// Percentile is the q-quantile (0..1) of ds by the nearest-rank method; 0
// for none.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// errorKind shortens an error to what tells it apart: its text up to the
// first digit, at most 80 bytes.
func errorKind(err string) string {
	if i := strings.IndexAny(err, "0123456789"); i > 0 {
		err = err[:i]
	}
	if len(err) > 80 {
		err = err[:80]
	}
	return strings.TrimSpace(err)
}

// caughtUp reports whether every consumer has delivered every partition's
// records up to logEnd.
func caughtUp(rec *recorder, logEnd map[uint32]uint64) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	got := map[string]map[uint32]uint64{}
	for _, o := range rec.h.Observations {
		if o.Poll {
			if got[o.Observer] == nil {
				got[o.Observer] = map[uint32]uint64{}
			}
			got[o.Observer][o.Partition] = max(got[o.Observer][o.Partition], o.Offset+1)
		}
	}
	for _, name := range rec.h.Consumers {
		for p, end := range logEnd {
			if got[name][p] < end {
				return false
			}
		}
	}
	return true
}

// stalls is the longest gap between acknowledgements under load (from
// its start to its end), and the time from the last heal to the first
// acknowledgement after it.
func stalls(acks []time.Time, start, end, lastHeal time.Time) (maxStall, recovery time.Duration) {
	ts := slices.Clone(acks)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	prev := start
	for _, t := range ts {
		if t.After(end) {
			break
		}
		maxStall = max(maxStall, t.Sub(prev))
		prev = t
	}
	maxStall = max(maxStall, end.Sub(prev))
	if !lastHeal.IsZero() {
		recovery = -1
		for _, t := range ts {
			if t.After(lastHeal) {
				recovery = t.Sub(lastHeal)
				break
			}
		}
	}
	return maxStall, recovery
}

// ProcessNames lists every process of the cluster: each validator's
// cometbft and app, the gateways, the indexer and NATS.
func (c *Cluster) ProcessNames() []string {
	var names []string
	for i := 0; i < c.validators(); i++ {
		names = append(names, localnet.CometBFTName(i), localnet.AppName(i))
	}
	for g := 0; g < c.Services.Gateways; g++ {
		names = append(names, localnet.GatewayName(g))
	}
	return append(names, localnet.IndexerName, localnet.NATSName)
}

// maxCommitted is the highest height any node's app has committed.
func maxCommitted(ctx context.Context, c *Cluster) int64 {
	var h int64
	for _, st := range c.Net.Status(ctx) {
		h = max(h, st.Committed())
	}
	return h
}

// maxCommittedAll is the highest height every node has committed.
func maxCommittedAll(ctx context.Context, c *Cluster) int64 {
	h := int64(-1)
	for _, st := range c.Net.Status(ctx) {
		if h < 0 || st.Committed() < h {
			h = st.Committed()
		}
	}
	return h
}

// WriteTable prints one line per phase: the load's figures, then each
// anomaly's count.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"nemesis", "faults", "sends", "acked", "unknown", "avail", "max stall", "recovery"}
	head = append(head, Categories...)
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		rec := "-"
		if r.Recovery > 0 {
			rec = r.Recovery.Round(10 * time.Millisecond).String()
		} else if r.Recovery < 0 {
			rec = "none"
		}
		cells := []string{r.Nemesis, fmt.Sprint(r.Faults), fmt.Sprint(r.Report.Sends), fmt.Sprint(r.Report.Acked), fmt.Sprint(r.Report.Unknown),
			fmt.Sprintf("%.1f%%", 100*r.Availability), r.MaxStall.Round(10 * time.Millisecond).String(), rec}
		for _, c := range Categories {
			cells = append(cells, fmt.Sprint(r.Report.Counts[c]))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if s := r.Report.Summary(); s != "" {
			fmt.Fprintf(w, "\n%s anomalies:\n%s", r.Nemesis, s)
		}
		if len(r.Errors) > 0 {
			fmt.Fprintf(w, "\n%s run errors:\n  %s\n", r.Nemesis, strings.Join(r.Errors, "\n  "))
		}
		if len(r.Notes) > 0 {
			fmt.Fprintf(w, "\n%s: %s\n", r.Nemesis, strings.Join(r.Notes, "; "))
		}
		if len(r.SendErrors) > 0 {
			var kinds []string
			for k, n := range r.SendErrors {
				kinds = append(kinds, fmt.Sprintf("%d× %s", n, k))
			}
			sort.Strings(kinds)
			fmt.Fprintf(w, "\n%s: %d sends of unknown outcome:\n  %s\n", r.Nemesis, r.Report.Unknown, strings.Join(kinds, "\n  "))
		}
	}
	return nil
}

// ErrUnsafe is returned when a phase found an anomaly or did not run whole.
var ErrUnsafe = errors.New("chaos: anomalies found")
