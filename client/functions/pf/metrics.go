package pf

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
)

// The metric names of Pulsar's function instances, so dashboards and the
// worker's scrape see the same series for Java, Python and Go functions.
const (
	metricPrefix = "pulsar_function_"

	metricReceived       = metricPrefix + "received_total"
	metricProcessed      = metricPrefix + "processed_successfully_total"
	metricUserExceptions = metricPrefix + "user_exceptions_total"
	metricSysExceptions  = metricPrefix + "system_exceptions_total"
	metricLatency        = metricPrefix + "process_latency_ms"
	metricLastInvocation = metricPrefix + "last_invocation"

	metricReceived1m       = metricPrefix + "received_total_1min"
	metricProcessed1m      = metricPrefix + "processed_successfully_total_1min"
	metricUserExceptions1m = metricPrefix + "user_exceptions_total_1min"
	metricSysExceptions1m  = metricPrefix + "system_exceptions_total_1min"
	metricLatency1m        = metricPrefix + "process_latency_ms_1min"

	metricUser = metricPrefix + "user_metric_"

	// latestExceptions is how many recent exceptions of each kind status
	// reports.
	latestExceptions = 10
)

// The quantiles of the latency and user summaries, as Pulsar's instances
// export them.
var summaryObjectives = map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001, 0.999: 0.0001}

// stats counts what the instance did since it started (totals) and since
// the last window reset (the "1min" figures, reset every minute and by
// ResetMetrics), for InstanceControl and Prometheus. Safe for concurrent
// use: the processing loop and the send callbacks update it, gRPC reads it.
type stats struct {
	mu     sync.Mutex
	total  counts
	window counts
	// lastInvocation is in milliseconds since the epoch.
	lastInvocation int64
	latestUser     []*pb.FunctionStatus_ExceptionInformation
	latestSys      []*pb.FunctionStatus_ExceptionInformation
	user           map[string]*userMetric // by name

	prom promStats
}

type counts struct {
	received, processed, userExceptions, sysExceptions int64
	latencyMs                                          float64 // sum
	latencyN                                           int64
}

type userMetric struct {
	sum   float64
	count int64
}

// promStats are the Prometheus series of one instance, labelled as Pulsar
// labels them.
type promStats struct {
	received, processed, userExceptions, sysExceptions         prometheus.Counter
	received1m, processed1m, userExceptions1m, sysExceptions1m prometheus.Gauge
	latency, latency1m                                         prometheus.Summary
	lastInvocation                                             prometheus.Gauge
	user                                                       *prometheus.SummaryVec
}

// metricLabels are the constant labels of every series: tenant, namespace
// ("<tenant>/<namespace>"), name, instance_id, cluster and fqfn, the values
// Pulsar's Java instance uses.
func metricLabels(tenant, namespace, name string, instanceID int, cluster string) prometheus.Labels {
	return prometheus.Labels{
		"tenant":      tenant,
		"namespace":   tenant + "/" + namespace,
		"name":        name,
		"instance_id": strconv.Itoa(instanceID),
		"cluster":     cluster,
		"fqfn":        tenant + "/" + namespace + "/" + name,
	}
}

// newStats returns zeroed stats whose series are registered on reg.
func newStats(reg prometheus.Registerer, labels prometheus.Labels) (*stats, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	p := promStats{
		received:         counter(metricReceived, "Total number of messages received from the input topics."),
		processed:        counter(metricProcessed, "Total number of messages processed successfully."),
		userExceptions:   counter(metricUserExceptions, "Total number of errors returned (or panics) by the function."),
		sysExceptions:    counter(metricSysExceptions, "Total number of errors of the instance itself (publishing, acknowledging)."),
		received1m:       gauge(metricReceived1m, "Messages received since the last one-minute reset."),
		processed1m:      gauge(metricProcessed1m, "Messages processed successfully since the last one-minute reset."),
		userExceptions1m: gauge(metricUserExceptions1m, "User exceptions since the last one-minute reset."),
		sysExceptions1m:  gauge(metricSysExceptions1m, "System exceptions since the last one-minute reset."),
		latency: prometheus.NewSummary(prometheus.SummaryOpts{
			Name: metricLatency, Help: "Time the function took per message, in milliseconds.",
			ConstLabels: labels, Objectives: summaryObjectives,
		}),
		latency1m: prometheus.NewSummary(prometheus.SummaryOpts{
			Name: metricLatency1m, Help: "Time the function took per message over the last minute, in milliseconds.",
			ConstLabels: labels, Objectives: summaryObjectives, MaxAge: time.Minute, AgeBuckets: 2,
		}),
		lastInvocation: gauge(metricLastInvocation, "When the function was last called, in milliseconds since the epoch."),
		user: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: metricUser, Help: "Values the function recorded with RecordMetric, by metric name.",
			ConstLabels: labels, Objectives: summaryObjectives,
		}, []string{"metric"}),
	}
	for _, c := range []prometheus.Collector{
		p.received, p.processed, p.userExceptions, p.sysExceptions,
		p.received1m, p.processed1m, p.userExceptions1m, p.sysExceptions1m,
		p.latency, p.latency1m, p.lastInvocation, p.user,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return &stats{prom: p, user: map[string]*userMetric{}}, nil
}

