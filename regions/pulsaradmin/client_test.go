package pulsaradmin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// The Go client leaks a producer's send-timeout goroutine when the broker
// refuses the producer (TestMigrationHelpers makes it refuse on purpose).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"))
}

// newClient starts a real in-process Magnetar standalone and returns a
// client of its admin API.
func newClient(t *testing.T) *Client {
	t.Helper()
	s := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	c, err := New(s.WebServiceURL(), WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.hc.CloseIdleConnections() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantDone(t *testing.T, what string, got []string, err error, want ...string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: did %v, want %v", what, got, want)
	}
}

func TestTenant(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	clusters, err := c.Clusters(ctx)
	if err != nil || len(clusters) != 1 {
		t.Fatalf("clusters: %v %v", clusters, err)
	}
	info := TenantInfo{AdminRoles: []string{"ops"}, AllowedClusters: clusters}
	got, err := c.EnsureTenant(ctx, "acme", info)
	wantDone(t, "create", got, err, "createTenant")
	got, err = c.EnsureTenant(ctx, "acme", info)
	wantDone(t, "re-apply", got, err)
	info.AdminRoles = []string{"dev", "ops"}
	got, err = c.EnsureTenant(ctx, "acme", info)
	wantDone(t, "change roles", got, err, "updateTenant")
	cur, err := c.GetTenant(ctx, "acme")
	if err != nil || !sameSet(cur.AdminRoles, info.AdminRoles) {
		t.Fatalf("tenant: %v %v", cur, err)
	}
	if err := c.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatalf("deleting a missing tenant: %v", err)
	}
	_, err = c.GetTenant(ctx, "acme")
	var e *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Reason != "Tenant does not exist" {
		t.Fatalf("get deleted tenant: %v", err)
	}
	// Pulsar's errors come back with status and reason.
	_, err = c.EnsureTenant(ctx, "other", TenantInfo{AllowedClusters: []string{"no-such-cluster"}})
	if !errors.As(err, &e) || e.Status != http.StatusPreconditionFailed || e.Reason != "Clusters do not exist" {
		t.Fatalf("unknown cluster: %v", err)
	}
}

