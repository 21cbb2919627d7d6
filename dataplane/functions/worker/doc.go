// Package worker is Magnetar's function worker: it runs Pulsar Functions,
// sources and sinks (Pulsar IO connectors) for a cluster. Every broker runs
// one by default (brokernode.Config.Functions), as Pulsar's brokers do with
// functionsWorkerEnabled.
//
// What it owns:
//   - the REST API (ServeHTTP): Pulsar's /admin/v3/functions, /sources and
//     /sinks (and the singular /source, /sink of the Java admin client),
//     /admin/v2/worker, and the state API our Python and Go instances use
//     (/magnetar/v1/functions/...); package admin authenticates and
//     authorizes each call before handing it here;
//   - the records: one per component in the metadata store (records.go
//     has the key layout), updated with compare-and-set;
//   - packages: uploaded jars, NARs, Python files and Go binaries are
//     stored once per SHA-256 in a PackageStore (ledgers on the bookies in
//     a cluster) and cached on each worker's disk by digest;
//   - scheduling: the workers register under a session; one, elected,
//     recomputes the assignment of instances to live workers on every
//     change (Schedule: balanced, minimal moves), so instances move when a
//     worker joins, leaves or dies;
//   - running: each worker starts the instances assigned to it as child
//     processes (runtime.go builds Pulsar's command lines for its Java
//     instance, our Python instance and Go binaries), one supervisor each
//     (instance.go): fresh loopback ports per start, output to a file and
//     the last lines kept for status, restarts with exponential backoff,
//     health checks over the instance's InstanceControl gRPC service, and
//     SIGTERM then SIGKILL to stop; children die with the worker
//     (Pdeathsig) and a worker that loses its session stops them;
//   - status and stats: read from the instances over gRPC; an instance on
//     another worker is asked of that worker (signed as an internal call);
//   - state: counters and values in the metadata store (state.go).
//
// Concurrency: three goroutines per worker (watch, membership and
// scheduling, reconcile), all stopped by Shutdown, which then stops every
// instance. Worker.mu guards the running set, the last assignment, the
// session and the connectors; supervisor.mu guards one instance's status.
// Neither is held while calling the other.
package worker
