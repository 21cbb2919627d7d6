package agent_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/apiserver"
	"github.com/magnetar-dev/magnetar/regions/agent"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul/consultest"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// sickable is a memory provisioner whose Status can report every broker
// alive but failing its health check, as a hung broker is.
type sickable struct {
	*provisioner.Memory
	sick atomic.Bool
}

func (s *sickable) Status(ctx context.Context, name string) (provisioner.ClusterStatus, error) {
	st, err := s.Memory.Status(ctx, name)
	if err == nil && s.sick.Load() {
		for i := range st.Processes {
			if st.Processes[i].Role == "broker" {
				st.Processes[i].Healthy = false
			}
		}
	}
	return st, err
}

// TestConsulRegistration: an agent with Consul registers itself and its
// cluster's brokers in its region's datacenter (r1), with checks from the
// provisioner's health; a control plane watching the federation through
// the other datacenter (r2) shows the region's Consul health; a scale-down
// deregisters the brokers removed; Consul SIGKILLed changes nothing in the
// agent or the data plane and the control plane says its view is stale;
// only deleting the cluster deregisters it.
func TestConsulRegistration(t *testing.T) {
	cc := consultest.Start(t, consultest.Options{Datacenters: []string{"r1", "r2"}})
	r1, r2 := cc.Agent("r1"), cc.Agent("r2")
	w, err := consul.NewWatcher(consul.WatcherConfig{Consul: consul.Config{Address: r2.HTTPAddr}, WaitTime: 5 * time.Second,
		DatacenterInterval: time.Second, MaxBackoff: 500 * time.Millisecond, RequestTimeout: 2 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	t.Cleanup(func() { w.Shutdown(context.Background()) })
	cp := newControlPlaneWith(t, "sqlite::memory:", func(c *apiserver.Config) { c.Discovery = w })
	cp.setup()
	prov := &sickable{Memory: provisioner.NewMemory()}
	runAgentWith(t, cp, prov, func(c *agent.Config) {
		c.Consul = &consul.RegistrarConfig{Consul: consul.Config{Address: r1.HTTPAddr, Datacenter: "r1"},
			Interval: 200 * time.Millisecond, TTL: 10 * time.Second, MaxBackoff: 500 * time.Millisecond, RequestTimeout: time.Second}
	})

	if op := cp.wait(cp.createCluster("c1", 2)); op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("create: %v", op)
	}
	// Read through r2 with ?dc=r1: the WAN-federated catalog.
	health := func(passingOnly bool) []*api.ServiceEntry {
		es, _, err := r2.Client("").Health().Service("acme", "c1", passingOnly, &api.QueryOptions{Datacenter: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	eventually(t, "c1's two brokers passing in r1", func() bool { return len(health(true)) == 2 })
	es := health(true)
	cl := must[*cpv1.Cluster](t)(cp.clusters.GetCluster(cp.ctx(), &cpv1.GetClusterRequest{Name: c1}))
	for _, e := range es {
		m := e.Service.Meta
		if m["region"] != "r1" || m["org"] != "acme" || m["cluster"] != "c1" || m["service_ssl_url"] != cl.TlsServiceUrl ||
			!strings.HasPrefix(m["pulsar_url"], "pulsar://") || !strings.Contains(cl.TlsServiceUrl, strings.TrimPrefix(m["pulsar_ssl_url"], "pulsar+ssl://")) {
			t.Fatalf("instance %s meta %v; cluster %v", e.Service.ID, m, cl)
		}
	}
	eventually(t, "the region's consul health in the control plane", func() bool {
		c := must[*cpv1.Region](t)(cp.regions.GetRegion(cp.ctx(), &cpv1.GetRegionRequest{Name: "regions/r1"})).GetConsul()
		return c.GetDatacenter() == "r1" && c.GetHealth() == "passing" && c.GetClusters() == 1 && c.GetClustersPassing() == 1 && !c.GetStale()
	})

	// The brokers hang: the agent's measurement turns their checks critical.
	prov.sick.Store(true)
	eventually(t, "c1 critical in the control plane's view", func() bool {
		v, ok := w.View().Cluster("acme", "c1")
		return ok && v.Status == consul.StatusCritical && strings.Contains(v.Brokers[0].Output, "failing its health check")
	})
	prov.sick.Store(false)
	eventually(t, "c1 passing again", func() bool { return len(health(true)) == 2 })

	// Scaled down to one broker: broker-1 is deregistered, broker-0 stays.
	cl.Size.Brokers = 1
	cp.wait(must[*cpv1.Operation](t)(cp.clusters.UpdateCluster(cp.ctx(), &cpv1.UpdateClusterRequest{Cluster: cl,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"size"}}})))
	eventually(t, "c1 down to broker-0", func() bool {
		es := health(false)
		return len(es) == 1 && es[0].Service.Meta["broker"] == "broker-0"
	})

	// Consul of r1 SIGKILLed: the agent keeps running its cluster and
	// reporting; the control plane keeps its last view and says it is stale.
	r1.Kill()
	eventually(t, "the control plane to call r1's view stale", func() bool {
		c := must[*cpv1.Region](t)(cp.regions.GetRegion(cp.ctx(), &cpv1.GetRegionRequest{Name: "regions/r1"})).GetConsul()
		return c.GetStale() && c.GetHealth() == "passing" && c.GetClusters() == 1 && c.GetError() != ""
	})
	c := must[*cpv1.Region](t)(cp.regions.GetRegion(cp.ctx(), &cpv1.GetRegionRequest{Name: "regions/r1"})).GetConsul()
	t.Logf("r1's consul killed: the control plane shows %v", c)
	if st, err := prov.Status(t.Context(), c1); err != nil || st.State != provisioner.StateReady {
		t.Fatalf("the data plane during the consul outage: %+v %v", st, err)
	}
	// The agent still works: a new cluster is provisioned meanwhile.
	if op := cp.wait(cp.createCluster("c2", 1)); op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("create during the consul outage: %v", op)
	}

	// Consul back (a dev agent: empty): the registrar repairs the catalog.
	r1.Restart(t)
	eventually(t, "c1 and c2 registered again", func() bool {
		a, _, err1 := r1.Client("").Health().Service("acme", "c1", true, nil)
		b, _, err2 := r1.Client("").Health().Service("acme", "c2", true, nil)
		return err1 == nil && err2 == nil && len(a) == 1 && len(b) == 1
	})
	eventually(t, "the control plane's view fresh again", func() bool {
		c := must[*cpv1.Region](t)(cp.regions.GetRegion(cp.ctx(), &cpv1.GetRegionRequest{Name: "regions/r1"})).GetConsul()
		return !c.GetStale() && c.GetClusters() == 2 && c.GetClustersPassing() == 2
	})

	// Deleted: deregistered.
	cp.wait(must[*cpv1.Operation](t)(cp.clusters.DeleteCluster(cp.ctx(), &cpv1.DeleteClusterRequest{Name: c1})))
	eventually(t, "c1 deregistered", func() bool {
		es, _, err := r1.Client("").Health().Service("acme", "c1", false, nil)
		return err == nil && len(es) == 0
	})
	if es, _, err := r1.Client("").Health().Service("acme", "c2", true, nil); err != nil || len(es) != 1 {
		t.Fatalf("c2 after c1's deletion: %v %v", es, err)
	}
}
