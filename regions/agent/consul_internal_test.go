package agent

import (
	"reflect"
	"testing"

	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// TestConsulCluster: what Consul is told of a cluster, from the process
// provisioner's status (per-process addresses) and from one without
// processes (the URLs' hosts).
func TestConsulCluster(t *testing.T) {
	withProcs := provisioner.ClusterStatus{State: provisioner.StateReady,
		ServiceURL: "pulsar://h:1,h:2", TLSServiceURL: "pulsar+ssl://h:11,h:12", AdminURL: "http://h:3", TLSAdminURL: "https://h:13",
		Processes: []provisioner.ProcessHealth{{Role: "metadata", Addr: "h:9"}, {Role: "broker", Index: 0, Addr: "h:1", HTTPAddr: "h:3", HTTPSAddr: "h:13"},
			{Role: "broker", Index: 1, Addr: "h:2", HTTPAddr: "h:4"}, {Role: "bookie", Addr: "h:8"}}}
	got, ok := consulCluster("organizations/acme/clusters/prod", withProcs)
	want := consul.Cluster{Org: "acme", Name: "prod", ServiceURL: "pulsar://h:1,h:2", TLSServiceURL: "pulsar+ssl://h:11,h:12",
		Brokers: []consul.Broker{
			{ID: "broker-0", PulsarURL: "pulsar://h:1", PulsarTLSURL: "pulsar+ssl://h:11", AdminURL: "http://h:3", AdminTLSURL: "https://h:13"},
			{ID: "broker-1", PulsarURL: "pulsar://h:2", PulsarTLSURL: "pulsar+ssl://h:12", AdminURL: "http://h:4"}}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("with processes:\n got %+v\nwant %+v", got, want)
	}
	noProcs := provisioner.ClusterStatus{State: provisioner.StateReady, ServiceURL: "pulsar://a:1,b:1", AdminURL: "http://a:2"}
	got, ok = consulCluster("organizations/acme/clusters/prod", noProcs)
	want = consul.Cluster{Org: "acme", Name: "prod", ServiceURL: "pulsar://a:1,b:1", Brokers: []consul.Broker{
		{ID: "broker-0", PulsarURL: "pulsar://a:1", AdminURL: "http://a:2"}, {ID: "broker-1", PulsarURL: "pulsar://b:1"}}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("without processes:\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"organizations/acme", "regions/r1/clusters/x"} {
		if _, ok := consulCluster(bad, withProcs); ok {
			t.Errorf("%s registered", bad)
		}
	}
	if _, ok := consulCluster("organizations/acme/clusters/prod", provisioner.ClusterStatus{}); ok {
		t.Error("a cluster without a service URL registered")
	}
}

func TestBrokerChecks(t *testing.T) {
	c := consul.Cluster{Brokers: []consul.Broker{{ID: "broker-0"}, {ID: "broker-1"}, {ID: "broker-2"}}}
	st := provisioner.ClusterStatus{Processes: []provisioner.ProcessHealth{
		{Role: "broker", Index: 0, Alive: true, Healthy: true}, {Role: "broker", Index: 1, Alive: true},
		{Role: "broker", Index: 2, Message: "exit status 1"}, {Role: "bookie", Alive: true}}}
	got := brokerChecks(st, c)
	want := map[string]consul.Status{"broker-0": consul.StatusPassing, "broker-1": consul.StatusCritical, "broker-2": consul.StatusCritical}
	for id, s := range want {
		if got[id].Status != s {
			t.Errorf("%s: %+v, want %s", id, got[id], s)
		}
	}
	if got["broker-2"].Output != "broker process not running: exit status 1" {
		t.Errorf("broker-2's output %q", got["broker-2"].Output)
	}
	// Without processes: the cluster's state for every broker.
	got = brokerChecks(provisioner.ClusterStatus{State: provisioner.StateFailed, Message: "no disk"}, c)
	if got["broker-1"] != (consul.Check{Status: consul.StatusCritical, Output: "cluster failed: no disk"}) {
		t.Errorf("failed cluster: %+v", got)
	}
	got = brokerChecks(provisioner.ClusterStatus{State: provisioner.StateReady}, c)
	if got["broker-0"].Status != consul.StatusPassing || len(got) != 3 {
		t.Errorf("ready cluster: %+v", got)
	}
}
