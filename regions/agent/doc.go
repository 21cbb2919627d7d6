// Package agent is the region agent: the process that makes one region's
// data planes match the desired state held by the global control plane.
//
// The agent pulls; the control plane never calls it. Run loops:
//
//   - watch: RegionAgent.WatchDesiredState long-polls with after_revision
//     (0 at start: a full resync of every cluster of the region) and
//     records the newest version of each cluster;
//   - reconcile: for every known cluster, converges the data plane through
//     the Provisioner (Apply for live clusters, Delete for clusters being
//     or already deleted) and reports what it saw with
//     ReportClusterStatus: PROGRESSING once per operation, READY with the
//     service and admin URLs, FAILED with the provisioner's message,
//     DELETED once a DELETING cluster's data plane is gone. A report is
//     sent only when it would change the cluster record, because every
//     report is itself a change the watch delivers. Reconcile runs on every
//     watch delivery, every second while some cluster is unsettled, and
//     every ReconcileInterval otherwise (which also repairs crashed
//     processes);
//   - heartbeat: RegionAgent.Heartbeat every HeartbeatInterval with a
//     summary (HEALTHY when every cluster is ready, else DEGRADED).
//
// Static stability: when the control plane cannot be reached the agent
// keeps reconciling the last desired state it has (so the data plane keeps
// running and crashed processes are replaced), retries with exponential
// backoff, and resumes the watch where it left off when the control plane
// returns. Provisioners adopt running processes, so the full resync on
// start restarts nothing that did not change.
//
// Callers: `magnetar agent` and `magnetar up`. Concurrency: Run may be
// called once; its three goroutines are owned by Run, which returns after
// they stop. State shared between them is guarded by Agent.mu.
package agent
