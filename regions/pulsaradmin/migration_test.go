package pulsaradmin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestMigrationHelpers runs the migration helpers against a real broker
// that replicates to a cluster it cannot reach, so a backlog builds up.
func TestMigrationHelpers(t *testing.T) {
	s := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	c, err := New(s.WebServiceURL(), WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.hc.CloseIdleConnections() })
	ctx := ctxT(t)

	// A remote cluster at a closed port: its replicators never connect.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if _, err := c.EnsureCluster(ctx, "far", ClusterData{ServiceURL: "http://" + dead, BrokerServiceURL: "pulsar://" + dead}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsureTenant(ctx, "geo", TenantInfo{AllowedClusters: []string{"standalone", "far"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.do(ctx, http.MethodPut, path("namespaces", "geo", "fo"), map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.do(ctx, http.MethodPost, path("namespaces", "geo", "fo", "replication"), []string{"standalone", "far"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsureTopic(ctx, TopicName{Persistent: true, Tenant: "geo", Namespace: "fo", Topic: "parted"}, 2); err != nil {
		t.Fatal(err)
	}
	pc := standalonetest.NewClient(t, s.ServiceURL())
	send := func(topic string, n int) {
		t.Helper()
		p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := range n {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i), Key: fmt.Sprint(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("persistent://geo/fo/plain", 7)
	send("persistent://geo/fo/parted", 10) // over both partitions

	backlog, err := c.NamespaceReplicationBacklog(ctx, "geo/fo", "far")
	if err != nil || backlog != 17 {
		t.Fatalf("replication backlog toward far: %d, %v; want 17", backlog, err)
	}
	if b, err := c.NamespaceReplicationBacklog(ctx, "geo/fo", "elsewhere"); err != nil || b != 0 {
		t.Fatalf("backlog toward a cluster not replicated to: %d, %v", b, err)
	}

	// Fence toward far: producers are refused naming it; GET shows it.
	target := &ClusterURL{ServiceURL: "http://" + dead, BrokerServiceURL: "pulsar://" + dead}
	if err := c.SetNamespaceMigration(ctx, "geo/fo", target); err != nil {
		t.Fatal(err)
	}
	st, err := c.NamespaceMigration(ctx, "geo/fo")
	if err != nil || !st.Migrated || st.URL.BrokerServiceURL != target.BrokerServiceURL {
		t.Fatalf("migration state: %+v, %v", st, err)
	}
	var raw map[string]any
	if err := c.do(ctx, http.MethodGet, path("namespaces", "geo", "fo"), nil, &raw); err != nil || raw["migrated"] != true {
		t.Fatalf("namespace policies show migrated=%v (%v)", raw["migrated"], err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = pc.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://geo/fo/plain"})
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "cluster far") {
		t.Fatalf("producer on the fenced namespace: %v, want a refusal naming cluster far", err)
	}

	// Bad input.
	var ae *Error
	if err := c.SetNamespaceMigration(ctx, "geo/fo", &ClusterURL{BrokerServiceURL: "http://wrong"}); !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Fatalf("bad target URL: %v, want 400", err)
	}
	if err := c.SetNamespaceMigration(ctx, "nope", nil); err == nil {
		t.Fatal("a namespace without tenant was accepted")
	}
	if err := c.SetNamespaceMigration(ctx, "geo/missing", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown namespace: %v, want not found", err)
	}

	// The namespace's own target wins over the cluster's; `true` alone
	// follows the cluster's.
	stats := func() (migrated bool, url string) {
		t.Helper()
		var st struct {
			Migrated bool `json:"migrated"`
			URL      struct {
				Broker string `json:"brokerServiceUrl"`
			} `json:"migratedClusterUrl"`
		}
		if err := c.do(ctx, http.MethodGet, path("persistent", "geo", "fo", "plain", "stats"), nil, &st); err != nil {
			t.Fatal(err)
		}
		return st.Migrated, st.URL.Broker
	}
	waitStats := func(migrated bool, url string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			m, u := stats()
			if m == migrated && u == url {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("topic stats: migrated %v to %q, want %v to %q", m, u, migrated, url)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitStats(true, "pulsar://"+dead)
	if err := c.SetNamespaceMigration(ctx, "geo/fo", nil); err != nil {
		t.Fatal(err)
	}
	waitStats(false, "")
	clusterMigrate := func(q string, body any) {
		t.Helper()
		if err := c.do(ctx, http.MethodPost, path("clusters", "standalone", "migrate")+q, body, nil); err != nil {
			t.Fatal(err)
		}
	}
	clusterMigrate("?migrated=true", map[string]string{"brokerServiceUrl": "pulsar://127.0.0.1:9"})
	waitStats(true, "pulsar://127.0.0.1:9") // the cluster's fence
	if err := c.SetNamespaceMigration(ctx, "geo/fo", target); err != nil {
		t.Fatal(err)
	}
	waitStats(true, "pulsar://"+dead) // the namespace's target wins
	if err := c.do(ctx, http.MethodPost, path("namespaces", "geo", "fo", "migration"), true, nil); err != nil {
		t.Fatal(err)
	}
	waitStats(true, "pulsar://127.0.0.1:9") // `true` follows the cluster's
	clusterMigrate("?migrated=false", nil)
	if err := c.SetNamespaceMigration(ctx, "geo/fo", nil); err != nil {
		t.Fatal(err)
	}
	waitStats(false, "")

	// Clearing reopens writes.
	if err := c.SetNamespaceMigration(ctx, "geo/fo", nil); err != nil {
		t.Fatal(err)
	}
	if st, err := c.NamespaceMigration(ctx, "geo/fo"); err != nil || st.Migrated {
		t.Fatalf("after clearing: %+v, %v", st, err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		var p pulsar.Producer
		p, err = pc.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://geo/fo/plain"})
		if err == nil {
			p.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("producer after clearing the fence: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
