package main

import (
	"fmt"
	"io"
	"os"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// timelineStep is the width of one -timeline bucket.
const timelineStep = 100 * time.Millisecond

// worstTracker keeps the worst latency per timelineStep of scheduled send
// time (open-loop runs with -timeline).
type worstTracker struct {
	mu    sync.Mutex
	worst []time.Duration
}

func (w *worstTracker) record(at, lat time.Duration) {
	if w == nil || at < 0 {
		return
	}
	i := int(at / timelineStep)
	w.mu.Lock()
	for len(w.worst) <= i {
		w.worst = append(w.worst, 0)
	}
	w.worst[i] = max(w.worst[i], lat)
	w.mu.Unlock()
}

// buckets returns the worst latency per timelineStep so far.
func (w *worstTracker) buckets() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.worst)
}

// storageSample is what the bookies' storage metrics say about one
// timelineStep: journal commit groups synced and their fdatasync time, and
// write-cache flushes (checkpoints) that ended and their time.
type storageSample struct {
	syncs, syncSeconds    float64
	flushes, flushSeconds float64
}

// storageSampler reads the summed storage histograms of a cluster every
// timelineStep until stopped.
type storageSampler struct {
	reg     *prometheus.Registry
	samples []storageSample
	stop    chan struct{}
	done    chan struct{}
}

func startStorageSampler(reg *prometheus.Registry) *storageSampler {
	s := &storageSampler{reg: reg, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *storageSampler) loop() {
	defer close(s.done)
	t := time.NewTicker(timelineStep)
	defer t.Stop()
	prev := s.read()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		cur := s.read()
		s.samples = append(s.samples, storageSample{
			syncs: cur.syncs - prev.syncs, syncSeconds: cur.syncSeconds - prev.syncSeconds,
			flushes: cur.flushes - prev.flushes, flushSeconds: cur.flushSeconds - prev.flushSeconds,
		})
		prev = cur
	}
}

// read sums the cluster's journal-sync and flush histograms.
func (s *storageSampler) read() storageSample {
	var out storageSample
	mfs, err := s.reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			switch mf.GetName() {
			case "magnetar_bookie_journal_sync_seconds":
				out.syncs += float64(h.GetSampleCount())
				out.syncSeconds += h.GetSampleSum()
			case "magnetar_bookie_flush_seconds":
				out.flushes += float64(h.GetSampleCount())
				out.flushSeconds += h.GetSampleSum()
			}
		}
	}
	return out
}

// finish stops the sampler (nil: none) and returns its samples.
func (s *storageSampler) finish() []storageSample {
	if s == nil {
		return nil
	}
	close(s.stop)
	<-s.done
	return s.samples
}

// printTimeline writes an open-loop run's worst add latency per
// timelineStep under the storage's view of the same steps: the mean
// fdatasync of a journal commit group and the flushes that ended.
func printTimeline(w io.Writer, worst []time.Duration, samples []storageSample, warmup time.Duration) {
	var add, fsync, flush strings.Builder
	for i := range max(len(worst), len(samples)) {
		if i > 0 && time.Duration(i)*timelineStep == warmup {
			add.WriteString(" |")
			fsync.WriteString(" |")
			flush.WriteString(" |")
		}
		a, sy, fl := "-", "-", "."
		if i < len(worst) && worst[i] > 0 { // 0: warm-up, not recorded
			a = fmt.Sprintf("%.0f", float64(worst[i])/1e6)
		}
		if i < len(samples) {
			if s := samples[i]; s.syncs > 0 {
				sy = fmt.Sprintf("%.1f", s.syncSeconds/s.syncs*1e3)
			}
			if s := samples[i]; s.flushes > 0 {
				fl = fmt.Sprintf("F%.0f", s.flushSeconds/s.flushes*1e3)
			}
		}
		fmt.Fprintf(&add, " %4s", a)
		fmt.Fprintf(&fsync, " %4s", sy)
		fmt.Fprintf(&flush, " %4s", fl)
	}
	fmt.Fprintf(w, "  worst add ms per %v:%s\n", timelineStep, add.String())
	fmt.Fprintf(w, "  journal fsync mean ms:%s\n", fsync.String())
	fmt.Fprintf(w, "  flush ended (F ms):   %s\n", flush.String())
}

// traceOnce makes -trace cover only the first latency run.
var traceOnce sync.Once

// startTrace starts an execution trace to path (if set, first call only)
// and returns the function that stops it.
func startTrace(path string) (stop func()) {
	stop = func() {}
	if path == "" {
		return stop
	}
	traceOnce.Do(func() {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ledgerbench: trace:", err)
			return
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			fmt.Fprintln(os.Stderr, "ledgerbench: trace:", err)
			return
		}
		stop = func() {
			trace.Stop()
			f.Close()
		}
	})
	return stop
}
