package broker_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/brokernode"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/internal/procstatus"
)

var footprintProfile = flag.String("footprint.heapprofile", "",
	"BenchmarkTopicFootprint writes a heap profile here while every topic is open and idle")

// footprintWorkers is how many creations are in flight, as in the W5
// workload of bench/streambench.
const footprintWorkers = 16

// BenchmarkTopicFootprint measures what an idle persistent topic costs and
// how fast topics are created: it creates b.N non-partitioned topics through
// the admin REST API (PUT /admin/v2/persistent/public/default/<name>, with
// footprintWorkers requests in flight) of a real in-process standalone
// (embedded etcd, a bookie on disk), then reports, per topic, the live heap
// and goroutine stack bytes and the goroutines still there once the topics
// are idle, and the creation rate. Run it with a fixed count, for example
//
//	go test ./dataplane/broker -run '^$' -bench TopicFootprint -benchtime 10000x \
//	    -footprint.heapprofile /tmp/topics.heap
//
// then `go tool pprof -top -inuse_space /tmp/topics.heap` says who holds the
// memory. The process also holds the metadata store and the bookie, so the
// numbers include what they keep per topic.
func BenchmarkTopicFootprint(b *testing.B) {
	if *footprintProfile != "" {
		// Sample finely: the default (one sample per 512 KiB) cannot
		// attribute a few KiB per topic to their owners.
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 64
		defer func() { runtime.MemProfileRate = old }()
	}
	md, node := startCountedStandalone(b)
	web := node.WebServiceURL()
	base := web + "/admin/v2/persistent/public/default/"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: footprintWorkers}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Warm up: the bundle is acquired and connections are made by the
	// first creation, which is not a per-topic cost.
	if err := putTopic(ctx, hc, base+"footprint-warmup"); err != nil {
		b.Fatal(err)
	}
	hc.CloseIdleConnections()
	heap0, stack0, g0 := liveFootprint()
	rss0, file0 := residentBytes(b), statusBytes(b, "RssFile")
	reads0, writes0 := md.reads.Load(), md.writes.Load()
	readTime0, writeTime0 := md.readTime.Load(), md.writeTime.Load()

	cpu0, err := procstatus.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, footprintWorkers)
	for range footprintWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := putTopic(ctx, hc, fmt.Sprintf("%sfootprint-%d", base, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	elapsed := b.Elapsed()
	cpu1, err := procstatus.CPUTime()
	if err != nil {
		b.Fatal(err)
	}
	reads, writes := md.reads.Load()-reads0, md.writes.Load()-writes0
	readTime, writeTime := md.readTime.Load()-readTime0, md.writeTime.Load()-writeTime0
	hc.CloseIdleConnections()

	// Idle: wait for the goroutines of the requests and of whatever the
	// creations started in the background to settle.
	heap1, stack1, g1 := liveFootprint()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		h, s, g := liveFootprint()
		settled := g == g1
		heap1, stack1, g1 = h, s, g
		if settled {
			break
		}
	}
	if *footprintProfile != "" {
		f, err := os.Create(*footprintProfile)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		if err := pprof.WriteHeapProfile(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	n := float64(b.N)
	b.ReportMetric(float64(heap1-heap0)/n, "heapB/topic")
	b.ReportMetric(float64(residentBytes(b)-rss0)/n, "rssB/topic")
	// The file-backed part of it: the metadata store's memory-mapped
	// database pages.
	b.ReportMetric(float64(statusBytes(b, "RssFile")-file0)/n, "rssFileB/topic")
	b.ReportMetric(float64(stack1-stack0)/n, "stackB/topic")
	b.ReportMetric(float64(g1-g0)/n, "goroutines/topic")
	b.ReportMetric(n/elapsed.Seconds(), "topics/s")
	// The process's CPU per creation: the admin API's client and server,
	// the broker and the metadata store, all in this process.
	b.ReportMetric(float64(cpu1-cpu0)/1e3/n, "cpu-µs/topic")
	b.ReportMetric(float64(reads)/n, "mdReads/topic")
	b.ReportMetric(float64(writes)/n, "mdWrites/topic")
	b.ReportMetric(float64(readTime)/1e6/max(float64(reads), 1), "ms/mdRead")
	b.ReportMetric(float64(writeTime)/1e6/max(float64(writes), 1), "ms/mdWrite")
	b.ReportMetric(0, "ns/op") // a creation's latency is not what this measures
}

// startCountedStandalone assembles what standalone.Start does (embedded
// etcd, a bookie on disk storage with JournalNoSync as in standalonetest,
// the broker node with E=Qw=Qa=1 and no auditor), with the broker's view of
// the metadata store counting its calls. It returns the counter and the web
// service URL; everything is stopped when b ends.
func startCountedStandalone(b testing.TB) (*countingStore, *brokernode.Node) {
	b.Helper()
	dir := b.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	log := standalonetest.QuietLogger()
	emb, err := etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{Dir: filepath.Join(dir, "metadata")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { emb.Close() })
	st, err := storage.Open(storage.Config{Dir: filepath.Join(dir, "bookie", "ledgers"), JournalNoSync: true, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	startBookie(b, ctx, standalonetest.FreeAddr(b), filepath.Join(dir, "bookie"), st, emb)
	md := &countingStore{Store: emb}
	node, err := brokernode.Start(ctx, brokernode.Config{
		Metadata: md, NoAuditor: true, HTTPAddr: "127.0.0.1:0",
		Ensemble: 1, WriteQuorum: 1, AckQuorum: 1,
		Broker: broker.Config{BinaryAddr: "127.0.0.1:0"}, Logger: log,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := node.Shutdown(sctx); err != nil {
			b.Errorf("broker node shutdown: %v", err)
		}
	})
	return md, node
}

// countingStore counts the reads (Get, Children) and writes (Put, Create,
// Delete, NextID) made through it, and the time they took.
type countingStore struct {
	metadata.Store
	reads, writes       atomic.Int64
	readTime, writeTime atomic.Int64 // nanoseconds
	policyReads         atomic.Int64 // Gets of tenant and namespace records
	partitionedReads    atomic.Int64 // Gets of partitioned-topic records
}

func (c *countingStore) read(t0 time.Time) {
	c.reads.Add(1)
	c.readTime.Add(int64(time.Since(t0)))
}

func (c *countingStore) write(t0 time.Time) {
	c.writes.Add(1)
	c.writeTime.Add(int64(time.Since(t0)))
}

func (c *countingStore) Get(ctx context.Context, key string) (metadata.KV, error) {
	defer c.read(time.Now())
	switch {
	case strings.HasPrefix(key, "/admin/policies/"):
		c.policyReads.Add(1)
	case strings.HasPrefix(key, "/admin/partitioned-topics/"):
		c.partitionedReads.Add(1)
	}
	return c.Store.Get(ctx, key)
}

func (c *countingStore) Children(ctx context.Context, parent string) ([]string, error) {
	defer c.read(time.Now())
	return c.Store.Children(ctx, parent)
}

func (c *countingStore) Put(ctx context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	defer c.write(time.Now())
	return c.Store.Put(ctx, key, value, expected)
}

func (c *countingStore) Create(ctx context.Context, key string, value []byte) (metadata.Version, error) {
	defer c.write(time.Now())
	return c.Store.Create(ctx, key, value)
}

func (c *countingStore) CreateUnless(ctx context.Context, key string, value []byte, absent ...string) (metadata.Version, error) {
	defer c.write(time.Now())
	return c.Store.CreateUnless(ctx, key, value, absent...)
}

func (c *countingStore) Delete(ctx context.Context, key string, expected metadata.Version) error {
	defer c.write(time.Now())
	return c.Store.Delete(ctx, key, expected)
}

func (c *countingStore) NextID(ctx context.Context, sequence string) (int64, error) {
	defer c.write(time.Now())
	return c.Store.NextID(ctx, sequence)
}

// residentBytes returns the process's resident set size (VmRSS), which
// the W5 workload measures of the standalone process.
func residentBytes(b *testing.B) int64 { return statusBytes(b, "VmRSS") }

// statusBytes returns a size field of /proc/self/status ("VmRSS",
// "RssFile", ...) in bytes.
func statusBytes(b testing.TB, field string) int64 {
	b.Helper()
	n, err := procstatus.Field(procstatus.Self, field)
	if err != nil {
		b.Skip(err)
	}
	return n
}

// liveFootprint returns the live heap bytes after a collection, the bytes of
// goroutine stacks in use and the number of goroutines.
func liveFootprint() (heap, stack int64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.StackInuse), runtime.NumGoroutine()
}

func putTopic(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("PUT %s: %s", url, resp.Status)
	}
	return nil
}
