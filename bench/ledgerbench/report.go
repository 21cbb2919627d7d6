package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
	"github.com/magnetar-dev/magnetar/bench/internal/table"
)

// target is one evaluated performance target.
type target struct {
	text string
	met  bool
}

// report is the computed summary.
type report struct {
	plain, ours table.Table
	targets     []target
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianOf applies f to each result and returns the median.
func medianOf(rs []result, f func(result) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs)
}

// medianRatio returns the median over rounds of f(a[i]) / g(b[i]).
func medianRatio(a, b []result, f, g func(result) float64) float64 {
	var xs []float64
	for i := range min(len(a), len(b)) {
		if d := g(b[i]); d > 0 {
			xs = append(xs, f(a[i])/d)
		}
	}
	return median(xs)
}

func quantileOf(q float64) func(result) float64 {
	return func(r result) float64 { return float64(r.hist.Quantile(q)) }
}

func entriesPerSec(r result) float64 { return r.entriesPerSec() }
func mbPerSec(r result) float64      { return r.mbPerSec() }

func fmtDur(ns float64) string {
	d := time.Duration(ns)
	switch {
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}

func fmtRatio(x float64) string { return fmt.Sprintf("%.2f", x) }

func buildReport(o options, res *results) *report {
	rep := &report{
		plain: table.Table{Header: []string{"entry", "grouped MB/s", "grouped entries/s", "1-entry fsync entries/s", "fsync p50", "fsync p99", "fsync p99.9"}},
		ours: table.Table{Header: []string{"config", "entry", "in flight", "MB/s", "entries/s", "/ plain grouped",
			"offered entries/s", "add p50", "add p99", "add p99.9", "p99 / plain p99",
			"plain at rate p50", "plain at rate p99", "p99 / plain at rate p99"}},
	}
	p50, p99, p999 := quantileOf(0.5), quantileOf(0.99), quantileOf(0.999)
	for _, size := range o.sizes {
		g, s := res.plainGrouped[size], res.plainSingle[size]
		rep.plain.Add(sizeName(size),
			fmt.Sprintf("%.1f", medianOf(g, mbPerSec)), fmt.Sprintf("%.0f", medianOf(g, entriesPerSec)),
			fmt.Sprintf("%.0f", medianOf(s, entriesPerSec)),
			fmtDur(medianOf(s, p50)), fmtDur(medianOf(s, p99)), fmtDur(medianOf(s, p999)))
	}
	for ci, q := range o.configs {
		for _, size := range o.sizes {
			k := cellKey{ci, size}
			t, l := res.tput[k], res.lat[k]
			tr := medianRatio(t, res.plainBracket[k], entriesPerSec, entriesPerSec)
			lr := medianRatio(l, res.plainSingle[size], p99, p99)
			pl := res.plainLat[k]
			rr := medianRatio(l, pl, p99, p99)
			rep.ours.Add(q.name, sizeName(size), fmt.Sprint(o.inflightFor(size)),
				fmt.Sprintf("%.1f", medianOf(t, mbPerSec)), fmt.Sprintf("%.0f", medianOf(t, entriesPerSec)), fmtRatio(tr),
				fmt.Sprintf("%.0f", medianOf(l, func(r result) float64 { return r.rate })),
				fmtDur(medianOf(l, p50)), fmtDur(medianOf(l, p99)), fmtDur(medianOf(l, p999)), fmtRatio(lr),
				fmtDur(medianOf(pl, p50)), fmtDur(medianOf(pl, p99)), fmtRatio(rr))
			if q.ensemble != 1 {
				continue
			}
			rep.targets = append(rep.targets,
				target{fmt.Sprintf("%s %s: throughput %.0f%% of the grouped plain fsync'd-append throughput just before and after it (target >= 80%%)",
					q.name, sizeName(size), 100*tr), tr >= 0.8},
				target{fmt.Sprintf("%s %s: p99 add latency at %.0f%% load %.2fx the plain 1-entry fsync p99 (target <= 2x)",
					q.name, sizeName(size), 100*o.loadFraction, lr), lr <= 2},
				target{fmt.Sprintf("%s %s (not an issue target; the disk's own floor): p99 add latency %.2fx that of a bare write+fdatasync group-commit loop on a plain file at the same offered rate",
					q.name, sizeName(size), rr), rr <= 2})
		}
	}
	return rep
}

func (t target) status() string {
	if t.met {
		return "MET"
	}
	return "NOT MET"
}

func (rep *report) writeText(w io.Writer, o options) {
	fmt.Fprintf(w, "ledgerbench: metadata memstore (in-memory), bookies in-process on 127.0.0.1, journal fsync on%s, dir %s\n", o.journalNote(), o.dir)
	fmt.Fprintf(w, "%d round(s), medians; max throughput: closed loop, %v after %v warm-up; latency: open loop at %.0f%% of that, %v; plain: %v each\n\n",
		o.rounds, o.duration, o.warmup, 100*o.loadFraction, o.latDuration, o.plainDuration)
	fmt.Fprintf(w, "Machine limit: fsync'd appends to a plain file in the same directory (grouped: %s per write+fdatasync)\n", sizeName(o.groupBytes))
	rep.plain.WriteText(w)
	fmt.Fprintln(w, "\nLedger appends (ratios are medians of per-round ratios against the same round's plain runs; \"/ plain grouped\": against the mean of the grouped plain runs just before and just after the throughput run)")
	rep.ours.WriteText(w)
	fmt.Fprintln(w, "\nTargets")
	for _, t := range rep.targets {
		fmt.Fprintf(w, "  %-7s %s\n", t.status(), t.text)
	}
}

func (rep *report) writeMarkdown(w io.Writer, o options, res *results) {
	fmt.Fprintf(w, "## Run of %s\n\n", res.started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- commit: `%s`\n", machine.GitCommit())
	fmt.Fprintf(w, "- command: `%s`\n", o.command)
	fmt.Fprintf(w, "- machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s; shared with other work\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(w, "- setup: metadata in memstore (in-memory); bookies in-process on 127.0.0.1, each with its own directory under `-dir`; journal fsync on%s\n", o.journalNote())
	fmt.Fprintf(w, "- method: %d interleaved round(s), medians; max throughput closed loop for %v after %v warm-up; latency open loop at %.0f%% of that round's max for %v, from scheduled send to ack; plain runs %v each\n",
		o.rounds, o.duration, o.warmup, 100*o.loadFraction, o.latDuration, o.plainDuration)
	fmt.Fprintf(w, "- load average before: %s; after: %s\n", res.before.LoadAvg, res.after.LoadAvg)
	fmt.Fprintf(w, "- /proc/pressure/cpu before: %s; after: %s\n", res.before.CPUPressure, res.after.CPUPressure)
	fmt.Fprintf(w, "- /proc/pressure/io before: %s; after: %s\n", res.before.IOPressure, res.after.IOPressure)
	fmt.Fprintf(w, "- duration: %v\n\n", res.after.At.Sub(res.started).Round(time.Second))
	fmt.Fprintf(w, "Machine limit: fsync'd appends to a plain file in the same directory (grouped: %s per write+fdatasync):\n\n", sizeName(o.groupBytes))
	rep.plain.WriteMarkdown(w)
	fmt.Fprintln(w, "\nLedger appends (ratios are medians of per-round ratios against the same round's plain runs; \"/ plain grouped\": against the mean of the grouped plain runs just before and just after the throughput run):")
	fmt.Fprintln(w)
	rep.ours.WriteMarkdown(w)
	fmt.Fprintln(w, "\nTargets:")
	fmt.Fprintln(w)
	for _, t := range rep.targets {
		fmt.Fprintf(w, "- **%s** %s\n", t.status(), t.text)
	}
}

// journalNote says how the bookies write their journals.
func (o options) journalNote() string {
	s := ", journal groups of 512 KiB and more written with O_DIRECT"
	if o.bufferedJournal {
		s = ", journal written through the page cache"
	}
	return s
}
