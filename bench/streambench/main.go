package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// generatorMemoryLimit bounds the load generator's heap
// (debug.SetMemoryLimit) when nothing is prefaulted; with a prefault the
// limit is memoryLimitFor(prefault).
const generatorMemoryLimit = 3 << 30

// defaultPrefault is the least heap the generator writes before the first
// round (memory.go, prefaultFor): the default runs peaked at 1.7 GiB of
// heap (W4 at 64 subscriptions, W2 closed loop), and writing
// a GiB takes ~2 s here.
const defaultPrefault = 2 << 30

// prefaultMaxDefault caps the default prefault; -prefault sets any size.
const prefaultMaxDefault = 8 << 30

// w1AllocRate is what the generator allocates per second of a W1 run at
// 50,000 msg/s of 1 KiB (~300 MB/s measured), with a margin.
const w1AllocRate = 400 << 20

// prefaultFor is the default prefault for runs of length run (warm-up,
// measurement and drain): what a W1 run allocates in that time, between
// defaultPrefault and prefaultMaxDefault, in whole GiB. Longer or faster
// runs use the written pages up and are collected at the memory limit
// (memoryLimitFor).
func prefaultFor(run time.Duration) int64 {
	n := int64(run.Seconds() * w1AllocRate)
	n = (n + 1<<30 - 1) &^ (1<<30 - 1)
	return min(max(n, defaultPrefault), prefaultMaxDefault)
}

// defaultWindow is W2's messages in flight. A closed loop measures the
// system only when the window is not the limit: with 1,024 spread over 16
// partitions, no producer's batch ever fills, each waits out its 10 ms
// delay, and every system that acknowledges in under ~5 ms is capped near
// window / (delay + round trip), ~70,000 msg/s. At 8,192 a full batch
// leaves every ~1 ms; 32,768 adds no more than 3%.
const defaultWindow = 8192

// defaultCreateInflight is how many topic creations W5 keeps in flight. A
// creation is one metadata-store commit; the store groups concurrent ones
// under one fsync, so with 16 in flight (the first choice) the rate was
// bound by the commit latency (2,809/s at 10,000 topics) with
// the cores half idle; 64 reached 6,216/s and 256 5,043/s (CPU-bound).
// A rate target is measured at saturation, like W2.
const defaultCreateInflight = 64

// options are the command's flags.
type options struct {
	workloads      map[string]bool
	systems        []string
	rounds         int
	duration       time.Duration // measured part of each run
	warmup         time.Duration // excluded start of each run
	laterWarmup    time.Duration // warm-up of the runs after the first on a server (plan)
	drain          time.Duration // longest wait for the last acks and deliveries
	limitDuration  time.Duration // each machine-limit measurement
	rate           int           // W1 msg/s
	w3Rates        []int
	size           int
	partitions     int
	window         int // W2 messages in flight
	createInflight int // W5 admin requests in flight
	fanoutRate     int // W4 msg/s published to the one topic
	fanouts        []int
	backlog        int64         // W6 bytes of backlog
	catchupRate    int           // W6 producer msg/s
	catchupLimit   time.Duration // W6 longest catch-up before it is reported as not caught up
	// magnetarFlags are extra flags for every Magnetar standalone started.
	magnetarFlags []string
	// backlogReadRate starts Magnetar with --backlog-read-rate (bytes/s).
	backlogReadRate int64
	// catchupPaced, when positive (and backlogReadRate is not set), runs
	// W6 a second time on a Magnetar started with --backlog-read-rate at
	// this multiple of the W6 producer's byte rate: the row "magnetar
	// paced". Pacing is an operator's setting (off by default, as Pulsar's
	// dispatch throttling); on two cores shared with the load generator an
	// unpaced catch-up takes the CPU the producer needs.
	catchupPaced float64
	// pprofAddr starts Magnetar with --pprof-addr.
	pprofAddr string
	// timeline prints, after each open-loop run, its worst publish latency
	// per 100 ms of scheduled send time.
	timeline bool
	// gcDuringRuns leaves the load generator's collector on during runs
	// (by default it is paused in each run and run between them: pauseGC).
	gcDuringRuns bool
	// prefault is how many bytes of heap the generator touches once before
	// the first round (prefaultHeap; 0: none; not with gcDuringRuns). main
	// sizes it to the runs (prefaultFor) unless -prefault or -short is
	// given; the harness's tests leave it 0.
	prefault     int64
	topics       int // W5 topics
	topicsRate   int // W5 total msg/s spread over the topics
	dir          string
	root         string // module root, where `go build` runs
	installRedis bool
	command      string
	timeout      time.Duration // the whole run's limit (0: none)
}

