package pipeline

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	byzlogv1 "github.com/byzlog/byzlog/protos/byzlog/v1"
)

// Metrics are the gateway's Prometheus metrics, registered by the caller.
type Metrics struct {
	queuedBytes   prometheus.GaugeFunc
	batches       *prometheus.CounterVec   // by outcome: ok, duplicate, error code
	bundleBatches prometheus.Histogram     // batches per submitted bundle
	bundleBytes   prometheus.Histogram     // bytes per submitted bundle
	latency       *prometheus.HistogramVec // produce to answer, by ack level
	resubmits     prometheus.Counter
	expired       prometheus.Counter
	conflicts     prometheus.Counter
	// unconfirmedDuplicates counts duplicate answers the named block did
	// not confirm.
	unconfirmedDuplicates prometheus.Counter
	disagreements         prometheus.Counter
	// sequenceReads counts reads of a producer's next sequence from the
	// nodes, by why: unknown, gap, client (GetProducerState) or kafka.
	sequenceReads *prometheus.CounterVec
	// lightBlocks counts light blocks served, by source: cache or nodes.
	lightBlocks *prometheus.CounterVec
}

func newMetrics(g *Gateway) *Metrics {
	return &Metrics{
		queuedBytes: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "queued_bytes",
			Help: "Bytes of batches accepted and not yet settled (committed, rejected or given up).",
		}, func() float64 { return float64(g.queued.Load()) }),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "batches_total",
			Help: "Batches answered, by outcome: ok, duplicate, or the gRPC code of the error.",
		}, []string{"outcome"}),
		bundleBatches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "bundle_batches",
			Help: "Batches per submitted bundle.", Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		bundleBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "bundle_bytes",
			Help: "Bytes per submitted bundle.", Buckets: prometheus.ExponentialBuckets(1024, 2, 12),
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "produce_seconds",
			Help: "Time from a batch's arrival to its answer, by ack level.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"ack"}),
		resubmits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "resubmits_total",
			Help: "Transactions submitted again after the commit timeout.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "expired_total",
			Help: "Transactions given up after the pending timeout without showing up in a block.",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "conflicts_total",
			Help: "Pending bundles settled because another transaction committed one of their batches (failover, a second gateway, a re-wrapped batch).",
		}),
		unconfirmedDuplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "unconfirmed_duplicates_total",
			Help: "Duplicate answers from a node that the block they named, as f+1 nodes report it, did not confirm (the batch was retried instead of acknowledged).",
		}),
		disagreements: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "node_disagreements_total",
			Help: "Blocks whose hash or results one node reported differently from the f+1 nodes that agreed (the gateway used theirs).",
		}),
		sequenceReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "sequence_reads_total",
			Help: "Reads of a producer's next sequence from every node (an ABCI query each), by why: unknown (a sequence state the gateway does not hold), gap (a batch ahead of it), client (GetProducerState) or kafka (the Kafka face).",
		}, []string{"reason"}),
		lightBlocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "byzlog", Subsystem: "gateway", Name: "light_blocks_total",
			Help: "Light blocks asked for (GetLightBlock), by source: cache, or nodes (read from f+1 nodes that agree, once per height for every caller waiting on it).",
		}, []string{"source"}),
	}
}

// Collectors lists the metrics for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.queuedBytes, m.batches, m.bundleBatches, m.bundleBytes, m.latency, m.resubmits, m.expired, m.conflicts, m.unconfirmedDuplicates, m.disagreements, m.sequenceReads, m.lightBlocks}
}

func (m *Metrics) answered(ack byzlogv1.Ack, since time.Time, rc *byzlogv1.Receipt, err error) {
	outcome := "ok"
	switch {
	case err != nil:
		outcome = outcomeLabel(err)
	case rc.GetDuplicate():
		outcome = "duplicate"
	}
	m.batches.WithLabelValues(outcome).Inc()
	m.latency.WithLabelValues(ack.String()).Observe(time.Since(since).Seconds())
}
