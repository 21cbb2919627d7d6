package apiserver

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
)

type emptyResp = emptypb.Empty

func storeQuery(kind string) store.ListQuery { return store.ListQuery{Kind: kind} }

// pulsarSuite tests Pulsar tenants, namespaces and topics; each runs on a
// fresh server and store.
var pulsarSuite = []struct {
	name string
	fn   func(*testing.T, *harness)
}{
	{"CRUD", testPulsarCRUD},
	{"Isolation", testPulsarIsolation},
	{"NonEmptyDelete", testPulsarNonEmptyDelete},
	{"AdmissionNaming", testPulsarAdmissionNaming},
	{"AgentWatchAndReport", testPulsarAgent},
	{"ClusterDeletionRemovesResources", testPulsarClusterDeleted},
}

func TestPulsarSQLite(t *testing.T) {
	for _, tc := range pulsarSuite {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t, "sqlite::memory:")) })
	}
}

func TestPulsarPostgres(t *testing.T) {
	for _, tc := range pulsarSuite {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t, pgtest.DSN(t))) })
	}
}

// pulsarClients are the gRPC clients of the Pulsar resources.
type pulsarClients struct {
	tenants    cpv1.TenantsClient
	namespaces cpv1.NamespacesClient
	topics     cpv1.TopicsClient
}

func (h *harness) pulsar() pulsarClients {
	return pulsarClients{cpv1.NewTenantsClient(h.conn), cpv1.NewNamespacesClient(h.conn), cpv1.NewTopicsClient(h.conn)}
}

// readyCluster creates cluster id of tn in region and reports it READY.
func (h *harness) readyCluster(tn tenant, id, region string) string {
	h.t.Helper()
	op := must[*cpv1.Operation](h.t)(h.clusters.CreateCluster(h.authCtx(tn.key), &cpv1.CreateClusterRequest{
		Parent: tn.org, ClusterId: id, Cluster: &cpv1.Cluster{Region: region}}))
	h.report(op.Target, cpv1.ReportClusterStatusRequest_READY)
	return op.Target
}

