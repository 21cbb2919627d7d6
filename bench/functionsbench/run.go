package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
)

// exclamationClass is the Java example function: input + "!".
const exclamationClass = "org.apache.pulsar.functions.api.examples.ExclamationFunction"

// exclamationPy is the Python exclamation function (our own, a
// pulsar.Function as users write them).
const exclamationPy = `from pulsar import Function


class ExclamationFunction(Function):
    def process(self, input, context):
        return input + "!"
`

// javaRAM is the Java instances' resources.ram: their -Xmx (the default
// 1 GiB per JVM is too much on a 2-core machine).
const javaRAM = 256 << 20

// noisyOthers is the share of the CPUs used by other processes above which
// a block is flagged noisy.
const noisyOthers = 0.25

// sample is one system's measurements in one round, by metric key.
type sample map[string]float64

// blockLoad is the machine's load around one system's block of one round.
type blockLoad struct {
	round          int
	system         string
	before, after  machine.Load
	busy           float64 // cores busy, all processes
	ours           float64 // cores used by the benchmark and the server's tree
	others         float64 // busy - ours
	topOthers      []machine.ProcCores
	cpuPressure10s float64
}

// densityResult is one density run: n idle instances on one worker.
type densityResult struct {
	system, runtime string
	n, running      int
	wave            int           // functions created before waiting for them to run (n: all at once)
	allRunning      time.Duration // first create request to all running
	instRSS         float64       // MiB, all instances
	serverRSS       float64       // MiB, the worker's (broker's) process
	serverCores     float64       // the worker process's CPU at idle
	instCores       float64       // all instances' CPU at idle
	idle            time.Duration
	err             error
}

// results is everything one run measured.
type results struct {
	started, ended time.Time
	loadBefore     string              // /proc/loadavg before the run
	samples        map[string][]sample // by system, one per round
	failures       []string            // "round r system: error"
	loads          []blockLoad
	density        []densityResult
	pulsarJVM      string // the broker JVM's heap and collector flags
}

// run executes the rounds and the density runs.
func run(ctx context.Context, o options, systems []system, pkgs packages, progress io.Writer) (*results, error) {
	res := &results{started: time.Now(), samples: map[string][]sample{}, loadBefore: machine.Snapshot().LoadAvg}
	tmp, err := os.MkdirTemp(o.dir, "functionsbench-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		fmt.Fprintln(progress, "keeping the standalones' directories (data, logs) in", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	for r := 1; r <= o.rounds; r++ {
		for _, sys := range systems {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			dir := filepath.Join(tmp, fmt.Sprintf("r%d-%s", r, sys.name()))
			fmt.Fprintf(progress, "round %d/%d %s\n", r, o.rounds, sys.name())
			bl := blockLoad{round: r, system: sys.name(), before: machine.Snapshot()}
			self0, _ := machine.ReadProc(os.Getpid())
			s, serverCPU, err := roundOf(ctx, o, sys, dir, pkgs, progress)
			finishLoad(&bl, self0, serverCPU)
			res.loads = append(res.loads, bl)
			if err != nil {
				res.failures = append(res.failures, fmt.Sprintf("round %d %s: %s", r, sys.name(), shortErr(err)))
				fmt.Fprintf(progress, "  %s round %d failed: %v\n", sys.name(), r, err)
			}
			if len(s) > 0 {
				res.samples[sys.name()] = append(res.samples[sys.name()], s)
			}
			if ps, ok := sys.(*pulsarSystem); ok && ps.jvmArgs != "" {
				res.pulsarJVM = ps.jvmArgs
			}
		}
	}
	for _, sys := range systems {
		var runs []densitySpec
		if sys.name() == "magnetar" && o.density > 0 {
			runs = append(runs, densitySpec{runtime: "PYTHON", n: o.density})
		}
		if o.javaDensity > 0 {
			runs = append(runs, densitySpec{runtime: "JAVA", n: o.javaDensity})
		}
		for _, spec := range runs {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			fmt.Fprintf(progress, "density %s: %d idle %s instances\n", sys.name(), spec.n, strings.ToLower(spec.runtime))
			dir := filepath.Join(tmp, fmt.Sprintf("density-%s-%s", sys.name(), strings.ToLower(spec.runtime)))
			d := densityOf(ctx, o, sys, dir, spec, pkgs, progress)
			if d.err != nil {
				fmt.Fprintf(progress, "  density %s failed: %v\n", sys.name(), d.err)
			}
			res.density = append(res.density, d)
		}
	}
	res.ended = time.Now()
	return res, nil
}

