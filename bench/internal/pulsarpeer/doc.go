// Package pulsarpeer runs the real Apache Pulsar 4.2.4 standalone as a
// same-run peer of Magnetar in the benchmarks under bench/: the broker
// alone, or with its in-broker functions worker (process runtime) running
// the same Java function instance as Magnetar's worker.
//
// What it owns:
//   - the "Pulsar home": Setup runs setup.sh (embedded here, beside
//     pom.xml), which copies the runtime closure of pulsar-broker 4.2.4
//     from Maven Central through ~/.m2 into <home>/lib (Pulsar's parent pom
//     imported as a BOM; 327 jars, ~250 MB, about a minute cold, instant
//     when done). The default home is $MAGNETAR_PULSAR_HOME, else
//     ~/.cache/magnetar/pulsar-4.2.4;
//   - the configuration: Start writes our own minimal standalone.conf
//     (only the keys that matter: cluster, loopback addresses and ports,
//     ensemble of one, the embedded bookie's loopback settings, the
//     functions worker on or off), a functions_worker.yml when the worker
//     is on (process runtime; javaInstanceJarLocation the pathing jar of
//     Magnetar's functions home) and a log4j2 configuration (console,
//     level info) into the run's directory;
//   - the process: `java <JVMArgs> -cp '<home>/lib/*'
//     org.apache.pulsar.PulsarStandaloneStarter --config ...` in a process
//     group of its own, on free loopback ports, its output in
//     <dir>/pulsar.log, ready when /admin/v2/brokers/health answers 200,
//     the namespace public/default exists (the standalone creates it only
//     after health answers) and, with the worker,
//     /admin/v3/functions/public/default answers 200 and
//     /admin/v2/worker/cluster/leader/ready answers true (a create before
//     then is refused with 503 "Leader not yet ready");
//     Stop sends SIGTERM to the whole group (the broker and the function
//     instances it started), then SIGKILL after a grace period, and waits.
//
// Metadata stays in RocksDB under the run's directory (metadataStoreUrl
// empty: no ZooKeeper process); stream storage is off, so function state is
// not available (Pulsar's own limit in this mode).
//
// Callers: bench/functionsbench (with the worker); any benchmark that wants
// Pulsar's broker alone (Config.Functions nil).
//
// Concurrency: a Standalone has one goroutine that waits for the JVM to
// exit; Pid, LogTail and Exited may be called from any goroutine, Stop
// from one at a time. Start returns only once the standalone is ready.
package pulsarpeer