// Create, get, list, update and delete the three kinds through REST and gRPC.
func testPulsarCRUD(t *testing.T, h *harness) {
	a := h.setup("acme")[0]
	cl := h.readyCluster(a, "prod", "regions/us-east")
	p := h.pulsar()
	ctx := h.authCtx(a.key)

	// Tenant through REST, read through gRPC.
	code, body := h.rest(a.key, "POST", "/v1/"+cl+"/tenants?tenantId=Sales_1&requestId=rq-1", map[string]any{"adminRoles": []string{"ops"}})
	tName := cl + "/tenants/Sales_1"
	if code != 200 || body["name"] != tName || body["state"] != "PENDING" || body["etag"] == "" || body["createTime"] == nil {
		t.Fatalf("create tenant: %d %v", code, body)
	}
	// A replayed request_id returns the first tenant.
	code, again := h.rest(a.key, "POST", "/v1/"+cl+"/tenants?tenantId=Sales_1&requestId=rq-1", map[string]any{"adminRoles": []string{"ops"}})
	if code != 200 || again["uid"] != body["uid"] {
		t.Fatalf("replayed create: %d %v", code, again)
	}
	tn := must[*cpv1.Tenant](t)(p.tenants.GetTenant(ctx, &cpv1.GetTenantRequest{Name: tName}))
	if len(tn.AdminRoles) != 1 || tn.AdminRoles[0] != "ops" || tn.State != cpv1.PulsarResourceState_PENDING {
		t.Fatalf("get tenant: %v", tn)
	}
	_, err := p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "Sales_1"})
	wantCode(t, err, codes.AlreadyExists, tName)
	// Under a cluster that does not exist: NOT_FOUND.
	_, err = p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: a.org + "/clusters/nope", TenantId: "x"})
	wantCode(t, err, codes.NotFound, a.org+"/clusters/nope")
	_, err = p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "y", Tenant: &cpv1.Tenant{AdminRoles: []string{""}}})
	wantCode(t, err, codes.InvalidArgument, "tenant.admin_roles[0]")
	tn = must[*cpv1.Tenant](t)(p.tenants.UpdateTenant(ctx, &cpv1.UpdateTenantRequest{
		Tenant: &cpv1.Tenant{Name: tName, Etag: tn.Etag, AdminRoles: []string{"ops", "dev"}}}))
	if len(tn.AdminRoles) != 2 {
		t.Fatalf("update tenant: %v", tn)
	}
	// A stale etag is refused.
	_, err = p.tenants.UpdateTenant(ctx, &cpv1.UpdateTenantRequest{Tenant: &cpv1.Tenant{Name: tName, Etag: `"stale"`, AdminRoles: []string{"x"}}})
	wantCode(t, err, codes.Aborted, "etag")

	// Namespace through gRPC with policies, read and patched through REST.
	pol := &cpv1.NamespacePolicies{
		Retention:            &cpv1.NamespacePolicies_Retention{TimeMinutes: 60, SizeMb: 100},
		MessageTtlSeconds:    proto.Int32(300),
		DeduplicationEnabled: proto.Bool(true),
		BacklogQuota:         &cpv1.NamespacePolicies_BacklogQuota{LimitBytes: 1 << 20, Policy: cpv1.NamespacePolicies_BacklogQuota_PRODUCER_EXCEPTION},
		AutoTopicCreation: &cpv1.NamespacePolicies_AutoTopicCreation{Allow: true,
			Type: cpv1.NamespacePolicies_AutoTopicCreation_PARTITIONED, DefaultPartitions: 2},
		SchemaCompatibilityStrategy: cpv1.NamespacePolicies_FULL,
		Bundles:                     8,
		ReplicationClusters:         []string{cl},
	}
	ns := must[*cpv1.Namespace](t)(p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{
		Parent: tName, NamespaceId: "orders", Namespace: &cpv1.Namespace{Policies: pol}}))
	nsName := tName + "/namespaces/orders"
	if ns.Name != nsName || !proto.Equal(ns.Policies, pol) || ns.State != cpv1.PulsarResourceState_PENDING {
		t.Fatalf("create namespace: %v", ns)
	}
	code, body = h.rest(a.key, "GET", "/v1/"+nsName, nil)
	if code != 200 || body["policies"].(map[string]any)["schemaCompatibilityStrategy"] != "FULL" {
		t.Fatalf("REST get namespace: %d %v", code, body)
	}
	// PATCH one policy: the others stay.
	code, body = h.rest(a.key, "PATCH", "/v1/"+nsName, map[string]any{"policies": map[string]any{"messageTtlSeconds": 60, "retention": map[string]any{"sizeMb": -1}}})
	if code != 200 {
		t.Fatalf("REST patch namespace: %d %v", code, body)
	}
	ns = must[*cpv1.Namespace](t)(p.namespaces.GetNamespace(ctx, &cpv1.GetNamespaceRequest{Name: nsName}))
	if ns.Policies.GetMessageTtlSeconds() != 60 || ns.Policies.Retention.SizeMb != -1 || ns.Policies.Retention.TimeMinutes != 60 ||
		!ns.Policies.GetDeduplicationEnabled() || ns.Policies.Bundles != 8 {
		t.Fatalf("after patch: %v", ns.Policies)
	}
	_, err = p.namespaces.UpdateNamespace(ctx, &cpv1.UpdateNamespaceRequest{Namespace: &cpv1.Namespace{Name: nsName,
		Policies: &cpv1.NamespacePolicies{Bundles: 16}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"policies.bundles"}}})
	wantCode(t, err, codes.InvalidArgument, "namespace.policies.bundles")
	_, err = p.namespaces.UpdateNamespace(ctx, &cpv1.UpdateNamespaceRequest{Namespace: &cpv1.Namespace{Name: nsName,
		Policies: &cpv1.NamespacePolicies{MessageTtlSeconds: proto.Int32(-1)}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"policies.message_ttl_seconds"}}})
	wantCode(t, err, codes.InvalidArgument, "namespace.policies.message_ttl_seconds")
	_, err = p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: tName, NamespaceId: "bad",
		Namespace: &cpv1.Namespace{Policies: &cpv1.NamespacePolicies{ReplicationClusters: []string{"organizations/other/clusters/x"}}}})
	wantCode(t, err, codes.InvalidArgument, "namespace.policies.replication_clusters[0]")
	_, err = p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: tName, NamespaceId: "bad",
		Namespace: &cpv1.Namespace{Policies: &cpv1.NamespacePolicies{AutoTopicCreation: &cpv1.NamespacePolicies_AutoTopicCreation{Allow: true}}}})
	wantCode(t, err, codes.InvalidArgument, "namespace.policies.auto_topic_creation.type")
	_, err = p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: tName + "x", NamespaceId: "n"})
	wantCode(t, err, codes.NotFound, tName+"x")

	// Topics: REST create (persistent by default), gRPC list and update.
	code, body = h.rest(a.key, "POST", "/v1/"+nsName+"/topics?topicId=events", map[string]any{"partitions": 3})
	tpName := nsName + "/topics/events"
	if code != 200 || body["name"] != tpName || body["persistent"] != true || body["partitions"] != float64(3) {
		t.Fatalf("create topic: %d %v", code, body)
	}
	must[*cpv1.Topic](t)(p.topics.CreateTopic(ctx, &cpv1.CreateTopicRequest{Parent: nsName, TopicId: "scratch", Topic: &cpv1.Topic{Persistent: proto.Bool(false)}}))
	list := must[*cpv1.ListTopicsResponse](t)(p.topics.ListTopics(ctx, &cpv1.ListTopicsRequest{Parent: nsName, PageSize: 1}))
	if len(list.Topics) != 1 || list.NextPageToken == "" || list.Topics[0].Name != tpName {
		t.Fatalf("list page 1: %v", list)
	}
	list = must[*cpv1.ListTopicsResponse](t)(p.topics.ListTopics(ctx, &cpv1.ListTopicsRequest{Parent: nsName, PageSize: 1, PageToken: list.NextPageToken}))
	if len(list.Topics) != 1 || list.NextPageToken != "" || list.Topics[0].GetPersistent() {
		t.Fatalf("list page 2: %v", list)
	}
	_, err = p.topics.UpdateTopic(ctx, &cpv1.UpdateTopicRequest{Topic: &cpv1.Topic{Name: tpName, Partitions: 2}})
	wantCode(t, err, codes.InvalidArgument, "topic.partitions")
	_, err = p.topics.UpdateTopic(ctx, &cpv1.UpdateTopicRequest{Topic: &cpv1.Topic{Name: nsName + "/topics/scratch", Partitions: 2}})
	wantCode(t, err, codes.InvalidArgument, "non-partitioned")
	tp := must[*cpv1.Topic](t)(p.topics.UpdateTopic(ctx, &cpv1.UpdateTopicRequest{Topic: &cpv1.Topic{Name: tpName, Partitions: 5}}))
	if tp.Partitions != 5 || !tp.GetPersistent() {
		t.Fatalf("update topic: %v", tp)
	}
	tenantsList := must[*cpv1.ListTenantsResponse](t)(p.tenants.ListTenants(ctx, &cpv1.ListTenantsRequest{Parent: cl}))
	nsList := must[*cpv1.ListNamespacesResponse](t)(p.namespaces.ListNamespaces(ctx, &cpv1.ListNamespacesRequest{Parent: tName}))
	if len(tenantsList.Tenants) != 1 || len(nsList.Namespaces) != 1 {
		t.Fatalf("lists: %v %v", tenantsList, nsList)
	}

	// Delete bottom-up through REST and gRPC.
	if code, body = h.rest(a.key, "DELETE", "/v1/"+tpName, nil); code != 200 {
		t.Fatalf("REST delete topic: %d %v", code, body)
	}
	must[*emptyResp](t)(p.topics.DeleteTopic(ctx, &cpv1.DeleteTopicRequest{Name: nsName + "/topics/scratch"}))
	must[*emptyResp](t)(p.namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: nsName, Etag: ns.Etag}))
	must[*emptyResp](t)(p.tenants.DeleteTenant(ctx, &cpv1.DeleteTenantRequest{Name: tName}))
	_, err = p.tenants.GetTenant(ctx, &cpv1.GetTenantRequest{Name: tName})
	wantCode(t, err, codes.NotFound, tName)
}