// finishLoad completes bl as its block ends: self0 is the benchmark's own
// usage when it began, serverCPU what the server's tree used meanwhile.
func finishLoad(bl *blockLoad, self0 machine.ProcUsage, serverCPU float64) {
	bl.after = machine.Snapshot()
	self1, _ := machine.ReadProc(os.Getpid())
	if secs := bl.after.At.Sub(bl.before.At).Seconds(); secs > 0 {
		bl.busy = machine.BusyCores(bl.before, bl.after)
		bl.ours = (self1.Sub(self0).CPUSeconds + serverCPU) / secs
		bl.others = max(0, bl.busy-bl.ours)
	}
	bl.cpuPressure10s = machine.CPUPressureAvg10()
	if bl.busy >= 0 && bl.others > noisyOthers {
		bl.topOthers = machine.TopOthers(bl.before, bl.after, os.Getpid(), 2)
	}
}

// packages are the function packages, read once.
type packages struct {
	javaJar fnPackage // the API examples jar
	python  fnPackage // exclamation.py
}

// roundOf runs one system's block of one round on a fresh standalone and
// returns what it measured (possibly partial, with the error that ended
// it) and the CPU seconds the server's tree used.
func roundOf(ctx context.Context, o options, sys system, dir string, pkgs packages, progress io.Writer) (sample, float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, err
	}
	s := sample{}
	srv, err := sys.start(ctx, dir)
	if err != nil {
		return nil, 0, err
	}
	s["ready"] = srv.readyAfter.Seconds()
	defer func() {
		if err := srv.stop(); err != nil {
			fmt.Fprintf(progress, "  %s stop: %v\n", sys.name(), err)
		}
	}()
	err = measureRound(ctx, o, sys, srv, pkgs, s, progress)
	// The server started in this block: its cumulative CPU is the block's.
	var serverCPU float64
	if t1, terr := readTree(srv.pid); terr == nil {
		u := t1.usage()
		serverCPU = u.server + u.instances
	}
	return s, serverCPU, err
}

