package main

import (
	"os"
	"runtime/debug"
	"time"
)

// serverGCPercent is the Go collector's target for the processes that load
// topics (broker, standalone) when GOGC is not set. Their heap is mostly
// long-lived: every loaded topic's managed ledger, registry entries and
// metadata-store index, ~1 KiB each. At the runtime's default (100) the
// heap may grow to twice what is live before a collection, and a broker
// under load keeps that headroom resident (3.1 KiB per topic with a
// producer on each of 100,000 topics, 2.4 at 50). 50 costs next to nothing
// in throughput: W2 at 50 and 100 alternating, 178,367 and 173,896 msg/s
// against 183,440 and 168,450; W5's creation rate 9,433 median against
// 9,605. 200 made fewer collections but cut W2 to 134,974-157,336 msg/s
// against 161,299-217,804 at 50 (streambench's W2 and W5, rounds
// alternating the settings on the 2-core virtual machine of
// docs/benchmarks.md).
// What an idle process keeps of the headroom, the idle trimmer returns
// (trim.go). Pulsar ships tuned collector settings for its brokers too
// (pulsar_env.sh); GOGC overrides.
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

// serverGC is applyServerGC on the process's environment, and the idle
// trimmer (--idle-release-after idle).
func serverGC(idle time.Duration) {
	applyServerGC(os.Getenv)
	trimWhenIdle(idle)
}
