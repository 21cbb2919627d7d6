// Command compatrun runs the Apache Pulsar Go client's own integration
// tests against `magnetar standalone` and writes a markdown report
// (docs/compatibility.md) with pass/fail per test, counts per milestone and
// the first failing assertion of every failure. It runs the tests in two
// modes (-mode): each test in a process of its own against a broker that
// is replaced every so often (a failure is the test's own), and each
// group's tests in one process, in upstream's file order, against one
// fresh broker, as upstream CI runs them (what a test leaves behind
// reaches the tests after it).
//
// Usage (compat/run.sh, `make compat`, prepares the arguments):
//
//	compatrun -upstream DIR -magnetar bin/magnetar -out OUTDIR [-groups M1,M2] [-run REGEX]
//	          [-mode both|each|group] [-timeout 60s] [-group-timeout 20m] [-restart-every 25]
//	          [-budget 55m] [-report docs/compatibility.md]
//	compatrun -report-only OUTDIR/results.json -upstream DIR -report FILE
//
// DIR is a writable copy of the upstream module with pulsar.test (built
// from ./pulsar, with -race) and admin.test (./pulsaradmin/pkg/admin) at
// its root. Tests are grouped into the milestones of the Pulsar wire notes
// (groups.go); the groups that need transactions, several brokers or
// Docker are listed in the report but not run unless asked for. The TLS
// and authentication group (M6) runs against a broker with TLS listeners
// and authentication on. The broker listens on the addresses the suite has compiled
// in (127.0.0.1:6650 and :8080); the runner refuses to start when
// something else holds them.
//
// Under OUTDIR: logs/<Test>.log (test output), logs/<Test>.broker.log
// (broker warnings while a failed test ran), broker-NNN.log (each broker
// process), logs/inprocess/<Group>.log and broker-<Group>.log (the
// in-process mode's processes and brokers; admin.<Group> for the admin
// package), results.json (rewritten after every test; -report-only
// renders it again).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	upstream      string
	upstreamVer   string
	magnetar      string
	out           string
	groups        string
	runFilter     string
	mode          string
	timeout       time.Duration
	groupTimeout  time.Duration
	restartEvery  int
	restartOnFail bool
	budget        time.Duration
	report        string
	reportOnly    string
	brokerFlags   []string
	repo          string
	command       string
	verbose       bool
}

func main() {
	var o options
	var brokerFlags string
	flag.StringVar(&o.upstream, "upstream", "", "writable copy of the pulsar-client-go module holding pulsar.test and admin.test (required)")
	flag.StringVar(&o.upstreamVer, "upstream-version", "v0.19.0", "version of the upstream module, for the report")
	flag.StringVar(&o.magnetar, "magnetar", "bin/magnetar", "magnetar binary")
	flag.StringVar(&o.out, "out", "", "directory for logs, broker data and results.json (required unless -report-only)")
	flag.StringVar(&o.groups, "groups", "", `milestones to run, e.g. "M1,M2"; "all" for every group; default: all but M7, M10, X`)
	flag.StringVar(&o.runFilter, "run", "", "run only tests whose name matches this regexp")
	flag.StringVar(&o.mode, "mode", modeBoth, `"each": one process per test; "group": one process per group, in upstream's file order, against one fresh broker; "both": each, then group`)
	flag.DurationVar(&o.timeout, "timeout", 60*time.Second, "-test.timeout of each test (mode each)")
	flag.DurationVar(&o.groupTimeout, "group-timeout", 20*time.Minute, "-test.timeout of each group's process (mode group; upstream CI's go test -timeout)")
	flag.IntVar(&o.restartEvery, "restart-every", 25, "start a fresh broker after this many tests (0: only when needed)")
	flag.BoolVar(&o.restartOnFail, "restart-on-fail", true, "start a fresh broker after every failed test")
	flag.DurationVar(&o.budget, "budget", 55*time.Minute, "stop starting tests after this long; the rest are reported as not run (0: no limit)")
	flag.StringVar(&o.report, "report", "", "markdown report to write (default: <out>/compatibility.md)")
	flag.StringVar(&o.reportOnly, "report-only", "", "render the report from this results.json and exit")
	flag.StringVar(&brokerFlags, "broker-flags", "--max-message-size 1048576", "extra flags for `magnetar standalone` (upstream CI uses maxMessageSize=1048576)")
	flag.StringVar(&o.repo, "repo", ".", "the Magnetar checkout, for the commit in the report")
	flag.StringVar(&o.command, "command", "", "command line to print in the report (default: this one)")
	flag.BoolVar(&o.verbose, "v", false, "print broker restarts")
	flag.Parse()
	o.brokerFlags = strings.Fields(brokerFlags)
	if o.command == "" {
		o.command = strings.Join(os.Args, " ")
	}
	if err := runMain(o); err != nil {
		fmt.Fprintln(os.Stderr, "compatrun:", err)
		os.Exit(1)
	}
}