// measureRound fills s with one round's metrics on a running server.
func measureRound(ctx context.Context, o options, sys system, srv *server, pkgs packages, s sample, progress io.Writer) error {
	adm := newAdmin(srv.webURL)
	cl, err := newClient(srv.brokerURL)
	if err != nil {
		return err
	}
	defer cl.Close()

	// create -> running and first output, Java ExclamationFunction.
	const fn = "excl-java"
	in, out := "persistent://public/default/excl-java-in", "persistent://public/default/excl-java-out"
	p, err := openPipe(cl, in, out)
	if err != nil {
		return err
	}
	defer p.close()
	created, err := createTimed(ctx, adm, p, fn, map[string]any{
		"tenant": "public", "namespace": "default", "name": fn,
		"runtime": "JAVA", "className": exclamationClass,
		"inputs": []string{in}, "output": out, "parallelism": 1,
		"subscriptionPosition": "Earliest", "processingGuarantees": "ATLEAST_ONCE",
		"resources": map[string]any{"cpu": 1.0, "ram": javaRAM, "disk": 10 << 30},
	}, pkgs.javaJar, o.createLimit)
	if err != nil {
		return fmt.Errorf("create %s: %w; server log tail:\n%s", fn, err, srv.logTail())
	}
	s["create_http"] = created.request.Seconds() * 1000
	s["to_running"] = created.running.Seconds()
	s["to_output"] = created.output.Seconds()
	fmt.Fprintf(progress, "  %s java: running %.2fs, first output %.2fs\n", sys.name(), created.running.Seconds(), created.output.Seconds())
	if sys.name() == "magnetar" {
		// The instance's own start, from its worker's histogram: the
		// floor under create → running for any worker that runs this
		// Java instance, Pulsar's included.
		if secs, err := instanceStartSeconds(ctx, srv.webURL, "JAVA"); err == nil {
			s["java_inst_start"] = secs
		} else {
			fmt.Fprintf(progress, "  %s java: instance start not measured: %v\n", sys.name(), err)
		}
	}

	if err := sleepCtx(ctx, o.settle); err != nil {
		return err
	}
	if err := recordRSS(srv.pid, fn, "idle", s); err != nil {
		return err
	}

	// Closed loop: o.messages through the function.
	t0, err := readTree(srv.pid)
	if err != nil {
		return err
	}
	tp := p.throughput(ctx, 1, o.messages, o.size, o.window, o.throughputLimit)
	t1, err := readTree(srv.pid)
	if err != nil {
		return err
	}
	if tp.received > 0 {
		d := cpuDelta(t0.usage(), t1.usage())
		s["tput"] = tp.rate()
		s["tput_recv_pct"] = 100 * float64(tp.received) / float64(o.messages)
		s["cpu_per_m"] = (d.server + d.instances) / float64(tp.received) * 1e6
		s["cpu_per_m_server"] = d.server / float64(tp.received) * 1e6
		s["cpu_per_m_inst"] = d.instances / float64(tp.received) * 1e6
	}
	fmt.Fprintf(progress, "  %s throughput: %d/%d outputs, %.0f msg/s (%d send errors)\n", sys.name(), tp.received, o.messages, tp.rate(), tp.sendErrors)
	if tp.received == 0 {
		return fmt.Errorf("no output of %d messages within %v; server log tail:\n%s", o.messages, o.throughputLimit, srv.logTail())
	}

	// Open loop at a moderate rate: e2e latency, the server's cores.
	t0, _ = readTree(srv.pid)
	lr, err := p.openLoop(ctx, 1+int64(o.messages), o.rate, o.rateDuration, o.size, o.drain)
	if err != nil {
		return err
	}
	t1, _ = readTree(srv.pid)
	if lr.received > 0 {
		d := cpuDelta(t0.usage(), t1.usage())
		s["lat_p50"] = lr.hist.Quantile(0.50).Seconds() * 1000
		s["lat_p99"] = lr.hist.Quantile(0.99).Seconds() * 1000
		s["lat_max"] = lr.hist.Quantile(1).Seconds() * 1000
		s["lat_recv_pct"] = 100 * float64(lr.received) / float64(lr.scheduled)
		s["cores_at_rate"] = (d.server + d.instances) / lr.duration.Seconds()
	}
	fmt.Fprintf(progress, "  %s open loop %d msg/s: %d/%d outputs, p50 %v p99 %v\n", sys.name(), o.rate, lr.received, lr.scheduled,
		lr.hist.Quantile(0.5), lr.hist.Quantile(0.99))
	if err := recordRSS(srv.pid, fn, "load", s); err != nil {
		return err
	}

	// Magnetar: a Python exclamation function beside it.
	if sys.name() == "magnetar" && o.python {
		const pyfn = "excl-py"
		pin, pout := "persistent://public/default/excl-py-in", "persistent://public/default/excl-py-out"
		pp, err := openPipe(cl, pin, pout)
		if err != nil {
			return err
		}
		defer pp.close()
		created, err := createTimed(ctx, adm, pp, pyfn, map[string]any{
			"tenant": "public", "namespace": "default", "name": pyfn,
			"runtime": "PYTHON", "className": "exclamation.ExclamationFunction",
			"inputs": []string{pin}, "output": pout, "parallelism": 1,
			"subscriptionPosition": "Earliest", "processingGuarantees": "ATLEAST_ONCE",
		}, pkgs.python, o.createLimit)
		if err != nil {
			return fmt.Errorf("create %s: %w; server log tail:\n%s", pyfn, err, srv.logTail())
		}
		s["py_to_running"] = created.running.Seconds()
		s["py_to_output"] = created.output.Seconds()
		if err := sleepCtx(ctx, o.settle); err != nil {
			return err
		}
		t, err := readTree(srv.pid)
		if err != nil {
			return err
		}
		if ins := t.instanceOf(pyfn); len(ins) > 0 {
			var kib uint64
			for _, in := range ins {
				kib += in.rssKiB
			}
			s["py_rss"] = float64(kib) / 1024
		}
		fmt.Fprintf(progress, "  %s python: running %.2fs, first output %.2fs, instance RSS %.1f MiB\n", sys.name(),
			created.running.Seconds(), created.output.Seconds(), s["py_rss"])
	}
	return nil
}

