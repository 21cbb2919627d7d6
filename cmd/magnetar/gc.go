package main

import (
	"os"
	"runtime/debug"
)

// serverGCPercent is the Go collector's target for the processes that load
// topics (broker, standalone) when GOGC is not set. Their heap is mostly
// long-lived: every loaded topic's managed ledger, registry entries and
// metadata-store index, ~1 KiB each. At the runtime's default (100) the
// heap may grow to twice what is live before a collection, and an idle
// broker keeps that headroom resident: 2.6 KiB per idle topic at 100,000
// topics. At 50 it is 1.9 KiB, for ~1% of W2's throughput (143 vs 141 k
// msg/s, same run; docs/benchmarks.md, fifth session). Pulsar ships tuned
// collector settings for its brokers too (pulsar_env.sh); GOGC overrides.
const serverGCPercent = 50

// applyServerGC sets serverGCPercent unless the environment (getenv)
// chooses GOGC itself, and reports whether it did.
func applyServerGC(getenv func(string) string) bool {
	if getenv("GOGC") != "" {
		return false
	}
	debug.SetGCPercent(serverGCPercent)
	return true
}

// serverGC is applyServerGC on the process's environment.
func serverGC() { applyServerGC(os.Getenv) }
