// Command georepbench measures geo-replication between two standalones
// ("east" and "west", in this process, each with its own metadata store,
// bookie and broker, journal fsync on), the replication link through a TCP
// proxy that adds a delay each way:
//
//   - delay: a producer in east at -rate msg/s of -size bytes; consumers in
//     east (local end-to-end) and in west (replicated) measure each
//     message's latency from its scheduled send time (in its payload, so a
//     stall cannot hide queueing), p50/p99/max after -warmup, with no added
//     delay and with -delay each way;
//
//   - throughput: a closed loop (-window messages in flight, batching on)
//     into a namespace that is not replicated (east's own maximum, as
//     streambench's W2) and then into the replicated one, where the figure
//     is the rate at which west received what east stored.
//
//     go run ./bench/georepbench [-rate 10000] [-size 1024] [-duration 10s] [-delay 50ms] [-markdown FILE]
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/internal/freeport"
	"github.com/magnetar-dev/magnetar/internal/tcpproxy"
)

var (
	rate     = flag.Int("rate", 10000, "messages per second of the delay runs")
	size     = flag.Int("size", 1024, "message size in bytes")
	duration = flag.Duration("duration", 10*time.Second, "length of each run")
	warmup   = flag.Duration("warmup", 2*time.Second, "first part of a delay run left out of its percentiles")
	delay    = flag.Duration("delay", 50*time.Millisecond, "delay added each way on the replication link")
	window   = flag.Int("window", 8192, "messages in flight in the throughput runs")
	markdown = flag.String("markdown", "", "also write the table to this file")
)

func main() {
	flag.Parse()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	east, west := start("east", quiet), start("west", quiet)
	defer shutdown(east)
	defer shutdown(west)
	px, err := tcpproxy.Start(strings.TrimPrefix(west.ServiceURL(), "pulsar://"))
	check(err)
	defer px.Close()
	// East's replicators reach west through the proxy; west's reach east
	// directly (the runs only produce in east).
	put(east.WebServiceURL()+"/admin/v2/clusters/west", fmt.Sprintf(`{"serviceUrl":%q,"brokerServiceUrl":%q,"proxyServiceUrl":"pulsar://%s"}`,
		west.WebServiceURL(), west.ServiceURL(), px.Addr()))
	put(west.WebServiceURL()+"/admin/v2/clusters/east", fmt.Sprintf(`{"serviceUrl":%q,"brokerServiceUrl":%q}`, east.WebServiceURL(), east.ServiceURL()))
	for _, s := range []*standalone.Standalone{east, west} {
		put(s.WebServiceURL()+"/admin/v2/tenants/bench", `{"allowedClusters":["east","west"]}`)
		put(s.WebServiceURL()+"/admin/v2/namespaces/bench/geo", `{}`)
		post(s.WebServiceURL()+"/admin/v2/namespaces/bench/geo/replication", `["east","west"]`)
		put(s.WebServiceURL()+"/admin/v2/namespaces/bench/local", `{}`)
	}
	ce, cw := client(east.ServiceURL()), client(west.ServiceURL())
	defer ce.Close()
	defer cw.Close()

	var rows []string
	row := func(s string) {
		fmt.Println(s)
		rows = append(rows, s)
	}
	row(fmt.Sprintf("Geo-replication, two standalones in one process on this machine, journal fsync on, %d B messages, the link through a TCP proxy:", *size))
	row("")
	row("| run | added delay each way | local e2e p50 / p99 | replicated p50 / p99 / max | messages |")
	row("|---|---|---|---|---|")
	for i, d := range []time.Duration{0, *delay} {
		px.SetDelay(d)
		topic := fmt.Sprintf("persistent://bench/geo/delay-%d", i)
		l, r, n := delayRun(ce, cw, topic)
		row(fmt.Sprintf("| %d msg/s | %v | %s / %s | %s / %s / %s | %d |", *rate, d, ms(l, 50), ms(l, 99), ms(r, 50), ms(r, 99), ms(r, 100), n))
	}
	px.SetDelay(0)
	local := throughput(ce, nil, "persistent://bench/local/tput")
	// Both clusters storing their own load at once: the storage work a
	// replicated stream costs (every message stored in both), without
	// replication: the machine's floor for the replicated figure.
	var both [2]float64
	var wg sync.WaitGroup
	for i, c := range []pulsar.Client{ce, cw} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			both[i] = throughput(c, nil, fmt.Sprintf("persistent://bench/local/tput-both-%d", i))
		}()
	}
	wg.Wait()
	repl := throughput(ce, cw, "persistent://bench/geo/tput")
	row("")
	row("| throughput (closed loop, batching) | msg/s | MB/s |")
	row("|---|---|---|")
	row(fmt.Sprintf("| east alone (not replicated) | %.0f | %.1f |", local, local*float64(*size)/1e6))
	row(fmt.Sprintf("| east and west at once, each its own load (per cluster, the lower) | %.0f | %.1f |", min(both[0], both[1]), min(both[0], both[1])*float64(*size)/1e6))
	row(fmt.Sprintf("| replicated east -> west (received in west) | %.0f | %.1f (%.0f%% of east alone, %.0f%% of each at once) |", repl, repl*float64(*size)/1e6, 100*repl/local, 100*repl/min(both[0], both[1])))
	if *markdown != "" {
		check(os.WriteFile(*markdown, []byte(strings.Join(rows, "\n")+"\n"), 0o644))
	}
}

