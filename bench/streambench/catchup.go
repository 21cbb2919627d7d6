package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// catchupResult is one W6 run: a backlog built, then read from the start by
// a new subscription while a producer keeps publishing at a fixed rate.
type catchupResult struct {
	backlogMsgs, backlogBytes uint64        // acknowledged before the reader subscribed
	fill                      time.Duration // time to build the backlog (closed loop)
	producerBps               float64       // the producer's offered rate, bytes/s
	caughtUp                  bool          // the reader received the whole backlog within o.catchupLimit
	catchup                   time.Duration // subscribe until the last backlog message was received
	readBytes                 uint64        // everything the reader received in that time (backlog and live)
	base, during              runResult     // the producer without and with the reader
}

// readBps is the reader's rate over the catch-up, bytes/s.
func (c catchupResult) readBps() float64 {
	if c.catchup <= 0 {
		return 0
	}
	return float64(c.readBytes) / c.catchup.Seconds()
}

// multiple is the read rate as a multiple of the producer's rate.
func (c catchupResult) multiple() float64 {
	if c.producerBps <= 0 {
		return 0
	}
	return c.readBps() / c.producerBps
}

// p99Raise is the producer's publish p99 during the catch-up over its p99
// without it; +Inf when either has no acknowledgement.
func (c catchupResult) p99Raise() float64 {
	a, b := quantileOf(c.during.pub, 0.99), quantileOf(c.base.pub, 0.99)
	if math.IsInf(a, 0) || math.IsInf(b, 0) || b == 0 {
		return math.Inf(1)
	}
	return a / b
}

func (c catchupResult) describe() string {
	done := "caught up"
	if !c.caughtUp {
		done = "NOT caught up"
	}
	return fmt.Sprintf("backlog %d msgs %.1f MB in %v; %s in %v: read %.1f MB/s = %.1fx the producer; pub p99 %v alone, %v during catch-up",
		c.backlogMsgs, float64(c.backlogBytes)/1e6, c.fill.Round(time.Millisecond), done, c.catchup.Round(time.Millisecond),
		c.readBps()/1e6, c.multiple(), c.base.pub.Quantile(0.99), c.during.pub.Quantile(0.99))
}

// ackRouter forwards the adapter's acknowledgements to the recorder of the
// current phase; acks of an earlier phase that arrive late fall outside the
// new recorder's window and are only counted as done.
type ackRouter struct{ cur atomic.Pointer[recorder] }

func (r *ackRouter) onAck(p []byte, err error) { r.cur.Load().onAck(p, err) }

