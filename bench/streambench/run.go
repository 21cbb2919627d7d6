package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
	"github.com/magnetar-dev/magnetar/bench/internal/machine"
)

// cellKey names one series of per-round results.
type cellKey struct {
	workload string // "W1", "W2", "W3", "W4"
	dur      durability
	rate     int // msg/s; 0 for W2
	system   string
	fanout   int // W4: subscriptions; 0 otherwise
}

// blockLoad is the machine's load around one system's block of one round.
type blockLoad struct {
	round          int
	system         string
	before, after  machine.Load
	busy           float64 // cores busy, all processes
	ours           float64 // cores used by the harness and the servers
	others         float64 // busy - ours
	noisy          bool
	topOthers      []machine.ProcCores // when noisy: who else used the CPU
	cpuPressure10s float64
}

// limits are the machine's own limits, measured in the same run.
type limits struct {
	fsyncBps map[int]float64 // by block size
	rtt      *latency.Histogram
	// groupCommit: a bare write+fdatasync group-commit loop offered W1's
	// rate and message size (machine.GroupCommitAtRate): the latency floor
	// of durability column (a) on this disk.
	groupCommit *latency.Histogram
	damon       string // the kernel's running DAMON monitors (machine.DAMON)
	// copyPlain and copyTLS are a loopback copy of W2's batches in plain
	// text and over TLS (machine.LoopbackCopy), measured when a TLS system
	// runs (copyTLS.Bytes > 0): what encryption alone costs this machine
	// per byte, to read the TLS systems' W2 against.
	copyPlain, copyTLS machine.CopyCost
}

// results holds every measurement of a harness run.
type results struct {
	started, ended time.Time
	limits         limits
	cells          map[cellKey][]runResult
	unsupported    map[cellKey]bool
	failed         map[string]error // system: why it is not (or no longer) measured
	loads          []blockLoad
	catchups       map[string][]catchupResult    // W6 by system, one per round
	manyTopics     map[string][]manyTopicsResult // W5 by system (Magnetar only), one per round
}

// noisyOthers is the share of the CPUs used by other processes above which
// a block is flagged noisy.
const noisyOthers = 0.25

// run executes the harness: limits, then the interleaved rounds.
func run(ctx context.Context, o options, systems []system, progress io.Writer) (*results, error) {
	res := &results{started: time.Now(), cells: map[cellKey][]runResult{},
		unsupported: map[cellKey]bool{}, failed: map[string]error{},
		catchups: map[string][]catchupResult{}, manyTopics: map[string][]manyTopicsResult{},
		limits: limits{fsyncBps: map[int]float64{}}}
	tmp, err := os.MkdirTemp(o.dir, "streambench-")
	if err != nil {
		return nil, fmt.Errorf("streambench: %w", err)
	}
	defer os.RemoveAll(tmp)

	// Build or find every server at once: the builds dominate a short run.
	prepErr := make([]error, len(systems))
	var wg sync.WaitGroup
	for i, s := range systems {
		fmt.Fprintf(progress, "preparing %s\n", s.name())
		wg.Add(1)
		go func() { // owned by run: waited for just below
			defer wg.Done()
			prepErr[i] = s.prepare(ctx, tmp)
		}()
	}
	wg.Wait()
	for i, s := range systems {
		if err := prepErr[i]; err != nil {
			if !errors.Is(err, errUnavailable) || s.name() == "magnetar" {
				return nil, err
			}
			fmt.Fprintf(progress, "%s unavailable: %v\n", s.name(), err)
			res.failed[s.name()] = err
		}
	}
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		bps, err := machine.FsyncAppend(ctx, tmp, size, o.limitDuration)
		if err != nil {
			return nil, err
		}
		res.limits.fsyncBps[size] = bps
	}
	if res.limits.rtt, err = machine.LoopbackRTT(ctx, o.limitDuration); err != nil {
		return nil, err
	}
	if res.limits.groupCommit, _, err = machine.GroupCommitAtRate(tmp, o.size, float64(o.rate), time.Second, max(o.limitDuration, 2*time.Second)); err != nil {
		return nil, err
	}
	res.limits.damon = machine.DAMON(machine.DAMONRoot)
	if slices.ContainsFunc(systems, func(s system) bool { ms, ok := s.(*magnetarSystem); return ok && ms.secure != nil }) {
		if err := measureCopies(ctx, o, &res.limits, progress); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(progress, "limits: fsync'd appends 4KiB %.1f MB/s, 64KiB %.1f MB/s, 1MiB %.1f MB/s; loopback RTT p50 %v p99 %v; group commit at %d msg/s p50 %v p99 %v; kernel DAMON %s\n",
		res.limits.fsyncBps[4<<10]/1e6, res.limits.fsyncBps[64<<10]/1e6, res.limits.fsyncBps[1<<20]/1e6,
		res.limits.rtt.Quantile(0.5), res.limits.rtt.Quantile(0.99),
		o.rate, res.limits.groupCommit.Quantile(0.5), res.limits.groupCommit.Quantile(0.99), cmp.Or(res.limits.damon, "not present"))

	for round := 1; round <= o.rounds; round++ {
		for _, s := range systems {
			if res.failed[s.name()] != nil {
				continue
			}
			if err := runBlock(ctx, o, s, round, tmp, res, progress); err != nil {
				if ctx.Err() != nil || s.name() == "magnetar" {
					return nil, fmt.Errorf("round %d: %w", round, err)
				}
				fmt.Fprintf(progress, "%s failed in round %d, dropped from later rounds: %v\n", s.name(), round, err)
				res.failed[s.name()] = err
			}
		}
	}
	res.ended = time.Now()
	return res, nil
}

