// Command noisybench measures noisy-neighbour protection on one broker: a
// `magnetar standalone` built from this repository and run as its own
// process (journal fsync on), driven through the Apache Pulsar Go client.
//
// Tenant B publishes at a fixed rate (-b-rate msg/s of -size bytes, no
// batching, asynchronously with at most -b-window messages in flight, open
// loop paced by a 1 ms ticker, latency from each message's scheduled send
// time) on its own namespace. Tenant A, in the same run, publishes as fast
// as it can: -a-producers producers on one connection, batching on, each
// with -a-window messages in flight. The cases, in this order in every
// round:
//
//   - alone: B only (the floor B's latency is judged against);
//   - ns quota: A on one topic of a namespace whose publishRate policy is
//     -quota msg/s (Pulsar applies a namespace's publish rate to each of
//     its topics);
//   - group quota: A spread over two topics in two namespaces that share a
//     resource group of -quota msg/s (the cap of a whole tenant on a
//     broker);
//   - no quota: A on a namespace without a limit (what A offers: the
//     quotas hold it to at least ten times less), skipped with
//     -no-quota=false.
//
// Reported per case: A's acknowledged rate in the measured window against
// its quota (target within 10%), B's publish p50/p99/p99.9 and B's p99
// against the same round's alone case (target at most 2x), the broker's
// CPU (from /proc/<pid>/stat) and the CPU other processes used meanwhile
// (the machine is shared). -cpuprofile DIR saves a CPU profile of the
// broker in each case of the first round (its --pprof-addr).
//
//	go run ./bench/noisybench [-rounds 5] [-duration 10s] [-warmup 1s] [-quota 2000] [-b-rate 1000]
//	    [-size 1024] [-a-producers 4] [-cpuprofile DIR] [-markdown FILE]
//
// Concurrency: main owns the server and every client; each case's
// publishing goroutines are started and waited for within the case.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
	"github.com/magnetar-dev/magnetar/bench/internal/machine"
	"github.com/magnetar-dev/magnetar/bench/internal/proc"
	"github.com/magnetar-dev/magnetar/bench/internal/table"
	"github.com/magnetar-dev/magnetar/internal/freeport"
)

var (
	rounds     = flag.Int("rounds", 5, "interleaved rounds of every case")
	duration   = flag.Duration("duration", 10*time.Second, "measured window of each case")
	warmup     = flag.Duration("warmup", time.Second, "time before the window in each case")
	quota      = flag.Int("quota", 2000, "tenant A's publish quota, msg/s")
	bRate      = flag.Int("b-rate", 1000, "tenant B's fixed publish rate, msg/s")
	size       = flag.Int("size", 1024, "message size in bytes")
	bWindow    = flag.Int("b-window", 1000, "tenant B's messages in flight at most")
	aProducers = flag.Int("a-producers", 4, "tenant A's producers")
	aWindow    = flag.Int("a-window", 2000, "messages in flight per producer of tenant A")
	aBatch     = flag.Int("a-batch", 1000, "tenant A's messages per batch at most (the client's default; each batch is one entry, charged whole)")
	noQuota    = flag.Bool("no-quota", true, "also run A without a quota")
	cpuprofile = flag.String("cpuprofile", "", "directory for CPU profiles of the broker, one per case of round 1")
	markdown   = flag.String("markdown", "", "also write the report as Markdown to this file")
	dirFlag    = flag.String("dir", "", "directory for the build and the data (default: a temporary one)")
)

// A case is one workload of a round.
type benchCase struct {
	name   string
	topics func(round int) []string // A's topics; none: B alone
}

// result is one case of one round.
type result struct {
	round        int
	c            *benchCase
	aAcked       int64 // A's acknowledgements in the window
	b            *latency.Histogram
	bScheduled   int64 // B's messages scheduled in the window
	broker, self float64
	others       float64 // cores used by other processes
}

func (r result) aRate() float64 { return float64(r.aAcked) / duration.Seconds() }