// delayRun produces at the fixed rate into topic in east and returns the
// local and replicated latencies after the warm-up.
func delayRun(ce, cw pulsar.Client, topic string) (local, repl []time.Duration, n int) {
	consume := func(c pulsar.Client, out *[]time.Duration, want int, done chan<- struct{}) pulsar.Consumer {
		cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "lat",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 10000})
		check(err)
		go func() {
			got := 0
			for got < want {
				m, err := cons.Receive(context.Background())
				if err != nil {
					break
				}
				at := time.Now()
				cons.Ack(m)
				sched := time.Unix(0, int64(binary.BigEndian.Uint64(m.Payload())))
				if got >= want-*rate*int((*duration-*warmup)/time.Second) {
					*out = append(*out, at.Sub(sched))
				}
				got++
			}
			close(done)
		}()
		return cons
	}
	total := *rate * int(*duration/time.Second)
	dl, dr := make(chan struct{}), make(chan struct{})
	cl := consume(ce, &local, total, dl)
	defer cl.Close()
	cr := consume(cw, &repl, total, dr)
	defer cr.Close()
	p, err := ce.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: time.Millisecond,
		MaxPendingMessages: 20000})
	check(err)
	defer p.Close()
	payload := make([]byte, *size)
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for sent < total {
		<-tick.C
		due := min(int(time.Since(start).Seconds()*float64(*rate)), total)
		for ; sent < due; sent++ {
			b := slices.Clone(payload)
			binary.BigEndian.PutUint64(b, uint64(start.Add(time.Duration(sent)*time.Second/time.Duration(*rate)).UnixNano()))
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: b}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					log.Fatalf("send: %v", err)
				}
			})
		}
	}
	check(p.Flush())
	for _, ch := range []chan struct{}{dl, dr} {
		select {
		case <-ch:
		case <-time.After(2 * time.Minute):
			log.Fatal("consumers did not receive every message")
		}
	}
	return local, repl, total
}

// throughput runs a closed loop into topic for -duration and returns msg/s:
// stored in east (cw nil), or received in west.
func throughput(ce, cw pulsar.Client, topic string) float64 {
	var received atomic.Int64
	var last atomic.Int64
	var cons pulsar.Consumer
	if cw != nil {
		var err error
		cons, err = cw.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "tput",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 20000})
		check(err)
		defer cons.Close()
		go func() {
			for {
				m, err := cons.Receive(context.Background())
				if err != nil {
					return
				}
				cons.AckID(m.ID())
				received.Add(1)
				last.Store(time.Now().UnixNano())
			}
		}()
	}
	p, err := ce.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: *window,
		BatchingMaxMessages: 1000, BatchingMaxSize: 1 << 20})
	check(err)
	defer p.Close()
	payload := make([]byte, *size)
	var stored atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for time.Since(start) < *duration {
		wg.Add(1)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err == nil {
				stored.Add(1)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if cw == nil {
		return float64(stored.Load()) / time.Since(start).Seconds()
	}
	for deadline := time.Now().Add(2 * time.Minute); received.Load() < stored.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatalf("west received %d of %d", received.Load(), stored.Load())
		}
	}
	return float64(received.Load()) / time.Unix(0, last.Load()).Sub(start).Seconds()
}

func ms(ds []time.Duration, pct int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)*pct/100, len(s)-1)
	return fmt.Sprintf("%.1f ms", float64(s[i].Microseconds())/1000)
}

func start(name string, logger *slog.Logger) *standalone.Standalone {
	dir, err := os.MkdirTemp("", "georepbench-"+name)
	check(err)
	bk, err := freeport.Addr()
	check(err)
	cfg := standalone.Config{DataDir: dir, BrokerAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", BookieAddr: bk, Logger: logger}
	cfg.Broker.ClusterName = name
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := standalone.Start(ctx, cfg)
	check(err)
	return s
}

func shutdown(s *standalone.Standalone) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Shutdown(ctx)
}

func client(url string) pulsar.Client {
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	check(err)
	return c
}

func put(url, body string)  { call(http.MethodPut, url, body) }
func post(url, body string) { call(http.MethodPost, url, body) }

func call(method, url, body string) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	check(err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	check(err)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Fatalf("%s %s: HTTP %d", method, url, resp.StatusCode)
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
