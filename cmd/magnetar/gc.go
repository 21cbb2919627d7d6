package main

import (
	"os"
	"runtime/debug"
)

// serverGCPercent is the Go collector's target for the processes that load
// topics (broker, standalone) when GOGC is not set. Their heap is mostly
// long-lived: every loaded topic's managed ledger, registry entries and
// metadata-store index, ~1 KiB each, and each cycle marks all of it, so
// the collector's share of a busy server's CPU falls as GOGC rises: W5
// created 8,098 topics/s at 50 and 9,556/s at 200 (medians of three
// alternating runs; 400 was no better; docs/benchmarks.md, fifteenth
// session). Between cycles the heap may grow by GOGC percent of what is
// live, and an idle process would keep that headroom resident (2.9 KiB
// per idle topic at 100,000 topics at 200, 1.7 at 50): the idle trimmer
// returns it once the load stops (trim.go). Pulsar ships tuned collector
// settings for its brokers too (pulsar_env.sh); GOGC overrides.
const serverGCPercent = 200

// applyServerGC sets serverGCPercent unless the environment (getenv)
// chooses GOGC itself, and reports whether it did.
func applyServerGC(getenv func(string) string) bool {
	if getenv("GOGC") != "" {
		return false
	}
	debug.SetGCPercent(serverGCPercent)
	return true
}

// serverGC is applyServerGC on the process's environment, and the idle
// trimmer.
func serverGC() {
	applyServerGC(os.Getenv)
	trimWhenIdle()
}
