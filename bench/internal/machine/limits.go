package machine

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
)

// FsyncAppend appends size-byte blocks to a new file in dir, each write
// followed by an fdatasync, for dur, and returns the bytes per second made
// durable. The file is left in dir for the caller to remove with dir once
// every measurement is over: deleting a large file on a disk mounted with
// discard stalls every fdatasync for seconds, which the next measurement
// would pay.
func FsyncAppend(ctx context.Context, dir string, size int, dur time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, "fsync-limit-*.dat")
	if err != nil {
		return 0, fmt.Errorf("machine: %w", err)
	}
	defer f.Close()
	buf := make([]byte, size)
	rand.Read(buf)
	var n int64
	start := time.Now()
	for time.Since(start) < dur && ctx.Err() == nil {
		if _, err := f.Write(buf); err != nil {
			return 0, fmt.Errorf("machine: append: %w", err)
		}
		if err := Fdatasync(f); err != nil {
			return 0, fmt.Errorf("machine: fdatasync: %w", err)
		}
		n += int64(size)
	}
	return float64(n) / time.Since(start).Seconds(), ctx.Err()
}

// LoopbackRTT measures round trips of a 64-byte message over one loopback
// TCP connection to an echo server, for dur, and returns their histogram.
func LoopbackRTT(ctx context.Context, dur time.Duration) (*latency.Histogram, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("machine: %w", err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() { // echo server; stops when the client connection closes
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		l.Close()
		<-done
		return nil, fmt.Errorf("machine: %w", err)
	}
	h := latency.NewHistogram()
	msg, in := make([]byte, 64), make([]byte, 64)
	start := time.Now()
	for time.Since(start) < dur && ctx.Err() == nil {
		t := time.Now()
		if _, err = c.Write(msg); err != nil {
			break
		}
		if _, err = io.ReadFull(c, in); err != nil {
			break
		}
		h.Record(time.Since(t))
	}
	c.Close()
	l.Close()
	<-done
	if err != nil {
		return nil, fmt.Errorf("machine: round trip: %w", err)
	}
	return h, nil
}

// GroupCommitAtRate is the machine's own append latency at a given load:
// entries of size bytes are offered at rate per second, open loop (a ticker
// of at most 1 ms that offers every entry due by now), to a bare
// group-commit loop on a new plain file in dir (one goroutine writes
// everything pending with one write and then fdatasyncs, as a journal
// does, and nothing else of ours touches the disk). Latency runs from an
// entry's scheduled time to the end of its group's fdatasync; entries
// scheduled after warmup are recorded (measured of them). It is the floor
// any system acknowledging after an fsync per group can reach at that rate
// on this disk, which a one-writer, queue-depth-1 fsync probe on an idle
// disk is not. The file is left in dir, as FsyncAppend leaves its own.
func GroupCommitAtRate(dir string, size int, rate float64, warmup, dur time.Duration) (_ *latency.Histogram, measured uint64, _ error) {
	name := filepath.Join(dir, fmt.Sprintf("group-commit-%d.dat", time.Now().UnixNano()))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("machine: %w", err)
	}
	defer f.Close()

	rate = max(rate, 1)
	interval := time.Duration(float64(time.Second) / rate)
	first := int64(warmup / interval)
	total := int64((warmup + dur) / interval)
	payload := make([]byte, size)
	rand.Read(payload)
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
				err = Fdatasync(f)
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
		return nil, 0, fmt.Errorf("machine: group commit: %w", werr)
	}
	return h, uint64(total - first), nil
}
