package main

// The in-process mode runs each group's tests of one package in one test
// process, in the order the binary lists them (upstream's file order),
// against one fresh broker: upstream CI runs `go test ./...` against one
// standalone, so whatever a test leaves on the broker (topics, schemas,
// policies) or in the client process reaches the tests after it. The
// per-test mode (run.go) hides such leaks; this mode shows them.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Run modes (-mode).
const (
	modeEach  = "each"  // one process per test (run.go)
	modeGroup = "group" // one process per group and package (this file)
	modeBoth  = "both"
)

// processRun is one test process of the in-process mode.
type processRun struct {
	Group string `json:"group"`
	Pkg   string `json:"pkg"`
	Tests int    `json:"tests"`
	// Exit is how the process ended: "ok", "exit status 1", "killed by the
	// runner", or why it did not run.
	Exit     string        `json:"exit"`
	Broker   string        `json:"broker,omitempty"` // what happened to the broker
	Duration time.Duration `json:"duration_ns"`
	Log      string        `json:"log,omitempty"`
}

// runGroups runs every selected group of tests, one process per group and
// package, each against a fresh broker (secured for M6). The budget counts
// from start.
func runGroups(ctx context.Context, o options, r *run, tests []testCase, start time.Time) error {
	logDir := filepath.Join(o.out, "logs", "inprocess")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	bin, err := brokerBinary(o.magnetar)
	if err != nil {
		return err
	}
	for _, g := range groups {
		for _, p := range packages {
			var batch []testCase
			for _, t := range tests {
				if t.Group == g.id && t.Pkg == p.pkg && r.selected(t) {
					batch = append(batch, t)
				}
			}
			if len(batch) == 0 {
				continue
			}
			pr, results := runBatch(ctx, o, r, bin, batch, logDir, start)
			r.Processes = append(r.Processes, pr)
			r.InProcess = append(r.InProcess, results...)
			var c counts
			for _, res := range results {
				c.add(res.Status)
			}
			fmt.Printf("[one process] %-4s %-22s %3d tests: %d pass, %d fail, %d skip, %d not run; %6.1fs %s\n",
				g.id, p.binary, c.tests, c.pass, c.fail, c.skip, c.notRun, pr.Duration.Seconds(), firstNonEmpty(pr.Broker, pr.Exit))
			if err := r.save(filepath.Join(o.out, "results.json")); err != nil {
				return err
			}
		}
	}
	return nil
}

