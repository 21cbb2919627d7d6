// Package proc owns the benchmarks' server subprocesses: a binary built
// from a Go module with `go build`, started in its own process group with
// its output in a log file, polled until a probe succeeds, and stopped
// (SIGTERM, then SIGKILL after a grace period) and waited for.
//
// Callers: the commands under bench/ that run servers as separate
// processes (streambench, noisybench), so that a server's CPU time is its
// own and the load generator's is not mixed into it.
//
// Concurrency: each Process has one goroutine that waits for the
// subprocess to exit; Stop and WaitReady may be called from one goroutine
// at a time.
package proc
