package storage

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// storageMetrics are the series DiskStorage observes on its hot paths. They
// exist from Open on (the journal reports into them before anyone could
// register them) and are exposed by RegisterMetrics.
type storageMetrics struct {
	journalSync    prometheus.Histogram
	journalGroup   prometheus.Histogram
	flushSeconds   prometheus.Histogram
	flushBytes     prometheus.Counter
	gcReclaimed    prometheus.Counter
	gcTombstones   prometheus.Counter
	gcLogsRemoved  prometheus.Counter
	gcJournalFiles prometheus.Counter
	gcEntriesMoved prometheus.Counter
}

func newStorageMetrics() *storageMetrics {
	return &storageMetrics{
		journalSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "magnetar_bookie_journal_sync_seconds",
			Help:    "fdatasync time of each journal commit group (adds are acknowledged after it).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50 µs .. 1.6 s
		}),
		journalGroup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "magnetar_bookie_journal_group_bytes",
			Help:    "Bytes written per journal commit group.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 10), // 256 B .. 64 MiB
		}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "magnetar_bookie_flush_seconds",
			Help:    "Time of each flush of the write cache to the index (and, with copying, the entry logs): a checkpoint.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 14), // 1 ms .. 8 s
		}),
		flushBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_bookie_flush_bytes_total", Help: "Entry bytes flushed from the write cache (indexed in place in the journal, or copied to the entry logs).",
		}),
		gcReclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_bookie_gc_reclaimed_bytes_total", Help: "Entry-log bytes reclaimed by garbage collection.",
		}),
		gcTombstones: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_bookie_gc_tombstones_dropped_total", Help: "Tombstones of deleted ledgers dropped after TombstoneTTL.",
		}),
		gcLogsRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_bookie_gc_entry_logs_removed_total", Help: "Entry logs removed by garbage collection (empty or compacted).",
		}),
		gcJournalFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_bookie_gc_journal_files_released_total", Help: "Journal files released by garbage collection once no index entry pointed into them (some after their live entries were copied to the entry logs).",
		}),
		gcEntriesMoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "magnetar_bookie_gc_entries_moved_total", Help: "Live entries copied to the entry logs by compaction (of entry logs and journal files).",
		}),
	}
}

func (m *storageMetrics) onJournalGroup(bytes int, sync time.Duration) {
	m.journalGroup.Observe(float64(bytes))
	if sync > 0 {
		m.journalSync.Observe(sync.Seconds())
	}
}

func (m *storageMetrics) onGC(st GCStats) {
	m.gcReclaimed.Add(float64(max(st.BytesReclaimed, 0)))
	m.gcTombstones.Add(float64(st.TombstonesDropped))
	m.gcLogsRemoved.Add(float64(st.LogsDeleted + st.LogsCompacted))
	m.gcEntriesMoved.Add(float64(st.EntriesMoved))
	m.gcJournalFiles.Add(float64(st.JournalFilesReleased))
}

// RegisterMetrics registers the storage's Prometheus series on reg: journal
// sync time and group size, flush time and bytes, GC, and gauges of the
// write cache, ledgers, tombstones, entry logs and the read-only state. Call
// it once per registry.
func (s *DiskStorage) RegisterMetrics(reg prometheus.Registerer) error {
	m := s.metrics
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	cs := []prometheus.Collector{
		m.journalSync, m.journalGroup, m.flushSeconds, m.flushBytes,
		m.gcReclaimed, m.gcTombstones, m.gcLogsRemoved, m.gcJournalFiles, m.gcEntriesMoved,
		gauge("magnetar_bookie_write_cache_bytes", "Entry bytes in the write cache, not yet flushed.", func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			n := s.active.bytes
			if s.flushing != nil {
				n += s.flushing.bytes
			}
			return float64(n)
		}),
		gauge("magnetar_bookie_ledgers", "Ledgers stored on this bookie.", func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(len(s.ledgers))
		}),
		gauge("magnetar_bookie_tombstones", "Tombstones of deleted ledgers kept (see TombstoneTTL).", func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(len(s.dead))
		}),
		gauge("magnetar_bookie_entry_log_bytes", "Bytes in entry logs on disk (live and garbage).", func() float64 {
			var n int64
			for _, l := range s.logs.Logs() {
				n += l.Size
			}
			return float64(n)
		}),
		gauge("magnetar_bookie_journal_files", "Journal files kept (not yet released: after a checkpoint, and once no index entry points into them).", func() float64 {
			return float64(len(s.jnl.Files()))
		}),
		gauge("magnetar_bookie_read_only", "1 while the storage refuses writes (disk full or I/O error), else 0.", func() float64 {
			if s.ReadOnly() != nil {
				return 1
			}
			return 0
		}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
