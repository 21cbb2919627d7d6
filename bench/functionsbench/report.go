package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
	"github.com/magnetar-dev/magnetar/bench/internal/pulsarpeer"
	"github.com/magnetar-dev/magnetar/bench/internal/table"
)

// metricDef is one row of the main table.
type metricDef struct {
	key, label, unit string
	format           string // fmt verb for the values
	magnetarOnly     bool
	// notRun says why a magnetarOnly row has no value for the other
	// systems (default: Pulsar has no Python instance).
	notRun string
}

// metricDefs are the main table's rows, in order. Labels name what was
// measured; o fills the sizes and rates in.
func metricDefs(o options) []metricDef {
	return []metricDef{
		{key: "ready", label: "standalone start → health and functions API answer", unit: "s", format: "%.1f"},
		{key: "create_http", label: "Java ExclamationFunction: create request (POST → 204)", unit: "ms", format: "%.0f"},
		{key: "to_running", label: "Java: create → status numRunning 1", unit: "s", format: "%.2f"},
		{key: "to_output", label: "Java: create → first output (an input already waiting)", unit: "s", format: "%.2f"},
		{key: "java_inst_start", label: "… of create → running, the Java instance's own start (exec → first health answer; the same JVM on both)", unit: "s", format: "%.2f", magnetarOnly: true,
			notRun: "not measured (Pulsar's worker exports no instance start time); the same JVM instance"},
		{key: "rss_idle_server", label: "RSS idle after create: broker/worker process", unit: "MiB", format: "%.0f"},
		{key: "rss_idle_inst", label: "RSS idle after create: Java instance", unit: "MiB", format: "%.0f"},
		{key: "rss_idle_total", label: "RSS idle after create: process tree", unit: "MiB", format: "%.0f"},
		{key: "tput", label: fmt.Sprintf("exclamation throughput, %d × %d B, %d in flight, end to end", o.messages, o.size, o.window), unit: "msg/s", format: "%.0f"},
		{key: "tput_recv_pct", label: "closed loop: outputs received", unit: "%", format: "%.1f"},
		{key: "cpu_per_m", label: "server CPU per million messages (broker/worker + instance)", unit: "s", format: "%.0f"},
		{key: "cpu_per_m_server", label: "… of which broker/worker process", unit: "s", format: "%.0f"},
		{key: "cpu_per_m_inst", label: "… of which Java instance", unit: "s", format: "%.0f"},
		{key: "lat_p50", label: fmt.Sprintf("publish → output e2e p50 at %d msg/s for %v", o.rate, o.rateDuration), unit: "ms", format: "%.2f"},
		{key: "lat_p99", label: fmt.Sprintf("publish → output e2e p99 at %d msg/s", o.rate), unit: "ms", format: "%.2f"},
		{key: "lat_max", label: fmt.Sprintf("publish → output e2e max at %d msg/s", o.rate), unit: "ms", format: "%.1f"},
		{key: "lat_recv_pct", label: "open loop: outputs received", unit: "%", format: "%.1f"},
		{key: "cores_at_rate", label: fmt.Sprintf("server cores at %d msg/s (broker/worker + instance)", o.rate), unit: "cores", format: "%.2f"},
		{key: "rss_load_server", label: "RSS after the load: broker/worker process", unit: "MiB", format: "%.0f"},
		{key: "rss_load_inst", label: "RSS after the load: Java instance", unit: "MiB", format: "%.0f"},
		{key: "rss_load_total", label: "RSS after the load: process tree", unit: "MiB", format: "%.0f"},
		{key: "py_to_running", label: "Python exclamation: create → numRunning 1", unit: "s", format: "%.2f", magnetarOnly: true},
		{key: "py_to_output", label: "Python exclamation: create → first output", unit: "s", format: "%.2f", magnetarOnly: true},
		{key: "py_rss", label: "Python instance RSS idle", unit: "MiB", format: "%.1f", magnetarOnly: true},
	}
}

