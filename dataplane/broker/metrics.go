package broker

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the broker's Prometheus series, one registry per Service (so
// several brokers in one test process do not collide). Names follow
// Pulsar's where Pulsar has one (pulsar_lookup_*, pulsar_in_*), with units.
type metrics struct {
	reg *prometheus.Registry

	lookups           *prometheus.CounterVec // by answer: connect, redirect, failed
	bundleAcquired    prometheus.Counter
	bundleReleased    *prometheus.CounterVec // by reason: unload, split, session_lost, shutdown
	topicLoads        prometheus.Counter
	inMessages        prometheus.Counter
	inBytes           prometheus.Counter
	publishSeconds    prometheus.Histogram
	outMessages       prometheus.Counter
	outBytes          prometheus.Counter
	sessionLost       prometheus.Counter
	loadManagerMoves  *prometheus.CounterVec // by action: unload, split
	publishThrottled  prometheus.Counter
	dispatchThrottled prometheus.Counter
	rateRefused       *prometheus.CounterVec // by limit
	authFailures      prometheus.Counter
	authzDenials      *prometheus.CounterVec // by surface (binary, admin) and action
	authRefreshes     prometheus.Counter
	compactions       *prometheus.CounterVec // by outcome: success, error (compaction.go)
	compactionRemoved prometheus.Counter
	compactionSeconds prometheus.Histogram
	usage             *usageMeter // per-namespace billing counters (usage.go)
	replSent          replSent    // messages replicated, by namespace and remote cluster (replication.go)
}

func newMetrics(s *Service) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), usage: newUsageMeter()}
	m.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulsar_lookup_answers_total", Help: "Topic lookups answered, by answer (connect, redirect, failed).",
	}, []string{"answer"})
	m.bundleAcquired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "magnetar_broker_bundles_acquired_total", Help: "Namespace bundles this broker took ownership of.",
	})
	m.bundleReleased = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magnetar_broker_bundles_released_total", Help: "Namespace bundles this broker gave up, by reason.",
	}, []string{"reason"})
	m.topicLoads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "magnetar_broker_topic_loads_total", Help: "Topics opened (loaded) on this broker.",
	})
	m.inMessages = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pulsar_in_messages_total", Help: "Messages persisted for producers.",
	})
	m.inBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pulsar_in_bytes_total", Help: "Payload bytes persisted for producers.",
	})
	// From a SEND read off the connection to its receipt queued, the
	// broker's share of the producer's latency (Pulsar reports it as
	// pulsar_broker_publish_latency): a producer's own latency minus this
	// is time in the client and the network.
	m.publishSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "magnetar_broker_publish_seconds",
		Help:    "Time from a SEND read by the broker to its entry stored (receipt or error queued).",
		Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16),
	})
	m.outMessages = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pulsar_out_messages_total", Help: "Messages dispatched to consumers.",
	})
	m.outBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pulsar_out_bytes_total", Help: "Payload bytes dispatched to consumers.",
	})
	m.sessionLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "magnetar_broker_metadata_sessions_lost_total", Help: "Times the broker's metadata session expired.",
	})
	m.loadManagerMoves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magnetar_load_manager_actions_total", Help: "Bundle unloads and splits ordered by the load manager (on the leader).",
	}, []string{"action"})
	m.authFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pulsar_authentication_failures_total", Help: "Connections and admin requests refused because their credentials failed authentication.",
	})
	m.authzDenials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magnetar_broker_authorization_denials_total", Help: "Requests the authorization policy refused, by surface (binary, admin) and action (produce, consume, lookup, tenant_admin, superuser).",
	}, []string{"surface", "action"})
	m.authRefreshes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "magnetar_broker_auth_refreshes_total", Help: "Credentials refreshed on live connections (AUTH_RESPONSE).",
	})
	m.publishThrottled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "magnetar_broker_publish_throttled_total", Help: "Times a connection's reads were paused for a publish rate limit (topic or resource group).",
	})
	m.dispatchThrottled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "magnetar_broker_dispatch_throttled_total", Help: "Times a subscription's dispatch was held for a dispatch rate limit (topic, subscription or resource group).",
	})
	m.rateRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magnetar_broker_limit_refusals_total", Help: "Producers, consumers, subscriptions and topics refused for a limit, by limit.",
	}, []string{"limit"})
	m.compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "magnetar_broker_compactions_total", Help: "Topic compactions run, by outcome (success, error).",
	}, []string{"outcome"})
	m.compactionRemoved = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pulsar_compaction_removed_event_count", Help: "Messages removed from compacted views by compactions.",
	})
	m.compactionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "magnetar_broker_compaction_seconds",
		Help:    "Duration of topic compactions, successful or not.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800},
	})
	topics := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulsar_topics_count", Help: "Topics open on this broker.",
	}, func() float64 { return float64(len(s.openTopics())) })
	m.reg.MustRegister(m.lookups, m.bundleAcquired, m.bundleReleased, m.topicLoads, m.inMessages, m.inBytes, m.publishSeconds,
		m.outMessages, m.outBytes, m.sessionLost, m.loadManagerMoves, m.publishThrottled, m.dispatchThrottled, m.rateRefused, m.authFailures, m.authzDenials, m.authRefreshes, topics,
		m.compactions, m.compactionRemoved, m.compactionSeconds,
		newReplCollector(s), newUsageCollector(m.usage),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(forcedCycles)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.cfg.TopicLevelMetrics {
		m.reg.MustRegister(newTopicCollector(s))
	}
	return m
}

// forcedCycles adds the collections the process forced itself to the Go
// collector's defaults (go_gc_cycles_forced_gc_cycles_total): the servers'
// idle trimmer (cmd/magnetar trim.go) is what forces them, so the counter
// says how often an idle broker handed its free heap back.
var forcedCycles = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/cycles/forced:gc-cycles$`)}

// Metrics returns the broker's Prometheus registry (served on /metrics by the
// admin HTTP server).
func (s *Service) Metrics() *prometheus.Registry { return s.metrics.reg }