func runMain(o options) error {
	if o.upstream == "" {
		return fmt.Errorf("-upstream is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	all, err := listTests(ctx, o.upstream)
	if err != nil {
		return err
	}
	all = order(all)

	if o.reportOnly != "" {
		r, err := loadRun(o.reportOnly)
		if err != nil {
			return err
		}
		reparse(r)
		reparseInProcess(r)
		return writeReportFile(o.report, r, all)
	}
	if o.out == "" {
		return fmt.Errorf("-out is required")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.report == "" {
		o.report = filepath.Join(o.out, "compatibility.md")
	}
	sel, err := parseGroups(o.groups)
	if err != nil {
		return err
	}
	var modes []string
	switch o.mode {
	case modeEach, modeGroup:
		modes = []string{o.mode}
	case modeBoth:
		modes = []string{modeEach, modeGroup}
	default:
		return fmt.Errorf("-mode: want %s, %s or %s, not %q", modeEach, modeGroup, modeBoth, o.mode)
	}
	var filter *regexp.Regexp
	if o.runFilter != "" {
		if filter, err = regexp.Compile(o.runFilter); err != nil {
			return fmt.Errorf("-run: %w", err)
		}
	}
	r := &run{
		Started:       time.Now(),
		Commit:        commitOf(o.repo),
		Command:       o.command,
		Upstream:      o.upstreamVer,
		BrokerCommand: brokerCommand(o),
		Timeout:       o.timeout,
		RestartEvery:  o.restartEvery,
		RunFilter:     o.runFilter,
		Modes:         modes,
	}
	if r.ran(modeGroup) {
		r.GroupTimeout = o.groupTimeout
	}
	for _, g := range groups {
		if sel[g.id] {
			r.Groups = append(r.Groups, g.id)
		}
	}
	// M10 suites are not in the binaries; they can only be listed.
	var runnable []testCase
	for _, t := range all {
		if t.Group == "M10" {
			continue
		}
		if filter != nil && !filter.MatchString(t.Name) {
			continue
		}
		runnable = append(runnable, t)
	}
	if filter != nil {
		// The report covers the subset only.
		var kept []testCase
		for _, t := range all {
			if filter.MatchString(t.Name) {
				kept = append(kept, t)
			}
		}
		all = kept
	}
	n := 0
	for _, t := range runnable {
		if r.selected(t) {
			n++
		}
	}
	fmt.Printf("compatrun: %d tests listed, %d to run (groups %s, modes %s), logs in %s\n",
		len(all), n, strings.Join(r.Groups, ","), strings.Join(modes, ","), o.out)
	var runErr error
	if r.ran(modeEach) {
		runErr = runAll(ctx, o, r, runnable)
	}
	if runErr == nil && r.ran(modeGroup) {
		runErr = runGroups(ctx, o, r, runnable, r.Started)
	}
	r.Finished = time.Now()
	if err := r.save(filepath.Join(o.out, "results.json")); err != nil {
		return err
	}
	if err := writeReportFile(o.report, r, all); err != nil {
		return err
	}
	fmt.Printf("compatrun: report written to %s\n", o.report)
	return runErr
}

// keepMarker starts the part of the report file that a new report keeps:
// the results of the other clients' suites (e2e/clients), which
// compatrun does not run.
const keepMarker = "<!-- compatrun keeps this line and everything below it -->"

// writeReportFile writes the report to path, followed by what the file
// held from keepMarker on.
func writeReportFile(path string, r *run, all []testCase) error {
	if path == "" {
		return fmt.Errorf("-report is required with -report-only")
	}
	old, _ := os.ReadFile(path)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	writeReport(f, r, all)
	if tail := keptTail(old); tail != nil {
		f.Write([]byte("\n"))
		f.Write(tail)
	}
	return f.Close()
}

// keptTail returns old from the line holding keepMarker on, or nil.
func keptTail(old []byte) []byte {
	i := bytes.Index(old, []byte(keepMarker))
	if i < 0 {
		return nil
	}
	if j := bytes.LastIndexByte(old[:i], '\n'); j >= 0 {
		i = j + 1
	} else {
		i = 0
	}
	return old[i:]
}

// commitOf describes the checkout: commit hash, "+ local changes" when the
// work tree differs. Read-only git commands.
func commitOf(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "--no-optional-locks", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " + local changes"
	}
	return c
}

func brokerCommand(o options) string {
	return strings.Join(append([]string{"magnetar standalone --broker-addr", brokerAddr, "--http-addr", httpAddr,
		"--bookie-addr", bookieAddr}, o.brokerFlags...), " ")
}

// reparse derives the reasons of failed tests again from their logs, so a
// better parser improves an old run's report. Statuses are kept.
func reparse(r *run) {
	for i, res := range r.Results {
		if res.Status != statusFail || res.Log == "" || strings.HasPrefix(res.Reason, "broker ") {
			continue
		}
		b, err := os.ReadFile(res.Log)
		if err != nil {
			continue
		}
		oc := parseOutput(res.Name, string(b), errors.New("exit status 1"), strings.HasPrefix(res.Reason, "killed by the runner"))
		r.Results[i].Reason, r.Results[i].Hint = oc.reason, oc.hint
	}
}
