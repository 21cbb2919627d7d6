// Command streambench measures Magnetar side by side with peer streaming
// systems (NATS JetStream, Redis streams) on the same machine in the same
// run, one load generator for all, through each system's ordinary client.
//
//	go run ./bench/streambench [-workloads W1,W2,W3,W4,W5,W6,W7] [-rounds 5] [-duration 2s] [-warmup 1s]
//	    [-later-warmup 500ms] [-systems magnetar,nats,redis] [-short] [-markdown FILE]
//	    [-fanouts 1,4,16,64] [-fanout-rate 5000] [-backlog 32MiB] [-catchup-rate 5000]
//	    [-catchup-limit 8s] [-catchup-paced 2.2] [-topics 10000] [-topics-rate 1000] [-gogc 400]
//	    [-gc-during-runs] [-prefault SIZE] [-timeline] [-self-pprof ADDR] [-timeout 1h]
//
// The load generator's own garbage collection added tens of milliseconds
// to the tail it measures, for every system alike: it collects before and
// after each run and not otherwise, keeping the pages it freed for the
// next run, and writes the heap a W1 run allocates (at least 2 GiB) once
// before the first round (-prefault; page faults cost 7-15 µs on this
// virtual machine and took most of the generator's CPU; memory.go). Its
// memory limit is 256 MiB above that: a longer run collects rather than
// fault.
// -gc-during-runs turns the collector back on, at GOGC 400 (-gogc).
// -timeline prints each open-loop run's worst latency per 100 ms to show
// where a tail comes from. The servers are separate processes with their
// own collectors.
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
// produced; W7 W1 with fsync on and off side by side. In (a) only:
// W4 fan-out, one topic of one partition at a fixed 5,000 msg/s read by
// 1/4/16/64 subscriptions (Magnetar: exclusive subscriptions; NATS: durable
// AckNone consumers of one stream; Redis: consumer groups read with NOACK),
// delivered msg/s and e2e across every subscription; W6 catch-up, a backlog
// of -backlog bytes (32 MiB; the spec's full run is -backlog 1GiB) built
// closed loop, then a producer at a fixed rate alone (its baseline p99) and
// again while a new subscription reads the topic from the start, until the
// reader has received every message acknowledged before it subscribed: read
// rate in MB/s and as a multiple of the producer's (target >= 2x) and the
// producer's p99 raise (target <= 2x), and again on a Magnetar started
// with --backlog-read-rate at -catchup-paced (2.2) times the producer's
// byte rate, the row "magnetar paced" (0: not run; an operator's setting,
// off by default like Pulsar's dispatch throttling: unpaced, a catch-up
// takes the CPU the producer shares on two cores); W5 many topics, Magnetar only (NATS
// subjects and Redis keys are not comparable objects): -topics topics (10k;
// the full run is -topics 100000) created through the admin API, VmRSS
// and open files per idle topic from /proc, the publish p99 at a fixed
// total rate round robin over every topic, and the restart time (SIGTERM,
// start on the same data, healthy and a produce to a random topic). W5
// uses its own standalone per round; W4 and W6 share the (a) server.
//
// By default every workload runs, 5 rounds, and the whole run stays under
// 15 minutes on a 2-core machine (`make bench`): runs measure 2 s after 1 s
// of warm-up (0.5 s for each run after the first on the same server: that
// server has already taken the faults and stalls of its first load) and
// wait at most 1 s for late acks, W6's backlog is 32 MiB
// (building it stops at 8 s too: the table shows the MB built) and a
// catch-up is cut at 8 s (NATS with sync always builds 32 MiB at ~4.5 MB/s
// and reads it back slower than its producer writes). The full sizes of the benchmarks issue are flags:
//
//	go run ./bench/streambench -workloads W4,W5,W6 -rounds 3 -backlog 1GiB -topics 100000 -catchup-limit 10m
//	go run ./bench/streambench -workloads W1,W2,W3,W7 -duration 4s
//
// System magnetar-secure is the same standalone with the clients on its
// TLS listener (pulsar+ssl://, a CA and certificate made by internal/pki),
// token authentication (an HS256 key, tokens minted as `magnetar token`
// does) and authorization on, the load generator's role granted produce
// and consume on public/default; system magnetar-tls is TLS alone, without
// authentication or authorization. `-systems
// magnetar,magnetar-tls,magnetar-secure -workloads W1,W2` (`make
// bench-secure`) measures what security costs and what of it is TLS (W5
// and the paced W6 run plain only). With a TLS system in the run, the
// machine limits include a loopback copy of W2's batches (1000 messages a
// frame) in plain text and over TLS in the load generator's process
// (machine.LoopbackCopy): CPU seconds per GB for both ends, whose
// difference is what encryption alone costs this machine; the table
// "Security cost and its floor" puts it at each system's W2 rate, next to
// the CPU the server and the load generator used.
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
