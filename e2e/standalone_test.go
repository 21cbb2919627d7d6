package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/internal/procstatus"
)

// standaloneProc is a `magnetar standalone` process on fixed loopback ports.
type standaloneProc struct {
	*Process
	brokerAddr, httpAddr string
}

func startStandaloneProc(t *testing.T, dir string, extra ...string) *standaloneProc {
	if testing.Short() {
		t.Skip("process-level test")
	}
	sp := &standaloneProc{brokerAddr: FreeAddr(t), httpAddr: FreeAddr(t)}
	args := append([]string{"standalone", "--data-dir", dir,
		"--broker-addr", sp.brokerAddr, "--http-addr", sp.httpAddr, "--bookie-addr", FreeAddr(t)}, extra...)
	sp.Process = Start(t, "standalone", args...)
	sp.waitReady(t)
	return sp
}

// waitReady polls GET /admin/v2/brokers/health until it answers 200.
func (sp *standaloneProc) waitReady(t *testing.T) {
	t.Helper()
	waitFor(t, "standalone health", 60*time.Second, func() bool {
		resp, err := http.Get("http://" + sp.httpAddr + "/admin/v2/brokers/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// quietPulsarLogger is a Pulsar client logger that writes nothing.
func quietPulsarLogger() plog.Logger {
	return plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func pulsarClient(t *testing.T, addr string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: "pulsar://" + addr, OperationTimeout: 30 * time.Second, ConnectionTimeout: 5 * time.Second,
		Logger: quietPulsarLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// crashPayload is deterministic from (producer, seq) so the consumer can
// check every byte.
func crashPayload(p, seq int) []byte {
	r := rand.New(rand.NewPCG(uint64(p), uint64(seq)))
	b := []byte(fmt.Sprintf("p%d-%07d-", p, seq))
	for range 200 + r.IntN(800) {
		b = append(b, byte(r.Uint32()))
	}
	return b
}

// TestStandaloneKill9 produces from three producers with receipts, SIGKILLs
// the standalone at a random moment, restarts it on the same directory and
// checks that every receipted message is delivered, byte-identical, in order
// per producer.
func TestStandaloneKill9(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	sp := startStandaloneProc(t, dir)
	topic := "persistent://public/default/crash"

	c := pulsarClient(t, sp.brokerAddr)
	sub, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "verify", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()

	const producers = 3
	var mu sync.Mutex
	receipted := make([][]int, producers) // seqs receipted, per producer
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for p := 0; p < producers; p++ {
		prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: fmt.Sprintf("crash-%d", p),
			BatchingMaxPublishDelay: 2 * time.Millisecond, SendTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				prod.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: crashPayload(p, seq)},
					func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						if err == nil {
							mu.Lock()
							receipted[p] = append(receipted[p], seq)
							mu.Unlock()
						}
					})
				if seq%64 == 63 {
					prod.Flush()
				}
			}
		}()
	}
	time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
	sp.Kill()
	close(stop)
	wg.Wait()
	c.Close()
	mu.Lock()
	total := 0
	for p := range receipted {
		total += len(receipted[p])
	}
	mu.Unlock()
	if total == 0 {
		t.Fatal("no message was receipted before the kill")
	}
	t.Logf("%d messages receipted before SIGKILL", total)

	sp.Restart()
	sp.waitReady(t)
	c2 := pulsarClient(t, sp.brokerAddr)
	defer c2.Close()
	cons, err := c2.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "verify"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	want := make([]map[int]bool, producers)
	for p := range receipted {
		want[p] = map[int]bool{}
		for _, s := range receipted[p] {
			want[p][s] = true
		}
	}
	lastSeq := []int{-1, -1, -1}
	missing := total
	for missing > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive after restart: %v (%d receipted messages not delivered)", err, missing)
		}
		var p, seq int
		if _, err := fmt.Sscanf(strings.SplitN(string(m.Payload()), "-", 3)[0]+" "+strings.SplitN(string(m.Payload()), "-", 3)[1], "p%d %d", &p, &seq); err != nil {
			t.Fatalf("unparsable payload %q", m.Payload()[:min(20, len(m.Payload()))])
		}
		if string(m.Payload()) != string(crashPayload(p, seq)) {
			t.Fatalf("message p%d-%d is not byte-identical", p, seq)
		}
		if seq <= lastSeq[p] {
			t.Fatalf("producer %d: seq %d after %d: out of order", p, seq, lastSeq[p])
		}
		lastSeq[p] = seq
		if want[p][seq] {
			delete(want[p], seq)
			missing--
		}
		cons.Ack(m)
	}
}