func TestNamespace(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	clusters, _ := c.Clusters(ctx)
	if _, err := c.EnsureTenant(ctx, "acme", TenantInfo{AllowedClusters: clusters}); err != nil {
		t.Fatal(err)
	}
	p := NamespacePolicies{
		Retention:                   &Retention{TimeMinutes: 60, SizeMB: 100},
		MessageTTLSeconds:           ptr(300),
		Deduplication:               proto.Bool(true),
		BacklogQuota:                &BacklogQuota{LimitBytes: 1 << 20, Policy: "producer_exception"},
		AutoTopicCreation:           &AutoTopicCreation{Allow: true, Type: "partitioned", DefaultPartitions: ptr(2)},
		SchemaCompatibilityStrategy: "FULL",
		Bundles:                     8,
		ReplicationClusters:         clusters,
	}
	got, err := c.EnsureNamespace(ctx, "acme", "orders", p)
	wantDone(t, "create", got, err, "createNamespace", "retention", "messageTTL", "deduplication",
		"backlogQuota", "autoTopicCreation", "schemaCompatibilityStrategy")
	got, err = c.EnsureNamespace(ctx, "acme", "orders", p)
	wantDone(t, "re-apply", got, err)
	cur, err := c.GetNamespacePolicies(ctx, "acme", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if *cur.Retention != *p.Retention || *cur.MessageTTLSeconds != 300 || !*cur.Deduplication || *cur.BacklogQuota != *p.BacklogQuota ||
		!cur.AutoTopicCreation.equal(*p.AutoTopicCreation) || cur.SchemaCompatibilityStrategy != "FULL" || cur.Bundles != 8 ||
		!slices.Equal(cur.ReplicationClusters, clusters) {
		t.Fatalf("policies as read: %+v", cur)
	}
	// Change two policies: only those are set.
	p.MessageTTLSeconds = ptr(60)
	p.AutoTopicCreation = &AutoTopicCreation{Allow: false}
	got, err = c.EnsureNamespace(ctx, "acme", "orders", p)
	wantDone(t, "change", got, err, "messageTTL", "autoTopicCreation")
	cur, _ = c.GetNamespacePolicies(ctx, "acme", "orders")
	if *cur.MessageTTLSeconds != 60 || cur.AutoTopicCreation.Allow {
		t.Fatalf("after change: %+v", cur)
	}
	// Unset policies are left alone.
	got, err = c.EnsureNamespace(ctx, "acme", "orders", NamespacePolicies{})
	wantDone(t, "nothing managed", got, err)
	// A policy the data plane refuses: the reason comes back.
	_, err = c.EnsureNamespace(ctx, "acme", "orders", NamespacePolicies{ReplicationClusters: []string{"nowhere"}})
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusPreconditionFailed || e.Reason != "Clusters do not exist" {
		t.Fatalf("bad replication cluster: %v", err)
	}
	// A namespace of a missing tenant.
	if _, err := c.EnsureNamespace(ctx, "ghost", "ns", p); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing tenant: %v", err)
	}

	// Non-empty: refused without force, deleted with it; then idempotent.
	tn := TopicName{Persistent: true, Tenant: "acme", Namespace: "orders", Topic: "x"}
	if _, err := c.EnsureTopic(ctx, tn, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteNamespace(ctx, "acme", "orders", false); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete non-empty: %v", err)
	}
	if err := c.DeleteTenant(ctx, "acme"); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete tenant with namespaces: %v", err)
	}
	if err := c.DeleteNamespace(ctx, "acme", "orders", true); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteNamespace(ctx, "acme", "orders", false); err != nil {
		t.Fatalf("deleting a missing namespace: %v", err)
	}
	if _, err := c.GetNamespacePolicies(ctx, "acme", "orders"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted namespace: %v", err)
	}
}

