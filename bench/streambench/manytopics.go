package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/bench/internal/machine"
	"github.com/magnetar-dev/magnetar/internal/procstatus"
)

// attachWorkers is how many producer creations W5 keeps in flight (its
// admin requests: options.createInflight).
const attachWorkers = 16

// manyTopicsResult is one W5 run against one Magnetar standalone.
type manyTopicsResult struct {
	topics           int
	create           time.Duration // creating every topic through the admin API
	attach           time.Duration // one producer per topic
	rssBase, rssIdle int64         // bytes, VmRSS before creation and with the topics created and idle
	rssAfter         int64         // bytes, VmRSS as the last creation was answered
	fdBase, fdIdle   int           // open files, likewise
	rssLoaded        int64         // VmRSS with a producer attached to every topic (topics loaded)
	fdLoaded         int
	run              runResult     // the fixed total rate, round robin over the topics
	stop             time.Duration // SIGTERM until the process exited
	ready            time.Duration // start until the admin API answered healthy and a produce succeeded
}

func (m manyTopicsResult) createRate() float64 { return float64(m.topics) / m.create.Seconds() }
func (m manyTopicsResult) attachRate() float64 { return float64(m.topics) / m.attach.Seconds() }
func (m manyTopicsResult) rssPerTopic() float64 {
	return float64(m.rssIdle-m.rssBase) / float64(m.topics)
}
func (m manyTopicsResult) rssPerTopicAfter() float64 {
	return float64(m.rssAfter-m.rssBase) / float64(m.topics)
}
func (m manyTopicsResult) fdPerTopic() float64 { return float64(m.fdIdle-m.fdBase) / float64(m.topics) }
func (m manyTopicsResult) rssPerLoaded() float64 {
	return float64(m.rssLoaded-m.rssBase) / float64(m.topics)
}
func (m manyTopicsResult) fdPerLoaded() float64 {
	return float64(m.fdLoaded-m.fdBase) / float64(m.topics)
}

func (m manyTopicsResult) describe() string {
	return fmt.Sprintf("%d topics created at %.0f/s, producers attached at %.0f/s; %.1f KiB RSS per topic as the creations ended, idle %.1f KiB and %.2f files per topic, with producers %.1f KiB and %.2f; at %.0f msg/s: acked %d/%d pub p99 %v; restart %v (stop %v, ready %v)",
		m.topics, m.createRate(), m.attachRate(), m.rssPerTopicAfter()/1024, m.rssPerTopic()/1024, m.fdPerTopic(), m.rssPerLoaded()/1024, m.fdPerLoaded(), m.run.offered, m.run.acked, m.run.sent,
		m.run.pub.Quantile(0.99), (m.stop + m.ready).Round(time.Millisecond), m.stop.Round(time.Millisecond), m.ready.Round(time.Millisecond))
}

