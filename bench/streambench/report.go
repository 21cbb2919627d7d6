package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
	"github.com/magnetar-dev/magnetar/bench/internal/machine"
	"github.com/magnetar-dev/magnetar/bench/internal/table"
)

// section is a titled table.
type section struct {
	title string
	t     table.Table
}

type report struct {
	sections []section
}

type metric func(runResult) float64

// quantileOf returns h's quantile q in ns, or +Inf when h is empty (the
// system acknowledged or delivered nothing in the window: unbounded).
func quantileOf(h *latency.Histogram, q float64) float64 {
	if h.Count() == 0 {
		return math.Inf(1)
	}
	return float64(h.Quantile(q))
}

func pubQ(q float64) metric { return func(r runResult) float64 { return quantileOf(r.pub, q) } }
func e2eQ(q float64) metric { return func(r runResult) float64 { return quantileOf(r.e2e, q) } }

func ackedRate(r runResult) float64     { return r.ackedPerSec() }
func deliveredRate(r runResult) float64 { return r.deliveredPerSec() }
func mbRate(r runResult) float64        { return r.mbPerSec() }
func ackedPct(r runResult) float64 {
	if r.sent == 0 {
		return 0
	}
	return 100 * float64(r.acked) / float64(r.sent)
}

func recvPct(r runResult) float64 {
	if r.sent == 0 {
		return 0
	}
	return 100 * float64(r.received) / float64(r.sent*uint64(max(1, r.subs)))
}

// ofDiskPct is runResult.ofDisk in percent (-1: not measured).
func ofDiskPct(r runResult) float64 {
	if f := r.ofDisk(); f >= 0 {
		return 100 * f
	}
	return -1
}

// cpuPerGB is the server's CPU seconds per GB acknowledged.
func cpuPerGB(r runResult) float64 {
	if !r.hasUsage || r.ackBytes == 0 {
		return -1
	}
	return r.usage.CPUSeconds / (float64(r.ackBytes) / 1e9)
}

// generatorCPUPerGB is the load generator's CPU seconds per GB
// acknowledged (its clients included).
func generatorCPUPerGB(r runResult) float64 {
	if !r.hasUsage || r.ackBytes == 0 {
		return -1
	}
	return r.generator.CPUSeconds / (float64(r.ackBytes) / 1e9)
}

// coresUsed is the CPU the server and the load generator used over the
// measured window, in cores.
func coresUsed(r runResult) float64 {
	if !r.hasUsage || r.elapsed <= 0 {
		return -1
	}
	return (r.usage.CPUSeconds + r.generator.CPUSeconds) / r.elapsed.Seconds()
}

// writeAmp is the server's disk bytes written per payload byte acknowledged.
func writeAmp(r runResult) float64 {
	if !r.hasUsage || r.ackBytes == 0 {
		return -1
	}
	return float64(r.usage.WriteBytes) / float64(r.ackBytes)
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

// medianBy is the median of f over rs.
func medianBy[T any](rs []T, f func(T) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs)
}

func fmtRatio(x float64) string {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", x)
}

func fmtDur(ns float64) string {
	if math.IsInf(ns, 1) {
		return "none"
	}
	d := time.Duration(ns)
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}

func fmtNum(f string) func(float64) string {
	return func(x float64) string {
		if x < 0 {
			return "n/a"
		}
		return fmt.Sprintf(f, x)
	}
}

// cellFor returns the results of key, or a reason there are none.
func (res *results) cellFor(k cellKey) ([]runResult, string) {
	if err := res.failed[k.system]; err != nil && len(res.cells[k]) == 0 {
		if errors.Is(err, errUnavailable) {
			return nil, "unavailable"
		}
		return nil, "failed"
	}
	if res.unsupported[k] {
		return nil, "not supported"
	}
	rs := res.cells[k]
	if len(rs) == 0 {
		return nil, "-"
	}
	return rs, ""
}

// medianCell formats the median over rounds of m.
func (res *results) medianCell(k cellKey, m metric, f func(float64) string) string {
	rs, why := res.cellFor(k)
	if rs == nil {
		return why
	}
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = m(r)
	}
	return f(median(xs))
}