func TestTopic(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	clusters, _ := c.Clusters(ctx)
	if _, err := c.EnsureTenant(ctx, "acme", TenantInfo{AllowedClusters: clusters}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsureNamespace(ctx, "acme", "ns", NamespacePolicies{}); err != nil {
		t.Fatal(err)
	}
	plain := TopicName{Persistent: true, Tenant: "acme", Namespace: "ns", Topic: "plain"}
	got, err := c.EnsureTopic(ctx, plain, 0)
	wantDone(t, "create non-partitioned", got, err, "createTopic")
	got, err = c.EnsureTopic(ctx, plain, 0)
	wantDone(t, "re-apply non-partitioned", got, err)
	if _, err := c.EnsureTopic(ctx, plain, 3); !errors.Is(err, ErrPartitions) {
		t.Fatalf("partitioning a non-partitioned topic: %v", err)
	}

	parts := TopicName{Persistent: true, Tenant: "acme", Namespace: "ns", Topic: "parts"}
	got, err = c.EnsureTopic(ctx, parts, 2)
	wantDone(t, "create partitioned", got, err, "createPartitionedTopic")
	got, err = c.EnsureTopic(ctx, parts, 2)
	wantDone(t, "re-apply partitioned", got, err)
	got, err = c.EnsureTopic(ctx, parts, 4)
	wantDone(t, "more partitions", got, err, "updatePartitions")
	if n, err := c.Partitions(ctx, parts); err != nil || n != 4 {
		t.Fatalf("partitions: %d %v", n, err)
	}
	if _, err := c.EnsureTopic(ctx, parts, 3); !errors.Is(err, ErrPartitions) {
		t.Fatalf("fewer partitions: %v", err)
	}
	if _, err := c.EnsureTopic(ctx, parts, 0); !errors.Is(err, ErrPartitions) {
		t.Fatalf("partitioned to non-partitioned: %v", err)
	}

	for _, tn := range []TopicName{plain, parts} {
		if err := c.DeleteTopic(ctx, tn, true); err != nil {
			t.Fatalf("delete %s: %v", tn, err)
		}
		if err := c.DeleteTopic(ctx, tn, true); err != nil {
			t.Fatalf("delete missing %s: %v", tn, err)
		}
	}
	if ok, err := c.topicExists(ctx, plain); err != nil || ok {
		t.Fatalf("plain topic after delete: %v %v", ok, err)
	}
	if n, err := c.Partitions(ctx, parts); err != nil || n != 0 {
		t.Fatalf("partitioned topic after delete: %d %v", n, err)
	}
	if err := c.DeleteNamespace(ctx, "acme", "ns", false); err != nil {
		t.Fatalf("namespace emptied by topic deletes: %v", err)
	}
}

// Apply, Remove and ApplyChange with the control plane's messages.
func TestApply(t *testing.T) {
	c := newClient(t)
	ctx := ctxT(t)
	const cl = "organizations/o/clusters/standalone"
	tenant := &cpv1.Tenant{Name: cl + "/tenants/acme", AdminRoles: []string{"ops"}}
	ns := &cpv1.Namespace{Name: cl + "/tenants/acme/namespaces/orders", Policies: &cpv1.NamespacePolicies{
		Retention:                   &cpv1.NamespacePolicies_Retention{TimeMinutes: -1, SizeMb: 512},
		MessageTtlSeconds:           proto.Int32(120),
		DeduplicationEnabled:        proto.Bool(false),
		BacklogQuota:                &cpv1.NamespacePolicies_BacklogQuota{LimitBytes: 4096, Policy: cpv1.NamespacePolicies_BacklogQuota_CONSUMER_BACKLOG_EVICTION},
		AutoTopicCreation:           &cpv1.NamespacePolicies_AutoTopicCreation{Allow: true, Type: cpv1.NamespacePolicies_AutoTopicCreation_NON_PARTITIONED},
		SchemaCompatibilityStrategy: cpv1.NamespacePolicies_BACKWARD_TRANSITIVE,
		Bundles:                     2,
		ReplicationClusters:         []string{cl},
	}}
	topic := &cpv1.Topic{Name: ns.Name + "/topics/events", Partitions: 3}

	for _, m := range []proto.Message{tenant, ns, topic} {
		if got, err := Apply(ctx, c, m); err != nil || len(got) == 0 {
			t.Fatalf("apply %v: %v %v", m, got, err)
		}
	}
	for _, m := range []proto.Message{tenant, ns, topic} {
		got, err := Apply(ctx, c, m)
		wantDone(t, "re-apply", got, err)
	}
	info, err := c.GetTenant(ctx, "acme")
	if err != nil || !slices.Equal(info.AllowedClusters, []string{"standalone"}) || !slices.Equal(info.AdminRoles, []string{"ops"}) {
		t.Fatalf("tenant: %+v %v", info, err)
	}
	// Admin roles another owner added: a plain client's Apply removes
	// them, one with WithKeptAdminRoles keeps those it names.
	keeping, err := New(c.base, WithKeptAdminRoles(func(r string) bool { return strings.HasPrefix(r, "managed:") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsureTenant(ctx, "acme", TenantInfo{AdminRoles: []string{"ops", "managed:a", "other"}, AllowedClusters: info.AllowedClusters}); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, keeping, tenant); err != nil {
		t.Fatal(err)
	}
	if info, err := c.GetTenant(ctx, "acme"); err != nil || !sameSet(info.AdminRoles, []string{"ops", "managed:a"}) {
		t.Fatalf("tenant after an apply keeping managed roles: %+v %v", info, err)
	}
	if _, err := Apply(ctx, c, tenant); err != nil {
		t.Fatal(err)
	}
	if info, err := c.GetTenant(ctx, "acme"); err != nil || !slices.Equal(info.AdminRoles, []string{"ops"}) {
		t.Fatalf("tenant after a plain apply: %+v %v", info, err)
	}
	p, err := c.GetNamespacePolicies(ctx, "acme", "orders")
	if err != nil || p.BacklogQuota.Policy != "consumer_backlog_eviction" || p.SchemaCompatibilityStrategy != "BACKWARD_TRANSITIVE" ||
		p.AutoTopicCreation.Type != "non-partitioned" || p.Retention.TimeMinutes != -1 || p.Bundles != 2 {
		t.Fatalf("namespace: %+v %v", p, err)
	}

	// Change a policy and the partitions through the API messages.
	ns.Policies.MessageTtlSeconds = proto.Int32(30)
	topic.Partitions = 5
	got, err := ApplyChange(ctx, c, &cpv1.PulsarResourceChange{Resource: &cpv1.PulsarResourceChange_Namespace{Namespace: ns}})
	wantDone(t, "namespace change", got, err, "messageTTL")
	got, err = ApplyChange(ctx, c, &cpv1.PulsarResourceChange{Resource: &cpv1.PulsarResourceChange_Topic{Topic: topic}})
	wantDone(t, "topic change", got, err, "updatePartitions")

	// Deletions, deepest first, twice (idempotent).
	for range 2 {
		for _, ch := range []*cpv1.PulsarResourceChange{
			{Deleted: true, Resource: &cpv1.PulsarResourceChange_Topic{Topic: topic}},
			{Deleted: true, Resource: &cpv1.PulsarResourceChange_Namespace{Namespace: ns}},
			{Deleted: true, Resource: &cpv1.PulsarResourceChange_Tenant{Tenant: tenant}},
		} {
			if _, err := ApplyChange(ctx, c, ch); err != nil {
				t.Fatalf("remove: %v", err)
			}
		}
	}
	if _, err := c.GetTenant(ctx, "acme"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("tenant after remove: %v", err)
	}
	if _, err := Apply(ctx, c, &cpv1.Topic{Name: "organizations/o/clusters/c/tenants/t"}); err == nil {
		t.Fatal("a tenant name as a topic was accepted")
	}
}

func TestNew(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

// TestRedirectKeepsCredentials: a broker's 307 to another host (the
// owner) is followed with the token, which net/http alone would drop; a
// redirect from https:// to http:// is followed without it.
func TestRedirectKeepsCredentials(t *testing.T) {
	var got []string
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") == "" {
			http.Error(w, `{"reason":"Authentication required"}`, http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`["c1"]`))
	}))
	defer owner.Close()
	// "localhost" is another host than the 127.0.0.1 the client first asks.
	ownerURL := strings.Replace(owner.URL, "127.0.0.1", "localhost", 1)
	redirector := func(h func(*httptest.Server) *httptest.Server) *httptest.Server {
		return h(httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, ownerURL+r.URL.Path, http.StatusTemporaryRedirect)
		})))
	}
	plain := redirector(func(s *httptest.Server) *httptest.Server { s.Start(); return s })
	defer plain.Close()
	c, err := New(plain.URL, WithToken("t0k"))
	if err != nil {
		t.Fatal(err)
	}
	var clusters []string
	if err := c.do(t.Context(), http.MethodGet, path("clusters"), nil, &clusters); err != nil || len(clusters) != 1 {
		t.Fatalf("through the redirect: %v %v", clusters, err)
	}
	if len(got) != 1 || got[0] != "Bearer t0k" {
		t.Fatalf("the owner saw Authorization %q, want the token", got)
	}

	got = nil
	secure := redirector(func(s *httptest.Server) *httptest.Server { s.StartTLS(); return s })
	defer secure.Close()
	hc := secure.Client()
	c, err = New(secure.URL, WithToken("t0k"), WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	var e *Error
	if err := c.do(t.Context(), http.MethodGet, path("clusters"), nil, &clusters); !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
		t.Fatalf("https:// redirected to http://: %v, want 401", err)
	}
	if len(got) != 1 || got[0] != "" {
		t.Fatalf("the token followed a redirect to http://: %q", got)
	}
}
