package main

import (
	"testing"
	"time"
)

// TestPrefaultFor: the default prefault covers what a W1 run allocates in
// its length, between the floor and the cap, in whole GiB.
func TestPrefaultFor(t *testing.T) {
	for _, c := range []struct {
		run  time.Duration
		want int64
	}{
		{4 * time.Second, 2 << 30},  // make bench's runs: the floor
		{6 * time.Second, 3 << 30},  // -duration 4s
		{14 * time.Second, 6 << 30}, // -duration 12s
		{time.Minute, 8 << 30},      // the cap
	} {
		if got := prefaultFor(c.run); got != c.want {
			t.Errorf("prefaultFor(%v) = %d MiB, want %d MiB", c.run, got>>20, c.want>>20)
		}
	}
	if got := memoryLimitFor(2 << 30); got != 2<<30+256<<20 {
		t.Errorf("memoryLimitFor(2 GiB) = %d MiB", got>>20)
	}
	if got := memoryLimitFor(0); got != generatorMemoryLimit {
		t.Errorf("memoryLimitFor(0) = %d MiB", got>>20)
	}
}