// runBatch runs tests (one group, one package) in one process against a
// fresh broker and returns the process and each test's result.
func runBatch(ctx context.Context, o options, r *run, bin string, tests []testCase, logDir string, start time.Time) (processRun, []result) {
	g, pkg := tests[0].Group, tests[0].Pkg
	pr := processRun{Group: g, Pkg: pkg, Tests: len(tests)}
	notRun := func(why string) (processRun, []result) {
		pr.Exit = "not run: " + why
		out := make([]result, len(tests))
		for i, t := range tests {
			out[i] = result{testCase: t, Status: statusNotRun, Reason: why}
		}
		return pr, out
	}
	switch {
	case ctx.Err() != nil:
		return notRun("interrupted")
	case o.budget > 0 && time.Since(start) > o.budget:
		return notRun(fmt.Sprintf("time budget (%v) used up", o.budget))
	}
	p := packageOf(pkg)
	name := g
	if pkg == pkgAdmin {
		name = "admin." + g
	}
	flags := o.brokerFlags
	if g == "M6" {
		flags = append(append([]string{}, flags...), secureFlags(o.upstream)...)
	}
	var (
		sa  *standalone
		err error
	)
	for attempt := 0; attempt < 2 && sa == nil; attempt++ {
		sa, err = startStandalone(ctx, bin, flags, filepath.Join(o.out, "data"), filepath.Join(o.out, "broker-"+name+".log"))
	}
	if err != nil {
		return notRun("starting magnetar standalone: " + err.Error())
	}
	r.Restarts++
	defer sa.stop()

	pr.Log = filepath.Join(logDir, name+".log")
	lf, err := os.Create(pr.Log)
	if err != nil {
		return notRun(err.Error())
	}
	defer lf.Close()
	names := make([]string, len(tests))
	for i, t := range tests {
		names[i] = regexp.QuoteMeta(t.Name)
	}
	cctx, cancel := context.WithTimeout(ctx, o.groupTimeout+30*time.Second)
	defer cancel()
	cmd := execTest(cctx, o, p, "^("+strings.Join(names, "|")+")$", o.groupTimeout)
	w := &testStartWriter{f: lf, brokerLogSize: sa.logSize, starts: map[string]int64{}}
	cmd.Stdout, cmd.Stderr = w, w
	began := time.Now()
	err = cmd.Run()
	pr.Duration = time.Since(began)
	killed := cctx.Err() != nil && ctx.Err() == nil
	var exitErr *exec.ExitError
	switch {
	case killed:
		pr.Exit = "killed by the runner: the test binary outlived -test.timeout " + o.groupTimeout.String()
	case err == nil:
		pr.Exit = "ok"
	case errors.As(err, &exitErr):
		pr.Exit = err.Error()
	default:
		return notRun("could not run the test binary: " + err.Error())
	}
	switch {
	case !sa.alive():
		pr.Broker = fmt.Sprintf("broker exited during the process (%v)", sa.err)
	case !sa.healthy(ctx):
		pr.Broker = "broker unhealthy after the process"
	}

	out := w.output()
	outcomes := parseBatch(tests, out, err, killed)
	results := make([]result, len(tests))
	end := sa.logSize()
	for i, t := range tests {
		oc := outcomes[i]
		res := result{testCase: t, Status: oc.status, Reason: oc.reason, Hint: oc.hint, Duration: oc.duration, Log: pr.Log}
		if from, ok := w.start(t.Name); ok {
			to := end
			if i+1 < len(tests) {
				if next, ok := w.start(tests[i+1].Name); ok {
					to = next
				}
			}
			res.BrokerLog = fmt.Sprintf("%s:%d-%d", filepath.Base(sa.logPath), from, to)
			if res.Status == statusFail {
				if ex := brokerExcerpt(sa.logPath, from, to, 300); len(ex) > 0 {
					_ = os.WriteFile(filepath.Join(logDir, t.Name+".broker.log"), []byte(strings.Join(ex, "\n")+"\n"), 0o644)
				}
			}
		}
		results[i] = res
	}
	return pr, results
}

// testStartWriter keeps a test process's output (in the log file and in
// memory) and notes the broker log's size when each top-level test
// starts, so each test's broker log range is known.
type testStartWriter struct {
	f             *os.File
	brokerLogSize func() int64

	mu      sync.Mutex
	buf     strings.Builder
	partial string // the last line, not yet complete
	starts  map[string]int64
}

// topRunRE matches the line that starts a top-level test.
var topRunRE = regexp.MustCompile(`^=== RUN\s+([^/\s]+)$`)

func (w *testStartWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	lines := strings.Split(w.partial+string(p), "\n")
	w.partial = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		if m := topRunRE.FindStringSubmatch(l); m != nil {
			if _, seen := w.starts[m[1]]; !seen {
				w.starts[m[1]] = w.brokerLogSize()
			}
		}
	}
	return w.f.Write(p)
}

func (w *testStartWriter) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *testStartWriter) start(name string) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	off, ok := w.starts[name]
	return off, ok
}

// batchOutcome is one test's outcome in a process that ran several.
type batchOutcome struct {
	outcome
	duration time.Duration
}

// durationRE reads a verdict's "(1.23s)".
var durationRE = regexp.MustCompile(`^--- (?:PASS|FAIL|SKIP): \S+ \(([0-9.]+)s\)`)