func main() {
	flag.Parse()
	log.SetFlags(0)
	ctx := context.Background()
	dir := *dirFlag
	if dir == "" {
		d, err := os.MkdirTemp("", "noisybench-")
		check(err)
		defer os.RemoveAll(d)
		dir = d
	}
	started := time.Now()
	root, err := proc.ModuleRoot()
	check(err)
	bin := filepath.Join(dir, "magnetar")
	log.Printf("building %s", bin)
	check(proc.GoBuild(ctx, root, bin, "./cmd/magnetar"))
	addrs, err := freeport.Addrs(4)
	check(err)
	broker, admin := addrs[0], "http://"+addrs[1]
	srv, err := proc.Start(dir, "magnetar.log", bin, "standalone", "--data-dir", filepath.Join(dir, "data"),
		"--broker-addr", addrs[0], "--http-addr", addrs[1], "--bookie-addr", addrs[2], "--pprof-addr", addrs[3])
	check(err)
	defer srv.Stop()
	check(srv.WaitReady(ctx, func(ctx context.Context) error { return do(ctx, http.MethodGet, admin+"/admin/v2/brokers/health", "") }))

	// Tenant A: a namespace with a publish rate, two in one resource
	// group, one without a limit. Tenant B: one namespace, no limit.
	setup := [][3]string{
		{http.MethodPut, "/admin/v2/tenants/tenant-a", `{"allowedClusters":["standalone"]}`},
		{http.MethodPut, "/admin/v2/tenants/tenant-b", `{"allowedClusters":["standalone"]}`},
		{http.MethodPut, "/admin/v2/namespaces/tenant-b/steady", `{}`},
		{http.MethodPut, "/admin/v2/namespaces/tenant-a/quota", `{}`},
		{http.MethodPost, "/admin/v2/namespaces/tenant-a/quota/publishRate", fmt.Sprintf(`{"publishThrottlingRateInMsg":%d,"publishThrottlingRateInByte":-1}`, *quota)},
		{http.MethodPut, "/admin/v2/resourcegroups/tenant-a", fmt.Sprintf(`{"publishRateInMsgs":%d,"publishRateInBytes":-1,"dispatchRateInMsgs":-1,"dispatchRateInBytes":-1}`, *quota)},
		{http.MethodPut, "/admin/v2/namespaces/tenant-a/group1", `{}`},
		{http.MethodPut, "/admin/v2/namespaces/tenant-a/group2", `{}`},
		{http.MethodPost, "/admin/v2/namespaces/tenant-a/group1/resourcegroup/tenant-a", ``},
		{http.MethodPost, "/admin/v2/namespaces/tenant-a/group2/resourcegroup/tenant-a", ``},
		{http.MethodPut, "/admin/v2/namespaces/tenant-a/free", `{}`},
	}
	for _, s := range setup {
		check(do(ctx, s[0], admin+s[1], s[2]))
	}
	cases := []*benchCase{
		{name: "alone"},
		{name: "ns quota", topics: func(r int) []string { return []string{fmt.Sprintf("persistent://tenant-a/quota/flood-%d", r)} }},
		{name: "group quota", topics: func(r int) []string {
			return []string{fmt.Sprintf("persistent://tenant-a/group1/flood-%d", r), fmt.Sprintf("persistent://tenant-a/group2/flood-%d", r)}
		}},
	}
	if *noQuota {
		cases = append(cases, &benchCase{name: "no quota", topics: func(r int) []string { return []string{fmt.Sprintf("persistent://tenant-a/free/flood-%d", r)} }})
	}

	clientA, clientB := newClient(broker), newClient(broker)
	defer clientA.Close()
	defer clientB.Close()
	load0 := machine.Snapshot()
	var results []result
	for round := 1; round <= *rounds; round++ {
		for i, c := range cases {
			var profile string
			if *cpuprofile != "" && round == 1 {
				profile = filepath.Join(*cpuprofile, fmt.Sprintf("broker-%s.pprof", strings.ReplaceAll(c.name, " ", "-")))
			}
			r := runCase(ctx, clientA, clientB, srv.Pid(), round, i, c, addrs[3], profile)
			results = append(results, r)
			log.Printf("round %d %-11s A %6.0f msg/s, B p50 %v p99 %v p99.9 %v (%d of %d acked), broker %.2f cores, others %.2f",
				round, c.name, r.aRate(), r.b.Quantile(0.5), r.b.Quantile(0.99), r.b.Quantile(0.999), r.b.Count(), r.bScheduled, r.broker, r.others)
		}
	}
	load1 := machine.Snapshot()
	report(os.Stdout, cases, results, started, load0, load1, false)
	if *markdown != "" {
		f, err := os.Create(*markdown)
		check(err)
		report(f, cases, results, started, load0, load1, true)
		check(f.Close())
	}
}

