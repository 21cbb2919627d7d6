// Package tprobe is TEMPORARY instrumentation for the tail-latency study; it
// is removed before commit.
package tprobe

import (
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"
)

var (
	On    = os.Getenv("TPROBE") != ""
	Start = time.Now()
	mu    sync.Mutex
	evs   []Ev
)

type Ev struct {
	Kind   string
	T0, T1 time.Time
	N, M   int64
}

func Rec(kind string, t0, t1 time.Time, n, m int64) {
	if !On {
		return
	}
	mu.Lock()
	evs = append(evs, Ev{kind, t0, t1, n, m})
	mu.Unlock()
}

func Reset() { mu.Lock(); evs = nil; mu.Unlock() }

func Dump(w io.Writer) {
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(evs, func(i, j int) bool { return evs[i].T0.Before(evs[j].T0) })
	for _, e := range evs {
		fmt.Fprintf(w, "%s %.6f %.6f %d %d\n", e.Kind, e.T0.Sub(Start).Seconds(), e.T1.Sub(e.T0).Seconds(), e.N, e.M)
	}
}
