package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// testCase is one upstream test and where to run it.
type testCase struct {
	Pkg   string `json:"pkg"`
	Name  string `json:"name"`
	Group string `json:"group"`
}

// result is one test's outcome, as stored in results.json.
type result struct {
	testCase
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Hint   string `json:"hint,omitempty"`
	Broker string `json:"broker,omitempty"` // what happened to the broker
	// BrokerLog is the broker log and the byte range it grew by while the
	// test ran: "broker-003.log:1200-5400".
	BrokerLog string        `json:"broker_log,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
	Log       string        `json:"log,omitempty"`
}

// run is the state of one compatibility run, saved as results.json.
type run struct {
	Started       time.Time     `json:"started"`
	Finished      time.Time     `json:"finished"`
	Commit        string        `json:"commit"`
	Command       string        `json:"command"`
	Upstream      string        `json:"upstream"`
	BrokerCommand string        `json:"broker_command"`
	Timeout       time.Duration `json:"timeout_ns"`
	RestartEvery  int           `json:"restart_every"`
	Groups        []string      `json:"groups"` // selected
	RunFilter     string        `json:"run_filter,omitempty"`
	Restarts      int           `json:"restarts"`
	// Modes are the run modes used: modeEach, modeGroup or both.
	Modes        []string      `json:"modes,omitempty"`
	GroupTimeout time.Duration `json:"group_timeout_ns,omitempty"`
	// Results of the per-test mode: one process per test.
	Results []result `json:"results"`
	// Processes and InProcess are the in-process mode's test processes
	// (one per group and package) and their tests' results.
	Processes []processRun `json:"processes,omitempty"`
	InProcess []result     `json:"in_process,omitempty"`
}

// ran reports whether the run used mode.
func (r *run) ran(mode string) bool {
	return slices.Contains(r.Modes, mode)
}

// packages the runner drives: binary name and working directory (the
// tests open files by paths relative to their package directory).
var packages = []testPackage{
	{pkgPulsar, "pulsar.test", "pulsar"},
	{pkgAdmin, "admin.test", "pulsaradmin/pkg/admin"},
}

// cleanBrokerTests want a broker nobody has used yet (notes §13).
var cleanBrokerTests = map[string]bool{"TestNamespaceTopics": true, "TestClientVersion": true}

// listTests asks each test binary for its tests (benchmarks, examples and
// fuzz targets are left out) and adds the multi-broker suites found in
// files behind build tags, which the binaries do not contain.
func listTests(ctx context.Context, upstream string) ([]testCase, error) {
	var out []testCase
	for _, p := range packages {
		cmd := exec.CommandContext(ctx, filepath.Join(upstream, p.binary), "-test.list", ".*")
		cmd.Dir = filepath.Join(upstream, p.dir)
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s -test.list: %w", p.binary, err)
		}
		for _, name := range strings.Fields(string(b)) {
			if strings.HasPrefix(name, "Test") {
				out = append(out, testCase{Pkg: p.pkg, Name: name, Group: classify(p.pkg, name)})
			}
		}
	}
	tagged, err := taggedSuites(filepath.Join(upstream, "pulsar"))
	if err != nil {
		return nil, err
	}
	return append(out, tagged...), nil
}

var (
	buildTagRE = regexp.MustCompile(`^//go:build .*\b(clustered|extensible_load_manager)\b`)
	testFuncRE = regexp.MustCompile(`^func (Test\w+)\(t \*testing\.T\)`)
)

// taggedSuites lists the Test functions of files built only with the
// clustered or extensible_load_manager tags (M10).
func taggedSuites(dir string) ([]testCase, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	var out []testCase
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		tagged := false
		for sc.Scan() {
			l := sc.Text()
			if buildTagRE.MatchString(l) {
				tagged = true
			}
			if m := testFuncRE.FindStringSubmatch(l); m != nil && tagged {
				out = append(out, testCase{Pkg: pkgPulsar, Name: m[1], Group: "M10"})
			}
		}
		fh.Close()
	}
	return out, nil
}

// order sorts tests by group (report order), keeping the binaries' order
// inside a group.
func order(tests []testCase) []testCase {
	var out []testCase
	for _, g := range groups {
		for _, t := range tests {
			if t.Group == g.id {
				out = append(out, t)
			}
		}
	}
	return out
}

