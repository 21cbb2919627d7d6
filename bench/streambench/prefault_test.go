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

// TestParseArgsPrefault: the prefault is the default for the run's length
// unless -prefault says otherwise, none in a smoke run unless asked for,
// and -short keeps the flags set explicitly.
func TestParseArgsPrefault(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int64
	}{
		{nil, prefaultFor(4 * time.Second)}, // 1 s warm-up + 2 s + 1 s drain
		{[]string{"-duration", "12s"}, prefaultFor(14 * time.Second)},
		{[]string{"-prefault", "0"}, 0},
		{[]string{"-prefault", "1GiB"}, 1 << 30},
		{[]string{"-short"}, 0},
		{[]string{"-short", "-prefault", "512MiB"}, 512 << 20},
	} {
		o, _, err := parseArgs(c.args)
		if err != nil {
			t.Fatalf("parseArgs(%q): %v", c.args, err)
		}
		if o.prefault != c.want {
			t.Errorf("parseArgs(%q): prefault %d MiB, want %d MiB", c.args, o.prefault>>20, c.want>>20)
		}
	}
	o, x, err := parseArgs([]string{"-short", "-topics", "500", "-workloads", "W5", "-gogc", "100", "-magnetar-flags", "--a --b"})
	if err != nil {
		t.Fatal(err)
	}
	if o.topics != 500 || o.rounds != 1 || !o.workloads["W5"] || o.workloads["W1"] || x.gogc != 100 || len(o.magnetarFlags) != 2 {
		t.Errorf("-short with flags: topics %d rounds %d workloads %v gogc %d magnetar flags %q", o.topics, o.rounds, o.workloads, x.gogc, o.magnetarFlags)
	}
	for _, bad := range [][]string{{"-prefault", "lots"}, {"-workloads", "W9"}, {"stray"}} {
		if _, _, err := parseArgs(bad); err == nil {
			t.Errorf("parseArgs(%q): no error", bad)
		}
	}
}
