package indexer

import (
	"github.com/byzlog/byzlog/indexer/publish"
	"github.com/byzlog/byzlog/indexer/verify"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the indexer's Prometheus collectors.
type Metrics struct {
	height         prometheus.Gauge
	progress       prometheus.Gauge
	tip            prometheus.Gauge
	lag            prometheus.Gauge
	records        prometheus.Counter
	skipped        prometheus.Counter
	held           prometheus.Gauge
	heldBytes      prometheus.Gauge
	replays        prometheus.Counter
	blocks         prometheus.Counter
	verifyFailures *prometheus.CounterVec
	publishErrors  prometheus.Counter
	rewinds        prometheus.Counter
	conflicts      prometheus.Counter
	lightErrors    prometheus.Counter
	latency        *prometheus.HistogramVec
}

// Stages of a block's way through the indexer, timed from its commit
// (latency).
const (
	stageVerified     = "verified"     // its header and the next one verified
	stageFetched      = "fetched"      // its data read and checked
	stagePublished    = "published"    // its records sent to JetStream
	stageAcknowledged = "acknowledged" // all of them stored
)

func newMetrics() *Metrics {
	return &Metrics{
		height: prometheus.NewGauge(prometheus.GaugeOpts{Name: "byzlog_indexer_height",
			Help: "Last height whose records and block message JetStream has acknowledged, all of them: the cursor (records held back behind an open Kafka transaction keep it before their block)."}),
		progress: prometheus.NewGauge(prometheus.GaugeOpts{Name: "byzlog_indexer_reported_height",
			Help: "Last published height reported to the chain (progress reports): nodes prune no block above it."}),
		tip: prometheus.NewGauge(prometheus.GaugeOpts{Name: "byzlog_indexer_chain_height",
			Help: "Highest height a node reported."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "byzlog_indexer_lag_blocks",
			Help: "Chain height minus the last published height (records held back behind open Kafka transactions do not count: byzlog_indexer_records_held)."}),
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "byzlog_indexer_records_published_total",
			Help: "Records published to JetStream (a rate of it is records/s)."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "byzlog_indexer_records_skipped_total",
			Help: "Records of replayed blocks not published because their stream already held them."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "byzlog_indexer_records_held",
			Help: "Records held back behind open Kafka transactions: a partition publishes nothing past its last stable offset until the transaction there ends."}),
		heldBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "byzlog_indexer_held_bytes",
			Help: "Bytes of the records held back behind open Kafka transactions (bounded by --max-held-bytes)."}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{Name: "byzlog_indexer_held_replays_total",
			Help: "times records held back past --max-held-bytes were dropped and, once their transaction ended, the blocks from theirs were published again."}),
		blocks: prometheus.NewCounter(prometheus.CounterOpts{Name: "byzlog_indexer_blocks_total",
			Help: "Blocks verified and published."}),
		verifyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "byzlog_indexer_verification_failures_total",
			Help: "Data a node served that failed a check against verified headers, by check (header, block, results, records, digest)."}, []string{"check"}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "byzlog_indexer_publish_errors_total",
			Help: "Publishes JetStream did not acknowledge; the indexer resumes from its last acknowledged height."}),
		rewinds: prometheus.NewCounter(prometheus.CounterOpts{Name: "byzlog_indexer_rewinds_total",
			Help: "times a stream held fewer records than JetStream had acknowledged (its server lost unsynced writes) and blocks were published again"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "byzlog_indexer_conflicts_total",
			Help: "times a stream held what another indexer published where this one expected its own, and it read the streams again"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "byzlog_indexer_block_latency_seconds",
			Help:    "Seconds from a block's commit (the next header's time) until the indexer reached a stage with it: verified (its headers), fetched (its data checked), published (its records sent), acknowledged (JetStream stored them all). Consumers get a record after acknowledged; a stage whose time grows is where the indexer waits.",
			Buckets: prometheus.ExponentialBuckets(0.01, 1.4, 24)}, []string{"stage"}),
		lightErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "byzlog_indexer_light_client_errors_total",
			Help: "Errors the light client reported: a primary that sent an invalid header and was replaced, a witness that disagreed or failed."}),
	}
}

// verify is the verifier's share of the counters.
func (m *Metrics) verify() verify.Metrics {
	return verify.Metrics{Failures: m.verifyFailures, LightErrors: m.lightErrors}
}

// publish is the publisher's share of the counters.
func (m *Metrics) publish() publish.Metrics {
	return publish.Metrics{Records: m.records, Skipped: m.skipped}
}

// Collectors lists the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.height, m.progress, m.tip, m.lag, m.records, m.skipped, m.held, m.heldBytes, m.replays, m.blocks, m.verifyFailures, m.publishErrors, m.rewinds, m.conflicts, m.lightErrors, m.latency}
}
