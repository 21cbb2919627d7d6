package offload

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics exposes the offloader's counters (Stats) on reg.
func (s *S3) RegisterMetrics(reg prometheus.Registerer) error {
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	for _, c := range []prometheus.Collector{
		counter("magnetar_offload_uploaded_bytes_total", "Bytes uploaded to tiered storage (data and index objects).", &s.stats.BytesUploaded),
		counter("magnetar_offload_parts_uploaded_total", "Multipart parts (blocks) uploaded.", &s.stats.PartsUploaded),
		counter("magnetar_offload_read_bytes_total", "Bytes read from tiered storage (range reads and index objects).", &s.stats.BytesRead),
		counter("magnetar_offload_range_reads_total", "Range reads of offloaded data objects.", &s.stats.RangeReads),
		counter("magnetar_offload_cache_hits_total", "Reads of offloaded entries served from the broker's cache of range reads.", &s.stats.CacheHits),
		counter("magnetar_offload_read_aheads_total", "Range reads started ahead of a sequential reader.", &s.stats.ReadAheads),
		counter("magnetar_offload_retries_total", "Tiered-storage requests tried again after an error or timeout.", &s.stats.Retries),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
