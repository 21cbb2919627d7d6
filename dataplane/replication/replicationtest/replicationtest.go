// Package replicationtest starts clusters that replicate to each other, for
// tests: in-process standalones, each registered in every other, with
// Pulsar admin clients.
package replicationtest

import (
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// Region is one cluster of a test: a standalone and an admin client.
type Region struct {
	Name  string
	S     *standalone.Standalone
	Admin pulsaradmin.Client
}

// StartRegions starts one standalone per name, each knowing every other
// (cluster records with the others' URLs); they stop when the test ends.
func StartRegions(t *testing.T, names ...string) []*Region {
	t.Helper()
	return StartConfiguredRegions(t, nil, names...)
}

// StartConfiguredRegions is StartRegions with configure, when not nil,
// called on each region's configuration before it starts.
func StartConfiguredRegions(t *testing.T, configure func(name string, cfg *standalone.Config), names ...string) []*Region {
	t.Helper()
	var rs []*Region
	for _, n := range names {
		cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
		cfg.Broker.ClusterName = n
		if configure != nil {
			configure(n, &cfg)
		}
		s := standalonetest.Start(t, cfg)
		adm, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: s.WebServiceURL()})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, &Region{Name: n, S: s, Admin: adm})
	}
	for _, r := range rs {
		for _, o := range rs {
			if o == r {
				continue
			}
			if err := r.Admin.Clusters().Create(utils.ClusterData{Name: o.Name, ServiceURL: o.S.WebServiceURL(),
				BrokerServiceURL: o.S.ServiceURL()}); err != nil {
				t.Fatalf("%s: register cluster %s: %v", r.Name, o.Name, err)
			}
		}
	}
	return rs
}

// ReplicatedNamespace creates tenant/ns replicated between all regions, in
// each of them.
func ReplicatedNamespace(t *testing.T, rs []*Region, tenant, ns string) {
	t.Helper()
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
	}
	for _, r := range rs {
		if err := r.Admin.Tenants().Create(utils.TenantData{Name: tenant, AllowedClusters: names}); err != nil {
			t.Fatalf("%s: tenant: %v", r.Name, err)
		}
		if err := r.Admin.Namespaces().CreateNamespace(tenant + "/" + ns); err != nil {
			t.Fatalf("%s: namespace: %v", r.Name, err)
		}
		if err := r.Admin.Namespaces().SetNamespaceReplicationClusters(tenant+"/"+ns, names); err != nil {
			t.Fatalf("%s: replication clusters: %v", r.Name, err)
		}
	}
}
