package agent

// Replication peers. A namespace whose replication clusters name other
// clusters (in this region or others) replicates to them only once the
// data plane knows them: before the agent applies such a namespace, it
// registers each of those clusters in the data plane (Pulsar's cluster
// record: the peer's admin URL as serviceUrl, its Pulsar URL as
// brokerServiceUrl) and adds them to the tenant's allowed clusters. The
// URLs come from the control plane: clusters of this region from their
// desired state, the others from the watch's peer changes. A peer that is
// not READY yet fails the apply, which is retried with backoff (and again
// when the peer's next change arrives).

import (
	"context"
	"fmt"
	"strings"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/regions/pulsaradmin"
)

// recordPeers applies the watch's changes of other regions' clusters.
// Called with a.mu held.
func (a *Agent) recordPeers(changes []*cpv1.ClusterChange) {
	for _, ch := range changes {
		cl := ch.GetCluster()
		if cl.GetName() == "" {
			continue
		}
		if ch.GetDeleted() {
			delete(a.peers, cl.GetName())
			continue
		}
		a.peers[cl.GetName()] = cl
	}
	if len(changes) > 0 {
		a.trigger() // namespaces waiting for a peer may go now
	}
}

// peer returns what the control plane says of a cluster: one of this
// region's or a peer.
func (a *Agent) peer(name string) *cpv1.Cluster {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.desired[name]; e != nil && !e.deleted {
		return e.cluster
	}
	return a.peers[name]
}

// pulsarName is the Pulsar cluster name of a cluster's data plane.
func (a *Agent) pulsarName(name string) string {
	if fn := a.cfg.PulsarClusterName; fn != nil {
		return fn(name)
	}
	return name[strings.LastIndex(name, "/")+1:] // pulsaradmin's default mapping
}

// preparePeers registers the replication clusters of a namespace change
// other than the namespace's own cluster, and allows them to its tenant.
func (a *Agent) preparePeers(ctx context.Context, c *pulsaradmin.Client, ch *cpv1.PulsarResourceChange) ([]string, error) {
	ns := ch.GetNamespace()
	if ns == nil || ch.GetDeleted() {
		return nil, nil
	}
	own := clusterOf(ns.GetName())
	var calls, allow []string
	for _, rc := range ns.GetPolicies().GetReplicationClusters() {
		if rc == own {
			continue
		}
		p := a.peer(rc)
		if p == nil || p.GetState() != cpv1.Cluster_READY || p.GetServiceUrl() == "" || p.GetAdminUrl() == "" {
			return calls, fmt.Errorf("replication cluster %s is not ready yet", rc)
		}
		name := a.pulsarName(rc)
		cd := pulsaradmin.ClusterData{ServiceURL: p.GetAdminUrl(), BrokerServiceURL: p.GetServiceUrl()}
		if err := a.peerCredentials(ctx, rc, p, &cd); err != nil {
			return calls, fmt.Errorf("credentials for replication cluster %s: %w", rc, err)
		}
		did, err := c.EnsureCluster(ctx, name, cd)
		if err != nil {
			return calls, fmt.Errorf("register replication cluster %s: %w", rc, err)
		}
		calls = append(calls, did...)
		allow = append(allow, name)
	}
	if len(allow) == 0 {
		return calls, nil
	}
	segs := strings.Split(ns.GetName(), "/") // organizations/o/clusters/c/tenants/t/namespaces/n
	if len(segs) != 8 {
		return calls, fmt.Errorf("%q is not a namespace name", ns.GetName())
	}
	tenant := segs[5]
	did, err := c.AllowClusters(ctx, tenant, allow)
	if err != nil {
		return calls, fmt.Errorf("allow replication clusters to tenant %s: %w", tenant, err)
	}
	return append(calls, did...), nil
}
