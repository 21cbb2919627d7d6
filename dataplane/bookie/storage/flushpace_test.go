package storage

import (
	"testing"
	"time"
)

func TestFlushPace(t *testing.T) {
	for _, c := range []struct {
		n       int64
		elapsed time.Duration
		want    time.Duration
	}{
		{4 << 20, 80 * time.Millisecond, 1250 * time.Microsecond}, // 50 MiB/s in: 128 KiB per 1.25 ms = 100 MiB/s out
		{4 << 20, 0, 0},                                   // first flush: no rate known
		{flushPaceChunk, time.Second, 0},                  // nothing worth pacing
		{1 << 20, 10 * time.Second, 5 * time.Millisecond}, // a slow trickle: capped
	} {
		if got := flushPace(c.n, c.elapsed); got != c.want {
			t.Errorf("flushPace(%d, %v) = %v, want %v", c.n, c.elapsed, got, c.want)
		}
	}
}
