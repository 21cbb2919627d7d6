package main

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestSettledFootprintWaitsForAQuietWindow grows this process's resident
// memory, pauses for less than the settle window, and grows it again: the
// reading must include the second growth, so a pause is not taken for the
// idle state.
func TestSettledFootprintWaitsForAQuietWindow(t *testing.T) {
	var held [][]byte
	grow := func(mib int) {
		for range mib {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			held = append(held, b)
		}
	}
	grow(16)
	done := make(chan int64)
	go func() {
		time.Sleep(700 * time.Millisecond) // a pause the old 200 ms pair settled in
		grow(64)
		rss, _, err := procFootprint(os.Getpid())
		if err != nil {
			t.Error(err)
		}
		done <- rss
	}()
	start := time.Now()
	rss, _, err := settledFootprint(context.Background(), os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	grown := <-done
	t.Logf("settled at %d MiB after %v; %d MiB once grown", rss>>20, time.Since(start).Round(time.Millisecond), grown>>20)
	if rss < grown-grown/100 {
		t.Fatalf("settled at %d bytes, before the second growth to %d", rss, grown)
	}
	if time.Since(start) < settleSpan {
		t.Fatalf("settled after %v, less than a full window (%v)", time.Since(start), settleSpan)
	}
	runtime.KeepAlive(held)
}