// spreadCell formats the median [min-max] over rounds of m, with f, over
// the rounds where m is measured (not negative).
func (res *results) spreadCell(k cellKey, m metric, f string) string {
	rs, why := res.cellFor(k)
	if rs == nil {
		return why
	}
	var xs []float64
	for _, r := range rs {
		if x := m(r); x >= 0 {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf(f+" ["+f+"–"+f+"]", median(xs), slices.Min(xs), slices.Max(xs))
}

// ratioCell formats the median [min-max] of the per-round ratios
// m(Magnetar) / m(peer).
func (res *results) ratioCell(ours, peer cellKey, m metric) string {
	a, why := res.cellFor(ours)
	if a == nil {
		return why
	}
	b, why := res.cellFor(peer)
	if b == nil {
		return why
	}
	var xs []float64
	for i := range min(len(a), len(b)) {
		x, y := m(a[i]), m(b[i])
		if y > 0 && x >= 0 && !math.IsInf(x, 0) && !math.IsInf(y, 0) {
			xs = append(xs, x/y)
		}
	}
	if len(xs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f [%.2f–%.2f]", median(xs), slices.Min(xs), slices.Max(xs))
}

func buildReport(o options, res *results) *report {
	rep := &report{}
	lim := section{title: "Machine limits (same run): fsync'd sequential appends to a plain file in the data directory's file system; loopback TCP round trip of 64 B; a bare write+fdatasync group-commit loop on a plain file offered W1's rate open loop (the latency floor of durability column (a) on this disk: nothing that acknowledges after an fsync per group can do better at that rate)",
		t: table.Table{Header: []string{"measure", "value"}}}
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		lim.t.Add(fmt.Sprintf("fsync'd append %s (MB/s)", sizeName(size)), fmt.Sprintf("%.1f", res.limits.fsyncBps[size]/1e6))
	}
	if res.limits.rtt != nil {
		lim.t.Add("loopback TCP RTT p50", fmtDur(float64(res.limits.rtt.Quantile(0.5))))
		lim.t.Add("loopback TCP RTT p99", fmtDur(float64(res.limits.rtt.Quantile(0.99))))
	}
	if h := res.limits.groupCommit; h != nil {
		for _, q := range []float64{0.5, 0.99, 0.999} {
			lim.t.Add(fmt.Sprintf("group commit at %d msg/s of %s, p%v", o.rate, sizeName(o.size), q*100), fmtDur(float64(h.Quantile(q))))
		}
	}
	if c := res.limits.copyTLS; c.Bytes > 0 {
		frames := fmt.Sprintf("loopback copy of %d x %s frames", batchMessages, sizeName(o.size))
		for _, cc := range []struct {
			name string
			c    machine.CopyCost
		}{{"plain TCP", res.limits.copyPlain}, {c.Cipher, c}} {
			lim.t.Add(fmt.Sprintf("%s, %s: MB/s; CPU s/GB (both ends)", frames, cc.name), fmt.Sprintf("%.0f; %.2f", cc.c.BytesPerSec()/1e6, cc.c.CPUSecondsPerGB()))
		}
	}
	if res.limits.damon != "" {
		// Its sampling stalls every process at once on the machine these
		// benchmarks were written on (machine.DAMON).
		lim.t.Add("kernel DAMON monitors", res.limits.damon)
	}
	rep.sections = append(rep.sections, lim)
	peers := o.systems[1:]
	w := o.workloads
	dur := fmtDur

	if w["W1"] {
		s := section{title: fmt.Sprintf("W1: one topic, %d partitions, fixed %d msg/s of %s, open loop; latency from the scheduled send time (median over rounds)", o.partitions, o.rate, sizeName(o.size)),
			t: table.Table{Header: []string{"durability", "system", "acked msg/s", "pub p50", "pub p99", "pub p99.9", "e2e p50", "e2e p99", "e2e p99.9", "acked %", "received %"}}}
		r := section{title: "W1 ratios Magnetar / peer, median of per-round ratios [min–max] (latency: below 1 means Magnetar is faster)",
			t: table.Table{Header: []string{"durability", "peer", "pub p50", "pub p99", "pub p99.9", "e2e p99"}}}
		for _, d := range allDurabilities {
			for _, sys := range o.systems {
				k := cellKey{"W1", d, o.rate, sys, 0}
				s.t.Add(d.String(), sys, res.medianCell(k, ackedRate, fmtNum("%.0f")),
					res.medianCell(k, pubQ(0.5), dur), res.medianCell(k, pubQ(0.99), dur), res.medianCell(k, pubQ(0.999), dur),
					res.medianCell(k, e2eQ(0.5), dur), res.medianCell(k, e2eQ(0.99), dur), res.medianCell(k, e2eQ(0.999), dur),
					res.medianCell(k, ackedPct, fmtNum("%.1f")), res.medianCell(k, recvPct, fmtNum("%.1f")))
			}
			ours := cellKey{"W1", d, o.rate, "magnetar", 0}
			for _, p := range peers {
				k := cellKey{"W1", d, o.rate, p, 0}
				r.t.Add(d.String(), p, res.ratioCell(ours, k, pubQ(0.5)), res.ratioCell(ours, k, pubQ(0.99)),
					res.ratioCell(ours, k, pubQ(0.999)), res.ratioCell(ours, k, e2eQ(0.99)))
			}
		}
		rep.sections = append(rep.sections, s, r)
	}
	if w["W3"] {
		s := section{title: fmt.Sprintf("W3: p99 by offered rate, %s, durability %v (median over rounds; ratio Magnetar / peer [min–max])", sizeName(o.size), durFsync),
			t: table.Table{Header: []string{"msg/s", "system", "acked msg/s", "acked %", "pub p99", "e2e p99", "pub p99 ratio", "e2e p99 ratio"}}}
		for _, rate := range o.w3Rates {
			wl := "W3"
			if rate == o.rate {
				wl = "W1"
			}
			ours := cellKey{wl, durFsync, rate, "magnetar", 0}
			for _, sys := range o.systems {
				k := cellKey{wl, durFsync, rate, sys, 0}
				pr, er := "", ""
				if sys != "magnetar" {
					pr, er = res.ratioCell(ours, k, pubQ(0.99)), res.ratioCell(ours, k, e2eQ(0.99))
				}
				s.t.Add(fmt.Sprint(rate), sys, res.medianCell(k, ackedRate, fmtNum("%.0f")), res.medianCell(k, ackedPct, fmtNum("%.1f")),
					res.medianCell(k, pubQ(0.99), dur), res.medianCell(k, e2eQ(0.99), dur), pr, er)
			}
		}
		rep.sections = append(rep.sections, s)
	}
	if w["W2"] {
		s := section{title: fmt.Sprintf("W2: maximum sustained publish throughput, closed loop with %d messages in flight, batching on, %s, durability %v; server CPU and disk writes from /proc/<pid>/{stat,io} (Magnetar: the standalone process, broker + bookie + etcd); Magnetar's MB/s against the fsync'd 1MiB appends measured for %v in its data directory just before and just after each of its runs (the machine-limits figure, taken once after the disk was idle, can read a burst the disk does not sustain)", o.window, sizeName(o.size), durFsync, o.limitDuration),
			t: table.Table{Header: []string{"system", "msg/s", "MB/s", "of fsync'd 1MiB appends before and after each run, % [min–max]", "server CPU s/GB", "disk bytes written / byte produced", "msg/s ratio Magnetar / peer"}}}
		ours := cellKey{"W2", durFsync, 0, "magnetar", 0}
		for _, sys := range o.systems {
			k := cellKey{"W2", durFsync, 0, sys, 0}
			ratio, disk := "", res.spreadCell(ours, ofDiskPct, "%.0f")
			if sys != "magnetar" {
				ratio, disk = res.ratioCell(ours, k, ackedRate), ""
			}
			s.t.Add(sys, res.medianCell(k, ackedRate, fmtNum("%.0f")), res.medianCell(k, mbRate, fmtNum("%.1f")), disk,
				res.medianCell(k, cpuPerGB, fmtNum("%.1f")), res.medianCell(k, writeAmp, fmtNum("%.2f")), ratio)
		}
		rep.sections = append(rep.sections, s)
	}
	if w["W2"] && res.limits.copyTLS.Bytes > 0 {
		rep.sections = append(rep.sections, securityFloor(o, res))
	}
	if w["W7"] {
		s := section{title: fmt.Sprintf("W7: W1 (%d msg/s) with fsync on (a) and off (b), median over rounds; on/off is the median of per-round ratios", o.rate),
			t: table.Table{Header: []string{"system", "pub p99 on", "pub p99 off", "pub p99 on/off", "e2e p99 on", "e2e p99 off", "e2e p99 on/off"}}}
		for _, sys := range o.systems {
			on, off := cellKey{"W1", durFsync, o.rate, sys, 0}, cellKey{"W1", durOS, o.rate, sys, 0}
			s.t.Add(sys, res.medianCell(on, pubQ(0.99), dur), res.medianCell(off, pubQ(0.99), dur), res.ratioCell(on, off, pubQ(0.99)),
				res.medianCell(on, e2eQ(0.99), dur), res.medianCell(off, e2eQ(0.99), dur), res.ratioCell(on, off, e2eQ(0.99)))
		}
		rep.sections = append(rep.sections, s)
	}
	if w["W4"] {
		s := section{title: fmt.Sprintf("W4: fan-out, one topic (1 partition) at a fixed %d msg/s of %s, durability %v, read by N subscriptions (Magnetar: exclusive subscriptions; NATS: durable AckNone consumers of one stream; Redis: consumer groups read with NOACK); e2e across all subscriptions (median over rounds; ratio Magnetar / peer [min–max])", o.fanoutRate, sizeName(o.size), durFsync),
			t: table.Table{Header: []string{"subscriptions", "system", "delivered msg/s", "e2e p50", "e2e p99", "acked %", "received %", "delivered ratio", "e2e p99 ratio"}}}
		for _, f := range o.fanouts {
			ours := cellKey{"W4", durFsync, o.fanoutRate, "magnetar", f}
			for _, sys := range o.systems {
				k := cellKey{"W4", durFsync, o.fanoutRate, sys, f}
				dr, er := "", ""
				if sys != "magnetar" {
					dr, er = res.ratioCell(ours, k, deliveredRate), res.ratioCell(ours, k, e2eQ(0.99))
				}
				s.t.Add(fmt.Sprint(f), sys, res.medianCell(k, deliveredRate, fmtNum("%.0f")),
					res.medianCell(k, e2eQ(0.5), dur), res.medianCell(k, e2eQ(0.99), dur),
					res.medianCell(k, ackedPct, fmtNum("%.1f")), res.medianCell(k, recvPct, fmtNum("%.1f")), dr, er)
			}
		}
		rep.sections = append(rep.sections, s)
	}
	if w["W5"] {
		s := section{title: fmt.Sprintf("W5: many topics, Magnetar only (NATS subjects and Redis keys cost next to nothing to create, so no comparable peer figure): %d topics created through the admin API (%d requests in flight), the standalone's VmRSS and open files per topic minus the baseline before creation: as the last creation was answered (after creating), idle (no client; RSS steady within 1%% for 2 s) and with one producer attached to every topic (%d attaching at a time), publish p99 at %d msg/s of %s round robin over every topic (one producer each, no batching, durability %v), restart = SIGTERM until exit + start until healthy and a produce to a random topic succeeded (median over rounds)", o.topics, o.createInflight, attachWorkers, o.topicsRate, sizeName(o.size), durFsync),
			t: table.Table{Header: []string{"system", "topics", "created/s", "producers/s", "after creating RSS KiB/topic", "idle RSS KiB/topic", "idle files/topic", "with producers RSS KiB/topic", "with producers files/topic", "acked msg/s", "acked %", "pub p50", "pub p99", "restart", "stop", "start to ready"}}}
		for _, sys := range o.systems {
			rs := res.manyTopics[sys]
			if len(rs) == 0 {
				why := "not comparable"
				if sys == "magnetar" {
					why = "-"
				}
				s.t.Add(sys, why, "", "", "", "", "", "", "", "", "", "", "", "", "", "")
				continue
			}
			md := func(f func(manyTopicsResult) float64) float64 { return medianBy(rs, f) }
			s.t.Add(sys, fmt.Sprint(rs[0].topics), fmt.Sprintf("%.0f", md(manyTopicsResult.createRate)), fmt.Sprintf("%.0f", md(manyTopicsResult.attachRate)),
				fmt.Sprintf("%.1f", md(manyTopicsResult.rssPerTopicAfter)/1024), fmt.Sprintf("%.1f", md(manyTopicsResult.rssPerTopic)/1024), fmt.Sprintf("%.2f", md(manyTopicsResult.fdPerTopic)),
				fmt.Sprintf("%.1f", md(manyTopicsResult.rssPerLoaded)/1024), fmt.Sprintf("%.2f", md(manyTopicsResult.fdPerLoaded)),
				fmt.Sprintf("%.0f", md(func(m manyTopicsResult) float64 { return m.run.ackedPerSec() })),
				fmt.Sprintf("%.1f", md(func(m manyTopicsResult) float64 { return ackedPct(m.run) })),
				dur(md(func(m manyTopicsResult) float64 { return quantileOf(m.run.pub, 0.5) })),
				dur(md(func(m manyTopicsResult) float64 { return quantileOf(m.run.pub, 0.99) })),
				dur(md(func(m manyTopicsResult) float64 { return float64(m.stop + m.ready) })),
				dur(md(func(m manyTopicsResult) float64 { return float64(m.stop) })),
				dur(md(func(m manyTopicsResult) float64 { return float64(m.ready) })))
		}
		rep.sections = append(rep.sections, s)
	}
	if w["W6"] {
		s := section{title: fmt.Sprintf("W6: catch-up, a backlog of %s (%d partitions, durability %v) read from the start by a new subscription while a producer publishes %d msg/s of %s; the backlog is everything acknowledged before the reader subscribed (the built backlog and the producer's baseline run); read rate = bytes received (backlog and live) / time to receive the whole backlog; targets: read >= 2x the producer, producer pub p99 raised <= 2x (median over rounds)", sizeName(int(o.backlog)), o.partitions, durFsync, o.catchupRate, sizeName(o.size)),
			t: table.Table{Header: []string{"system", "MB before subscribe", "built at MB/s", "caught up", "catch-up time", "read MB/s", "x producer", "pub p99 alone", "pub p99 during", "p99 raise", "targets"}}}
		if len(res.catchups[pacedSystem]) > 0 {
			s.title += fmt.Sprintf(`; "%s": a Magnetar started with --backlog-read-rate %d (%.1fx the producer's bytes/s; an operator's setting, off by default as Pulsar's dispatch throttling)`, pacedSystem, pacedRate(o), o.catchupPaced)
		}
		rows := slices.Clone(o.systems)
		if i := slices.Index(rows, "magnetar"); i >= 0 && len(res.catchups[pacedSystem]) > 0 {
			rows = slices.Insert(rows, i+1, pacedSystem)
		}
		for _, sys := range rows {
			rs := res.catchups[sys]
			if len(rs) == 0 {
				why := "-"
				if err := res.failed[sys]; err != nil {
					why = "failed"
					if errors.Is(err, errUnavailable) {
						why = "unavailable"
					}
				}
				s.t.Add(sys, why, "", "", "", "", "", "", "", "", "")
				continue
			}
			md := func(f func(catchupResult) float64) float64 { return medianBy(rs, f) }
			caught := 0
			for _, r := range rs {
				if r.caughtUp {
					caught++
				}
			}
			mult, raise := md(catchupResult.multiple), md(catchupResult.p99Raise)
			verdict := "met"
			if caught < len(rs) || mult < 2 || raise > 2 {
				verdict = "MISSED"
			}
			s.t.Add(sys, fmt.Sprintf("%.0f", md(func(c catchupResult) float64 { return float64(c.backlogBytes) / 1e6 })),
				fmt.Sprintf("%.1f", md(func(c catchupResult) float64 { return float64(c.backlogBytes) / 1e6 / c.fill.Seconds() })),
				fmt.Sprintf("%d/%d", caught, len(rs)), dur(md(func(c catchupResult) float64 { return float64(c.catchup) })),
				fmt.Sprintf("%.1f", md(catchupResult.readBps)/1e6), fmt.Sprintf("%.1f", mult),
				dur(md(func(c catchupResult) float64 { return quantileOf(c.base.pub, 0.99) })),
				dur(md(func(c catchupResult) float64 { return quantileOf(c.during.pub, 0.99) })),
				fmtRatio(raise), verdict)
		}
		rep.sections = append(rep.sections, s)
	}
	ld := section{title: fmt.Sprintf("Load per round and system block (cores busy from /proc/stat; ours = harness + server CPU; NOISY when others used more than %.2f cores, with the busiest other processes and their cores)", noisyOthers),
		t: table.Table{Header: []string{"round", "system", "load avg before", "load avg after", "cpu some avg10 after", "io pressure after", "wall", "busy cores", "ours", "others", "flag"}}}
	for _, b := range res.loads {
		flag := ""
		if b.noisy {
			flag = "NOISY"
			for _, p := range b.topOthers {
				flag += ", " + p.String()
			}
		}
		ld.t.Add(fmt.Sprint(b.round), b.system, b.before.LoadAvg, b.after.LoadAvg, fmtNum("%.1f%%")(b.cpuPressure10s),
			firstPressure(b.after.IOPressure), b.after.At.Sub(b.before.At).Round(time.Second).String(), fmtNum("%.2f")(b.busy), fmt.Sprintf("%.2f", b.ours), fmt.Sprintf("%.2f", b.others), flag)
	}
	rep.sections = append(rep.sections, ld)
	return rep
}

// securityFloor is W2 of the plain and the TLS systems next to what the
// loopback copies say encryption alone costs at each one's rate.
func securityFloor(o options, res *results) section {
	extra := res.limits.copyTLS.CPUSecondsPerGB() - res.limits.copyPlain.CPUSecondsPerGB()
	s := section{title: fmt.Sprintf("Security cost and its floor: W2 (median over rounds) by system; \"TLS crypto at this rate\": the TLS loopback copy's CPU per GB minus the plain copy's (%.2f s/GB, machine limits), times the system's W2 MB/s: the cores encrypting in the client and decrypting in the broker take at that rate, of the machine's %d CPUs; \"CPU-bound ceiling\": plain text's server + generator CPU per GB over that plus the crypto's, the most a TLS system can reach of plain text's rate while the CPUs are the limit", extra, runtime.NumCPU()),
		t: table.Table{Header: []string{"system", "msg/s", "of plain text, median of per-round ratios [min–max]", "CPU-bound ceiling, of plain text", "MB/s", "server CPU s/GB", "generator CPU s/GB", "cores used (server + generator)", "TLS crypto at this rate (cores)"}}}
	ours := cellKey{"W2", durFsync, 0, "magnetar", 0}
	// When the server and the generator keep the machine's CPUs busy, a
	// TLS system moves at most plain text's MB/s times plain's CPU per GB
	// over that plus the crypto's: the ceiling its ratio is read against.
	ceiling := ""
	if rs, _ := res.cellFor(ours); rs != nil {
		xs := make([]float64, 0, len(rs))
		for _, r := range rs {
			if c := cpuPerGB(r) + generatorCPUPerGB(r); r.hasUsage && c > 0 {
				xs = append(xs, c)
			}
		}
		if len(xs) > 0 {
			plain := median(xs)
			ceiling = fmt.Sprintf("%.2f", plain/(plain+extra))
		}
	}
	for _, sys := range o.systems {
		if sys != "magnetar" && sys != "magnetar-tls" && sys != "magnetar-secure" {
			continue
		}
		k := cellKey{"W2", durFsync, 0, sys, 0}
		of, ceil := "", ""
		if sys != "magnetar" {
			of, ceil = res.ratioCell(k, ours, ackedRate), ceiling
		}
		s.t.Add(sys, res.medianCell(k, ackedRate, fmtNum("%.0f")), of, ceil, res.medianCell(k, mbRate, fmtNum("%.1f")),
			res.medianCell(k, cpuPerGB, fmtNum("%.1f")), res.medianCell(k, generatorCPUPerGB, fmtNum("%.1f")),
			res.medianCell(k, coresUsed, fmtNum("%.2f")),
			res.medianCell(k, func(r runResult) float64 { return extra * r.mbPerSec() / 1e3 }, fmtNum("%.2f")))
	}
	return s
}

// firstPressure returns the "some" line of a pressure reading.
func firstPressure(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == ';' {
			return s[:i]
		}
	}
	return s
}

func sizeName(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func (rep *report) writeText(w io.Writer) {
	for _, s := range rep.sections {
		fmt.Fprintf(w, "\n%s\n", s.title)
		s.t.WriteText(w)
	}
	fmt.Fprintf(w, "\n%s\n", behindNote)
}

// behindNote explains an acked % below 100.
const behindNote = "\"none\": nothing was acknowledged (or received) in the window. acked % is of the messages scheduled in the measured window; below 100 the system fell behind the offered rate " +
	"(messages still unpublished, or unacknowledged, when the window and the drain ended) and its percentiles cover only what was acknowledged: the true tail is worse."

func (rep *report) writeMarkdown(w io.Writer, o options, res *results) {
	fmt.Fprintf(w, "## streambench run of %s\n\n", res.started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- commit: `%s`\n", machine.GitCommit())
	fmt.Fprintf(w, "- command: `%s`\n", o.command)
	fmt.Fprintf(w, "- machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s; shared with other work\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(w, "- method: %d interleaved round(s) (%v); each run %v measured after %v warm-up (%v for the runs after the first on a server); open loop paced by a 1 ms ticker with catch-up, latency from the scheduled send time; servers on loopback, fresh data directory per durability and round\n",
		o.rounds, o.systems, o.duration, o.warmup, o.laterWarmup)
	for name, err := range res.failed {
		fmt.Fprintf(w, "- %s not measured: %v\n", name, err)
	}
	fmt.Fprintf(w, "- duration: %v\n", res.ended.Sub(res.started).Round(time.Second))
	for _, s := range rep.sections {
		fmt.Fprintf(w, "\n%s:\n\n", s.title)
		s.t.WriteMarkdown(w)
	}
	fmt.Fprintf(w, "\n%s\n", behindNote)
}