// measureCopies measures the loopback copies of W2's batches (a producer's
// full batch: batchMessages messages of o.size bytes) in plain text and
// over TLS, each for at least 2 s.
func measureCopies(ctx context.Context, o options, lim *limits, progress io.Writer) error {
	d := max(o.limitDuration, 2*time.Second)
	var err error
	if lim.copyPlain, err = machine.LoopbackCopy(ctx, batchMessages*o.size, false, d); err != nil {
		return err
	}
	if lim.copyTLS, err = machine.LoopbackCopy(ctx, batchMessages*o.size, true, d); err != nil {
		return err
	}
	fmt.Fprintf(progress, "limits: loopback copy of %d x %s frames: plain %.0f MB/s at %.2f CPU s/GB; %s %.0f MB/s at %.2f CPU s/GB\n",
		batchMessages, sizeName(o.size), lim.copyPlain.BytesPerSec()/1e6, lim.copyPlain.CPUSecondsPerGB(),
		lim.copyTLS.Cipher, lim.copyTLS.BytesPerSec()/1e6, lim.copyTLS.CPUSecondsPerGB())
	return nil
}

// plannedRun is one run within a server's lifetime.
type plannedRun struct {
	key        cellKey
	load       loadSpec
	partitions int // 0: o.partitions
}

// plan lists the runs for durability d.
func plan(o options, system string, d durability) []plannedRun {
	w := o.workloads
	lat := func(workload string, rate int) plannedRun {
		return plannedRun{key: cellKey{workload, d, rate, system, 0}, load: loadSpec{rate: float64(rate), size: o.size,
			warmup: o.warmup, duration: o.duration, drain: o.drain, subscribe: true, pauseGC: !o.gcDuringRuns}}
	}
	var runs []plannedRun
	w1 := w["W1"] && (d == durFsync || d == durOS || d == durMemory) ||
		w["W7"] && (d == durFsync || d == durOS) ||
		w["W3"] && d == durFsync
	if w1 {
		runs = append(runs, lat("W1", o.rate))
	}
	if w["W3"] && d == durFsync {
		for _, r := range o.w3Rates {
			if r != o.rate {
				runs = append(runs, lat("W3", r))
			}
		}
	}
	if w["W2"] && d == durFsync {
		runs = append(runs, plannedRun{key: cellKey{"W2", d, 0, system, 0}, load: loadSpec{window: o.window, size: o.size,
			warmup: o.warmup, duration: o.duration, drain: o.drain, pauseGC: !o.gcDuringRuns}})
	}
	if w["W4"] && d == durFsync {
		for _, f := range o.fanouts {
			r := lat("W4", o.fanoutRate)
			r.key.fanout, r.load.fanout, r.partitions = f, f, 1
			runs = append(runs, r)
		}
	}
	// The runs after the first on a server warm up for less: the first
	// (W1 in (a), on a fresh server) takes the faults of memory touched for
	// the first time and the stall they cause (a first touch costs ~16 µs
	// per 4 KiB page there: docs/benchmarks.md, "Machine limits"); the
	// later ones start on a warm server.
	for i := 1; i < len(runs); i++ {
		runs[i].load.warmup = o.laterWarmup
	}
	return runs
}