// defaults: every workload, 5 interleaved rounds of 3 systems, stays
// under 15 minutes on a 2-core machine (the benchmarks issue's bound for
// `make bench`): runs measure 2 s after 1 s of warm-up (100,000 samples
// at W1's rate, enough for a p99.9; 0.5 s for the runs after the first on
// a server: 13m2s against 14m6s with 1 s) and wait at most
// 1 s for late acks; W6's backlog is 32 MiB (NATS with sync always builds
// it at ~4.5 MB/s) and a catch-up is cut at 8 s (Magnetar and Redis read
// it in under half a second, Magnetar paced at 2.2x the producer in ~4 s;
// NATS reads it back at 2-3 MB/s and is cut either way). With a 2 s
// drain, 48 MiB and a 10 s cut, runs took 12 minutes on a quiet machine
// and 16-17 minutes when the disk was slow, over the bound.
// The full-size runs (4 s, W6 1 GiB, W5 100k topics) are flags.
func defaultOptions() options {
	return options{
		workloads: map[string]bool{"W1": true, "W2": true, "W3": true, "W4": true, "W5": true, "W6": true, "W7": true},
		systems:   []string{"magnetar", "nats", "redis"},
		rounds:    5, duration: 2 * time.Second, warmup: time.Second, laterWarmup: 500 * time.Millisecond, drain: time.Second,
		limitDuration: time.Second, rate: 50000, w3Rates: []int{1000, 5000, 20000, 50000},
		size: 1024, partitions: 16, window: defaultWindow, createInflight: defaultCreateInflight, installRedis: true,
		fanoutRate: 5000, fanouts: []int{1, 4, 16, 64},
		backlog: 32 << 20, catchupRate: 5000, catchupLimit: 8 * time.Second, catchupPaced: 2.2,
		topics: 10000, topicsRate: 1000, timeout: time.Hour,
	}
}

// shorten turns o into the smoke configuration: tiny rates and durations,
// one round.
func (o *options) shorten() {
	o.rounds = 1
	o.duration, o.warmup, o.laterWarmup, o.drain, o.limitDuration = 500*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond, 2*time.Second, 100*time.Millisecond
	o.rate, o.w3Rates, o.window = 1000, []int{200, 1000}, 256
	o.fanoutRate, o.fanouts = 200, []int{1, 4}
	o.backlog, o.catchupRate, o.catchupLimit, o.catchupPaced = 4<<20, 200, 30*time.Second, 10
	o.topics, o.topicsRate = 50, 100
}

// cliExtras are the command-line settings that are not options: they act
// on the load generator process itself.
type cliExtras struct {
	markdown  string // -markdown
	selfPprof string // -self-pprof
	gogc      int    // -gogc
}

