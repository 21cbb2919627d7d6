package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
	"github.com/magnetar-dev/magnetar/bench/internal/machine"
)

// Payload layout: bytes [0,8) the scheduled send time (Unix nanoseconds,
// little endian); [8,16) reserved for adapters (Redis keeps the partition
// in byte 15); the rest random filler.
const payloadHeader = 16

// runResult is one measured run of one system.
type runResult struct {
	offered  float64 // msg/s asked (open loop); 0 for closed loop
	sent     uint64  // messages scheduled in the measured window (open loop), or published in it (closed loop)
	behind   uint64  // open loop: of those, not published before the window ended (the system fell behind)
	acked    uint64  // of those, acknowledged
	failed   uint64  // of those, failed
	received uint64  // of those, deliveries to the subscribers (up to subs per message)
	subs     int     // subscriptions each message is delivered to (0 or 1: one)
	ackBytes uint64  // payload bytes acknowledged in the window
	allAcked uint64  // every acknowledgement, warm-up and drain included
	elapsed  time.Duration
	pub, e2e *latency.Histogram
	usage    machine.ProcUsage // the server's CPU and disk writes during the window
	// generator is the load generator's own usage during the window: the
	// clients (the Pulsar client's TLS included) and the pacing.
	generator machine.ProcUsage
	hasUsage  bool
	// disk is the machine's fsync'd 1 MiB append rate (bytes/s) measured
	// just before and just after the run (bracketDisk; zero when not
	// measured): what "W2 at 80% of the fsync'd bandwidth" compares with,
	// since that bandwidth swings 2-3x within minutes on a shared disk.
	disk [2]float64
	// worst is the worst publish latency of the messages scheduled in each
	// timelineStep from the start of the run, warm-up included (open loop):
	// it shows whether a tail comes from one stall and when.
	worst []time.Duration
}

// timelineStep is the width of a runResult.worst bucket.
const timelineStep = 100 * time.Millisecond

func (r runResult) ackedPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.acked) / r.elapsed.Seconds()
}

// deliveredPerSec is the deliveries per second to all subscriptions.
func (r runResult) deliveredPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.received) / r.elapsed.Seconds()
}

// ofDisk is the run's acknowledged bytes per second over the mean of its
// bracketing fsync'd appends, or -1 when they were not measured.
func (r runResult) ofDisk() float64 {
	if r.disk[0] <= 0 || r.disk[1] <= 0 {
		return -1
	}
	return r.mbPerSec() * 1e6 / ((r.disk[0] + r.disk[1]) / 2)
}

func (r runResult) mbPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ackBytes) / 1e6 / r.elapsed.Seconds()
}

// recorder collects acknowledgements and deliveries from the adapter's
// goroutines. Messages scheduled in [from, to) are measured.
type recorder struct {
	mu        sync.Mutex
	start     int64  // Unix ns: the run's first scheduled send
	from, to  int64  // Unix ns
	closed    bool   // closed loop: count acks by arrival time, release window
	subs      uint64 // deliveries expected per message (W4's fan-out), at least 1
	window    chan struct{}
	res       runResult
	totalSent uint64 // every message, warm-up included
	totalDone uint64 // acked or failed
	totalRecv uint64
}

func newRecorder(from, to time.Time) *recorder {
	return &recorder{from: from.UnixNano(), to: to.UnixNano(), subs: 1,
		res: runResult{pub: latency.NewHistogram(), e2e: latency.NewHistogram()}}
}

func (r *recorder) inWindow(t int64) bool { return t >= r.from && t < r.to }

func (r *recorder) onSent(sched int64) {
	r.mu.Lock()
	r.totalSent++
	if r.inWindow(sched) {
		r.res.sent++
	}
	r.mu.Unlock()
}

func (r *recorder) onAck(payload []byte, err error) {
	now := time.Now().UnixNano()
	sched := int64(binary.LittleEndian.Uint64(payload))
	r.mu.Lock()
	r.totalDone++
	measured := r.inWindow(sched)
	if r.closed {
		measured = r.inWindow(now)
	}
	if err == nil {
		r.res.allAcked++
	}
	switch {
	case !measured:
	case err != nil:
		r.res.failed++
	default:
		r.res.acked++
		r.res.ackBytes += uint64(len(payload))
		r.res.pub.Record(time.Duration(now - sched))
	}
	if err == nil && !r.closed && sched >= r.start && r.start > 0 {
		i := int((sched - r.start) / int64(timelineStep))
		for len(r.res.worst) <= i {
			r.res.worst = append(r.res.worst, 0)
		}
		r.res.worst[i] = max(r.res.worst[i], time.Duration(now-sched))
	}
	r.mu.Unlock()
	if r.window != nil {
		<-r.window
	}
}