// runCase runs one case: A's flood (if any) and B's fixed rate together,
// measured in the window [warmup, warmup+duration) from the start.
func runCase(ctx context.Context, clientA, clientB pulsar.Client, pid, round, idx int, c *benchCase, pprofAddr, profile string) result {
	res := result{round: round, c: c, b: latency.NewHistogram()}
	bp, err := clientB.CreateProducer(pulsar.ProducerOptions{Topic: fmt.Sprintf("persistent://tenant-b/steady/b-%d-%d", round, idx),
		DisableBatching: true, MaxPendingMessages: *bWindow, SendTimeout: time.Minute})
	check(err)
	var aps []pulsar.Producer
	if c.topics != nil {
		topics := c.topics(round)
		for i := range *aProducers {
			p, err := clientA.CreateProducer(pulsar.ProducerOptions{Topic: topics[i%len(topics)], MaxPendingMessages: *aWindow,
				BatchingMaxMessages: uint(*aBatch), BatchingMaxSize: 1 << 20, BatchingMaxPublishDelay: 10 * time.Millisecond, SendTimeout: time.Minute})
			check(err)
			aps = append(aps, p)
		}
	}

	start := time.Now()
	from, to := start.Add(*warmup), start.Add(*warmup+*duration)
	inWindow := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	floodCtx, stopFlood := context.WithCancel(ctx)
	var aAcked atomic.Int64
	var wg sync.WaitGroup
	for _, p := range aps {
		wg.Add(1)
		go func() { // owned by runCase: stopped by stopFlood, waited for below
			defer wg.Done()
			payload := make([]byte, *size)
			for floodCtx.Err() == nil {
				p.SendAsync(floodCtx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err == nil && inWindow(time.Now()) {
						aAcked.Add(1)
					}
				})
			}
		}()
	}

	var mu sync.Mutex // guards res.b
	var pending sync.WaitGroup
	var u0, s0 machine.ProcUsage
	var l0 machine.Load
	measuring := false
	profiled := make(chan struct{})
	if profile != "" {
		go func() { // owned by runCase: waited for below
			defer close(profiled)
			time.Sleep(time.Until(from))
			saveProfile(pprofAddr, profile, *duration)
		}()
	} else {
		close(profiled)
	}
	tick := time.NewTicker(time.Millisecond)
	sent := 0
	for now := range tick.C {
		if !measuring && !now.Before(from) {
			measuring = true
			u0, _ = machine.ReadProc(pid)
			s0, _ = machine.ReadProc(os.Getpid())
			l0 = machine.Snapshot()
		}
		if !now.Before(to) {
			break
		}
		due := int(now.Sub(start).Seconds() * float64(*bRate))
		for ; sent < due; sent++ {
			sched := start.Add(time.Duration(sent) * time.Second / time.Duration(*bRate))
			counted := inWindow(sched)
			if counted {
				res.bScheduled++
			}
			payload := make([]byte, *size)
			binary.BigEndian.PutUint64(payload, uint64(sched.UnixNano()))
			pending.Add(1)
			bp.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer pending.Done()
				if err == nil && counted {
					mu.Lock()
					res.b.Record(time.Since(sched))
					mu.Unlock()
				}
			})
		}
	}
	tick.Stop()
	u1, _ := machine.ReadProc(pid)
	s1, _ := machine.ReadProc(os.Getpid())
	l1 := machine.Snapshot()
	win := l1.At.Sub(l0.At).Seconds()
	res.broker, res.self = u1.Sub(u0).CPUSeconds/win, s1.Sub(s0).CPUSeconds/win
	res.others = max(machine.BusyCores(l0, l1)-res.broker-res.self, 0)
	res.aAcked = aAcked.Load()

	stopFlood()
	wg.Wait()
	// Closing fails what A still has in flight; B's last sends finish.
	for _, p := range aps {
		p.Close()
	}
	drained := make(chan struct{})
	go func() { pending.Wait(); close(drained) }() // ends when B's last callback ran
	select {
	case <-drained:
	case <-time.After(time.Minute):
		log.Fatalf("round %d %s: B's messages not acknowledged within a minute", round, c.name)
	}
	bp.Close()
	<-profiled
	return res
}