// parseArgs parses the command line (without the program name) into the
// options and the process settings. -short applies the smoke
// configuration, under explicitly set flags.
func parseArgs(args []string) (options, cliExtras, error) {
	o := defaultOptions()
	var x cliExtras
	var workloads, systems, fanouts, backlog, prefault, magnetarFlags string
	var short bool
	fs := flag.NewFlagSet("streambench", flag.ContinueOnError)
	fs.StringVar(&workloads, "workloads", "W1,W2,W3,W4,W5,W6,W7", "workloads to run")
	fs.StringVar(&systems, "systems", strings.Join(o.systems, ","), "systems to run: magnetar first, then peers (nats, redis, magnetar-cluster: 3 bookies + 2 brokers, magnetar-copied: the standalone with --copy-to-entry-logs, magnetar-secure: the standalone over TLS with token authentication and authorization, magnetar-tls: over TLS without them)")
	fs.IntVar(&o.rounds, "rounds", o.rounds, "interleaved rounds per system")
	fs.DurationVar(&o.duration, "duration", o.duration, "measured time of each run")
	fs.DurationVar(&o.warmup, "warmup", o.warmup, "warm-up before each measurement (excluded)")
	fs.DurationVar(&o.laterWarmup, "later-warmup", o.laterWarmup, "warm-up of each run after the first on the same server (-warmup alone sets it too)")
	fs.IntVar(&o.rate, "rate", o.rate, "W1 rate in msg/s")
	fs.IntVar(&o.size, "size", o.size, "message size in bytes")
	fs.IntVar(&o.window, "window", o.window, "W2 messages in flight (closed loop), over all partitions")
	fs.IntVar(&o.createInflight, "create-inflight", o.createInflight, "W5 topic creations (admin requests) in flight")
	fs.IntVar(&o.fanoutRate, "fanout-rate", o.fanoutRate, "W4 msg/s published to the one topic")
	fs.StringVar(&fanouts, "fanouts", joinInts(o.fanouts), "W4 subscription counts")
	fs.StringVar(&backlog, "backlog", sizeName(int(o.backlog)), "W6 backlog to build and catch up on (the full run: 1GiB)")
	fs.StringVar(&prefault, "prefault", "", "heap the load generator writes once before the first round, so runs do not take page faults on fresh memory (default: what a W1 run of -warmup + -duration + -drain allocates, at least 2GiB; 0: none; -short: none)")
	fs.IntVar(&o.catchupRate, "catchup-rate", o.catchupRate, "W6 producer msg/s while the backlog is read")
	fs.StringVar(&o.pprofAddr, "pprof-addr", "", "start Magnetar with --pprof-addr (for example 127.0.0.1:6061) to profile it while a workload runs")
	fs.Int64Var(&o.backlogReadRate, "backlog-read-rate", 0, "start Magnetar with --backlog-read-rate (bytes/s; catch-up reads paced; 0: unpaced, the default)")
	fs.Float64Var(&o.catchupPaced, "catchup-paced", o.catchupPaced, "W6 also on a Magnetar with --backlog-read-rate at this multiple of the producer's byte rate (row \"magnetar paced\"; 0: not run)")
	fs.DurationVar(&o.catchupLimit, "catchup-limit", o.catchupLimit, "W6 longest catch-up (then reported as not caught up)")
	fs.IntVar(&o.topics, "topics", o.topics, "W5 topics to create (the full run: 100000)")
	fs.IntVar(&o.topicsRate, "topics-rate", o.topicsRate, "W5 total msg/s, round robin over the topics")
	fs.StringVar(&o.dir, "dir", "", "directory for binaries and data (default: the system temp dir)")
	fs.BoolVar(&o.timeline, "timeline", false, "after each open-loop run, print its worst publish latency (ms) per 100 ms of scheduled send time, warm-up included and marked with |")
	fs.BoolVar(&short, "short", false, "smoke run: tiny rates and durations, one round")
	fs.StringVar(&x.markdown, "markdown", "", "also write the Markdown section (date, commit, command, limits, tables, load) to this file")
	fs.BoolVar(&o.gcDuringRuns, "gc-during-runs", false, "leave the load generator's garbage collector on during each run (default: collect between runs, not in them; its cycles put 20-30 ms spikes into every system's latency)")
	fs.StringVar(&magnetarFlags, "magnetar-flags", "", "extra flags for every Magnetar standalone started (space-separated, for example \"--journal-buffered-writes\")")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "stop the whole run (servers included) with an error after this long (0: never); a run whose server hung or lost its data directory otherwise keeps going")
	fs.StringVar(&x.selfPprof, "self-pprof", "", "serve the load generator's own /debug/pprof on this address (for example 127.0.0.1:6062)")
	fs.IntVar(&x.gogc, "gogc", 400, "GOGC of the load generator itself until its first run, and with -gc-during-runs (servers are separate processes and keep their own)")
	if err := fs.Parse(args); err != nil {
		return o, x, err
	}
	if fs.NArg() > 0 {
		return o, x, fmt.Errorf("streambench: unexpected arguments %q", fs.Args())
	}
	o.magnetarFlags = strings.Fields(magnetarFlags)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["warmup"] && !set["later-warmup"] {
		o.laterWarmup = o.warmup
	}
	if short { // explicit flags win over -short
		explicit := o
		o.shorten()
		keep := func(name string, dst *int, v int) {
			if set[name] {
				*dst = v
			}
		}
		keep("rounds", &o.rounds, explicit.rounds)
		keep("fanout-rate", &o.fanoutRate, explicit.fanoutRate)
		keep("catchup-rate", &o.catchupRate, explicit.catchupRate)
		keep("topics", &o.topics, explicit.topics)
		keep("topics-rate", &o.topicsRate, explicit.topicsRate)
		if set["catchup-limit"] {
			o.catchupLimit = explicit.catchupLimit
		}
		if set["catchup-paced"] {
			o.catchupPaced = explicit.catchupPaced
		}
	}
	var err error
	if !short || set["fanouts"] {
		if o.fanouts, err = parseInts(fanouts); err != nil {
			return o, x, err
		}
	}
	if !short || set["backlog"] {
		if o.backlog, err = parseSize(backlog); err != nil {
			return o, x, err
		}
	}
	switch {
	case set["prefault"]:
		if o.prefault, err = parseSizeOrZero(prefault); err != nil {
			return o, x, err
		}
	case !short:
		o.prefault = prefaultFor(o.warmup + o.duration + o.drain)
	}
	if o.workloads, err = parseWorkloads(workloads); err != nil {
		return o, x, err
	}
	if o.systems, err = parseSystems(systems); err != nil {
		return o, x, err
	}
	return o, x, nil
}