// runManyTopics runs W5 on a fresh standalone in dir: o.topics topics
// created through the admin API, memory and open files per idle topic,
// the publish p99 at o.topicsRate spread round robin over every topic, and
// the restart time. It returns the servers' CPU seconds for the load
// record.
func runManyTopics(ctx context.Context, m *magnetarSystem, dir string, o options) (res manyTopicsResult, cpu float64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, 0, fmt.Errorf("streambench: %w", err)
	}
	started, err := m.start(ctx, dir, durFsync)
	if err != nil {
		return res, 0, err
	}
	srv := started.(*magnetarServer)
	defer func() {
		if srv != nil {
			if u, uerr := machine.ReadProc(srv.pid()); uerr == nil {
				cpu += u.CPUSeconds
			}
			if serr := srv.stop(); err == nil {
				err = serr
			}
		}
	}()
	res.topics = o.topics
	pc := newPutClient(srv.http, o.createInflight)
	defer pc.close()

	// The baseline is a server that has created topics already: the
	// per-topic figures are what one more topic costs, not the code and
	// caches the first creations bring in (the servers hand the pages
	// mapped at start back to the kernel once ready, and the creation
	// path faults its own back in: ~10 MiB, 1 KiB per topic at 10k).
	warm := make([]string, min(warmupTopics, o.topics))
	for i := range warm {
		warm[i] = fmt.Sprintf("w5-warmup-%d", i)
	}
	if err := forEachParallel(ctx, o.createInflight, warm, func(ctx context.Context, name string) error {
		return pc.put(ctx, "/admin/v2/persistent/public/default/"+name)
	}); err != nil {
		return res, 0, fmt.Errorf("streambench: W5 warm-up topics: %w", err)
	}
	if res.rssBase, res.fdBase, err = settledFootprint(ctx, srv.pid()); err != nil {
		return res, 0, err
	}

	names := make([]string, o.topics)
	for i := range names {
		names[i] = fmt.Sprintf("w5-%d", i)
	}
	t0 := time.Now()
	err = forEachParallel(ctx, o.createInflight, names, func(ctx context.Context, name string) error {
		return pc.put(ctx, "/admin/v2/persistent/public/default/"+name)
	})
	res.create = time.Since(t0)
	if err != nil {
		return res, 0, fmt.Errorf("streambench: W5 create topics: %w", err)
	}
	if res.rssAfter, _, err = procFootprint(srv.pid()); err != nil {
		return res, 0, err
	}
	// Idle: no client is connected, and the server has had the time to
	// settle (the servers return their collector's headroom once quiet:
	// cmd/magnetar/trim.go).
	if res.rssIdle, res.fdIdle, err = settledFootprint(ctx, srv.pid()); err != nil {
		return res, 0, err
	}

	a := &manyTopicsAdapter{srv: srv, names: names}
	spec := topicSpec{name: "w5", durability: durFsync}
	ls := loadSpec{rate: float64(o.topicsRate), size: o.size, warmup: o.warmup, duration: o.duration, drain: o.drain, pid: srv.pid(), pauseGC: !o.gcDuringRuns}
	if res.run, err = runLoad(ctx, a, spec, ls); err != nil {
		return res, 0, err
	}
	res.attach, res.rssLoaded, res.fdLoaded = a.attach, a.rss, a.fds

	// Restart: SIGTERM, start on the same data directory, then the admin
	// API and a produce to a random existing topic.
	if u, uerr := machine.ReadProc(srv.pid()); uerr == nil {
		cpu += u.CPUSeconds
	}
	t0 = time.Now()
	old := srv
	srv = nil
	if err := old.stop(); err != nil {
		return res, cpu, err
	}
	res.stop = time.Since(t0)
	t0 = time.Now()
	if srv, err = m.startAt(ctx, dir, durFsync, []string{old.broker, old.http, old.bookie}); err != nil {
		return res, cpu, err
	}
	if err := produceOnce(ctx, srv, names[rand.IntN(len(names))]); err != nil {
		return res, cpu, err
	}
	res.ready = time.Since(t0)
	return res, cpu, nil
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// produceOnce creates a producer on topic and sends one message, waiting
// for its receipt, within a minute.
func produceOnce(ctx context.Context, srv *magnetarServer, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + srv.broker, OperationTimeout: time.Minute, Logger: plog.DefaultNopLogger()})
	if err != nil {
		return fmt.Errorf("streambench: pulsar client: %w", err)
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/" + topic})
	if err != nil {
		return fmt.Errorf("streambench: W5 producer after restart: %w", err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: make([]byte, payloadHeader)}); err != nil {
		return fmt.Errorf("streambench: W5 produce after restart: %w", err)
	}
	return nil
}

