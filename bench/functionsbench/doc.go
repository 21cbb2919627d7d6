// Command functionsbench measures Magnetar's functions worker beside Apache
// Pulsar's (4.2.4, its in-broker worker with the process runtime), on the
// same machine in the same run, with one load generator for both.
//
//	go run ./bench/functionsbench [-rounds 3] [-systems magnetar,pulsar] [-messages 20000] [-size 100]
//	    [-window 1000] [-rate 1000] [-rate-duration 10s] [-python] [-density 200] [-density-wave 0]
//	    [-java-density 3] [-density-idle 30s] [-pulsar-heap "-Xms1g -Xmx2g ..."] [-keep] [-markdown FILE]
//
// `make bench-functions` runs the defaults.
//
// Both workers run the same function code on the same instance: the Java
// ExclamationFunction of pulsar-functions-api-examples 4.0.8 on Pulsar's own
// Java instance (JavaInstanceMain, from Magnetar's functions home laid out
// by dataplane/functions/javainstance/setup.sh: Pulsar's worker gets its
// pathing jar as javaInstanceJarLocation and its class path and log4j2
// file as system properties), resources.ram 256 MiB (the instance's -Xmx),
// created through the same multipart REST v3 requests (admin.go). Pulsar
// comes from Maven Central through bench/internal/pulsarpeer.
//
// In each round, a fresh standalone of each system in turn (interleaved:
// Magnetar, Pulsar, Magnetar, ...):
//   - create → running: one input is published, then the function is
//     created (its subscription from the earliest message); the times from
//     the create request to status numRunning 1 and to that input's output;
//   - resident memory idle after create, summed VmRSS of the server process
//     and of its descendants (the instances), each shown;
//   - closed loop: -messages of -size bytes, -window in flight, through the
//     function; end-to-end msg/s (first send to last output) and the
//     server's CPU seconds per million messages (utime+stime of the server
//     process and the instance, from /proc; the load generator, this
//     process, excluded);
//   - open loop: -rate msg/s for -rate-duration, each message carrying its
//     scheduled send time: p50/p99/max of publish → output (no coordinated
//     omission), the server's cores at that rate; then the memory again;
//   - Magnetar only: a Python exclamation function (our Python instance;
//     Pulsar's Python instance is not in its Maven artifacts): create →
//     running, first output, its instance's RSS.
//
// After the rounds, the density runs: -density idle Python instances
// (parallelism 1, one input topic each) on one Magnetar worker, all at
// once by default (requests 8 at a time), or in waves of -density-wave
// (the next wave once the previous ones run), until all run
// (-density-limit); then their RSS, the worker's and the instances' CPU at
// idle over -density-idle. Pulsar is not run there (no Python instance in its
// Maven artifacts, and a Java instance is a JVM each); -java-density N
// (3) runs N idle Java instances on each system for reference.
//
// The report (Markdown, on stdout and in -markdown FILE) gives each
// metric's median and [min–max] over rounds, the machine (cores, memory,
// load average before the run), the Pulsar broker's JVM flags, and each
// block's load: cores busy, ours (benchmark and server tree), the others'
// and, when they used more than a quarter core, the busiest of them.
//
// Concurrency: main owns everything; a measurement's receiving goroutine is
// stopped and waited for before the next starts; each server (and its
// instances) is stopped and waited for before the next one starts.
package main