// saveProfile writes a CPU profile of the broker over d to path.
func saveProfile(addr, path string, d time.Duration) {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
	if err != nil {
		log.Printf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	check(os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	check(err)
	_, err = io.Copy(f, resp.Body)
	check(err)
	check(f.Close())
}

// report writes the per-round table and the summary with the targets.
func report(w io.Writer, cases []*benchCase, rs []result, started time.Time, l0, l1 machine.Load, md bool) {
	write := func(t *table.Table) {
		if md {
			t.WriteMarkdown(w)
		} else {
			t.WriteText(w)
		}
		fmt.Fprintln(w)
	}
	alone := map[int]result{}
	for _, r := range rs {
		if r.c.topics == nil {
			alone[r.round] = r
		}
	}
	p99ratio := func(r result) float64 {
		return float64(r.b.Quantile(0.99)) / float64(alone[r.round].b.Quantile(0.99))
	}
	fmt.Fprintf(w, "Noisy neighbour, one broker (magnetar standalone, journal fsync on), commit %s, %s\n\n", machine.GitCommit(), started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s; shared with other work: load average %s before, %s after\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), l0.LoadAvg, l1.LoadAvg)
	fmt.Fprintf(w, "- B: %d msg/s of %d B, no batching, at most %d in flight, open loop; A: %d producers on one connection, batches of up to %d, %d in flight each, closed loop; quota %d msg/s\n",
		*bRate, *size, *bWindow, *aProducers, *aBatch, *aWindow, *quota)
	fmt.Fprintf(w, "- method: %d interleaved round(s) of %d cases, each %v measured after %v; B's latency from each message's scheduled send time; \"B p99 / alone\": against the same round's alone case\n\n",
		*rounds, len(cases), *duration, *warmup)

	per := table.Table{Header: []string{"round", "case", "A msg/s", "A / quota", "B p50", "B p99", "B p99.9", "B acked %", "B p99 / alone", "broker cores", "others cores"}}
	for _, r := range rs {
		aRate, ratio, quotaRatio := "", "", ""
		if r.c.topics != nil {
			aRate, ratio = fmt.Sprintf("%.0f", r.aRate()), fmt.Sprintf("%.2f", p99ratio(r))
			quotaRatio = fmt.Sprintf("%.2f", r.aRate()/float64(*quota))
		}
		per.Add(fmt.Sprint(r.round), r.c.name, aRate, quotaRatio, fmtDur(r.b.Quantile(0.5)), fmtDur(r.b.Quantile(0.99)), fmtDur(r.b.Quantile(0.999)),
			fmt.Sprintf("%.1f", 100*float64(r.b.Count())/float64(max(r.bScheduled, 1))), ratio, fmt.Sprintf("%.2f", r.broker), fmt.Sprintf("%.2f", r.others))
	}
	write(&per)

	sum := table.Table{Header: []string{"case", "A msg/s", "A / quota [min–max]", "B p50", "B p99", "B p99.9", "B p99 / alone [min–max]", "broker cores", "targets"}}
	for _, c := range cases {
		var mine []result
		for _, r := range rs {
			if r.c == c {
				mine = append(mine, r)
			}
		}
		q := func(p float64) string {
			return fmtDur(time.Duration(median(mine, func(r result) float64 { return float64(r.b.Quantile(p)) })))
		}
		aRate, quotaCell, ratioCell, verdict := "", "", "", "floor"
		if c.topics != nil {
			aRate = fmt.Sprintf("%.0f", median(mine, result.aRate))
			qs := spread(mine, func(r result) float64 { return r.aRate() / float64(*quota) })
			ps := spread(mine, p99ratio)
			quotaCell, ratioCell = fmtSpread(qs), fmtSpread(ps)
			switch {
			case c.name == "no quota":
				verdict = fmt.Sprintf("A offers %.0fx the quota", qs[0])
			case qs[0] >= 0.9 && qs[0] <= 1.1 && ps[0] <= 2:
				verdict = "met"
			default:
				var miss []string
				if qs[0] < 0.9 || qs[0] > 1.1 {
					miss = append(miss, fmt.Sprintf("A at %.2f of its quota", qs[0]))
				}
				if ps[0] > 2 {
					miss = append(miss, fmt.Sprintf("B p99 %.2fx alone", ps[0]))
				}
				verdict = "MISSED: " + strings.Join(miss, ", ")
			}
		}
		sum.Add(c.name, aRate, quotaCell, q(0.5), q(0.99), q(0.999), ratioCell, fmt.Sprintf("%.2f", median(mine, func(r result) float64 { return r.broker })), verdict)
	}
	fmt.Fprintf(w, "Medians over rounds (targets: A within 10%% of its quota, B's p99 at most 2x alone):\n\n")
	write(&sum)
}

// spread returns the median, minimum and maximum of f over rs.
func spread(rs []result, f func(result) float64) [3]float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	return [3]float64{medianOf(xs), xs[0], xs[len(xs)-1]}
}

func fmtSpread(s [3]float64) string { return fmt.Sprintf("%.2f [%.2f–%.2f]", s[0], s[1], s[2]) }

func median(rs []result, f func(result) float64) float64 { return spread(rs, f)[0] }

func medianOf(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fms", float64(d)/1e6)
}

func newClient(broker string) pulsar.Client {
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + broker, OperationTimeout: 30 * time.Second, Logger: plog.DefaultNopLogger()})
	check(err)
	return c
}

func do(ctx context.Context, method, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("noisybench: %s %s: %s %s", method, url, resp.Status, b)
	}
	return nil
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
