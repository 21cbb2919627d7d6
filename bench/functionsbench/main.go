package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/proc"
	"github.com/magnetar-dev/magnetar/bench/internal/pulsarpeer"
	"github.com/magnetar-dev/magnetar/dataplane/functions/javainstance"
)

// options are the command's flags.
type options struct {
	systems         []string // "magnetar" first, then "pulsar"
	rounds          int
	messages        int           // closed-loop messages per round
	size            int           // message bytes
	window          int           // closed-loop messages in flight
	rate            int           // open-loop msg/s
	rateDuration    time.Duration // open-loop sending time
	drain           time.Duration // longest wait for the open loop's last outputs
	throughputLimit time.Duration // longest closed-loop run
	createLimit     time.Duration // longest wait for a function to run and answer
	settle          time.Duration // pause before an idle reading
	python          bool          // Magnetar's Python exclamation function in each round
	density         int           // idle Python instances on one Magnetar worker (0: not run)
	javaDensity     int           // idle Java instances on each system (0: not run)
	densityIdle     time.Duration // the idle CPU reading's length
	densityWave     int           // functions created before waiting for them to run (0: all at once)
	densityLimit    time.Duration // longest wait for all density instances to run
	pulsarHeap      []string      // the Pulsar broker JVM's heap flags (nil: pulsarpeer.DefaultHeapArgs)
	dir             string
	keep            bool // keep the standalones' directories
	timeout         time.Duration
	command         string
}

// defaultOptions keep the whole run under ~15 minutes on a 2-core machine:
// a round is ~1 minute for Magnetar and ~1.5-2 for Pulsar (its start-up
// is 15-55 s here), three rounds; then 200 idle Python instances on one
// Magnetar worker, created all at once (~1.5 minutes: the worker starts
// 4 at a time), and 3 idle Java instances on each system (~2.5 minutes).
// -density-wave N creates them N at a time instead.
func defaultOptions() options {
	return options{
		systems: []string{"magnetar", "pulsar"}, rounds: 3,
		messages: 20000, size: 100, window: 1000,
		rate: 1000, rateDuration: 10 * time.Second, drain: 10 * time.Second,
		throughputLimit: 2 * time.Minute, createLimit: 3 * time.Minute, settle: 5 * time.Second,
		python: true, density: 200, densityWave: 0, javaDensity: 3,
		densityIdle: 30 * time.Second, densityLimit: 4 * time.Minute,
		timeout: 45 * time.Minute,
	}
}

func parseArgs(args []string) (options, string, error) {
	o := defaultOptions()
	var systems, heap, markdown string
	fs := flag.NewFlagSet("functionsbench", flag.ContinueOnError)
	fs.StringVar(&systems, "systems", strings.Join(o.systems, ","), "systems: magnetar (always, first) and pulsar (Apache Pulsar 4.2.4 standalone with its functions worker)")
	fs.IntVar(&o.rounds, "rounds", o.rounds, "interleaved rounds, a fresh standalone of each system per round (0: only the density runs)")
	fs.IntVar(&o.messages, "messages", o.messages, "closed-loop messages through the function per round")
	fs.IntVar(&o.size, "size", o.size, "message size in bytes")
	fs.IntVar(&o.window, "window", o.window, "closed-loop messages in flight")
	fs.IntVar(&o.rate, "rate", o.rate, "open-loop rate (msg/s) of the latency run")
	fs.DurationVar(&o.rateDuration, "rate-duration", o.rateDuration, "open-loop sending time")
	fs.DurationVar(&o.drain, "drain", o.drain, "longest wait for the open loop's last outputs")
	fs.DurationVar(&o.throughputLimit, "throughput-limit", o.throughputLimit, "longest closed-loop run")
	fs.DurationVar(&o.createLimit, "create-limit", o.createLimit, "longest wait for a created function to run and answer")
	fs.DurationVar(&o.settle, "settle", o.settle, "pause before an idle memory reading")
	fs.BoolVar(&o.python, "python", o.python, "also a Python exclamation function on Magnetar each round")
	fs.IntVar(&o.density, "density", o.density, "idle Python instances on one Magnetar worker (0: not run)")
	fs.IntVar(&o.javaDensity, "java-density", o.javaDensity, "idle Java instances (256 MiB heap each) on one worker of every system, for reference (0: not run)")
	fs.IntVar(&o.densityWave, "density-wave", o.densityWave, "density runs create this many functions, wait until they run, then the next (0: all at once; see defaultOptions)")
	fs.DurationVar(&o.densityLimit, "density-limit", o.densityLimit, "longest wait for all of a density run's instances to run")
	fs.DurationVar(&o.densityIdle, "density-idle", o.densityIdle, "how long the density runs' idle CPU is measured")
	fs.StringVar(&heap, "pulsar-heap", strings.Join(pulsarpeer.DefaultHeapArgs, " "), "the Pulsar broker JVM's heap and collector flags (space-separated)")
	fs.StringVar(&o.dir, "dir", "", "directory for the binary and the standalones' data (default: the system temp dir)")
	fs.BoolVar(&o.keep, "keep", false, "keep the standalones' directories (data, server and instance logs) for a look afterwards")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "stop the whole run after this long (0: never)")
	fs.StringVar(&markdown, "markdown", "", "also write the Markdown report to this file")
	if err := fs.Parse(args); err != nil {
		return o, "", err
	}
	if fs.NArg() > 0 {
		return o, "", fmt.Errorf("functionsbench: unexpected arguments %q", fs.Args())
	}
	o.systems = []string{"magnetar"}
	for _, f := range strings.Split(systems, ",") {
		switch n := strings.ToLower(strings.TrimSpace(f)); n {
		case "magnetar", "":
		case "pulsar":
			o.systems = append(o.systems, n)
		default:
			return o, "", fmt.Errorf("functionsbench: unknown system %q (magnetar, pulsar)", f)
		}
	}
	if o.rounds < 0 || o.messages < 1 || o.size < 40 || o.window < 1 || o.rate < 1 || o.rateDuration <= 0 {
		return o, "", errors.New("functionsbench: -messages, -window, -rate and -rate-duration must be positive, -rounds not negative, -size at least 40")
	}
	o.pulsarHeap = strings.Fields(heap)
	return o, markdown, nil
}