// section is a titled table.
type section struct {
	title string
	t     table.Table
}

type report struct {
	header   []string // Markdown list lines
	sections []section
	notes    []string
}

func buildReport(o options, res *results) *report {
	rep := &report{}
	rep.header = append(rep.header,
		fmt.Sprintf("commit: `%s`", machine.GitCommit()),
		fmt.Sprintf("command: `%s`", o.command),
		fmt.Sprintf("machine: %d CPUs, %s RAM, %s/%s, %s; load average before the run %s; shared with other work (load per block below)",
			runtime.NumCPU(), memTotal(), runtime.GOOS, runtime.GOARCH, runtime.Version(), res.loadBefore),
		fmt.Sprintf("duration: %v", res.ended.Sub(res.started).Round(time.Second)),
		fmt.Sprintf("method: %d interleaved round(s) of %v, a fresh standalone of each system per round on loopback; "+
			"both workers run the same Java instance (Pulsar's JavaInstanceMain from the functions home: "+
			"the pathing java-instance.jar, the same -Dpulsar.functions.instance.classpath and log4j2 file), resources.ram %d MiB (-Xmx), "+
			"the function's subscription from the earliest message; the same REST v3 multipart requests; "+
			"load from pulsar-client-go (STRING schema, batching delay %v) in this process, its CPU excluded; "+
			"server CPU and RSS from /proc (utime+stime, VmRSS) over the server process and its descendants (the instances)",
			o.rounds, o.systems, javaRAM>>20, producerBatchDelay),
		"magnetar: `magnetar standalone` built from this commit (broker, bookie, metadata store, functions worker in one process, journal fsync on)",
	)
	if slices.Contains(o.systems, "pulsar") {
		jvm := res.pulsarJVM
		if jvm == "" {
			jvm = strings.Join(o.pulsarHeap, " ")
		}
		rep.header = append(rep.header, fmt.Sprintf("pulsar: Apache Pulsar %s standalone (PulsarStandaloneStarter, RocksDB metadata, one bookie, no stream storage) "+
			"with its in-broker functions worker (functionsWorkerEnabled=true, process runtime), jars from Maven Central (bench/internal/pulsarpeer); "+
			"broker JVM `%s` (Pulsar's own launcher uses other GC settings); journal fsync on (BookKeeper's default)", pulsarpeer.Version, jvm))
	}
	for _, f := range res.failures {
		rep.header = append(rep.header, "not measured: "+f)
	}

	main := section{title: "Functions worker: Magnetar and Apache Pulsar " + pulsarpeer.Version + " (median [min–max] over rounds; n = rounds measured)"}
	main.t.Header = []string{"metric", "unit"}
	for _, s := range o.systems {
		main.t.Header = append(main.t.Header, fmt.Sprintf("%s (n=%d)", s, len(res.samples[s])))
	}
	for _, m := range metricDefs(o) {
		row := []string{m.label, m.unit}
		for _, s := range o.systems {
			if m.magnetarOnly && s != "magnetar" {
				why := m.notRun
				if why == "" {
					why = "not run (no Python instance in Pulsar's Maven artifacts)"
				}
				row = append(row, why)
				continue
			}
			row = append(row, spreadCell(res.samples[s], m.key, m.format))
		}
		main.t.Add(row...)
	}
	rep.sections = append(rep.sections, main)

	if len(res.density) > 0 || o.density > 0 {
		ds := section{title: fmt.Sprintf("Density: N idle instances on one worker (parallelism 1 each, one input topic each, no output; idle CPU over %v after all run; one run each)", o.densityIdle)}
		ds.t.Header = []string{"system", "runtime", "N", "created", "create → all running", "instances RSS total (MiB)", "per instance (MiB)", "worker process RSS (MiB)", "worker CPU idle (cores)", "instances CPU idle (cores)"}
		for _, d := range res.density {
			if d.err != nil {
				ds.t.Add(d.system, strings.ToLower(d.runtime), strconv.Itoa(d.n), waveName(d), "failed: "+shortErr(d.err), "", "", "", "", "")
				continue
			}
			ds.t.Add(d.system, strings.ToLower(d.runtime), strconv.Itoa(d.n), waveName(d), d.allRunning.Round(100*time.Millisecond).String(),
				fmt.Sprintf("%.0f", d.instRSS), fmt.Sprintf("%.1f", d.instRSS/float64(d.n)), fmt.Sprintf("%.0f", d.serverRSS),
				fmt.Sprintf("%.3f", d.serverCores), fmt.Sprintf("%.3f", d.instCores))
		}
		if slices.Contains(o.systems, "pulsar") && o.density > 0 {
			ds.t.Add("pulsar", "python", strconv.Itoa(o.density), "", "not run: no Python instance in Pulsar's Maven artifacts, and its Java instances are one JVM each (see -java-density for a small N)", "", "", "", "", "")
		}
		rep.sections = append(rep.sections, ds)
	}

	ld := section{title: fmt.Sprintf("Load per round and system block (cores busy from /proc/stat; ours = benchmark + server tree; others = the rest, with the busiest when above %.2f cores)", noisyOthers)}
	ld.t.Header = []string{"round", "system", "load avg before", "load avg after", "cpu some avg10 after", "wall", "busy cores", "ours", "others", "busiest others (alive through the block)"}
	for _, b := range res.loads {
		var top []string
		for _, p := range b.topOthers {
			top = append(top, p.String())
		}
		ld.t.Add(strconv.Itoa(b.round), b.system, b.before.LoadAvg, b.after.LoadAvg, fmt.Sprintf("%.1f%%", b.cpuPressure10s),
			b.after.At.Sub(b.before.At).Round(time.Second).String(), fmt.Sprintf("%.2f", b.busy), fmt.Sprintf("%.2f", b.ours),
			fmt.Sprintf("%.2f", b.others), strings.Join(top, ", "))
	}
	rep.sections = append(rep.sections, ld)

	rep.notes = append(rep.notes,
		"create → first output: one input is published before the function is created; the time runs from the create request to that input's output arriving.",
		"RSS sums VmRSS over processes: pages two JVMs share (the class-data archive, libraries) count in each.",
		"The closed loop's rate runs from the first send to the last output; the open loop's latency runs from each message's scheduled send time to its output's arrival (no coordinated omission).")
	return rep
}