// Another organization's key sees nothing of the tenant's Pulsar resources.
func testPulsarIsolation(t *testing.T, h *harness) {
	ts := h.setup("acme", "rival")
	a, b := ts[0], ts[1]
	cl := h.readyCluster(a, "prod", "regions/us-east")
	p := h.pulsar()
	must[*cpv1.Tenant](t)(p.tenants.CreateTenant(h.authCtx(a.key), &cpv1.CreateTenantRequest{Parent: cl, TenantId: "t"}))
	must[*cpv1.Namespace](t)(p.namespaces.CreateNamespace(h.authCtx(a.key), &cpv1.CreateNamespaceRequest{Parent: cl + "/tenants/t", NamespaceId: "ns"}))
	bc := h.authCtx(b.key)
	_, err := p.tenants.GetTenant(bc, &cpv1.GetTenantRequest{Name: cl + "/tenants/t"})
	wantCode(t, err, codes.NotFound, "")
	_, err = p.tenants.ListTenants(bc, &cpv1.ListTenantsRequest{Parent: cl})
	wantCode(t, err, codes.NotFound, "")
	_, err = p.tenants.CreateTenant(bc, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "mine"})
	wantCode(t, err, codes.NotFound, "")
	_, err = p.namespaces.DeleteNamespace(bc, &cpv1.DeleteNamespaceRequest{Name: cl + "/tenants/t/namespaces/ns"})
	wantCode(t, err, codes.NotFound, "")
	_, err = p.topics.CreateTopic(bc, &cpv1.CreateTopicRequest{Parent: cl + "/tenants/t/namespaces/ns", TopicId: "x"})
	wantCode(t, err, codes.NotFound, "")
	code, _ := h.rest(b.key, "GET", "/v1/"+cl+"/tenants/t/namespaces/ns", nil)
	if code != 404 {
		t.Fatalf("REST get by another org: %d", code)
	}
	// The owner still sees it unchanged.
	must[*cpv1.Namespace](t)(p.namespaces.GetNamespace(h.authCtx(a.key), &cpv1.GetNamespaceRequest{Name: cl + "/tenants/t/namespaces/ns"}))
}