// recordRSS stores the server's and fn's instance resident memory under
// rss_<phase>_{server,inst,total}.
func recordRSS(pid int, fn, phase string, s sample) error {
	t, err := readTree(pid)
	if err != nil {
		return err
	}
	srv, all := t.rssMiB()
	var inst float64
	for _, in := range t.instanceOf(fn) {
		inst += float64(in.rssKiB) / 1024
	}
	s["rss_"+phase+"_server"] = srv
	s["rss_"+phase+"_inst"] = inst
	s["rss_"+phase+"_total"] = srv + all
	return nil
}

// createResult is how long a function took to come up.
type createResult struct {
	request time.Duration // the create request (POST until its answer)
	running time.Duration // POST sent until status numRunning == 1
	output  time.Duration // POST sent until the output of an input already waiting arrives
}

// createTimed publishes one input (the probe), creates the function (its
// subscription from the earliest message) and times it until it runs and
// until the probe's output arrives.
func createTimed(ctx context.Context, adm *admin, p *pipe, name string, cfg map[string]any, pkg fnPackage, limit time.Duration) (createResult, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := p.sendProbe(ctx); err != nil {
		return createResult{}, fmt.Errorf("probe: %w", err)
	}
	var res createResult
	var outAt time.Time
	var outErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	wg.Go(func() { outAt, outErr = p.firstOutput(ctx) })
	if err := adm.create(ctx, name, cfg, pkg); err != nil {
		cancel()
		wg.Wait()
		return res, err
	}
	res.request = time.Since(t0)
	runAt, err := adm.waitRunning(ctx, name, 1, 50*time.Millisecond)
	if err != nil {
		cancel()
		wg.Wait()
		return res, err
	}
	res.running = runAt.Sub(t0)
	wg.Wait()
	if outErr != nil {
		return res, fmt.Errorf("first output: %w", outErr)
	}
	res.output = outAt.Sub(t0)
	return res, nil
}

// densitySpec is one density run's runtime and instance count.
type densitySpec struct {
	runtime string // "PYTHON" or "JAVA"
	n       int
}