func main() {
	o, markdown, err := parseArgs(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	o.command = commandLine(os.Args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("the run took longer than -timeout %v", o.timeout))
		defer cancel()
	}
	if err := runAndReport(ctx, o, os.Stdout, os.Stderr, markdown); err != nil {
		fmt.Fprintln(os.Stderr, "functionsbench:", err)
		stop()
		os.Exit(1)
	}
}

// runAndReport prepares the systems and packages, runs, and writes the
// report to out (and to markdownPath when set).
func runAndReport(ctx context.Context, o options, out, progress io.Writer, markdownPath string) error {
	root, err := proc.ModuleRoot()
	if err != nil {
		return err
	}
	fnHome, err := javainstance.Locate("")
	if err != nil {
		return err
	}
	jars, _ := filepath.Glob(filepath.Join(fnHome.ExamplesDir, "pulsar-functions-api-examples-*.jar"))
	if len(jars) != 1 {
		return fmt.Errorf("functionsbench: want one pulsar-functions-api-examples jar in %s, found %d (run %s)", fnHome.ExamplesDir, len(jars), javainstance.SetupScript)
	}
	jar, err := os.ReadFile(jars[0])
	if err != nil {
		return err
	}
	pkgs := packages{
		javaJar: fnPackage{fileName: filepath.Base(jars[0]), data: jar},
		python:  fnPackage{fileName: "exclamation.py", data: []byte(exclamationPy)},
	}
	bin, err := os.MkdirTemp(o.dir, "functionsbench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	fmt.Fprintln(progress, "building magnetar")
	mag := &magnetarSystem{bin: filepath.Join(bin, "magnetar"), javaHome: fnHome.Dir}
	if err := proc.GoBuild(ctx, root, mag.bin, "./cmd/magnetar"); err != nil {
		return err
	}
	systems := []system{mag}
	for _, s := range o.systems[1:] {
		if s == "pulsar" {
			fmt.Fprintln(progress, "setting up Apache Pulsar", pulsarpeer.Version, "(bench/internal/pulsarpeer/setup.sh)")
			home, err := pulsarpeer.Setup(ctx, "", progress)
			if err != nil {
				return err
			}
			systems = append(systems, &pulsarSystem{home: home, fnHome: fnHome, heapArgs: o.pulsarHeap})
		}
	}
	res, err := run(ctx, o, systems, pkgs, progress)
	if err != nil {
		return err
	}
	rep := buildReport(o, res)
	rep.write(out)
	if markdownPath != "" {
		f, err := os.Create(markdownPath)
		if err != nil {
			return err
		}
		rep.write(f)
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// commandLine renders argv as a command a reader can paste.
func commandLine(args []string) string {
	parts := []string{"go run ./bench/functionsbench"}
	for _, a := range args[1:] {
		if strings.ContainsAny(a, " \t'\"$") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}