// A tenant with namespaces and a namespace with topics cannot be deleted.
func testPulsarNonEmptyDelete(t *testing.T, h *harness) {
	a := h.setup("acme")[0]
	cl := h.readyCluster(a, "prod", "regions/us-east")
	p := h.pulsar()
	ctx := h.authCtx(a.key)
	tName := cl + "/tenants/t"
	must[*cpv1.Tenant](t)(p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "t"}))
	for _, id := range []string{"a", "b"} {
		must[*cpv1.Namespace](t)(p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: tName, NamespaceId: id}))
	}
	must[*cpv1.Topic](t)(p.topics.CreateTopic(ctx, &cpv1.CreateTopicRequest{Parent: tName + "/namespaces/a", TopicId: "x"}))
	_, err := p.tenants.DeleteTenant(ctx, &cpv1.DeleteTenantRequest{Name: tName})
	wantCode(t, err, codes.FailedPrecondition, "has 2 namespaces")
	_, err = p.namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: tName + "/namespaces/a"})
	wantCode(t, err, codes.FailedPrecondition, "has 1 topics")
	code, body := h.rest(a.key, "DELETE", "/v1/"+tName, nil)
	if code != 400 || body["code"] != float64(codes.FailedPrecondition) {
		t.Fatalf("REST delete non-empty tenant: %d %v", code, body)
	}
	must[*emptyResp](t)(p.namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: tName + "/namespaces/b"}))
	must[*emptyResp](t)(p.topics.DeleteTopic(ctx, &cpv1.DeleteTopicRequest{Name: tName + "/namespaces/a/topics/x"}))
	must[*emptyResp](t)(p.namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: tName + "/namespaces/a"}))
	must[*emptyResp](t)(p.tenants.DeleteTenant(ctx, &cpv1.DeleteTenantRequest{Name: tName}))
}

