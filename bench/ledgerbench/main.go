// Command ledgerbench measures ledger appends through the whole Magnetar
// write path (ledger client -> wire protocol over loopback TCP -> bookie
// server -> journal with fsync) side by side with the machine's own limit
// (fsync'd appends to a plain file in the same directory), and prints a
// table with the ratios and the performance targets evaluated.
//
// Usage:
//
//	go run ./bench/ledgerbench -dir /path/on/the/disk/to/test [-markdown] [-short]
//
// Bookies run in-process on 127.0.0.1 with disk storage under -dir (journal
// fsync on, the default), metadata in an in-memory store (memstore). Each
// round runs, per entry size, the plain-file baselines and then every
// ledger configuration, so the numbers that are compared were measured
// minutes apart at most; the table shows medians over the rounds.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// options are the command's flags.
type options struct {
	dir           string
	duration      time.Duration // closed-loop measurement
	latDuration   time.Duration // open-loop measurement
	plainDuration time.Duration // each plain-file measurement
	warmup        time.Duration
	rounds        int
	sizes         []int
	configs       []quorum
	inflight      int // 0: by entry size
	groupBytes    int
	loadFraction  float64
	markdown      bool
	timeline      bool   // print each latency run's worst add per 100 ms next to the bookies' fsyncs and flushes
	tracePath     string // execution trace of the first latency run, to this file
	// bufferedJournal sets the bookies' storage.Config.JournalBufferedWrites.
	bufferedJournal bool
	command         string
	plainDir        string // set by run: where the plain files go
}

var allConfigs = []quorum{
	{name: "E=1 Qw=1 Qa=1", bookies: 1, ensemble: 1, qw: 1, qa: 1},
	{name: "E=3 Qw=3 Qa=2", bookies: 3, ensemble: 3, qw: 3, qa: 2},
	{name: "E=1 Qw=1 Qa=1 copied", bookies: 1, ensemble: 1, qw: 1, qa: 1, copyToEntryLogs: true},
	{name: "E=3 Qw=3 Qa=2 copied", bookies: 3, ensemble: 3, qw: 3, qa: 2, copyToEntryLogs: true},
}

func main() {
	var (
		o                             options
		short                         bool
		sizes, configs                string
		cpuProf, blockProf, mutexProf string
	)
	flag.StringVar(&o.dir, "dir", "", "directory on the disk to measure (required); bookie and plain files go below it and are removed")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "measured time of each max-throughput run (after -warmup)")
	flag.DurationVar(&o.latDuration, "lat-duration", 3*time.Second, "measured time of each fixed-rate latency run (after -warmup)")
	flag.DurationVar(&o.plainDuration, "plain-duration", 2*time.Second, "measured time of each plain-file run (after -warmup)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "warm-up before each measurement")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds; the table shows medians")
	flag.StringVar(&sizes, "sizes", "1024,65536", "entry sizes in bytes, comma-separated")
	flag.StringVar(&configs, "configs", "1,3", "ledger configurations by ensemble size: 1 (E=Qw=Qa=1, one bookie), 3 (E=3 Qw=3 Qa=2, three bookies); 1c and 3c: the same with bookies that copy every entry to the entry logs at each flush (storage.Config.CopyToEntryLogs, BookKeeper's layout; the others index entries in place in the journal)")
	flag.IntVar(&o.inflight, "inflight", 0, "closed-loop appends in flight (0: 8192 for entries up to 4 KiB, else 32 MiB worth, at least 64)")
	flag.IntVar(&o.groupBytes, "group-bytes", 512<<10, "bytes per write+fdatasync in the grouped plain baseline (the journal's default MaxGroupBytes)")
	flag.Float64Var(&o.loadFraction, "load", 0.5, "latency runs offer this fraction of the measured max throughput")
	flag.BoolVar(&o.markdown, "markdown", false, "print a Markdown section (date, commit, command, load) instead of the text table")
	flag.StringVar(&o.tracePath, "trace", "", "write an execution trace (go tool trace) of the first latency run to this file")
	flag.BoolVar(&o.timeline, "timeline", false, "print each latency run's worst add latency per 100 ms of scheduled time, above the bookies' mean journal fdatasync and the write-cache flushes that ended in the same 100 ms")
	flag.BoolVar(&o.bufferedJournal, "journal-buffered", false, "the bookies write their journals through the page cache (storage.Config.JournalBufferedWrites; default: O_DIRECT)")
	flag.BoolVar(&short, "short", false, "CI smoke run: one short round (~15 s)")
	flag.StringVar(&cpuProf, "cpuprofile", "", "write a CPU profile to this file")
	flag.StringVar(&blockProf, "blockprofile", "", "write a block profile to this file")
	flag.StringVar(&mutexProf, "mutexprofile", "", "write a mutex profile to this file")
	flag.Parse()
	if o.dir == "" {
		fmt.Fprintln(os.Stderr, "ledgerbench: -dir is required")
		flag.Usage()
		os.Exit(2)
	}
	if short {
		o.shorten()
	}
	var err error
	if o.sizes, err = parseSizes(sizes); err == nil {
		o.configs, err = parseConfigs(configs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgerbench:", err)
		os.Exit(2)
	}
	o.command = commandLine(os.Args)

	if cpuProf != "" {
		f, err := os.Create(cpuProf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ledgerbench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if blockProf != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		defer writeProfile("block", blockProf)
	}
	if mutexProf != "" {
		runtime.SetMutexProfileFraction(10)
		defer writeProfile("mutex", mutexProf)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ledgerbench:", err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// shorten turns o into the CI smoke configuration.
func (o *options) shorten() {
	o.duration = 400 * time.Millisecond
	o.latDuration = 300 * time.Millisecond
	o.plainDuration = 300 * time.Millisecond
	o.warmup = 100 * time.Millisecond
	o.rounds = 1
}

func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgerbench:", err)
		return
	}
	defer f.Close()
	pprof.Lookup(name).WriteTo(f, 0)
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > 4<<20 {
			return nil, fmt.Errorf("bad entry size %q (1 B to 4 MiB)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseConfigs(s string) ([]quorum, error) {
	var out []quorum
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "1":
			out = append(out, allConfigs[0])
		case "3":
			out = append(out, allConfigs[1])
		case "1c":
			out = append(out, allConfigs[2])
		case "3c":
			out = append(out, allConfigs[3])
		default:
			return nil, fmt.Errorf("unknown configuration %q (1, 3, 1c or 3c)", f)
		}
	}
	return out, nil
}

// commandLine renders argv as a shell command a reader can paste.
func commandLine(args []string) string {
	parts := []string{"go run ./bench/ledgerbench"}
	for _, a := range args[1:] {
		if strings.ContainsAny(a, " \t'\"$") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// inflightFor is the closed-loop pipeline depth for an entry size.
func (o *options) inflightFor(size int) int {
	if o.inflight > 0 {
		return o.inflight
	}
	// 1024 entries of 1 KiB, twice the journal's 512 KiB commit group,
	// measured the window rather than the storage: 187-215 MB/s against
	// 272-287 MB/s with 8192 or 32768 in flight (back to back).
	if size <= 4<<10 {
		return 8192
	}
	return max(64, (32<<20)/size)
}
