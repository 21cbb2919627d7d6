package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
)

// quorum is a ledger replication setting.
type quorum struct {
	name             string
	bookies          int
	ensemble, qw, qa int
	// copyToEntryLogs: the bookies copy entries to the entry logs at each
	// flush (storage.Config.CopyToEntryLogs).
	copyToEntryLogs bool
}

// result is one measurement.
type result struct {
	entries uint64
	bytes   uint64
	elapsed time.Duration
	hist    *latency.Histogram // latency runs only
	rate    float64            // open loop: the target rate (entries/s)
}

// meanOf is a and b, two runs of equal length, as one result: the mean of
// their throughputs.
func meanOf(a, b result) result {
	return result{entries: a.entries + b.entries, bytes: a.bytes + b.bytes, elapsed: a.elapsed + b.elapsed}
}

func (r result) entriesPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.entries) / r.elapsed.Seconds()
}

// mbPerSec is payload throughput in MB/s (10^6 bytes).
func (r result) mbPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.bytes) / r.elapsed.Seconds() / 1e6
}

func randomPayload(size int) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(size), 42))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// errBox keeps the first error reported by a callback.
type errBox struct{ p atomic.Pointer[error] }

func (e *errBox) set(err error) {
	if err != nil {
		e.p.CompareAndSwap(nil, &err)
	}
}

func (e *errBox) get() error {
	if p := e.p.Load(); p != nil {
		return *p
	}
	return nil
}

// closedLoop appends to a new ledger with at most inflight appends
// outstanding, for warmup and then dur; it reports what was acknowledged
// during dur.
func closedLoop(ctx context.Context, c *client.Client, q quorum, size, inflight int, warmup, dur time.Duration) (result, error) {
	h, err := c.CreateLedger(ctx, client.CreateOptions{Ensemble: q.ensemble, WriteQuorum: q.qw, AckQuorum: q.qa})
	if err != nil {
		return result{}, err
	}
	payload := randomPayload(size)
	sem := make(chan struct{}, inflight)
	var acked atomic.Uint64
	var failed errBox
	cb := func(_ int64, err error) {
		failed.set(err)
		acked.Add(1)
		<-sem
	}
	start := time.Now()
	measureFrom, measureTo := start.Add(warmup), start.Add(warmup+dur)
	var a0, a1 uint64
	var t0, t1 time.Time
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			h.Close(context.Background())
			return result{}, ctx.Err()
		}
		now := time.Now()
		if t0.IsZero() && now.After(measureFrom) {
			a0, t0 = acked.Load(), now
		}
		if now.After(measureTo) {
			a1, t1 = acked.Load(), now
			<-sem
			break
		}
		if failed.get() != nil {
			break
		}
		h.AppendAsync(payload, cb)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cerr := h.Close(cctx)
	if err := failed.get(); err != nil {
		return result{}, err
	}
	if cerr != nil {
		return result{}, fmt.Errorf("close ledger: %w", cerr)
	}
	n := a1 - a0
	return result{entries: n, bytes: n * uint64(size), elapsed: t1.Sub(t0)}, nil
}

// errBehind means an open-loop run could not keep up with its rate.
var errBehind = errors.New("open loop: the ledger fell too far behind the offered rate")

// openLoop appends to a new ledger at a fixed rate (entries/s), paced by a
// ticker that catches up on every tick (the sends due by now are all made,
// each with its own scheduled time), for warmup and then dur. Latency runs
// from an entry's scheduled send time to its acknowledgement; entries
// scheduled during dur are recorded (and into worst, if not nil).
func openLoop(ctx context.Context, c *client.Client, q quorum, size int, rate float64, warmup, dur time.Duration, worst *worstTracker) (result, error) {
	h, err := c.CreateLedger(ctx, client.CreateOptions{Ensemble: q.ensemble, WriteQuorum: q.qw, AckQuorum: q.qa})
	if err != nil {
		return result{}, err
	}
	payload := randomPayload(size)
	rate = max(rate, 1)
	interval := time.Duration(float64(time.Second) / rate)
	// Entry i is due at start + i*interval; entry ids equal send indexes in
	// a new ledger, so a callback finds its scheduled time from its id.
	first := int64(warmup / interval)
	total := int64((warmup + dur) / interval)
	var (
		mu     sync.Mutex
		hist   = latency.NewHistogram()
		acked  atomic.Int64
		failed errBox
		start  time.Time
	)
	cb := func(id int64, err error) {
		now := time.Now()
		failed.set(err)
		acked.Add(1)
		if err != nil || id < first {
			return
		}
		at := time.Duration(id) * interval
		lat := now.Sub(start.Add(at))
		mu.Lock()
		hist.Record(lat)
		mu.Unlock()
		worst.record(at, lat)
	}
	// Bound what may be outstanding: far more than the rate needs, far less
	// than the memory of the machine.
	maxOutstanding := max(int64(rate), int64((256<<20)/size))
	tick := min(max(interval, 250*time.Microsecond), time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	start = time.Now()
	var sent int64
	var runErr error
	for sent < total && runErr == nil {
		select {
		case <-t.C:
		case <-ctx.Done():
			runErr = ctx.Err()
			continue
		}
		due := min(int64(time.Since(start)/interval)+1, total)
		for ; sent < due; sent++ {
			h.AppendAsync(payload, cb)
		}
		if sent-acked.Load() > maxOutstanding {
			runErr = errBehind
		}
		if err := failed.get(); err != nil {
			runErr = err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cerr := h.Close(cctx)
	if runErr == nil {
		runErr = failed.get()
	}
	if runErr == nil && cerr != nil {
		runErr = fmt.Errorf("close ledger: %w", cerr)
	}
	if runErr != nil {
		return result{}, runErr
	}
	n := uint64(total - first)
	return result{entries: n, bytes: n * uint64(size), elapsed: time.Duration(n) * interval, hist: hist, rate: rate}, nil
}