// The policy's naming rule for Pulsar names applies: the API passes the
// right kind and id to the Authorizer.
func testPulsarAdmissionNaming(t *testing.T, h *harness) {
	a := h.setup("acme")[0]
	cl := h.readyCluster(a, "prod", "regions/us-east")
	p := h.pulsar()
	ctx := h.authCtx(a.key)
	for _, id := range []string{"has space", "a/b", "per%cent"} {
		_, err := p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: id})
		wantCode(t, err, codes.InvalidArgument, "tenant_id: must match")
	}
	// Names Pulsar accepts and control-plane ids do not: upper case, '=', '.'.
	must[*cpv1.Tenant](t)(p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "Team.A=1"}))
	_, err := p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: cl + "/tenants/Team.A=1", NamespaceId: "n s"})
	wantCode(t, err, codes.InvalidArgument, "namespace_id: must match")
	must[*cpv1.Namespace](t)(p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: cl + "/tenants/Team.A=1", NamespaceId: "NS_1"}))
	_, err = p.topics.CreateTopic(ctx, &cpv1.CreateTopicRequest{Parent: cl + "/tenants/Team.A=1/namespaces/NS_1", TopicId: "t?"})
	wantCode(t, err, codes.InvalidArgument, "topic_id: must match")
	// ':' is a Pulsar name character; REST paths carry it too.
	tp := must[*cpv1.Topic](t)(p.topics.CreateTopic(ctx, &cpv1.CreateTopicRequest{Parent: cl + "/tenants/Team.A=1/namespaces/NS_1", TopicId: "a:b"}))
	if code, body := h.rest(a.key, "GET", "/v1/"+tp.Name, nil); code != 200 || body["name"] != tp.Name {
		t.Fatalf("REST get of %s: %d %v", tp.Name, code, body)
	}
	code, body := h.rest(a.key, "POST", "/v1/"+cl+"/tenants?tenantId=bad%20name", map[string]any{})
	if code != 400 {
		t.Fatalf("REST bad tenant id: %d %v", code, body)
	}
}