func (r *recorder) onMsg(payload []byte) {
	now := time.Now().UnixNano()
	if len(payload) < payloadHeader {
		return
	}
	sched := int64(binary.LittleEndian.Uint64(payload))
	r.mu.Lock()
	r.totalRecv++
	if r.inWindow(sched) {
		r.res.received++
		r.res.e2e.Record(time.Duration(now - sched))
	}
	r.mu.Unlock()
}

// drained reports whether every sent message is acknowledged and, when
// subscribed, received.
func (r *recorder) drained(subscribed bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.totalDone >= r.totalSent && (!subscribed || r.totalRecv >= r.subs*r.totalSent)
}

func (r *recorder) result() runResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res
}

// newPayload returns a payload of size bytes stamped with sched.
func newPayload(size int, filler []byte, sched int64) []byte {
	p := make([]byte, size)
	binary.LittleEndian.PutUint64(p, uint64(sched))
	copy(p[payloadHeader:], filler)
	return p
}

func randomFiller(size int) []byte {
	b := make([]byte, size)
	rand.Read(b)
	return b
}

// loadSpec is one run's load.
type loadSpec struct {
	rate      float64 // msg/s; 0: closed loop
	window    int     // closed loop: most messages in flight
	size      int
	warmup    time.Duration
	duration  time.Duration
	drain     time.Duration // longest wait for outstanding acks and deliveries
	subscribe bool
	fanout    int // W4: subscribe this many named subscriptions instead of the default one
	pid       int // server process for CPU and disk accounting, 0 for none
	filler    []byte
	pauseGC   bool // collect before the run and not during it (pauseGC)
}

// pauseGC, when on, collects garbage now and leaves the load generator's
// collector off for the run; the returned function collects again and
// leaves it off until the next run (off: it does nothing). The Pulsar Go
// client allocates about 6 bytes for every byte it sends and receives
// (W1: ~300 MB/s, most of it copies of batches it neither compresses nor
// decompresses); at GOGC 400 its collector ran every ~0.5 s for 10-18 ms
// of marking on the two cores the servers share, and each cycle put a
// 20-30 ms spike into the latency of every system it measured, in every
// durability column (`-timeline` showed one spike per cycle; with the
// server's collector off the spikes stayed, with the generator's off they
// went). The collector stays off between runs too, so that the pages a
// run allocated are kept for the next (memory.go). A run allocates at
// most a few GB; the memory limit stops the heap before the machine's
// memory does. The servers keep their own collectors.
func pauseGC(on bool) (resume func()) {
	if !on {
		return func() {}
	}
	limitHeap()
	collectKeepingPages()
	return collectKeepingPages
}

// teardownTimeout bounds an adapter's teardown after a run. A peer far
// behind its offered load can take tens of seconds to drop what it holds
// (NATS deleting a W4 stream at 64 consumers took more than 30 s); the
// run's own -timeout still bounds a server that never answers.
const teardownTimeout = 2 * time.Minute

// usageMark is the server's and the load generator's cumulative usage at
// one end of a run's measured window.
type usageMark struct{ server, generator machine.ProcUsage }

