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
//     processes).
//     Each reconcile pass then applies the region's Pulsar tenants,
//     namespaces, topics, functions, sources and sinks (the watch's
//     pulsar_changes) to clusters the
//     provisioner reports READY, through their admin REST API
//     (regions/pulsaradmin: Apply, or Remove for deletions), deletions
//     deepest first, then the others shallowest first, skipping children
//     of a parent that did not settle in the same pass. Each result is
//     reported with ReportResourceStatus (APPLIED, or FAILED with the
//     error) carrying the etag and revision acted on; ABORTED (changed
//     since) and NOT_FOUND (deleted since) wait for the watch. A record per
//     resource (the spec last applied and the admin URL it went to) keeps
//     an unchanged resource from being applied again when the watch
//     delivers it, e.g. after the agent's own report; failures are retried
//     with exponential backoff, and a new desired state or admin URL
//     applies again at once. After a restart the full resync re-applies
//     everything once; the admin calls are then no-ops and nothing is
//     reported. The tenants' allowed cluster is the data plane's own Pulsar
//     cluster (Config.PulsarClusterName, else the one GET /admin/v2/clusters
//     lists: "standalone" for `magnetar broker`'s default, "<org>-<cluster>"
//     for the process provisioner). Functions, sources and sinks go to the
//     cluster's function workers (admin REST v3); after applying, the agent
//     reads their instances' status and reports it with the state
//     (instance_status), again every ReconcileInterval, and sooner (a
//     growing wait up to 10s, the resource unsettled) while an instance
//     does not run; an unchanged status is not reported;
//   - heartbeat: RegionAgent.Heartbeat every HeartbeatInterval with a
//     summary (HEALTHY when every cluster is ready, else DEGRADED);
//   - metering (with Config.MeteringDir): every MeteringInterval reads the
//     usage counters of every broker of every ready cluster
//     (GET /magnetar/v1/usage), rolls them up into hourly totals
//     (billing.Rollup), writes them durably to MeteringDir/usage.json and
//     then sends the changed totals with Billing.IngestUsageRecords (see
//     metering.go for why each step may be cut short by a crash).
//
// With Config.Consul the agent also registers itself and every cluster it
// runs in its region's Consul datacenter (consul.go, regions/discovery/consul):
// a cluster's brokers with their service and admin URLs once the
// provisioner reports it READY, with TTL checks set from the provisioner's
// own health probes of the brokers on every registrar pass; a cluster is
// deregistered only when the agent has deleted its data plane. The
// registrar runs in a goroutine of its own, started and stopped by Run;
// Consul being down never holds up a reconcile.
//
// Static stability: when the control plane cannot be reached the agent
// keeps reconciling the last desired state it has (so the data plane keeps
// running and crashed processes are replaced), retries with exponential
// backoff, and resumes the watch where it left off when the control plane
// returns. Provisioners adopt running processes, so the full resync on
// start restarts nothing that did not change.
//
// Callers: `magnetar agent` and `magnetar up`. Concurrency: Run may be
// called once; its three goroutines (four with metering) are owned by Run, which returns after
// they stop. State shared between them is guarded by Agent.mu, which is
// never held across I/O; the admin clients are used by the reconcile
// goroutine only, and their idle connections are closed when Run returns.
package agent