func (s *stats) received(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total.received++
	s.window.received++
	s.lastInvocation = now.UnixMilli()
	s.prom.received.Inc()
	s.prom.received1m.Inc()
	s.prom.lastInvocation.Set(float64(s.lastInvocation))
}

// latency records how long one call of the function took.
func (s *stats) latency(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total.latencyMs += ms
	s.total.latencyN++
	s.window.latencyMs += ms
	s.window.latencyN++
	s.prom.latency.Observe(ms)
	s.prom.latency1m.Observe(ms)
}

func (s *stats) processed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total.processed++
	s.window.processed++
	s.prom.processed.Inc()
	s.prom.processed1m.Inc()
}

func (s *stats) userException(err error, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total.userExceptions++
	s.window.userExceptions++
	s.prom.userExceptions.Inc()
	s.prom.userExceptions1m.Inc()
	s.latestUser = appendLatest(s.latestUser, err, now)
}

func (s *stats) sysException(err error, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total.sysExceptions++
	s.window.sysExceptions++
	s.prom.sysExceptions.Inc()
	s.prom.sysExceptions1m.Inc()
	s.latestSys = appendLatest(s.latestSys, err, now)
}

func appendLatest(l []*pb.FunctionStatus_ExceptionInformation, err error, now time.Time) []*pb.FunctionStatus_ExceptionInformation {
	if len(l) == latestExceptions {
		l = append(l[:0], l[1:]...)
	}
	return append(l, &pb.FunctionStatus_ExceptionInformation{ExceptionString: err.Error(), MsSinceEpoch: now.UnixMilli()})
}

func (s *stats) recordUser(name string, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.user[name]
	if m == nil {
		m = &userMetric{}
		s.user[name] = m
	}
	m.sum += v
	m.count++
	s.prom.user.WithLabelValues(name).Observe(v)
}

// resetWindow starts a new "1min" window.
func (s *stats) resetWindow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.window = counts{}
	s.prom.received1m.Set(0)
	s.prom.processed1m.Set(0)
	s.prom.userExceptions1m.Set(0)
	s.prom.sysExceptions1m.Set(0)
}

// status fills an InstanceControl FunctionStatus.
func (s *stats) status(instanceID int) *pb.FunctionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &pb.FunctionStatus{
		Running:                  true,
		InstanceId:               strconv.Itoa(instanceID),
		NumReceived:              s.total.received,
		NumSuccessfullyProcessed: s.total.processed,
		NumUserExceptions:        s.total.userExceptions,
		LatestUserExceptions:     cloneExceptions(s.latestUser),
		NumSystemExceptions:      s.total.sysExceptions,
		LatestSystemExceptions:   cloneExceptions(s.latestSys),
		AverageLatency:           s.total.avgLatency(),
		LastInvocationTime:       s.lastInvocation,
	}
}

// metrics fills an InstanceControl MetricsData.
func (s *stats) metrics() *pb.MetricsData {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &pb.MetricsData{
		ReceivedTotal:                   s.total.received,
		ProcessedSuccessfullyTotal:      s.total.processed,
		SystemExceptionsTotal:           s.total.sysExceptions,
		UserExceptionsTotal:             s.total.userExceptions,
		AvgProcessLatency:               s.total.avgLatency(),
		LastInvocation:                  s.lastInvocation,
		ReceivedTotal_1Min:              s.window.received,
		ProcessedSuccessfullyTotal_1Min: s.window.processed,
		SystemExceptionsTotal_1Min:      s.window.sysExceptions,
		UserExceptionsTotal_1Min:        s.window.userExceptions,
		AvgProcessLatency_1Min:          s.window.avgLatency(),
	}
	if len(s.user) > 0 {
		m.UserMetrics = make(map[string]float64, 2*len(s.user))
		for name, u := range s.user {
			m.UserMetrics[name+"_sum"] = u.sum
			m.UserMetrics[name+"_count"] = float64(u.count)
		}
	}
	return m
}

func (c counts) avgLatency() float64 {
	if c.latencyN == 0 {
		return 0
	}
	return c.latencyMs / float64(c.latencyN)
}

func cloneExceptions(l []*pb.FunctionStatus_ExceptionInformation) []*pb.FunctionStatus_ExceptionInformation {
	out := make([]*pb.FunctionStatus_ExceptionInformation, len(l))
	for i, e := range l {
		out[i] = &pb.FunctionStatus_ExceptionInformation{ExceptionString: e.ExceptionString, MsSinceEpoch: e.MsSinceEpoch}
	}
	return out
}