// The region agent's long-poll returns the Pulsar resources after their
// cluster, and ReportResourceStatus moves them to APPLIED.
func testPulsarAgent(t *testing.T, h *harness) {
	a := h.setup("limited", "acme")[1] // the first may use us-east only
	p := h.pulsar()
	ctx := h.authCtx(a.key)
	op := h.authCtx(h.opKey)
	cl := h.readyCluster(a, "prod", "regions/us-east")
	eu := h.readyCluster(a, "eu", "regions/eu-west")
	tName, nsName := cl+"/tenants/t", cl+"/tenants/t/namespaces/ns"
	tpName := nsName + "/topics/x"
	must[*cpv1.Tenant](t)(p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "t"}))
	must[*cpv1.Namespace](t)(p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: tName, NamespaceId: "ns"}))
	must[*cpv1.Topic](t)(p.topics.CreateTopic(ctx, &cpv1.CreateTopicRequest{Parent: nsName, TopicId: "x", Topic: &cpv1.Topic{Partitions: 2}}))
	must[*cpv1.Tenant](t)(p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: eu, TenantId: "elsewhere"}))
	// A later change of the tenant keeps it before its namespace.
	must[*cpv1.Tenant](t)(p.tenants.UpdateTenant(ctx, &cpv1.UpdateTenantRequest{Tenant: &cpv1.Tenant{Name: tName, AdminRoles: []string{"r"}}}))

	w := must[*cpv1.WatchDesiredStateResponse](t)(h.agent.WatchDesiredState(op, &cpv1.WatchDesiredStateRequest{Region: "regions/us-east", Timeout: durationpb.New(10 * time.Second)}))
	if len(w.Changes) != 1 || w.Changes[0].Cluster.Name != cl {
		t.Fatalf("watch clusters: %v", w.Changes)
	}
	var names []string
	for _, c := range w.PulsarChanges {
		n, _ := pulsarChangeName(c)
		names = append(names, n)
		if c.Deleted || c.Revision <= 0 || c.Revision > w.Revision {
			t.Fatalf("change %v", c)
		}
	}
	if len(names) != 3 || names[0] != tName || names[1] != nsName || names[2] != tpName {
		t.Fatalf("pulsar changes in order tenant, namespace, topic; got %v", names)
	}
	if w.PulsarChanges[2].GetTopic().Partitions != 2 || len(w.PulsarChanges[0].GetTenant().AdminRoles) != 1 {
		t.Fatalf("desired state: %v", w.PulsarChanges)
	}
	ew := must[*cpv1.WatchDesiredStateResponse](t)(h.agent.WatchDesiredState(op, &cpv1.WatchDesiredStateRequest{Region: "regions/eu-west", Timeout: durationpb.New(10 * time.Second)}))
	if len(ew.PulsarChanges) != 1 || ew.PulsarChanges[0].GetTenant().GetName() != eu+"/tenants/elsewhere" {
		t.Fatalf("eu-west watch: %v", ew.PulsarChanges)
	}

	// Reports: APPLIED with the observed etag; a stale etag is refused.
	topic := w.PulsarChanges[2].GetTopic()
	got := must[*cpv1.PulsarResourceChange](t)(h.agent.ReportResourceStatus(op, &cpv1.ReportResourceStatusRequest{
		Name: tpName, State: cpv1.PulsarResourceState_APPLIED, ObservedEtag: topic.Etag, ObservedRevision: w.Revision}))
	if got.GetTopic().State != cpv1.PulsarResourceState_APPLIED {
		t.Fatalf("report: %v", got)
	}
	tp := must[*cpv1.Topic](t)(p.topics.GetTopic(ctx, &cpv1.GetTopicRequest{Name: tpName}))
	if tp.State != cpv1.PulsarResourceState_APPLIED || tp.Etag == topic.Etag {
		t.Fatalf("topic after report: %v", tp)
	}
	_, err := h.agent.ReportResourceStatus(op, &cpv1.ReportResourceStatusRequest{Name: tpName, State: cpv1.PulsarResourceState_FAILED, ObservedEtag: topic.Etag})
	wantCode(t, err, codes.Aborted, "etag")
	// FAILED through REST, with a message, on the namespace.
	code, body := h.rest(h.opKey, "POST", "/v1/"+nsName+":reportStatus", map[string]any{"state": "FAILED", "message": "412 Clusters do not exist"})
	if code != 200 || body["namespace"].(map[string]any)["state"] != "FAILED" {
		t.Fatalf("REST report: %d %v", code, body)
	}
	ns := must[*cpv1.Namespace](t)(p.namespaces.GetNamespace(ctx, &cpv1.GetNamespaceRequest{Name: nsName}))
	if ns.State != cpv1.PulsarResourceState_FAILED || ns.StatusMessage != "412 Clusters do not exist" {
		t.Fatalf("namespace after report: %v", ns)
	}
	// Tenants may not report.
	_, err = h.agent.ReportResourceStatus(ctx, &cpv1.ReportResourceStatusRequest{Name: tName, State: cpv1.PulsarResourceState_APPLIED})
	wantCode(t, err, codes.PermissionDenied, "")
	_, err = h.agent.ReportResourceStatus(op, &cpv1.ReportResourceStatusRequest{Name: cl, State: cpv1.PulsarResourceState_APPLIED})
	wantCode(t, err, codes.InvalidArgument, "name")

	// The agent sees its own report once; repeating it writes nothing.
	w2 := must[*cpv1.WatchDesiredStateResponse](t)(h.agent.WatchDesiredState(op, &cpv1.WatchDesiredStateRequest{Region: "regions/us-east", AfterRevision: w.Revision, Timeout: durationpb.New(10 * time.Second)}))
	if len(w2.PulsarChanges) != 2 {
		t.Fatalf("changes after reports: %v", w2.PulsarChanges)
	}
	must[*cpv1.PulsarResourceChange](t)(h.agent.ReportResourceStatus(op, &cpv1.ReportResourceStatusRequest{
		Name: tpName, State: cpv1.PulsarResourceState_APPLIED, ObservedEtag: tp.Etag}))
	rev, err := h.store.Revision(t.Context())
	if err != nil || rev != w2.Revision {
		t.Fatalf("a report that changes nothing wrote: revision %d, watch revision %d (%v)", rev, w2.Revision, err)
	}
	// An update sets the resource back to PENDING.
	tp = must[*cpv1.Topic](t)(p.topics.UpdateTopic(ctx, &cpv1.UpdateTopicRequest{Topic: &cpv1.Topic{Name: tpName, Partitions: 4}}))
	if tp.State != cpv1.PulsarResourceState_PENDING {
		t.Fatalf("after update: %v", tp)
	}

	// Deletions come deepest first.
	must[*emptyResp](t)(p.topics.DeleteTopic(ctx, &cpv1.DeleteTopicRequest{Name: tpName}))
	must[*emptyResp](t)(p.namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: nsName}))
	must[*cpv1.Namespace](t)(p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: tName, NamespaceId: "ns2"}))
	w3 := must[*cpv1.WatchDesiredStateResponse](t)(h.agent.WatchDesiredState(op, &cpv1.WatchDesiredStateRequest{Region: "regions/us-east", AfterRevision: w2.Revision, Timeout: durationpb.New(10 * time.Second)}))
	var order []string
	for _, c := range w3.PulsarChanges {
		n, _ := pulsarChangeName(c)
		if c.Deleted {
			n = "-" + n
		}
		order = append(order, n)
	}
	if len(order) != 3 || order[0] != "-"+tpName || order[1] != "-"+nsName || order[2] != tName+"/namespaces/ns2" {
		t.Fatalf("order after deletes: %v", order)
	}
}

