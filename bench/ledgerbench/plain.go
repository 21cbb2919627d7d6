package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
	"github.com/magnetar-dev/magnetar/bench/internal/machine"
)

// The machine's own limit: fsync'd sequential appends to a new plain file
// in the same directory, with nothing else in the way.

// plainGrouped appends groups of entries (one write of max(1,
// groupBytes/size) entries, then one fdatasync: what the journal does with
// one commit group) for warmup and then dur, and reports the entries
// appended during dur.
func plainGrouped(dir string, size, groupBytes int, warmup, dur time.Duration) (result, error) {
	perGroup := max(1, groupBytes/size)
	buf := make([]byte, 0, perGroup*size)
	p := randomPayload(size)
	for range perGroup {
		buf = append(buf, p...)
	}
	var n uint64
	elapsed, err := appendLoop(dir, warmup, dur, func(f *os.File, measuring bool) error {
		if _, err := f.Write(buf); err != nil {
			return err
		}
		if err := machine.Fdatasync(f); err != nil {
			return err
		}
		if measuring {
			n += uint64(perGroup)
		}
		return nil
	})
	return result{entries: n, bytes: n * uint64(size), elapsed: elapsed}, err
}

// plainSingle appends one entry and fdatasyncs it, again and again, for
// warmup and then dur; it records the latency of each append+fdatasync
// made during dur.
func plainSingle(dir string, size int, warmup, dur time.Duration) (result, error) {
	p := randomPayload(size)
	h := latency.NewHistogram()
	elapsed, err := appendLoop(dir, warmup, dur, func(f *os.File, measuring bool) error {
		t := time.Now()
		if _, err := f.Write(p); err != nil {
			return err
		}
		if err := machine.Fdatasync(f); err != nil {
			return err
		}
		if measuring {
			h.Record(time.Since(t))
		}
		return nil
	})
	return result{entries: h.Count(), bytes: h.Count() * uint64(size), elapsed: elapsed, hist: h}, err
}

// appendLoop creates a new file in dir, calls step for warmup (measuring
// false) and then for dur (measuring true), removes the file and returns
// how long the measured phase took.
func appendLoop(dir string, warmup, dur time.Duration, step func(f *os.File, measuring bool) error) (time.Duration, error) {
	name := filepath.Join(dir, fmt.Sprintf("plain-%d.dat", time.Now().UnixNano()))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer os.Remove(name)
	defer f.Close()
	for end := time.Now().Add(warmup); time.Now().Before(end); {
		if err := step(f, false); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for end := start.Add(dur); time.Now().Before(end); {
		if err := step(f, true); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// plainAtRate is the machine's own latency at a given load: entries of size
// bytes are offered at rate per second, open loop (paced like openLoop), to
// a bare group-commit loop on a plain file (one goroutine writes everything
// pending with one write and then fdatasyncs, as the journal does, and
// nothing else touches the disk). Latency runs from an entry's scheduled
// time to the end of its group's fdatasync. It is the floor any journal
// doing one fsync per group can reach at that rate on this disk, which the
// 1-entry fsync baseline (one writer, queue depth 1, an idle disk) is not.
func plainAtRate(dir string, size int, rate float64, warmup, dur time.Duration) (result, error) {
	name := filepath.Join(dir, fmt.Sprintf("plain-rate-%d.dat", time.Now().UnixNano()))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return result{}, err
	}
	defer os.Remove(name)
	defer f.Close()

	rate = max(rate, 1)
	interval := time.Duration(float64(time.Second) / rate)
	first := int64(warmup / interval)
	total := int64((warmup + dur) / interval)
	payload := randomPayload(size)
	h := latency.NewHistogram()

	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		pending []int64 // indexes of entries offered and not yet written
		closed  bool
		werr    error
		start   time.Time
	)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		var group []int64
		var buf []byte
		for {
			mu.Lock()
			for len(pending) == 0 && !closed {
				cond.Wait()
			}
			if len(pending) == 0 {
				mu.Unlock()
				return
			}
			group, pending = pending, group[:0]
			mu.Unlock()
			buf = buf[:0]
			for range group {
				buf = append(buf, payload...)
			}
			_, err := f.Write(buf)
			if err == nil {
				err = machine.Fdatasync(f)
			}
			if err != nil {
				mu.Lock()
				werr = err
				mu.Unlock()
				return
			}
			now := time.Now()
			for _, i := range group {
				if i >= first {
					h.Record(now.Sub(start.Add(time.Duration(i) * interval)))
				}
			}
		}
	}()

	tick := min(max(interval, 250*time.Microsecond), time.Millisecond)
	t := time.NewTicker(tick)
	start = time.Now()
	for sent := int64(0); sent < total; {
		<-t.C
		due := min(int64(time.Since(start)/interval)+1, total)
		mu.Lock()
		for ; sent < due; sent++ {
			pending = append(pending, sent)
		}
		failed := werr != nil
		cond.Signal()
		mu.Unlock()
		if failed {
			break
		}
	}
	t.Stop()
	mu.Lock()
	closed = true
	cond.Signal()
	mu.Unlock()
	<-writerDone
	if werr != nil {
		return result{}, werr
	}
	n := uint64(total - first)
	return result{entries: n, bytes: n * uint64(size), elapsed: time.Duration(n) * interval, hist: h, rate: rate}, nil
}