// runBlock runs one system's share of one round: a fresh server per
// durability, every planned run against it.
func runBlock(ctx context.Context, o options, s system, round int, tmp string, res *results, progress io.Writer) error {
	bl, self0 := startLoad(round, s.name())
	var serverCPU float64
	for _, d := range allDurabilities {
		runs := plan(o, s.name(), d)
		catchup := o.workloads["W6"] && d == durFsync
		if len(runs) == 0 && !catchup {
			continue
		}
		dir := filepath.Join(tmp, fmt.Sprintf("r%d-%s-%d", round, s.name(), d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("streambench: %w", err)
		}
		// Every run starts on a disk with nothing left to write back:
		// durability (b) leaves hundreds of MB of dirty pages that the
		// kernel would otherwise write back during the next runs. (It
		// did not remove the round-to-round spread of W1's tail.)
		machine.Quiesce()
		srv, err := s.start(ctx, dir, d)
		if errors.Is(err, errUnsupported) {
			for _, r := range runs {
				res.unsupported[r.key] = true
			}
			continue // (every system has (a): W6 is never unsupported)
		}
		if err != nil {
			return fmt.Errorf("start %s %v: %w", s.name(), d, err)
		}
		u0, _ := machine.ReadProc(srv.pid())
		for i, r := range runs {
			spec := topicSpec{name: fmt.Sprintf("r%d-%s-%d-%d", round, r.key.workload, r.key.rate, i),
				partitions: o.partitions, durability: d, throughput: r.key.workload == "W2"}
			if r.partitions > 0 {
				spec.partitions = r.partitions
			}
			r.load.pid = srv.pid()
			machine.Quiesce()
			bracket := r.key.workload == "W2" && s.name() == "magnetar"
			var before float64
			if bracket {
				if before, err = bracketDisk(ctx, dir, o); err != nil {
					srv.stop()
					return err
				}
			}
			rr, err := runLoad(ctx, srv.newAdapter(), spec, r.load)
			if err != nil {
				srv.stop()
				return fmt.Errorf("%s %s %v: %w", s.name(), r.key.workload, d, err)
			}
			if bracket {
				after, err := bracketDisk(ctx, dir, o)
				if err != nil {
					srv.stop()
					return err
				}
				rr.disk = [2]float64{before, after}
			}
			res.cells[r.key] = append(res.cells[r.key], rr)
			fmt.Fprintf(progress, "round %d %-8s %s %-12v %s\n", round, s.name(), r.key.workload, d, describe(rr))
			if o.timeline && len(rr.worst) > 0 {
				fmt.Fprintf(progress, "  worst pub ms per %v: %s\n", timelineStep, timeline(rr.worst, r.load.warmup))
			}
		}
		if catchup {
			spec := topicSpec{name: fmt.Sprintf("r%d-W6", round), partitions: o.partitions, durability: d}
			cr, err := runCatchup(ctx, srv.newAdapter(), spec, o)
			if err != nil {
				srv.stop()
				return fmt.Errorf("%s W6: %w", s.name(), err)
			}
			res.catchups[s.name()] = append(res.catchups[s.name()], cr)
			fmt.Fprintf(progress, "round %d %-8s W6 %-12v %s\n", round, s.name(), d, cr.describe())
		}
		u1, _ := machine.ReadProc(srv.pid())
		serverCPU += u1.Sub(u0).CPUSeconds
		if err := srv.stop(); err != nil {
			return err
		}
		if ms, ok := s.(*magnetarSystem); ok && ms.secure == nil && catchup && o.catchupPaced > 0 && ms.backlogReadRate == 0 {
			cpu, err := runPacedCatchup(ctx, o, ms, round, filepath.Join(tmp, fmt.Sprintf("r%d-%s-W6-paced", round, s.name())), res, progress)
			if err != nil {
				return err
			}
			serverCPU += cpu
		}
		// The data directory stays until the run ends (run removes tmp):
		// deleting gigabytes here would have the next system measured on
		// a disk busy freeing (and, mounted with discard, trimming) them,
		// which put 100-200 ms stalls into the first runs after a delete.
	}
	// W5 creates and restarts its own plain-text standalones.
	if ms, ok := s.(*magnetarSystem); ok && ms.secure == nil && o.workloads["W5"] {
		dir := filepath.Join(tmp, fmt.Sprintf("r%d-%s-W5", round, s.name()))
		mr, cpu, err := runManyTopics(ctx, ms, dir, o)
		serverCPU += cpu
		if err != nil {
			return fmt.Errorf("%s W5: %w", s.name(), err)
		}
		res.manyTopics[s.name()] = append(res.manyTopics[s.name()], mr)
		fmt.Fprintf(progress, "round %d %-8s W5 %s\n", round, s.name(), mr.describe())
	}
	bl.finish(self0, serverCPU)
	res.loads = append(res.loads, bl)
	return nil
}

// startLoad starts the load record of a block: the machine's and the
// harness's own usage before it.
func startLoad(round int, system string) (blockLoad, machine.ProcUsage) {
	bl := blockLoad{round: round, system: system, before: machine.Snapshot()}
	self0, _ := machine.ReadProc(os.Getpid())
	return bl, self0
}

// finish completes bl as its block ends: self0 is the harness's usage at
// startLoad, serverCPU the CPU seconds its servers used meanwhile. A block
// whose other processes used more than noisyOthers cores is noisy, and
// names the two busiest of them.
func (bl *blockLoad) finish(self0 machine.ProcUsage, serverCPU float64) {
	bl.after = machine.Snapshot()
	self1, _ := machine.ReadProc(os.Getpid())
	if secs := bl.after.At.Sub(bl.before.At).Seconds(); secs > 0 {
		bl.busy = machine.BusyCores(bl.before, bl.after)
		bl.ours = (self1.Sub(self0).CPUSeconds + serverCPU) / secs
		bl.others = max(0, bl.busy-bl.ours)
	}
	bl.cpuPressure10s = machine.CPUPressureAvg10()
	bl.noisy = bl.busy >= 0 && bl.others > noisyOthers
	if bl.noisy {
		bl.topOthers = machine.TopOthers(bl.before, bl.after, os.Getpid(), 2)
	}
}

// timeline formats worst (one bucket per timelineStep) in milliseconds,
// with a | where the warm-up ends.
func timeline(worst []time.Duration, warmup time.Duration) string {
	var b strings.Builder
	for i, w := range worst {
		if time.Duration(i)*timelineStep == warmup {
			b.WriteString("| ")
		}
		fmt.Fprintf(&b, "%.0f ", w.Seconds()*1e3)
	}
	return strings.TrimSpace(b.String())
}

func describe(r runResult) string {
	if r.offered == 0 {
		s := fmt.Sprintf("closed loop: %.0f msg/s %.1f MB/s", r.ackedPerSec(), r.mbPerSec())
		if f := r.ofDisk(); f >= 0 {
			s += fmt.Sprintf(" = %.0f%% of fsync'd 1MiB appends just before and after it (%.1f, %.1f MB/s)", 100*f, r.disk[0]/1e6, r.disk[1]/1e6)
		}
		return s
	}
	return fmt.Sprintf("at %.0f/s: acked %d/%d recv %d, pub p50 %v p99 %v, e2e p50 %v p99 %v",
		r.offered, r.acked, r.sent, r.received, r.pub.Quantile(0.5), r.pub.Quantile(0.99),
		r.e2e.Quantile(0.5), r.e2e.Quantile(0.99))
}

// bracketDisk measures the fsync'd 1 MiB append rate in dir for
// o.limitDuration, next to Magnetar's W2 runs: the bandwidth W2's 80%
// target is of. The machine-limits figure, measured once after the disk
// was idle, can read a burst: on the machine this was written on, fifteen
// 1 s measurements in a row read 810 MB/s, then 300-331 MB/s, and ten idle
// seconds did not bring the burst back; runs' start figures ranged from
// 225 to 607 MB/s the same day (docs/benchmarks.md, "Machine limits").
// A ratio to it said more about when it was taken than about the run.
// Peers' W2 runs are not bracketed: the target is Magnetar's, and each
// bracket costs 2 x -limit-duration per round.
func bracketDisk(ctx context.Context, dir string, o options) (float64, error) {
	bps, err := machine.FsyncAppend(ctx, dir, 1<<20, o.limitDuration)
	if err != nil {
		return 0, fmt.Errorf("streambench: fsync'd appends next to W2: %w", err)
	}
	return bps, nil
}

// pacedSystem names W6's paced Magnetar row.
const pacedSystem = "magnetar paced"

// pacedRate is the --backlog-read-rate of W6's paced row, in bytes/s.
func pacedRate(o options) int64 {
	return int64(o.catchupPaced * float64(o.catchupRate) * float64(o.size))
}

// runPacedCatchup runs W6 on a fresh Magnetar started with
// --backlog-read-rate at o.catchupPaced times the producer's byte rate and
// returns the server's CPU seconds.
func runPacedCatchup(ctx context.Context, o options, ms *magnetarSystem, round int, dir string, res *results, progress io.Writer) (float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("streambench: %w", err)
	}
	paced := *ms
	paced.backlogReadRate = pacedRate(o)
	machine.Quiesce()
	srv, err := paced.start(ctx, dir, durFsync)
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", pacedSystem, err)
	}
	u0, _ := machine.ReadProc(srv.pid())
	spec := topicSpec{name: fmt.Sprintf("r%d-W6p", round), partitions: o.partitions, durability: durFsync}
	cr, err := runCatchup(ctx, srv.newAdapter(), spec, o)
	if err != nil {
		srv.stop()
		return 0, fmt.Errorf("%s W6: %w", pacedSystem, err)
	}
	res.catchups[pacedSystem] = append(res.catchups[pacedSystem], cr)
	fmt.Fprintf(progress, "round %d %-8s W6 %-12v %s (--backlog-read-rate %d)\n", round, pacedSystem, durFsync, cr.describe(), paced.backlogReadRate)
	u1, _ := machine.ReadProc(srv.pid())
	return u1.Sub(u0).CPUSeconds, srv.stop()
}
