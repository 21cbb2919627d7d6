package apiserver

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
)

// fakeDiscovery is a Consul view the test sets.
type fakeDiscovery struct {
	mu sync.Mutex
	v  consul.View
}

func (f *fakeDiscovery) View() consul.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v
}

func (f *fakeDiscovery) set(v consul.View) {
	f.mu.Lock()
	f.v = v
	f.mu.Unlock()
}

// consulView has the agents of us-east and eu-west and clusters east and
// west of acme, in datacenters of the regions' names.
func consulView(at time.Time, east consul.Status, eastStale bool) consul.View {
	cl := func(name, region string, st consul.Status) consul.ClusterView {
		return consul.ClusterView{Org: "acme", Name: name, Region: region, Datacenter: region, Status: st,
			Brokers: []consul.BrokerView{{ID: "broker-0", Status: st, Output: "broker process running but failing its health check"}}}
	}
	return consul.View{
		Datacenters: []consul.DatacenterView{{Name: "us-east", Stale: eastStale, LastRefresh: at, Err: map[bool]string{true: "connection refused"}[eastStale]},
			{Name: "eu-west", LastRefresh: at}},
		Regions: []consul.RegionView{{Region: "us-east", Datacenter: "us-east", Status: consul.StatusPassing, Output: "region agent running, 1 clusters"},
			{Region: "eu-west", Datacenter: "eu-west", Status: consul.StatusPassing}},
		Clusters:    []consul.ClusterView{cl("east", "us-east", east), cl("west", "eu-west", consul.StatusPassing)},
		Stale:       eastStale,
		LastRefresh: at,
	}
}

// TestConsulHealthFailsOver: with a Consul catalog watch, regions show
// their Consul health, and a member whose brokers' Consul checks are all
// critical is failed over automatically although its Pulsar port still
// accepts connections: the same unplanned runbook, RTO and RPO as a failed
// probe. A stale view (Consul unreachable) fails nothing over.
func TestConsulHealthFailsOver(t *testing.T) {
	disc := &fakeDiscovery{}
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	disc.set(consulView(at, consul.StatusPassing, false))
	h := startHarnessWith(t, openStore(t, "sqlite::memory:"), t.TempDir()+"/bootstrap.key", func(c *Config) { c.Discovery = disc })
	a := h.setup("solo", "acme")[1]
	ctx := h.authCtx(a.key)
	op := h.authCtx(h.opKey)

	r := must[*cpv1.Region](t)(h.regions.GetRegion(ctx, &cpv1.GetRegionRequest{Name: "regions/us-east"}))
	if c := r.GetConsul(); c.GetDatacenter() != "us-east" || c.GetHealth() != "passing" || c.GetClusters() != 1 || c.GetClustersPassing() != 1 ||
		c.GetStale() || !c.GetLastRefresh().AsTime().Equal(at) {
		t.Fatalf("region's consul health: %v", c)
	}
	// REST shows the same, in the JSON names of the OpenAPI document.
	if code, body := h.rest(a.key, "GET", "/v1/regions/eu-west", nil); code != 200 || body["consul"].(map[string]any)["health"] != "passing" {
		t.Fatalf("REST region: %d %v", code, body)
	}

	var east, west string
	for _, id := range []string{"east", "west"} {
		region := map[string]string{"east": "regions/us-east", "west": "regions/eu-west"}[id]
		o := must[*cpv1.Operation](t)(h.clusters.CreateCluster(ctx, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: id, Cluster: &cpv1.Cluster{Region: region}}))
		must[*cpv1.Cluster](t)(h.agent.ReportClusterStatus(op, &cpv1.ReportClusterStatusRequest{Name: o.Target,
			State: cpv1.ReportClusterStatusRequest_READY, ServiceUrl: newFakeBroker(t).url(), AdminUrl: "http://unused"}))
		if id == "east" {
			east = o.Target
		} else {
			west = o.Target
		}
	}
	groups := cpv1.NewReplicationGroupsClient(h.conn)
	gname := a.org + "/replicationGroups/g"
	cop := must[*cpv1.Operation](t)(groups.CreateReplicationGroup(ctx, &cpv1.CreateReplicationGroupRequest{Parent: a.org, ReplicationGroupId: "g",
		ReplicationGroup: &cpv1.ReplicationGroup{Members: []string{east, west}, Namespaces: []string{"shop/orders"},
			FailoverPolicy: &cpv1.FailoverPolicy{Mode: cpv1.FailoverPolicy_AUTOMATIC, FailoverDelay: durationpb.New(0), SwitchBackDelay: durationpb.New(3600e9)}}}))
	h.applyPending(t)
	eventually(t, "the group's creation", func() bool {
		o := must[*cpv1.Operation](t)(h.ops.GetOperation(ctx, &cpv1.GetOperationRequest{Name: cop.Name}))
		return o.Done && o.State == cpv1.Operation_SUCCEEDED
	})
	h.reportBacklog(t, east, west, 7)

	groupsNow := func() []*cpv1.ReplicationGroup {
		return []*cpv1.ReplicationGroup{must[*cpv1.ReplicationGroup](t)(groups.GetReplicationGroup(ctx, &cpv1.GetReplicationGroupRequest{Name: gname}))}
	}
	// Consul unreachable in east's datacenter, its last view critical:
	// no verdict, east stays healthy and active.
	disc.set(consulView(at, consul.StatusCritical, true))
	h.srv.probeMembers(context.Background(), groupsNow())
	if !h.srv.repl.healthy(east) {
		t.Fatalf("a stale consul view failed east: %s", h.srv.repl.healthDetail(east))
	}
	r = must[*cpv1.Region](t)(h.regions.GetRegion(ctx, &cpv1.GetRegionRequest{Name: "regions/us-east"}))
	if c := r.GetConsul(); !c.GetStale() || c.GetError() != "connection refused" || c.GetHealth() != "passing" {
		t.Fatalf("region's consul health while its datacenter is unreadable: %v", c)
	}

	// East's checks critical in a fresh view: failed over to west, unplanned,
	// the last reported backlog as RPO, as for a failed probe.
	disc.set(consulView(time.Now(), consul.StatusCritical, false))
	h.srv.probeMembers(context.Background(), groupsNow())
	if d := h.srv.repl.healthDetail(east); h.srv.repl.healthy(east) || !strings.Contains(d, "consul: every broker's check is critical in datacenter us-east") {
		t.Fatalf("east's health with critical consul checks: %s", d)
	}
	eventually(t, "the automatic failover", func() bool {
		h.applyPending(t)
		h.reportBacklog(t, west, east, 0)
		g := groupsNow()[0]
		return g.ActiveCluster == west && g.Operation == ""
	})
	var auto *cpv1.Operation
	for _, o := range must[*cpv1.ListOperationsResponse](t)(h.ops.ListOperations(ctx, &cpv1.ListOperationsRequest{Organization: a.org, Target: gname})).Operations {
		if o.Runbook != nil && !o.Runbook.Planned {
			auto = o
		}
	}
	if auto == nil || auto.State != cpv1.Operation_SUCCEEDED || auto.Runbook.Report.RpoMessages != 7 || auto.Runbook.Report.Rto == nil {
		t.Fatalf("automatic failover: %v", auto)
	}
	t.Logf("failed over on consul health: RTO %s, RPO %d entries", auto.Runbook.Report.Rto.AsDuration(), auto.Runbook.Report.RpoMessages)
}
