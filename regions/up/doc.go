// Package up is `magnetar up`: a whole managed service on one machine for
// development. It runs, in one process and under one data directory, the
// control plane (SQLite store, OPA policy) and one region agent per region
// with the process provisioner, and registers the regions with the
// bootstrap operator key.
//
// Layout of DataDir:
//
//	controlplane.db      the control plane's SQLite store
//	bootstrap.key        the operator API key (written on the first start)
//	regions/<id>/        the process provisioner of region <id>
//	                     (clusters/<org>-<cluster>/..., see regions/provisioner/process)
//
// Unlike `magnetar agent`, `up` is a development command: Shutdown stops
// every data-plane process it runs, keeping their data; the next start
// brings the clusters back.
//
// Callers: cmd/magnetar/up.go and tests. Concurrency: Start returns a
// running Env; its goroutines (the API server and the agents) are owned by
// the Env and stopped and waited for by Shutdown.
package up