func main() {
	o, x, err := parseArgs(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err == nil {
		o.root, err = moduleRoot()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "streambench:", err)
		os.Exit(2)
	}
	// The load generator allocates a payload per message and its clients
	// more; at the default GOGC its collector ran every ~180 ms for ~40 ms
	// on the two cores the servers share, and its pauses and assists
	// showed up in every system's latency (Magnetar's W1 memory-only e2e
	// p99 22.8-27.9 ms at GOGC 100, 13.8-14.1 ms at 400).
	debug.SetGCPercent(x.gogc)
	if x.selfPprof != "" {
		ln, err := net.Listen("tcp", x.selfPprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "streambench:", err)
			os.Exit(2)
		}
		go http.Serve(ln, nil) // net/http/pprof registers on the default mux
	}
	o.command = commandLine(os.Args)
	// With the collector paused (pauseGC), the heap stops at this limit,
	// where the runtime collects regardless (a 1 GiB W6 catch-up read
	// allocates ~6 GiB in the client): a collection costs a spike of
	// 10-30 ms, growing the heap past the prefaulted pages a fault per
	// page (memoryLimitFor).
	debug.SetMemoryLimit(memoryLimitFor(o.prefault))
	if !o.gcDuringRuns && o.prefault > 0 {
		// First, while the heap is fresh from the kernel: the runtime
		// zeroes reused pages itself, a fault per page (memory.go).
		t0 := time.Now()
		faults, err := prefaultHeap(o.prefault)
		if err != nil {
			fmt.Fprintln(os.Stderr, "streambench:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "prefault: %s of heap written in %v (%d page faults)\n", sizeName(int(o.prefault)), time.Since(t0).Round(time.Millisecond), faults)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := runAndReport(ctx, o, os.Stdout, os.Stderr, x.markdown); err != nil {
		fmt.Fprintln(os.Stderr, "streambench:", err)
		stop()
		os.Exit(1)
	}
}

// runAndReport runs the harness, prints the tables to out and, when
// markdownPath is set, writes the Markdown section there.
// It stops everything after o.timeout (0: never).
func runAndReport(ctx context.Context, o options, out, progress io.Writer, markdownPath string) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("the run took longer than -timeout %v", o.timeout))
		defer cancel()
	}
	res, err := run(ctx, o, buildSystems(o), progress)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w (%w)", context.Cause(ctx), err)
		}
		return err
	}
	rep := buildReport(o, res)
	rep.writeText(out)
	if markdownPath != "" {
		f, err := os.Create(markdownPath)
		if err != nil {
			return fmt.Errorf("streambench: %w", err)
		}
		rep.writeMarkdown(f, o, res)
		if err := f.Close(); err != nil {
			return fmt.Errorf("streambench: %w", err)
		}
	}
	return nil
}

