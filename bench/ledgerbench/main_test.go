package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
)

// TestSmoke runs the benchmark end to end with tiny durations, so CI keeps
// it working. It asserts the report's shape, never a number.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bookies on a real disk for a few seconds")
	}
	o := options{dir: t.TempDir(), groupBytes: 512 << 10, loadFraction: 0.5, command: "test"}
	o.shorten()
	o.duration, o.latDuration, o.plainDuration, o.warmup = 200*time.Millisecond, 150*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	o.sizes = []int{1 << 10, 64 << 10}
	o.configs = allConfigs
	tracePath := filepath.Join(t.TempDir(), "lat.trace")
	for _, md := range []bool{false, true} {
		o.markdown = md
		// The second run also prints timelines and traces its first latency run.
		o.timeline = md
		if md {
			o.tracePath = tracePath
		}
		var out, progress bytes.Buffer
		if err := run(context.Background(), o, &out, &progress); err != nil {
			t.Fatalf("run (markdown %v): %v\nprogress:\n%s", md, err, progress.String())
		}
		if md {
			// The fsync line carries figures: the sampler read the bookies' journal metrics.
			if !regexp.MustCompile(`worst add ms per 100ms:.* [0-9]+`).MatchString(progress.String()) ||
				!regexp.MustCompile(`journal fsync mean ms:.* [0-9]+\.[0-9]`).MatchString(progress.String()) {
				t.Errorf("no timeline with figures in the progress:\n%s", progress.String())
			}
			if fi, err := os.Stat(tracePath); err != nil || fi.Size() == 0 {
				t.Errorf("trace file: %v", err)
			}
		}
		if n := strings.Count(progress.String(), "plain after"); n != len(o.sizes)*len(o.configs) {
			t.Errorf("%d grouped plain runs after a throughput run, want one per size and configuration:\n%s", n, progress.String())
		}
		s := out.String()
		for _, want := range []string{"E=1 Qw=1 Qa=1", "E=3 Qw=3 Qa=2", "1KiB", "64KiB", "memstore", "target >= 80%"} {
			if !strings.Contains(s, want) {
				t.Errorf("report (markdown %v) lacks %q:\n%s", md, want, s)
			}
		}
		if md && !strings.Contains(s, "| config |") {
			t.Errorf("markdown report has no table:\n%s", s)
		}
	}
}

// TestThroughputRatioBracketed: the E=1 throughput target compares with the
// mean of the grouped plain runs before and after the throughput run, not
// with the first plain run of the round.
func TestThroughputRatioBracketed(t *testing.T) {
	o := options{sizes: []int{1 << 10}, configs: allConfigs[:1], loadFraction: 0.5}
	second := func(entries uint64) result {
		h := latency.NewHistogram()
		h.Record(time.Millisecond)
		return result{entries: entries, bytes: entries << 10, elapsed: time.Second, hist: h}
	}
	k := cellKey{0, 1 << 10}
	res := &results{
		plainGrouped: map[int][]result{1 << 10: {second(100), second(300)}}, // before, after
		plainBracket: map[cellKey][]result{k: {meanOf(second(100), second(300))}},
		plainSingle:  map[int][]result{1 << 10: {second(10)}},
		tput:         map[cellKey][]result{k: {second(170)}},
		lat:          map[cellKey][]result{k: {second(85)}},
		plainLat:     map[cellKey][]result{k: {second(85)}},
	}
	rep := buildReport(o, res)
	// 170 against the mean 200: 85%, met; against the first run (100) it
	// would be 170%.
	if got := rep.targets[0]; !got.met || !strings.Contains(got.text, "throughput 85%") {
		t.Errorf("throughput target = %+v, want 85%% and met", got)
	}
}

// BenchmarkOpenLoop offers 1 KiB adds to an E=Qw=Qa=1 ledger on one
// in-process bookie over loopback TCP at a fixed rate (50,000/s, the storage
// benchmark's rate) and reports the add latency percentiles from each add's
// scheduled time: the whole stack (ledger client, wire, server, storage),
// to set beside storage's BenchmarkAddEntryOpenLoop. Sub-benchmarks: entries
// indexed in place in the journal (the default) and copied to the entry
// logs. b.N is ignored; one iteration is a 1 s warm-up and 10 s measured.
func BenchmarkOpenLoop(b *testing.B) {
	for _, layout := range []struct {
		name string
		copy bool
	}{{"in-place", false}, {"copied", true}} {
		b.Run(layout.name, func(b *testing.B) {
			ctx := context.Background()
			c, err := startCluster(ctx, b.TempDir(), 1, storage.Config{CopyToEntryLogs: layout.copy})
			if err != nil {
				b.Fatal(err)
			}
			defer c.close()
			q := allConfigs[0]
			for b.Loop() {
				r, err := openLoop(ctx, c.client, q, 1<<10, 50_000, time.Second, 10*time.Second, nil)
				if err != nil {
					b.Fatal(err)
				}
				ms := func(p float64) float64 { return float64(r.hist.Quantile(p).Microseconds()) / 1000 }
				b.ReportMetric(ms(0.5), "p50-ms")
				b.ReportMetric(ms(0.99), "p99-ms")
				b.ReportMetric(ms(0.999), "p99.9-ms")
			}
		})
	}
}