// runAll runs the selected tests one at a time against a standalone that
// is replaced every RestartEvery tests, after every failure (when
// RestartOnFail) and whenever it is found unhealthy.
func runAll(ctx context.Context, o options, r *run, tests []testCase) error {
	logDir := filepath.Join(o.out, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	bin, err := brokerBinary(o.magnetar)
	if err != nil {
		return err
	}
	var (
		sa        *standalone
		instance  int
		sinceBoot int
		stopped   string // why sa was stopped
		secure    bool   // sa runs with secureFlags
	)
	defer func() { sa.stop() }()
	restart := func(why string, wantSecure bool) error {
		sa.stop()
		sa = nil
		instance++
		logPath := filepath.Join(o.out, fmt.Sprintf("broker-%03d.log", instance))
		var err error
		for attempt := 0; attempt < 2; attempt++ {
			flags := o.brokerFlags
			if wantSecure {
				flags = append(append([]string{}, flags...), secureFlags(o.upstream)...)
			}
			sa, err = startStandalone(ctx, bin, flags, filepath.Join(o.out, "data"), logPath)
			if err == nil {
				break
			}
		}
		if err != nil {
			return err
		}
		sinceBoot, secure = 0, wantSecure
		r.Restarts++
		if o.verbose {
			fmt.Printf("        broker #%d started (%s)\n", instance, why)
		}
		return nil
	}

	start := time.Now()
	total := 0
	for _, t := range tests {
		if r.selected(t) {
			total++
		}
	}
	done := 0
	for _, t := range tests {
		if !r.selected(t) {
			continue
		}
		done++
		if ctx.Err() != nil {
			r.add(result{testCase: t, Status: statusNotRun, Reason: "interrupted"})
			continue
		}
		if o.budget > 0 && time.Since(start) > o.budget {
			r.add(result{testCase: t, Status: statusNotRun, Reason: fmt.Sprintf("not run: time budget (%v) used up", o.budget)})
			continue
		}
		var why string
		wantSecure := t.Group == "M6"
		switch {
		case sa != nil && secure != wantSecure:
			why = "TLS and authentication on or off for " + t.Name
		case sa == nil:
			why = firstNonEmpty(stopped, "first test")
		case !sa.healthy(ctx):
			why = "unhealthy before " + t.Name
		case o.restartEvery > 0 && sinceBoot >= o.restartEvery:
			why = fmt.Sprintf("every %d tests", o.restartEvery)
		case cleanBrokerTests[t.Name] && sinceBoot > 0:
			why = t.Name + " wants a clean broker"
		}
		if why != "" {
			if err := restart(why, wantSecure); err != nil {
				return fmt.Errorf("starting magnetar standalone: %w", err)
			}
		}
		res := runOne(ctx, o, t, logDir, sa)
		sinceBoot++
		// The broker after the test: crashed, unhealthy or fine.
		switch {
		case !sa.alive():
			res.Broker = fmt.Sprintf("broker exited during the test (%v)", sa.err)
		case !sa.healthy(ctx):
			res.Broker = "broker unhealthy after the test"
		}
		if res.Broker != "" && res.Status == statusPass {
			res.Status = statusFail
			res.Reason = res.Broker
		}
		r.add(res)
		fmt.Printf("[%3d/%d] %-4s %-60s %-4s %6.1fs %s\n", done, total, t.Group, t.Name, res.Status,
			res.Duration.Seconds(), firstNonEmpty(res.Broker, res.Reason))
		if err := r.save(filepath.Join(o.out, "results.json")); err != nil {
			return err
		}
		if res.Broker != "" || (res.Status == statusFail && o.restartOnFail) {
			sa.stop()
			sa = nil
			stopped = "after " + t.Name + " failed"
		}
	}
	return nil
}

// runOne runs one test binary for one test, from the package directory.
func runOne(ctx context.Context, o options, t testCase, logDir string, sa *standalone) result {
	p := packageOf(t.Pkg)
	logPath := filepath.Join(logDir, t.Name+".log")
	if t.Pkg == pkgAdmin {
		logPath = filepath.Join(logDir, "admin."+t.Name+".log")
	}
	res := result{testCase: t, Log: logPath}
	lf, err := os.Create(logPath)
	if err != nil {
		res.Status, res.Reason = statusFail, err.Error()
		return res
	}
	defer lf.Close()
	// The binary's own -test.timeout prints where the test is stuck; the
	// context is a backstop for a binary that does not exit.
	cctx, cancel := context.WithTimeout(ctx, o.timeout+30*time.Second)
	defer cancel()
	cmd := execTest(cctx, o, p, "^"+regexp.QuoteMeta(t.Name)+"$", o.timeout)
	var buf strings.Builder
	cmd.Stdout = teeWriter{lf, &buf}
	cmd.Stderr = cmd.Stdout
	from := sa.logSize()
	began := time.Now()
	err = cmd.Run()
	res.Duration = time.Since(began)
	res.BrokerLog = fmt.Sprintf("%s:%d-%d", filepath.Base(sa.logPath), from, sa.logSize())
	killed := cctx.Err() != nil && ctx.Err() == nil
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !killed {
		res.Status, res.Reason = statusFail, "could not run the test binary: "+err.Error()
		return res
	}
	oc := parseOutput(t.Name, buf.String(), err, killed)
	res.Status, res.Reason, res.Hint = oc.status, oc.reason, oc.hint
	if res.Status == statusFail {
		if ex := brokerExcerpt(sa.logPath, from, sa.logSize(), 300); len(ex) > 0 {
			_ = os.WriteFile(strings.TrimSuffix(logPath, ".log")+".broker.log", []byte(strings.Join(ex, "\n")+"\n"), 0o644)
		}
	}
	return res
}

// testPackage is one upstream package the runner drives.
type testPackage struct {
	pkg, binary, dir string
}

// packageOf returns the package named pkg.
func packageOf(pkg string) testPackage {
	for _, q := range packages {
		if q.pkg == pkg {
			return q
		}
	}
	return packages[0]
}

// execTest prepares p's test binary to run the tests matching run, from
// the package directory, with -test.timeout timeout.
func execTest(ctx context.Context, o options, p testPackage, run string, timeout time.Duration) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(o.upstream, p.binary),
		"-test.v", "-test.count", "1", "-test.run", run, "-test.timeout", timeout.String())
	cmd.Dir = filepath.Join(o.upstream, p.dir)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

type teeWriter struct {
	f *os.File
	b *strings.Builder
}

func (w teeWriter) Write(p []byte) (int, error) {
	w.b.Write(p)
	return w.f.Write(p)
}

func (r *run) selected(t testCase) bool {
	for _, g := range r.Groups {
		if g == t.Group {
			return true
		}
	}
	return false
}

func (r *run) add(res result) { r.Results = append(r.Results, res) }

// save writes the run atomically, so an interrupted run keeps what it did.
func (r *run) save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func loadRun(path string) (*run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Modes) == 0 { // written before the in-process mode existed
		r.Modes = []string{modeEach}
	}
	return &r, nil
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
