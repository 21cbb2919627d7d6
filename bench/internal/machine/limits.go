package machine

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/magnetar-dev/magnetar/bench/internal/latency"
)

// FsyncAppend appends size-byte blocks to a new file in dir, each write
// followed by an fdatasync, for dur, and returns the bytes per second made
// durable. The file is removed.
func FsyncAppend(ctx context.Context, dir string, size int, dur time.Duration) (float64, error) {
	f, err := os.CreateTemp(dir, "fsync-limit-*.dat")
	if err != nil {
		return 0, fmt.Errorf("machine: %w", err)
	}
	defer os.Remove(f.Name())
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