// TestBacklogReadRateFlag: `magnetar standalone --backlog-read-rate` paces a
// subscription catching up on a backlog read from the bookie. 2 MiB are
// written, the process is restarted (so nothing is in the broker's cache)
// and a consumer reads them back at 256 KiB/s: at least 4 s (half the
// nominal 8 s; unpaced it takes well under a second).
func TestBacklogReadRateFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	sp := startStandaloneProc(t, dir, "--backlog-read-rate", "262144")
	topic := "persistent://public/default/paced"
	c := pulsarClient(t, sp.brokerAddr)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}
	sub, err := c.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 512, 4 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, n)
	for range n {
		prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: make([]byte, size)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	c.Close()

	sp.Terminate()
	sp.StartAgain()
	sp.waitReady(t)
	c = pulsarClient(t, sp.brokerAddr)
	defer c.Close()
	start := time.Now()
	sub, err = c.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range n {
		m, err := sub.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		sub.Ack(m)
	}
	if took := time.Since(start); took < 4*time.Second {
		t.Fatalf("read 2 MiB of backlog in %v at --backlog-read-rate 256 KiB/s: not paced", took)
	} else {
		t.Logf("read 2 MiB of backlog in %v at 256 KiB/s", took)
	}
}

// TestStandaloneGCPercent: `magnetar standalone` runs the Go collector at
// GOGC 50 unless GOGC is set, as its /metrics report (go_gc_gogc_percent).
func TestStandaloneGCPercent(t *testing.T) {
	for _, tc := range []struct{ env, want string }{{"", "50"}, {"80", "80"}} {
		t.Setenv("GOGC", tc.env)
		sp := startStandaloneProc(t, filepath.Join(t.TempDir(), "data"))
		if got := scrapeMetrics(t, sp.httpAddr, "go_gc_gogc_percent")["go_gc_gogc_percent"]; strconv.FormatFloat(got, 'g', -1, 64) != tc.want {
			t.Errorf("GOGC=%q: go_gc_gogc_percent %v, want %s", tc.env, got, tc.want)
		}
		sp.Terminate()
	}
}

// TestStandaloneReleasesStartupPages: once ready, the standalone hands the
// executable's pages mapped at start back to the kernel (cmd/magnetar
// pageout.go), though the e2e binary was written a moment ago (dirty pages
// the kernel would skip): its file-backed resident memory falls well under
// the 64% of the binary it holds without the release (53% when the
// binary's dirty pages are not written back first).
func TestStandaloneReleasesStartupPages(t *testing.T) {
	sp := startStandaloneProc(t, filepath.Join(t.TempDir(), "data"))
	fi, err := os.Stat(Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	limit := fi.Size() * 40 / 100
	var file int64
	waitFor(t, "file-backed resident memory under 40% of the binary", 20*time.Second, func() bool {
		if file, err = procstatus.Field(sp.Pid(), "RssFile"); err != nil {
			t.Fatal(err)
		}
		return file < limit
	})
	t.Logf("RssFile %d MiB of a %d MiB binary", file>>20, fi.Size()>>20)
}

// TestStandaloneReturnsIdleMemory: once a standalone has been idle for
// --idle-release-after (1 s here; 30 s by default) after work, its idle
// trimmer (cmd/magnetar trim.go) forces a collection and hands every free
// page back to the kernel: the forced collections
// (go_gc_cycles_forced_gc_cycles_total, which nothing else in the server
// forces) rise after the work, and the free heap is then released
// (go_memstats_heap_idle_bytes minus go_memstats_heap_released_bytes
// under 2 MiB).
func TestStandaloneReturnsIdleMemory(t *testing.T) {
	sp := startStandaloneProc(t, filepath.Join(t.TempDir(), "data"), "--idle-release-after", "1s")
	// 5,000 topic creations allocate ~45 MiB in the server: more than
	// the trimmer's 32 MiB before a trim is worth it.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 5000; i += 16 {
				req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("http://%s/admin/v2/persistent/public/default/idle-%d", sp.httpAddr, i), nil)
				resp, err := hc.Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					errs <- fmt.Errorf("create topic idle-%d: %s", i, resp.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	const cycles, idle, released = "go_gc_cycles_forced_gc_cycles_total", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes"
	before := scrapeMetrics(t, sp.httpAddr, cycles)[cycles]
	// Scraped once a second: each scrape allocates in the server, and
	// scraping at waitFor's pace (every 20 ms) kept it from ever being
	// quiet enough to trim.
	var m map[string]float64
	for deadline := time.Now().Add(15 * time.Second); ; {
		time.Sleep(time.Second)
		m = scrapeMetrics(t, sp.httpAddr, cycles, idle, released)
		if m[cycles] > before && m[idle]-m[released] < 2<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no forced collection with the free heap released within 15 s: forced %v -> %v, free heap held unreleased %.1f MiB",
				before, m[cycles], (m[idle]-m[released])/(1<<20))
		}
	}
	t.Logf("forced collections %v -> %v; free heap held unreleased: %.1f MiB", before, m[cycles], (m[idle]-m[released])/(1<<20))
}

// scrapeMetrics returns the values of the named unlabelled metrics of the
// server's /metrics.
func scrapeMetrics(t *testing.T, httpAddr string, names ...string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		for _, n := range names {
			if v, ok := strings.CutPrefix(line, n+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				out[n] = f
			}
		}
	}
	if len(out) != len(names) {
		t.Fatalf("/metrics has %v of %v", out, names)
	}
	return out
}
