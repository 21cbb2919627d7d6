package agent_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/provisioner/provisionertest"
)

// adminGet GETs path from the data plane's admin API and decodes the JSON
// answer into out; it returns the HTTP status.
func adminGet(t *testing.T, adminURL, path string, out any) int {
	t.Helper()
	resp, err := http.Get(adminURL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("GET %s: %q: %v", path, raw, err)
		}
	}
	return resp.StatusCode
}

type pulsarClients struct {
	tenants    cpv1.TenantsClient
	namespaces cpv1.NamespacesClient
	topics     cpv1.TopicsClient
}

func (cp *controlPlane) pulsar() pulsarClients {
	return pulsarClients{cpv1.NewTenantsClient(cp.conn), cpv1.NewNamespacesClient(cp.conn), cpv1.NewTopicsClient(cp.conn)}
}

const (
	t1     = c1 + "/tenants/t1"
	ns1    = t1 + "/namespaces/ns1"
	orders = ns1 + "/topics/orders"
)

// stateOf reads a Pulsar resource's state and message.
func (cp *controlPlane) stateOf(name string) (cpv1.PulsarResourceState, string, string) {
	pc := cp.pulsar()
	var m interface {
		proto.Message
		GetState() cpv1.PulsarResourceState
		GetStatusMessage() string
		GetEtag() string
	}
	var err error
	switch strings.Count(name, "/") {
	case 5:
		m, err = pc.tenants.GetTenant(cp.ctx(), &cpv1.GetTenantRequest{Name: name})
	case 7:
		m, err = pc.namespaces.GetNamespace(cp.ctx(), &cpv1.GetNamespaceRequest{Name: name})
	default:
		m, err = pc.topics.GetTopic(cp.ctx(), &cpv1.GetTopicRequest{Name: name})
	}
	if err != nil {
		return 0, err.Error(), ""
	}
	return m.GetState(), m.GetStatusMessage(), m.GetEtag()
}

