package main

import (
	"fmt"
	"os"
	"path/filepath"
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
// false) and then for dur (measuring true) and returns how long the
// measured phase took. The file stays until the run ends (see run).
func appendLoop(dir string, warmup, dur time.Duration, step func(f *os.File, measuring bool) error) (time.Duration, error) {
	name := filepath.Join(dir, fmt.Sprintf("plain-%d.dat", time.Now().UnixNano()))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
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

// plainAtRate is the machine's own latency at the offered rate: see
// machine.GroupCommitAtRate, the floor any journal doing one fsync per
// group can reach at that rate on this disk (which the 1-entry fsync
// baseline, one writer at queue depth 1 on an idle disk, is not).
func plainAtRate(dir string, size int, rate float64, warmup, dur time.Duration) (result, error) {
	h, n, err := machine.GroupCommitAtRate(dir, size, rate, warmup, dur)
	if err != nil {
		return result{}, err
	}
	return result{entries: n, bytes: n * uint64(size), elapsed: time.Duration(float64(n) / max(rate, 1) * float64(time.Second)), hist: h, rate: rate}, nil
}
