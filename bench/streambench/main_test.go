package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
)

// TestShortRun runs the harness in its smoke configuration against a real
// magnetar and a real nats-server (and redis-server when installed), and
// checks that every table was produced from messages that were really
// acknowledged and received. It asserts no timing.
func TestShortRun(t *testing.T) {
	o := defaultOptions()
	o.shorten()
	o.duration, o.warmup, o.limitDuration = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	o.w3Rates = []int{200, o.rate}
	o.workloads = map[string]bool{"W1": true, "W2": true, "W3": true, "W4": true, "W5": true, "W6": true, "W7": true}
	o.backlog, o.topics, o.fanouts = 512<<10, 20, []int{3}
	o.dir = t.TempDir()
	o.installRedis = false
	o.command = "test"
	o.systems = []string{"magnetar", "nats"}
	if _, err := exec.LookPath("redis-server"); err == nil {
		o.systems = append(o.systems, "redis")
	}
	var err error
	if o.root, err = moduleRoot(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	res, err := run(ctx, o, buildSystems(o), &progress)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, progress.String())
	}
	for name, err := range res.failed {
		t.Errorf("%s failed: %v", name, err)
	}
	for _, sys := range o.systems {
		for _, k := range []cellKey{{"W1", durFsync, o.rate, sys, 0}, {"W1", durOS, o.rate, sys, 0}, {"W1", durMemory, o.rate, sys, 0}, {"W3", durFsync, 200, sys, 0}} {
			rs := res.cells[k]
			if len(rs) != 1 {
				t.Errorf("%+v: %d results, want 1", k, len(rs))
				continue
			}
			if r := rs[0]; r.sent == 0 || r.acked == 0 || r.received == 0 || r.pub.Count() == 0 || r.e2e.Count() == 0 {
				t.Errorf("%+v: sent %d acked %d received %d (histograms %d, %d)", k, r.sent, r.acked, r.received, r.pub.Count(), r.e2e.Count())
			}
		}
		w2 := res.cells[cellKey{"W2", durFsync, 0, sys, 0}]
		// A system that fsyncs every message may ack none inside a 200 ms
		// window on a loaded machine; the drain waits for every ack.
		if len(w2) != 1 || w2[0].allAcked == 0 {
			t.Errorf("%s W2: %+v", sys, w2)
		} else if u := w2[0].usage; !w2[0].hasUsage || u.CPUSeconds <= 0 && u.WriteBytes <= 0 {
			// CPU time comes in clock ticks (10 ms): a peer's smoke-sized
			// W2 can use less than one (it did: NATS, 0 s and 282,624
			// bytes written), so either figure shows the accounting works.
			t.Errorf("%s W2: no server CPU or disk writes accounted: %+v", sys, u)
		}
		// Magnetar's W2 runs are bracketed by fsync'd appends; peers' not.
		if len(w2) == 1 && (w2[0].disk[0] > 0 && w2[0].disk[1] > 0) != (sys == "magnetar") {
			t.Errorf("%s W2: fsync'd appends around the run %v", sys, w2[0].disk)
		}
	}
	for _, sys := range o.systems {
		for _, f := range o.fanouts {
			rs := res.cells[cellKey{"W4", durFsync, o.fanoutRate, sys, f}]
			if len(rs) != 1 {
				t.Errorf("%s W4 x%d: %d results, want 1", sys, f, len(rs))
				continue
			}
			// Every subscription received messages of the window.
			if r := rs[0]; r.acked == 0 || r.subs != f || r.received < uint64(f) || r.e2e.Count() != r.received {
				t.Errorf("%s W4 x%d: acked %d subs %d received %d e2e samples %d", sys, f, r.acked, r.subs, r.received, r.e2e.Count())
			}
		}
		cs := res.catchups[sys]
		if len(cs) != 1 {
			t.Errorf("%s W6: %d results, want 1", sys, len(cs))
		} else if c := cs[0]; !c.caughtUp || c.backlogBytes < uint64(o.backlog) || c.readBytes < c.backlogBytes || c.base.pub.Count() == 0 {
			t.Errorf("%s W6: %+v", sys, c)
		}
	}
	// W6's paced row: Magnetar again, with --backlog-read-rate.
	if cs := res.catchups[pacedSystem]; len(cs) != 1 {
		t.Errorf("%s W6: %d results, want 1", pacedSystem, len(cs))
	} else if c := cs[0]; !c.caughtUp || c.backlogBytes < uint64(o.backlog) || c.readBytes < c.backlogBytes || c.base.pub.Count() == 0 {
		t.Errorf("%s W6: %+v", pacedSystem, c)
	}
	if ms := res.manyTopics["magnetar"]; len(ms) != 1 {
		t.Errorf("W5: %d results, want 1", len(ms))
	} else if m := ms[0]; m.topics != o.topics || m.rssLoaded <= 0 || m.create <= 0 || m.attach <= 0 || m.rssIdle <= 0 || m.fdIdle <= 0 || m.run.acked == 0 || m.ready <= 0 {
		t.Errorf("W5: %+v", m)
	}
	if len(res.manyTopics) != 1 {
		t.Errorf("W5 ran on %d systems, want Magnetar only", len(res.manyTopics))
	}
	if len(res.loads) != len(o.systems) {
		t.Errorf("%d load records, want %d", len(res.loads), len(o.systems))
	}

	rep := buildReport(o, res)
	var text bytes.Buffer
	rep.writeText(&text)
	md := filepath.Join(t.TempDir(), "bench.md")
	f, err := os.Create(md)
	if err != nil {
		t.Fatal(err)
	}
	rep.writeMarkdown(f, o, res)
	f.Close()
	mdText, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Machine limits", "W1: one topic", "W1 ratios", "W3: p99", "W2: maximum", "W7: W1", "W4: fan-out", "W5: many topics", "W6: catch-up", "Load per round", "nats"} {
		if !strings.Contains(text.String(), want) || !strings.Contains(string(mdText), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
	for _, want := range []string{"- commit: `", "- command: `test`", "| durability | system |", "| io pressure after | wall |"} {
		if !strings.Contains(string(mdText), want) {
			t.Errorf("markdown lacks %q:\n%s", want, mdText)
		}
	}
	if d := machine.DAMON(machine.DAMONRoot); d != "" && !strings.Contains(string(mdText), "| kernel DAMON monitors | "+d+" |") {
		t.Errorf("markdown lacks the kernel's DAMON monitors (%s):\n%s", d, mdText)
	}
	if strings.Contains(text.String(), "failed") {
		t.Errorf("report has failed cells:\n%s", text.String())
	}
	t.Logf("progress:\n%s", progress.String())
}