// waveName says how a density run created its functions.
func waveName(d densityResult) string {
	if d.wave <= 0 || d.wave >= d.n {
		return "all at once"
	}
	return fmt.Sprintf("in waves of %d", d.wave)
}

// spreadCell formats the median and range of metric key over samples.
func spreadCell(samples []sample, key, format string) string {
	var xs []float64
	for _, s := range samples {
		if v, ok := s[key]; ok {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return "—"
	}
	slices.Sort(xs)
	med := median(xs)
	if len(xs) == 1 {
		return fmt.Sprintf(format, med)
	}
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", med, xs[0], xs[len(xs)-1])
}

// median of sorted xs.
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// memTotal is MemTotal of /proc/meminfo in GiB.
func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "n/a"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kib, _ := strconv.ParseFloat(f[0], 64)
				return fmt.Sprintf("%.0f GiB", kib/(1<<20))
			}
		}
	}
	return "n/a"
}

func (rep *report) write(w io.Writer) {
	fmt.Fprintf(w, "## functionsbench run of %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	for _, h := range rep.header {
		fmt.Fprintf(w, "- %s\n", h)
	}
	for _, s := range rep.sections {
		fmt.Fprintf(w, "\n%s:\n\n", s.title)
		s.t.WriteMarkdown(w)
	}
	fmt.Fprintln(w)
	for _, n := range rep.notes {
		fmt.Fprintf(w, "%s\n", n)
	}
}