// forEachParallel calls f for every item, workers at a time, and returns
// the first error (after which the remaining items are skipped).
func forEachParallel(ctx context.Context, workers int, items []string, f func(context.Context, string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Add(1)
		go func() { // owned by forEachParallel: ends when work is closed
			defer wg.Done()
			for it := range work {
				if err := f(ctx, it); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
				}
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case work <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// warmupTopics are created before W5's baseline is read.
const warmupTopics = 256

// settledFootprint waits for pid's resident size to settle and returns the
// last reading: readings every 200 ms, settled once those of the last
// settleWindow are all within 1% of the latest (at most settleLimit). A
// server returns what its collector left resident a second or two after it
// goes quiet (cmd/magnetar/trim.go); a shorter window reads the headroom of
// the creations just ended, which is why rssAfter is reported too.
func settledFootprint(ctx context.Context, pid int) (rss int64, fds int, err error) {
	type reading struct {
		at  time.Time
		rss int64
	}
	var window []reading
	waitFor(ctx, settleLimit, func() bool {
		if n := len(window); n > 0 && time.Since(window[n-1].at) < 200*time.Millisecond {
			return false
		}
		r, f, ferr := procFootprint(pid)
		if ferr != nil {
			err = ferr
			return true
		}
		now := time.Now()
		rss, fds = r, f
		window = append(window, reading{now, r})
		for len(window) > 0 && now.Sub(window[0].at) > settleWindow {
			window = window[1:]
		}
		if now.Sub(window[0].at) < settleSpan {
			return false // not a full window yet
		}
		for _, w := range window {
			if abs(w.rss-r) > r/100 {
				return false
			}
		}
		return true
	})
	return rss, fds, err
}

// settleWindow and settleLimit bound settledFootprint; settleSpan is the
// least time its readings must span to count as a full window (readings
// come every 200 ms or later, so a window's first one may be up to that
// much younger than settleWindow).
const (
	settleWindow = 2 * time.Second
	settleSpan   = settleWindow - 250*time.Millisecond
	settleLimit  = 15 * time.Second
)

// procFootprint returns pid's resident set size (VmRSS of
// /proc/<pid>/status) in bytes and its number of open files (entries of
// /proc/<pid>/fd).
func procFootprint(pid int) (rss int64, fds int, err error) {
	if rss, err = procstatus.Field(pid, "VmRSS"); err != nil {
		return 0, 0, fmt.Errorf("streambench: %w", err)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("streambench: %w", err)
	}
	return rss, len(ents), nil
}

// manyTopicsAdapter publishes round robin over many existing topics, one
// producer each, without batching (each topic sees a message now and then).
// It has no subscriber: W5 measures the publish latency.
type manyTopicsAdapter struct {
	srv       *magnetarServer
	names     []string
	client    pulsar.Client
	producers []pulsar.Producer
	onAck     func([]byte, error)
	next      int           // publish's round robin; publish has one caller
	attach    time.Duration // time to create every producer
	rss       int64         // the server's VmRSS and open files once every producer is attached
	fds       int
}

var errNoSubscriber = errors.New("streambench: W5 has no subscriber")

func (a *manyTopicsAdapter) setup(ctx context.Context, spec topicSpec, onAck func([]byte, error)) error {
	a.onAck = onAck
	var err error
	a.client, err = pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + a.srv.broker, OperationTimeout: time.Minute,
		Logger: plog.DefaultNopLogger()})
	if err != nil {
		return fmt.Errorf("streambench: pulsar client: %w", err)
	}
	index := make(map[string]int, len(a.names))
	for i, n := range a.names {
		index[n] = i
	}
	a.producers = make([]pulsar.Producer, len(a.names))
	t0 := time.Now()
	err = forEachParallel(ctx, attachWorkers, a.names, func(ctx context.Context, name string) error {
		p, err := a.client.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/" + name,
			DisableBatching: true, MaxPendingMessages: 64, SendTimeout: time.Minute})
		if err != nil {
			return fmt.Errorf("streambench: W5 producer %s: %w", name, err)
		}
		a.producers[index[name]] = p // distinct index per goroutine
		return nil
	})
	a.attach = time.Since(t0)
	if err != nil {
		return err
	}
	a.rss, a.fds, err = procFootprint(a.srv.pid())
	return err
}

func (a *manyTopicsAdapter) subscribe(context.Context, subscription, func([]byte)) error {
	return errNoSubscriber
}

func (a *manyTopicsAdapter) publish(ctx context.Context, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := a.producers[a.next%len(a.producers)]
	a.next++
	p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload},
		func(_ pulsar.MessageID, m *pulsar.ProducerMessage, err error) { a.onAck(m.Payload, err) })
	return nil
}

func (a *manyTopicsAdapter) teardown(ctx context.Context) error {
	if a.client != nil {
		a.client.Close() // closes every producer
	}
	return nil
}