func TestParseFlags(t *testing.T) {
	// -warmup alone sets the later runs' warm-up too; -later-warmup wins.
	for _, c := range []struct {
		args          []string
		warmup, later time.Duration
	}{
		{nil, time.Second, 500 * time.Millisecond},
		{[]string{"-warmup", "3s"}, 3 * time.Second, 3 * time.Second},
		{[]string{"-warmup", "3s", "-later-warmup", "1s"}, 3 * time.Second, time.Second},
		{[]string{"-later-warmup", "0s"}, time.Second, 0},
	} {
		o, _, err := parseArgs(c.args)
		if err != nil || o.warmup != c.warmup || o.laterWarmup != c.later {
			t.Errorf("parseArgs(%q): warm-up %v, later %v, %v; want %v, %v", c.args, o.warmup, o.laterWarmup, err, c.warmup, c.later)
		}
	}
	if _, err := parseWorkloads("W1,W8"); err == nil {
		t.Error("W8 accepted")
	}
	if w, err := parseWorkloads("W4,w5,W6"); err != nil || !w["W4"] || !w["W5"] || !w["W6"] || w["W1"] {
		t.Errorf("parseWorkloads = %v, %v", w, err)
	}
	for in, want := range map[string]int64{"256MiB": 256 << 20, "1GiB": 1 << 30, "4096": 4096, "64KiB": 64 << 10} {
		if n, err := parseSize(in); err != nil || n != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1GiB", "1TB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
	if xs, err := parseInts("1, 4,16"); err != nil || joinInts(xs) != "1,4,16" {
		t.Errorf("parseInts = %v, %v", xs, err)
	}
	if _, err := parseInts("1,0"); err == nil {
		t.Error("fan-out 0 accepted")
	}
	w, err := parseWorkloads("w1, W7")
	if err != nil || !w["W1"] || !w["W7"] || w["W2"] {
		t.Errorf("parseWorkloads = %v, %v", w, err)
	}
	s, err := parseSystems("nats,redis")
	if err != nil || strings.Join(s, ",") != "magnetar,nats,redis" {
		t.Errorf("parseSystems = %v, %v", s, err)
	}
	if _, err := parseSystems("kafka"); err == nil {
		t.Error("unknown system accepted")
	}
}

func TestPlan(t *testing.T) {
	o := defaultOptions()
	count := map[durability]int{}
	for _, d := range allDurabilities {
		count[d] = len(plan(o, "magnetar", d))
	}
	// (a): W1 + W3 at 1k/5k/20k (50k is W1's) + W2 + W4 at four fan-outs
	// (W5 and W6 are not planned runs); (b): W1; (c): W1.
	if count[durFsync] != 9 || count[durOS] != 1 || count[durMemory] != 1 {
		t.Errorf("runs per durability: %v", count)
	}
	// The first run on a server warms up for -warmup, the later ones for
	// -later-warmup.
	for i, r := range plan(o, "magnetar", durFsync) {
		want := o.laterWarmup
		if i == 0 {
			want = o.warmup
		}
		if r.load.warmup != want || r.load.duration != o.duration {
			t.Errorf("(a) run %d (%s): warm-up %v, measured %v; want %v, %v", i, r.key.workload, r.load.warmup, r.load.duration, want, o.duration)
		}
	}
	o.workloads = map[string]bool{"W7": true}
	if n := len(plan(o, "nats", durMemory)); n != 0 {
		t.Errorf("W7 alone plans %d memory runs", n)
	}
	// W4: one run per fan-out on a one-partition topic, in (a) only.
	o.workloads = map[string]bool{"W4": true}
	runs := plan(o, "redis", durFsync)
	if len(runs) != len(o.fanouts) {
		t.Fatalf("W4 plans %d runs, want %d", len(runs), len(o.fanouts))
	}
	for i, r := range runs {
		if r.key.fanout != o.fanouts[i] || r.load.fanout != o.fanouts[i] || r.partitions != 1 || r.key.rate != o.fanoutRate {
			t.Errorf("W4 run %d: %+v", i, r)
		}
	}
	if n := len(plan(o, "redis", durOS)); n != 0 {
		t.Errorf("W4 plans %d runs in (b)", n)
	}
}

// TestRunTimeout: a run longer than -timeout stops with an error naming it,
// and leaves no server of its own running (the limit is long enough for the
// build and the machine limits, so it ends a W1 run against a server).
func TestRunTimeout(t *testing.T) {
	o := defaultOptions()
	o.shorten()
	o.systems, o.workloads = []string{"magnetar"}, map[string]bool{"W1": true}
	o.dir, o.command, o.installRedis = t.TempDir(), "test", false
	o.timeout = time.Minute
	var err error
	if o.root, err = moduleRoot(); err != nil {
		t.Fatal(err)
	}
	// The run builds its own binary within o.timeout: a build now leaves
	// it the link only, on a loaded machine too.
	if err := goBuild(context.Background(), o.root, filepath.Join(t.TempDir(), "magnetar"), "./cmd/magnetar"); err != nil {
		t.Fatal(err)
	}
	o.duration = 5 * time.Minute // the run cannot end within o.timeout
	var out, progress bytes.Buffer
	err = runAndReport(context.Background(), o, &out, &progress, "")
	if err == nil || !strings.Contains(err.Error(), "-timeout 1m0s") {
		t.Fatalf("runAndReport = %v, want the timeout\nprogress:\n%s", err, progress.String())
	}
	if !strings.Contains(progress.String(), "limits:") {
		t.Fatalf("the run stopped before its server started:\n%s", progress.String())
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		if b, err := os.ReadFile(c); err == nil && strings.Contains(string(b), o.dir) {
			t.Errorf("a process of the run is still running: %s", strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// TestOfDiskCell checks W2's share of the bracketing fsync'd appends on
// made-up rounds: each round against the mean of its own two brackets, the
// median and range over the rounds that have them.
func TestOfDiskCell(t *testing.T) {
	round := func(mbps, before, after float64) runResult {
		return runResult{ackBytes: uint64(mbps * 1e6), elapsed: time.Second, disk: [2]float64{before * 1e6, after * 1e6}}
	}
	k := cellKey{"W2", durFsync, 0, "magnetar", 0}
	res := &results{cells: map[cellKey][]runResult{k: {
		round(200, 200, 300), // 80%
		round(240, 200, 200), // 120%
		round(100, 400, 600), // 20%
		round(500, 0, 0),     // not bracketed: left out
	}}}
	if got, want := res.spreadCell(k, ofDiskPct, "%.0f"), "80 [20–120]"; got != want {
		t.Errorf("spreadCell = %q, want %q", got, want)
	}
	if f := round(500, 0, 600).ofDisk(); f != -1 {
		t.Errorf("ofDisk with one bracket missing = %v, want -1", f)
	}
	if got := describe(round(240, 200, 200)); !strings.Contains(got, "= 120% of fsync'd 1MiB appends just before and after it (200.0, 200.0 MB/s)") {
		t.Errorf("describe = %q", got)
	}
}
