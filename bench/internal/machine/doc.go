// Package machine owns what the benchmarks read about the machine they run
// on: its load (load average, pressure stall information, CPU time used by
// everything else), the CPU time and disk writes of one process
// (/proc/<pid>/stat and /proc/<pid>/io), the commit being measured, the
// limits results are read against: fsync'd sequential appends to a plain
// file, the loopback TCP round trip, a bare group-commit loop at a rate,
// and the CPU a loopback copy takes in plain text and over TLS; and the
// kernel's DAMON monitors, whose sampling stalls every process at once on
// some machines.
//
// Callers: the commands under bench/ (ledgerbench, streambench).
//
// Concurrency: every function is safe for concurrent use; the limit
// measurements load the disk or the CPU while they run, so callers run them
// alone.
package machine