// densityOf creates spec.n functions (parallelism 1, each on its own input
// topic, no output) on a fresh standalone, waits until all run, then
// measures the idle tree for o.densityIdle.
func densityOf(ctx context.Context, o options, sys system, dir string, spec densitySpec, pkgs packages, progress io.Writer) densityResult {
	d := densityResult{system: sys.name(), runtime: spec.runtime, n: spec.n}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		d.err = err
		return d
	}
	srv, err := sys.start(ctx, dir)
	if err != nil {
		d.err = err
		return d
	}
	defer func() {
		if err := srv.stop(); err != nil {
			fmt.Fprintf(progress, "  %s stop: %v\n", sys.name(), err)
		}
	}()
	adm := newAdmin(srv.webURL)
	name := func(i int) string { return fmt.Sprintf("idle-%s-%d", strings.ToLower(spec.runtime), i) }
	cfg := func(i int) (map[string]any, fnPackage) {
		c := map[string]any{
			"tenant": "public", "namespace": "default", "name": name(i), "runtime": spec.runtime,
			"inputs": []string{fmt.Sprintf("persistent://public/default/idle-in-%d", i)}, "parallelism": 1,
		}
		if spec.runtime == "JAVA" {
			c["className"] = exclamationClass
			c["resources"] = map[string]any{"cpu": 1.0, "ram": javaRAM, "disk": 10 << 30}
			return c, pkgs.javaJar
		}
		c["className"] = "exclamation.ExclamationFunction"
		return c, pkgs.python
	}
	dctx, cancel := context.WithTimeout(ctx, o.densityLimit)
	defer cancel()
	wave := o.densityWave
	if wave <= 0 || wave > spec.n {
		wave = spec.n
	}
	d.wave = wave
	var mu sync.Mutex
	// createAll creates functions [lo, hi) with 8 requests in flight, as a
	// deployment script would.
	createAll := func(lo, hi int) error {
		var next atomic.Int64
		next.Store(int64(lo))
		var firstErr error
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < hi; i = int(next.Add(1)) - 1 {
					c, pkg := cfg(i)
					if err := adm.create(dctx, name(i), c, pkg); err != nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		return firstErr
	}
	// waitAll polls the status of functions [0, hi) not yet running, every
	// second, until all of them run.
	running := map[int]bool{}
	waitAll := func(hi int) error {
		for {
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for i := range hi {
				if running[i] {
					continue
				}
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					if st, err := adm.status(dctx, name(i)); err == nil && st.NumRunning >= 1 {
						mu.Lock()
						running[i] = true
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			d.running = len(running)
			if len(running) >= hi {
				return nil
			}
			if err := sleepCtx(dctx, time.Second); err != nil {
				procs := 0
				if t, err := readTree(srv.pid); err == nil {
					procs = len(t.descs)
				}
				return fmt.Errorf("%d of %d running after %v (%d instance processes alive)", d.running, spec.n, o.densityLimit, procs)
			}
		}
	}
	t0 := time.Now()
	for lo := 0; lo < spec.n; lo += wave {
		hi := min(spec.n, lo+wave)
		if err := createAll(lo, hi); err != nil {
			d.err = fmt.Errorf("create: %w", err)
			return d
		}
		if err := waitAll(hi); err != nil {
			d.err = err
			return d
		}
	}
	d.allRunning = time.Since(t0)
	fmt.Fprintf(progress, "  %s: %d %s instances running after %v\n", sys.name(), spec.n, strings.ToLower(spec.runtime), d.allRunning.Round(time.Millisecond))
	if err := sleepCtx(ctx, o.settle); err != nil {
		d.err = err
		return d
	}
	a, err := readTree(srv.pid)
	if err != nil {
		d.err = err
		return d
	}
	if err := sleepCtx(ctx, o.densityIdle); err != nil {
		d.err = err
		return d
	}
	b, err := readTree(srv.pid)
	if err != nil {
		d.err = err
		return d
	}
	d.idle = o.densityIdle
	cpu := cpuDelta(a.usage(), b.usage())
	d.serverCores = cpu.server / o.densityIdle.Seconds()
	d.instCores = cpu.instances / o.densityIdle.Seconds()
	d.serverRSS, _ = b.rssMiB()
	for i := range spec.n {
		for _, in := range b.instanceOf(name(i)) {
			d.instRSS += float64(in.rssKiB) / 1024
		}
	}
	return d
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// instanceStartSeconds is the mean of magnetar_functions_instance_start_seconds
// for runtime on the worker at webURL (one start per fresh standalone here).
func instanceStartSeconds(ctx context.Context, webURL, runtime string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, webURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum, count float64
	label := `{runtime="` + runtime + `"} `
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "magnetar_functions_instance_start_seconds_sum"+label); ok {
			sum, _ = strconv.ParseFloat(v, 64)
		} else if v, ok := strings.CutPrefix(line, "magnetar_functions_instance_start_seconds_count"+label); ok {
			count, _ = strconv.ParseFloat(v, 64)
		}
	}
	if count == 0 {
		return 0, fmt.Errorf("no %s instance start in %s/metrics", runtime, webURL)
	}
	return sum / count, nil
}
