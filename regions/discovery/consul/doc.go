// Package consul puts Magnetar's regions and data-plane clusters in a
// Consul catalog and reads them back: a region agent registers itself and
// the clusters it runs (Registrar); the control plane watches the
// WAN-federated catalog of every datacenter (Watcher). Each region is one
// Consul datacenter.
//
// # What is registered
//
// Every registration goes to the Consul agent the Config points at (the
// region's local agent), so the services belong to that agent's node.
//
//   - The region agent: service "magnetar-agent", ID "magnetar-agent:<region>",
//     tags "magnetar=agent" and "region=<region>", Meta region. One TTL
//     check, renewed while the registrar runs.
//   - Each broker of each cluster: one instance of service "<org>", ID
//     "magnetar:<org>:<cluster>:<broker>", with the broker's address and
//     Pulsar port, tags "<cluster>", "magnetar=broker", "org=<org>",
//     "cluster=<cluster>", "region=<region>", and Meta org, cluster, region,
//     broker, pulsar_url, pulsar_ssl_url, admin_url, admin_tls_url (this
//     broker) and service_url, service_ssl_url (every broker of the cluster).
//     One TTL check per instance, "<service ID>:ttl", set from what the
//     caller's HealthFunc measured.
//
// The organization is the service name and the cluster is a tag so that
// Consul's DNS form "<tag>.<service>.service.<datacenter>.consul" reads
// "<cluster>.<org>.service.<datacenter>.consul": an A query there returns
// the addresses of the cluster's brokers whose checks are not critical, and
// an SRV query their Pulsar ports. This works for organization and cluster
// names that are DNS labels (letters, digits, hyphens); names with dots or
// underscores are registered all the same and found through the HTTP API,
// but not through DNS. Organizations may not be named "consul" or
// "magnetar-agent" (ErrReservedName): those service names are taken.
//
// # Health
//
// Checks are TTL checks. Every RegistrarConfig.Interval the registrar calls
// HealthFunc for each cluster and sets each broker's check to the status it
// returns, which also renews the TTL; a broker the function leaves out is
// critical; Refresh measures at once, for a caller that learns of a change
// sooner. When the registrar stops renewing (the region agent is down),
// the checks turn critical after RegistrarConfig.TTL. No check asks Consul
// to deregister a critical service.
//
// The Watcher rates a cluster from its instances: passing when every
// broker passes, critical when every broker is critical, warning
// otherwise. An instance's status is the worst of its checks, its node's
// included (Consul's maintenance mode counts as critical).
//
// # Static stability
//
// Consul being unreachable or failing changes nothing in Magnetar: the
// registrar keeps the last desired state, keeps measuring, retries with
// exponential backoff, reports Stale, and re-registers whatever Consul lost
// (a restarted dev agent, a wiped node) as soon as it answers. Instances
// are deregistered only when the caller says so: DeleteCluster, or a
// SetCluster with fewer brokers. The watcher keeps the last view of every
// datacenter it could not read, marks it stale with the time of its last
// successful refresh, and sends no health events for it.
//
// # ACLs
//
// The token comes from Config (flags), else CONSUL_HTTP_TOKEN or
// CONSUL_HTTP_TOKEN_FILE. A refused request (HTTP 403) is an *ACLError,
// matching ErrACL, that names the permission the operation needs and where
// the token came from. The registrar needs service:write on "magnetar-agent"
// and on every organization's service; the watcher needs service:read and
// node:read in every datacenter (with less, Consul silently filters the
// answers: the watcher reports that in DatacenterView.Err).
//
// # Concurrency
//
// A Registrar or Watcher is safe for concurrent use. Start launches its
// goroutines; Shutdown stops them and waits. Each datacenter the Watcher
// watches has one goroutine running blocking queries; OnChange is called
// from those goroutines, one call at a time, and must not block.
package consul