// When a cluster's data plane is gone, its Pulsar resources go with it.
func testPulsarClusterDeleted(t *testing.T, h *harness) {
	a := h.setup("acme")[0]
	cl := h.readyCluster(a, "prod", "regions/us-east")
	p := h.pulsar()
	ctx := h.authCtx(a.key)
	must[*cpv1.Tenant](t)(p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "t"}))
	must[*cpv1.Namespace](t)(p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: cl + "/tenants/t", NamespaceId: "ns"}))
	must[*cpv1.Topic](t)(p.topics.CreateTopic(ctx, &cpv1.CreateTopicRequest{Parent: cl + "/tenants/t/namespaces/ns", TopicId: "x"}))
	must[*cpv1.Operation](t)(h.clusters.DeleteCluster(ctx, &cpv1.DeleteClusterRequest{Name: cl}))
	// While the cluster is being deleted nothing new is created in it.
	_, err := p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "late"})
	wantCode(t, err, codes.FailedPrecondition, "being deleted")
	h.report(cl, cpv1.ReportClusterStatusRequest_DELETED)
	for _, n := range []string{"tenants", "namespaces", "topics"} {
		if c, err := h.store.Count(t.Context(), storeQuery(n)); err != nil || c != 0 {
			t.Fatalf("%s left after the cluster: %d (%v)", n, c, err)
		}
	}
	// A new cluster with the same name starts empty.
	h.readyCluster(a, "prod", "regions/us-east")
	l := must[*cpv1.ListTenantsResponse](t)(p.tenants.ListTenants(ctx, &cpv1.ListTenantsRequest{Parent: cl}))
	if len(l.Tenants) != 0 {
		t.Fatalf("tenants of the new cluster: %v", l.Tenants)
	}
}