// runLoad sets up a, runs the load and tears a down.
func runLoad(ctx context.Context, a adapter, spec topicSpec, ls loadSpec) (res runResult, err error) {
	rec := newRecorder(time.Time{}, time.Time{})
	if ls.rate == 0 {
		rec.closed = true
		rec.window = make(chan struct{}, ls.window)
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer cancel()
		if terr := a.teardown(tctx); err == nil && terr != nil {
			err = terr
		}
	}()
	if err := a.setup(ctx, spec, rec.onAck); err != nil {
		return res, err
	}
	if ls.fanout > 0 {
		ls.subscribe = true
		rec.subs = uint64(ls.fanout)
		for i := range ls.fanout {
			if err := a.subscribe(ctx, subscription{name: fmt.Sprintf("fan-%d", i)}, rec.onMsg); err != nil {
				return res, err
			}
		}
	} else if ls.subscribe {
		if err := a.subscribe(ctx, subscription{}, rec.onMsg); err != nil {
			return res, err
		}
	}
	ls.filler = randomFiller(ls.size)
	defer pauseGC(ls.pauseGC)()
	start := time.Now()
	from, to := start.Add(ls.warmup), start.Add(ls.warmup+ls.duration)
	rec.mu.Lock()
	rec.start, rec.from, rec.to = start.UnixNano(), from.UnixNano(), to.UnixNano()
	rec.mu.Unlock()

	var u0, u1 usageMark
	var usageErr error = fmt.Errorf("streambench: no server process")
	readUsage := func(dst *usageMark) {
		if ls.pid > 0 {
			dst.server, usageErr = machine.ReadProc(ls.pid)
			if usageErr == nil {
				dst.generator, usageErr = machine.ReadProc(os.Getpid())
			}
		}
	}
	if ls.rate > 0 {
		err = openLoop(ctx, a, rec, ls, start, from, to, readUsage, &u0, &u1)
	} else {
		err = closedLoop(ctx, a, rec, ls, start, from, to, readUsage, &u0, &u1)
	}
	if err != nil {
		return res, err
	}
	// Wait for the stragglers, polling, up to ls.drain.
	deadline := time.Now().Add(ls.drain)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !rec.drained(ls.subscribe) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	res = rec.result()
	res.offered = ls.rate
	res.subs = int(rec.subs)
	res.elapsed = ls.duration
	if usageErr == nil && ls.pid > 0 {
		res.usage, res.generator, res.hasUsage = u1.server.Sub(u0.server), u1.generator.Sub(u0.generator), true
	}
	return res, nil
}

// openLoop sends at ls.rate: every millisecond it sends every message whose
// scheduled time has come (catching up after a stall), each stamped with
// its scheduled time, never sleeping per message. It stops at the end of
// the window even when the system has fallen behind: the messages due but
// not published by then are counted in behind.
func openLoop(ctx context.Context, a adapter, rec *recorder, ls loadSpec, start, from, to time.Time,
	readUsage func(*usageMark), u0, u1 *usageMark) error {
	total := int64(ls.rate * to.Sub(start).Seconds())
	nsPer := float64(time.Second) / ls.rate
	schedOf := func(i int64) int64 { return start.UnixNano() + int64(float64(i)*nsPer) }
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var sent int64
	startedUsage := false
	defer func() {
		readUsage(u1)
		rec.mu.Lock()
		for i := sent; i < total; i++ { // due in the window, never published
			if rec.inWindow(schedOf(i)) {
				rec.res.sent++
				rec.res.behind++
			}
		}
		rec.mu.Unlock()
	}()
	// Publishing stops at the end of the window even when the client's
	// window is full and publish blocks.
	pctx, cancel := context.WithDeadline(ctx, to)
	defer cancel()
	for sent < total {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-pctx.Done():
			return nil
		case <-tick.C:
		}
		now := time.Now()
		if !startedUsage && !now.Before(from) {
			readUsage(u0)
			startedUsage = true
		}
		due := min(total, int64(float64(now.Sub(start))/nsPer)+1)
		for ; sent < due; sent++ {
			sched := schedOf(sent)
			p := newPayload(ls.size, ls.filler, sched)
			err := a.publish(pctx, p)
			if err != nil && !time.Now().Before(to) {
				return ctx.Err() // this message and the rest are behind
			}
			rec.onSent(sched)
			if err != nil {
				rec.onAck(p, err)
			}
		}
	}
	return nil
}

// closedLoop keeps ls.window messages in flight for warm-up plus duration.
func closedLoop(ctx context.Context, a adapter, rec *recorder, ls loadSpec, start, from, to time.Time,
	readUsage func(*usageMark), u0, u1 *usageMark) error {
	pctx, cancel := context.WithDeadline(ctx, to)
	defer cancel()
	defer readUsage(u1)
	startedUsage := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-pctx.Done():
			return nil
		case rec.window <- struct{}{}:
		}
		now := time.Now()
		if !startedUsage && !now.Before(from) {
			readUsage(u0)
			startedUsage = true
		}
		sched := now.UnixNano()
		p := newPayload(ls.size, ls.filler, sched)
		err := a.publish(pctx, p)
		if err != nil && !time.Now().Before(to) {
			<-rec.window
			return ctx.Err()
		}
		rec.onSent(sched)
		if err != nil {
			rec.onAck(p, err)
		}
	}
}