func (cp *controlPlane) waitApplied(names ...string) {
	cp.t.Helper()
	for _, n := range names {
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, msg, _ := cp.stateOf(n)
			if st == cpv1.PulsarResourceState_APPLIED && msg == "" {
				break
			}
			if time.Now().After(deadline) {
				cp.t.Fatalf("%s is %v %q, want APPLIED", n, st, msg)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// createTenantNamespaceTopic creates t1, ns1 (retention 60 min / 100 MB,
// TTL 3600 s) and orders (3 partitions) in c1.
func (cp *controlPlane) createTenantNamespaceTopic() {
	t := cp.t
	pc := cp.pulsar()
	must[*cpv1.Tenant](t)(pc.tenants.CreateTenant(cp.ctx(), &cpv1.CreateTenantRequest{Parent: c1, TenantId: "t1",
		Tenant: &cpv1.Tenant{AdminRoles: []string{"ops"}}}))
	must[*cpv1.Namespace](t)(pc.namespaces.CreateNamespace(cp.ctx(), &cpv1.CreateNamespaceRequest{Parent: t1, NamespaceId: "ns1",
		Namespace: &cpv1.Namespace{Policies: &cpv1.NamespacePolicies{
			Retention:         &cpv1.NamespacePolicies_Retention{TimeMinutes: 60, SizeMb: 100},
			MessageTtlSeconds: proto.Int32(3600)}}}))
	must[*cpv1.Topic](t)(pc.topics.CreateTopic(cp.ctx(), &cpv1.CreateTopicRequest{Parent: ns1, TopicId: "orders",
		Topic: &cpv1.Topic{Partitions: 3}}))
}

type retention struct {
	Minutes int   `json:"retentionTimeInMinutes"`
	SizeMB  int64 `json:"retentionSizeInMB"`
}

func TestPulsarResources(t *testing.T) {
	cp := newControlPlane(t, "sqlite::memory:")
	cp.setup()
	sp := provisionertest.NewStandalones(t)
	runAgent(t, cp, sp)
	if op := cp.wait(cp.createCluster("c1", 1)); op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("create cluster: %v", op)
	}
	admin := must[provisioner.ClusterStatus](t)(sp.Status(t.Context(), c1)).AdminURL

	cp.createTenantNamespaceTopic()
	cp.waitApplied(t1, ns1, orders)

	var tenant struct {
		AdminRoles      []string `json:"adminRoles"`
		AllowedClusters []string `json:"allowedClusters"`
	}
	if code := adminGet(t, admin, "/admin/v2/tenants/t1", &tenant); code != http.StatusOK ||
		!slices.Equal(tenant.AdminRoles, []string{"ops"}) || !slices.Equal(tenant.AllowedClusters, []string{"standalone"}) {
		t.Fatalf("tenant on the data plane: %d %+v", code, tenant)
	}
	var ret retention
	if code := adminGet(t, admin, "/admin/v2/namespaces/t1/ns1/retention", &ret); code != http.StatusOK || ret != (retention{60, 100}) {
		t.Fatalf("retention on the data plane: %d %+v", code, ret)
	}
	var ttl int
	if code := adminGet(t, admin, "/admin/v2/namespaces/t1/ns1/messageTTL", &ttl); code != http.StatusOK || ttl != 3600 {
		t.Fatalf("message TTL on the data plane: %d %d", code, ttl)
	}
	var parts struct {
		Partitions int `json:"partitions"`
	}
	if code := adminGet(t, admin, "/admin/v2/persistent/t1/ns1/orders/partitions", &parts); code != http.StatusOK || parts.Partitions != 3 {
		t.Fatalf("partitions on the data plane: %d %+v", code, parts)
	}
	_, _, tenantEtag := cp.stateOf(t1)

	// A policy change is re-applied.
	pc := cp.pulsar()
	must[*cpv1.Namespace](t)(pc.namespaces.UpdateNamespace(cp.ctx(), &cpv1.UpdateNamespaceRequest{
		Namespace:  &cpv1.Namespace{Name: ns1, Policies: &cpv1.NamespacePolicies{Retention: &cpv1.NamespacePolicies_Retention{TimeMinutes: 120, SizeMb: 200}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"policies.retention"}}}))
	eventually(t, "the new retention on the data plane", func() bool {
		var r retention
		return adminGet(t, admin, "/admin/v2/namespaces/t1/ns1/retention", &r) == http.StatusOK && r == (retention{120, 200})
	})
	cp.waitApplied(ns1)
	if code := adminGet(t, admin, "/admin/v2/namespaces/t1/ns1/messageTTL", &ttl); code != http.StatusOK || ttl != 3600 {
		t.Fatalf("message TTL after the retention change: %d %d", code, ttl)
	}
	// The unchanged tenant was neither re-reported nor rewritten.
	if _, _, etag := cp.stateOf(t1); etag != tenantEtag {
		t.Fatalf("the tenant changed (etag %s, was %s)", etag, tenantEtag)
	}

	// Deletions reach the data plane, deepest first.
	if _, err := pc.topics.DeleteTopic(cp.ctx(), &cpv1.DeleteTopicRequest{Name: orders}); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.namespaces.DeleteNamespace(cp.ctx(), &cpv1.DeleteNamespaceRequest{Name: ns1}); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.tenants.DeleteTenant(cp.ctx(), &cpv1.DeleteTenantRequest{Name: t1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tenant to be gone from the data plane", func() bool {
		return adminGet(t, admin, "/admin/v2/tenants/t1", nil) == http.StatusNotFound
	})
	if code := adminGet(t, admin, "/admin/v2/namespaces/t1/ns1/retention", nil); code != http.StatusNotFound {
		t.Fatalf("namespace after delete: %d", code)
	}
	var topics []string
	if code := adminGet(t, admin, "/admin/v2/persistent/t1/ns1/partitioned", &topics); code == http.StatusOK && len(topics) > 0 {
		t.Fatalf("partitioned topics after delete: %v", topics)
	}
	if _, err := pc.tenants.GetTenant(cp.ctx(), &cpv1.GetTenantRequest{Name: t1}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetTenant after delete: %v", err)
	}
}

// TestPulsarResourceRetry makes the admin API unreachable: the resources
// are reported FAILED with the cause, then APPLIED once it is back; an
// agent restart re-applies nothing that the record says is applied.
func TestPulsarResourceRetry(t *testing.T) {
	cp := newControlPlane(t, "sqlite::memory:")
	cp.setup()
	sp := provisionertest.NewStandalones(t)
	sp.SetBadAdmin("http://" + standalonetest.FreeAddr(t))
	stop := runAgent(t, cp, sp)
	if op := cp.wait(cp.createCluster("c1", 1)); op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("create cluster: %v", op)
	}
	cp.createTenantNamespaceTopic()
	eventually(t, "the tenant to be FAILED", func() bool {
		st, msg, _ := cp.stateOf(t1)
		return st == cpv1.PulsarResourceState_FAILED && strings.Contains(msg, "pulsaradmin:")
	})

	sp.SetBadAdmin("")
	cp.waitApplied(t1, ns1, orders)
	admin := must[provisioner.ClusterStatus](t)(sp.Status(t.Context(), c1)).AdminURL
	var parts struct {
		Partitions int `json:"partitions"`
	}
	if code := adminGet(t, admin, "/admin/v2/persistent/t1/ns1/orders/partitions", &parts); code != http.StatusOK || parts.Partitions != 3 {
		t.Fatalf("partitions on the data plane: %d %+v", code, parts)
	}

	// A restarted agent resyncs: the admin calls are no-ops and nothing is
	// reported, so the records keep their etags.
	etags := map[string]string{}
	for _, n := range []string{t1, ns1, orders} {
		_, _, etags[n] = cp.stateOf(n)
	}
	stop()
	runAgent(t, cp, sp)
	// A new topic proves the new agent has caught up with the watch.
	pc := cp.pulsar()
	must[*cpv1.Topic](t)(pc.topics.CreateTopic(cp.ctx(), &cpv1.CreateTopicRequest{Parent: ns1, TopicId: "audit"}))
	cp.waitApplied(ns1 + "/topics/audit")
	for n, want := range etags {
		if st, msg, etag := cp.stateOf(n); etag != want || st != cpv1.PulsarResourceState_APPLIED {
			t.Fatalf("%s after the restart: %v %q etag %s (was %s)", n, st, msg, etag, want)
		}
	}
}
