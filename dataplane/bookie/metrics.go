package bookie

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// serverMetrics are the bookie server's request series. The per-operation
// children are resolved once, so the request path does no label lookup.
type serverMetrics struct {
	requests    *prometheus.CounterVec // op, result
	addOK       prometheus.Counter
	addErr      prometheus.Counter
	readOK      prometheus.Counter
	readErr     prometheus.Counter
	addSeconds  prometheus.Histogram
	readSeconds prometheus.Histogram
	addBytes    prometheus.Counter
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "magnetar_bookie_requests_total",
			Help: "Requests answered, by operation (add, read) and result (ok, error).",
		}, []string{"op", "result"}),
		addSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "magnetar_bookie_add_seconds",
			Help:    "Time from an add request's arrival to its durable acknowledgement (journal group commit included).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}),
		readSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "magnetar_bookie_read_seconds",
			Help:    "Time to serve a read request from the caches or the entry logs.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16),
		}),
		addBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_bookie_add_bytes_total", Help: "Payload bytes of acknowledged adds.",
		}),
	}
	m.addOK = m.requests.WithLabelValues("add", "ok")
	m.addErr = m.requests.WithLabelValues("add", "error")
	m.readOK = m.requests.WithLabelValues("read", "ok")
	m.readErr = m.requests.WithLabelValues("read", "error")
	return m
}

func (m *serverMetrics) added(start time.Time, n int, err error) {
	if err != nil {
		m.addErr.Inc()
		return
	}
	m.addOK.Inc()
	m.addBytes.Add(float64(n))
	m.addSeconds.Observe(time.Since(start).Seconds())
}

func (m *serverMetrics) read(start time.Time, err error) {
	if err != nil {
		m.readErr.Inc()
		return
	}
	m.readOK.Inc()
	m.readSeconds.Observe(time.Since(start).Seconds())
}

// RegisterMetrics registers the server's Prometheus series on reg: requests
// by operation and result, add and read latency, added bytes and open
// connections. The storage registers its own (storage.DiskStorage's
// RegisterMetrics).
func (s *Server) RegisterMetrics(reg prometheus.Registerer) error {
	m := s.metrics
	conns := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "magnetar_bookie_connections", Help: "Open client connections.",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.conns))
	})
	for _, c := range []prometheus.Collector{m.requests, m.addSeconds, m.readSeconds, m.addBytes, conns} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