// parseBatch reads the -test.v output of one process that ran tests in
// this order. A test's verdict is looked for in the whole output; the
// reasons of a failure come from its own part (from its "=== RUN" line to
// the next test's). A test that never started is not run: the process
// ended in an earlier one (a panic, the timeout) or left it out.
func parseBatch(tests []testCase, out string, exitErr error, killed bool) []batchOutcome {
	lines := strings.Split(out, "\n")
	startLine := map[string]int{}
	var order []string // tests in the order they started
	for i, l := range lines {
		if m := topRunRE.FindStringSubmatch(l); m != nil {
			if _, seen := startLine[m[1]]; !seen {
				startLine[m[1]] = i
				order = append(order, m[1])
			}
		}
	}
	verdicts := map[string]string{}
	durations := map[string]time.Duration{}
	for _, l := range lines {
		if m := verdictRE.FindStringSubmatch(l); m != nil {
			verdicts[m[2]] = strings.ToLower(m[1])
			if d := durationRE.FindStringSubmatch(l); d != nil {
				if dur, err := time.ParseDuration(d[1] + "s"); err == nil {
					durations[m[2]] = dur
				}
			}
		}
	}
	// The test the process started last, and whether the process ended
	// before its verdict.
	last, unfinished := "", false
	if len(order) > 0 {
		last = order[len(order)-1]
		unfinished = verdicts[last] == ""
	}
	part := func(name string) string {
		from := startLine[name]
		to := len(lines)
		for _, other := range order {
			if i := startLine[other]; i > from && i < to {
				to = i
			}
		}
		if name == last && unfinished {
			to = len(lines)
		}
		return strings.Join(lines[from:to], "\n")
	}
	ended := processEnd(out, exitErr, killed, last)
	res := make([]batchOutcome, len(tests))
	for i, t := range tests {
		b := batchOutcome{duration: durations[t.Name]}
		_, started := startLine[t.Name]
		switch {
		case !started:
			b.status, b.reason = statusNotRun, ended
		case verdicts[t.Name] == statusPass:
			b.status = statusPass
		default:
			b.outcome = parseOutput(t.Name, part(t.Name), errors.New("exit status 1"), killed && unfinished && t.Name == last)
		}
		res[i] = b
	}
	return res
}

// processEnd says why a process stopped before running every test.
func processEnd(out string, exitErr error, killed bool, last string) string {
	in := ""
	if last != "" {
		in = " in " + last
	}
	switch {
	case killed:
		return "the runner killed the process" + in
	case strings.Contains(out, "panic: test timed out after"):
		return "the process timed out" + in
	case strings.Contains(out, "\npanic: ") || strings.HasPrefix(out, "panic: "):
		return "the process panicked" + in
	case exitErr != nil:
		return fmt.Sprintf("the process ended (%v)%s", exitErr, in)
	}
	return "the process did not start it"
}

// reparseInProcess derives the in-process results' reasons again from the
// processes' logs. Statuses are kept.
func reparseInProcess(r *run) {
	for _, pr := range r.Processes {
		if pr.Log == "" {
			continue
		}
		b, err := os.ReadFile(pr.Log)
		if err != nil {
			continue
		}
		var idx []int
		var tests []testCase
		for i, res := range r.InProcess {
			if res.Group == pr.Group && res.Pkg == pr.Pkg {
				idx = append(idx, i)
				tests = append(tests, res.testCase)
			}
		}
		var exitErr error
		if pr.Exit != "ok" {
			exitErr = errors.New(pr.Exit)
		}
		outs := parseBatch(tests, string(b), exitErr, strings.HasPrefix(pr.Exit, "killed"))
		for k, i := range idx {
			if r.InProcess[i].Status == statusFail && !strings.HasPrefix(r.InProcess[i].Reason, "broker ") {
				r.InProcess[i].Reason, r.InProcess[i].Hint = outs[k].reason, outs[k].hint
			}
		}
	}
}