// runCatchup runs W6 on a: build o.backlog bytes (closed loop, o.window in
// flight), publish at o.catchupRate for warm-up plus duration alone (the
// baseline), then keep publishing at that rate while a new subscription
// reads from the start, until it has received every message acknowledged
// before it subscribed or o.catchupLimit passes.
func runCatchup(ctx context.Context, a adapter, spec topicSpec, o options) (res catchupResult, err error) {
	n := max(1, int(o.backlog/int64(o.size)))
	spec.retain = n + int(float64(o.catchupRate)*(o.warmup+o.duration+o.catchupLimit).Seconds())
	var router ackRouter
	fill := newRecorder(time.Unix(0, 0), time.Unix(0, math.MaxInt64))
	fill.closed, fill.window = true, make(chan struct{}, o.window)
	router.cur.Store(fill)
	defer func() {
		tctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if terr := a.teardown(tctx); err == nil && terr != nil {
			err = terr
		}
	}()
	if err := a.setup(ctx, spec, router.onAck); err != nil {
		return res, err
	}
	filler := randomFiller(o.size)

	// Backlog: n messages, closed loop, every one acknowledged. Building
	// stops after catchupLimit: a system that cannot write the backlog in
	// that time cannot read it back in it either (NATS with sync always
	// took 25-30 s per round in a slow machine state, pushing `make bench`
	// past its 15 minutes); the table reports the MB actually built.
	t0 := time.Now()
	for i := range n {
		if i%256 == 0 && time.Since(t0) > o.catchupLimit {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case fill.window <- struct{}{}:
		}
		sched := time.Now().UnixNano()
		p := newPayload(o.size, filler, sched)
		err := a.publish(ctx, p)
		fill.onSent(sched)
		if err != nil {
			fill.onAck(p, err)
		}
	}
	if err := waitFor(ctx, o.catchupLimit, func() bool { return fill.drained(false) }); err != nil {
		return res, fmt.Errorf("streambench: W6 backlog not acknowledged: %w", err)
	}
	res.fill = time.Since(t0)
	if f := fill.result(); f.failed > 0 {
		return res, fmt.Errorf("streambench: W6 backlog: %d of %d publishes failed", f.failed, n)
	}

	// Baseline: the producer alone.
	noUsage := func(*usageMark) {}
	var u usageMark
	ls := loadSpec{rate: float64(o.catchupRate), size: o.size, warmup: o.warmup, duration: o.duration, filler: filler}
	resume := pauseGC(!o.gcDuringRuns) // both phases alike, as in every other run
	start := time.Now()
	base := newRecorder(start.Add(o.warmup), start.Add(o.warmup+o.duration))
	router.cur.Store(base)
	if err := openLoop(ctx, a, base, ls, start, start.Add(o.warmup), start.Add(o.warmup+o.duration), noUsage, &u, &u); err != nil {
		resume()
		return res, err
	}
	err = waitFor(ctx, o.drain, func() bool { return base.drained(false) })
	resume()
	if err != nil && ctx.Err() != nil {
		return res, err
	}
	fill.mu.Lock()
	acked := fill.res.allAcked
	fill.mu.Unlock()
	base.mu.Lock()
	acked += base.res.allAcked
	base.mu.Unlock()
	res.base = base.result()
	res.base.offered, res.base.elapsed = ls.rate, o.duration
	res.backlogMsgs, res.backlogBytes = acked, acked*uint64(o.size)
	res.producerBps = ls.rate * float64(o.size)

	// Catch-up: the producer again, and a new subscription from the start.
	defer pauseGC(!o.gcDuringRuns)()
	start = time.Now()
	during := newRecorder(start, start.Add(o.catchupLimit))
	router.cur.Store(during)
	pctx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	prodDone := make(chan error, 1)
	cls := ls
	cls.warmup, cls.duration = 0, o.catchupLimit
	go func() { // owned by runCatchup: stopped by stopProducer, waited for below
		prodDone <- openLoop(pctx, a, during, cls, start, start, start.Add(o.catchupLimit), noUsage, &u, &u)
	}()
	var old, readBytes atomic.Uint64
	subscribed := time.Now()
	onMsg := func(p []byte) {
		readBytes.Add(uint64(len(p)))
		if len(p) >= 8 && int64(binary.LittleEndian.Uint64(p)) < start.UnixNano() {
			old.Add(1)
		}
	}
	if err := a.subscribe(ctx, subscription{name: "catchup", fromStart: true}, onMsg); err != nil {
		stopProducer()
		<-prodDone
		return res, err
	}
	werr := waitFor(ctx, o.catchupLimit, func() bool { return old.Load() >= acked })
	res.catchup, res.readBytes, res.caughtUp = time.Since(subscribed), readBytes.Load(), werr == nil
	stopProducer()
	if perr := <-prodDone; perr != nil && ctx.Err() != nil {
		return res, perr
	}
	if werr != nil && ctx.Err() != nil {
		return res, werr
	}
	waitFor(ctx, o.drain, func() bool { return during.drained(false) })
	res.during = during.result()
	res.during.offered, res.during.elapsed = ls.rate, res.catchup
	return res, nil
}

// waitFor polls cond every 10 ms until it holds, ctx ends or limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if !time.Now().Before(deadline) {
			return fmt.Errorf("streambench: not done after %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
