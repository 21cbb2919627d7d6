// Command streambench measures Magnetar side by side with peer streaming
// systems (NATS JetStream, Redis streams) on the same machine in the same
// run, one load generator for all, through each system's ordinary client.
//
//	go run ./bench/streambench [-workloads W1,W2,W3,W7] [-rounds 5] [-duration 5s] [-warmup 1s]
//	    [-systems magnetar,nats,redis] [-short] [-markdown FILE]
//
// What it owns: building and running the servers as subprocesses (the
// magnetar binary and nats-server built from their Go modules with `go
// build`, Debian's redis-server) on free loopback ports with temporary data
// directories; one adapter per system (setup a topic of N partitions,
// publish asynchronously with an acknowledgement callback, subscribe with a
// message callback carrying the payload, teardown); an open-loop generator
// paced by a ticker that sends every message due since the start (latency
// is measured from each message's scheduled send time, carried in its
// payload, so a stalled system cannot hide its queueing: no coordinated
// omission); a closed-loop generator with a bounded in-flight window for
// maximum throughput; and the tables.
//
// Durability is a column, never mixed: (a) acknowledged after fsync,
// (b) acknowledged after the write to the OS, (c) memory only.
// Magnetar: (a) default journal fsync, (b) --journal-sync=false,
// (c) non-persistent:// topics. NATS: file storage with sync_interval
// always, file storage with the default sync, memory storage. Redis:
// appendonly with appendfsync always, appendfsync no, no persistence.
//
// Workloads: W1 one topic of 16 partitions (NATS: 16 subjects of one
// stream; Redis: 16 stream keys) at a fixed 50,000 msg/s of 1 KiB, publish
// and end-to-end latency, in every durability; W3 the p99 at 1k/5k/20k/50k
// msg/s in (a); W2 the maximum sustained throughput with batching in (a),
// with the server's CPU seconds per GB and disk bytes written per byte
// produced; W7 W1 with fsync on and off side by side.
// TODO(W4): fan-out (one topic, many subscriptions).
// TODO(W5): many topics (10k topics at a low rate each).
// TODO(W6): catch-up reads of a backlog while producing.
//
// Rounds are interleaved (Magnetar, the peers, Magnetar, the peers ...);
// the tables show each system's median over rounds and, per peer, the
// median with minimum and maximum of the per-round ratios Magnetar / peer.
// The machine's limits (fsync'd appends of 4 KiB, 64 KiB and 1 MiB;
// loopback TCP round trip) are measured in the same run, and each round's
// load (load average, /proc/pressure, CPU used by other processes) is
// recorded; rounds where other processes used a noticeable share of the
// CPUs are flagged noisy.
//
// Concurrency: main owns everything; each run's adapter owns its client
// goroutines and stops and waits for them in teardown; each server is a
// subprocess stopped (SIGTERM, then SIGKILL after a grace period) and waited
// for before the next one starts.
package main