func buildSystems(o options) []system {
	var out []system
	for _, s := range o.systems {
		switch s {
		case "magnetar":
			out = append(out, &magnetarSystem{root: o.root, backlogReadRate: o.backlogReadRate, pprofAddr: o.pprofAddr, extraArgs: o.magnetarFlags})
		case "nats":
			out = append(out, &natsSystem{root: o.root})
		case "magnetar-cluster":
			out = append(out, &clusterSystem{root: o.root})
		case "magnetar-copied":
			out = append(out, &magnetarSystem{root: o.root, backlogReadRate: o.backlogReadRate, copyToEntryLogs: true, extraArgs: o.magnetarFlags})
		case "magnetar-secure":
			out = append(out, &magnetarSystem{root: o.root, backlogReadRate: o.backlogReadRate, pprofAddr: o.pprofAddr, secure: &secureSetup{}, extraArgs: o.magnetarFlags})
		case "magnetar-tls":
			out = append(out, &magnetarSystem{root: o.root, backlogReadRate: o.backlogReadRate, pprofAddr: o.pprofAddr, secure: &secureSetup{tlsOnly: true}, extraArgs: o.magnetarFlags})
		case "redis":
			out = append(out, &redisSystem{install: o.installRedis})
		}
	}
	return out
}

func parseWorkloads(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		switch w := strings.ToUpper(strings.TrimSpace(f)); w {
		case "W1", "W2", "W3", "W4", "W5", "W6", "W7":
			out[w] = true
		default:
			return nil, fmt.Errorf("unknown workload %q", f)
		}
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

// parseSize parses a byte count with an optional B, KiB, MiB or GiB suffix.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q (e.g. 256MiB, 1GiB)", s)
	}
	return n * mult, nil
}

// parseSizeOrZero is parseSize that also takes "0".
func parseSizeOrZero(s string) (int64, error) {
	if strings.TrimSpace(s) == "0" {
		return 0, nil
	}
	return parseSize(s)
}

func parseSystems(s string) ([]string, error) {
	out := []string{"magnetar"} // always first: every ratio is against it
	for _, f := range strings.Split(s, ",") {
		switch n := strings.ToLower(strings.TrimSpace(f)); n {
		case "magnetar":
		case "nats", "redis", "magnetar-cluster", "magnetar-copied", "magnetar-secure", "magnetar-tls":
			out = append(out, n)
		default:
			return nil, fmt.Errorf("unknown system %q (magnetar, nats, redis, magnetar-cluster, magnetar-copied, magnetar-secure, magnetar-tls)", f)
		}
	}
	return out, nil
}

// commandLine renders argv as a shell command a reader can paste.
func commandLine(args []string) string {
	parts := []string{"go run ./bench/streambench"}
	for _, a := range args[1:] {
		if strings.ContainsAny(a, " \t'\"$") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}
