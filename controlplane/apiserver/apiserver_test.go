package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
)

// suite is every API test; each runs on a fresh server and store.
var suite = []struct {
	name string
	fn   func(*testing.T, *harness)
}{
	{"ClusterLifecycle", testClusterLifecycle},
	{"TenantIsolation", testTenantIsolation},
	{"RequestIDIdempotency", testRequestIDIdempotency},
	{"StaleEtag", testStaleEtag},
	{"PaginationWhileCreating", testPaginationWhileCreating},
	{"FieldMaskUpdate", testFieldMaskUpdate},
	{"Authentication", testAuthentication},
	{"DeletionProtection", testDeletionProtection},
	{"CancelCreate", testCancelCreate},
	{"AdmissionAndValidation", testAdmissionAndValidation},
}

// TestSQLite runs the suite over SQLite in memory.
func TestSQLite(t *testing.T) {
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t, "sqlite::memory:")) })
	}
}

// TestPostgres runs the suite over a real PostgreSQL server started by
// pgtest; skipped when PostgreSQL is not installed unless
// MAGNETAR_REQUIRE_POSTGRES=1.
func TestPostgres(t *testing.T) {
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t, pgtest.DSN(t))) })
	}
}

// The whole tenant flow through REST and gRPC: operator bootstrap, orgs, a
// service account key with org.admin, a cluster created through REST, the
// region agent's long-poll and READY report, the operation and Wait.
func testClusterLifecycle(t *testing.T, h *harness) {
	if h.opKey == "" || !strings.HasPrefix(h.opKey, keyPrefix) {
		t.Fatalf("bootstrap key file holds %q", h.opKey)
	}
	if fi, err := os.Stat(filepath.Join(filepath.Dir(h.srv.cfg.BootstrapKeyFile), "bootstrap.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bootstrap key file: %v mode %v", err, fi.Mode())
	}
	op := h.authCtx(h.opKey)

	// Operator: region and organizations through REST.
	code, body := h.rest(h.opKey, "POST", "/v1/regions?regionId=us-east", map[string]any{"displayName": "US East"})
	if code != 200 || body["name"] != "regions/us-east" {
		t.Fatalf("create region: %d %v", code, body)
	}
	for _, id := range []string{"alpha", "beta"} {
		code, body = h.rest(h.opKey, "POST", "/v1/organizations?organizationId="+id, map[string]any{"displayName": id})
		if code != 200 {
			t.Fatalf("create org %s: %d %v", id, code, body)
		}
	}
	// A service account in alpha with an API key (REST) and org.admin (gRPC).
	sa := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(op, &cpv1.CreateServiceAccountRequest{
		Parent: "organizations/alpha", ServiceAccountId: "ci", ServiceAccount: &cpv1.ServiceAccount{DisplayName: "CI"}}))
	code, body = h.rest(h.opKey, "POST", "/v1/"+sa.Name+"/apiKeys?apiKeyId=k1", map[string]any{"displayName": "ci key"})
	key, _ := body["secret"].(string)
	if code != 200 || !strings.HasPrefix(key, keyPrefix) || body["state"] != "ACTIVE" {
		t.Fatalf("create key: %d %v", code, body)
	}
	code, body = h.rest(h.opKey, "GET", "/v1/"+sa.Name+"/apiKeys/k1", nil)
	if code != 200 || body["secret"] != "" {
		t.Fatalf("the secret must be shown once only: %d %v", code, body)
	}
	must[*cpv1.RoleBinding](t)(h.rbs.CreateRoleBinding(op, &cpv1.CreateRoleBindingRequest{Parent: "organizations/alpha", RoleBindingId: "ci-admin",
		RoleBinding: &cpv1.RoleBinding{Role: "roles/org.admin", Member: sa.Name, Resource: "organizations/alpha"}}))

	// The tenant's key creates a cluster through REST: an Operation.
	code, body = h.rest(key, "POST", "/v1/organizations/alpha/clusters?clusterId=prod&requestId=r-1",
		map[string]any{"region": "regions/us-east", "size": map[string]any{"brokers": 3, "bookies": 3}})
	if code != 200 || body["state"] != "PENDING" || body["target"] != "organizations/alpha/clusters/prod" {
		t.Fatalf("create cluster: %d %v", code, body)
	}
	opName := body["name"].(string)
	tc := h.authCtx(key)

	// Wait (gRPC) is started before the agent reports, and returns when done.
	waited := make(chan *cpv1.Operation, 1)
	go func() {
		o, err := h.ops.WaitOperation(tc, &cpv1.WaitOperationRequest{Name: opName, Timeout: durationpb.New(30 * time.Second)})
		if err != nil {
			t.Errorf("WaitOperation: %v", err)
		}
		waited <- o
	}()

	// The region agent's long-poll sees the cluster.
	w := must[*cpv1.WatchDesiredStateResponse](t)(h.agent.WatchDesiredState(op, &cpv1.WatchDesiredStateRequest{Region: "regions/us-east", Timeout: durationpb.New(10 * time.Second)}))
	if len(w.Changes) != 1 || w.Changes[0].Cluster.Name != "organizations/alpha/clusters/prod" || w.Changes[0].Cluster.Size.Brokers != 3 || w.Changes[0].Cluster.State != cpv1.Cluster_CREATING {
		t.Fatalf("watch: %v", w)
	}
	// A second long-poll from the returned revision waits, and sees the
	// next change as soon as it is made.
	next := make(chan *cpv1.WatchDesiredStateResponse, 1)
	go func() {
		r, err := h.agent.WatchDesiredState(op, &cpv1.WatchDesiredStateRequest{Region: "regions/us-east", AfterRevision: w.Revision, Timeout: durationpb.New(30 * time.Second)})
		if err != nil {
			t.Errorf("WatchDesiredState: %v", err)
		}
		next <- r
	}()

	cl := must[*cpv1.Cluster](t)(h.agent.ReportClusterStatus(op, &cpv1.ReportClusterStatusRequest{
		Name: "organizations/alpha/clusters/prod", State: cpv1.ReportClusterStatusRequest_READY,
		ServiceUrl: "pulsar://prod.alpha:6650", AdminUrl: "http://prod.alpha:8080", ObservedRevision: w.Revision}))
	if cl.State != cpv1.Cluster_READY {
		t.Fatalf("after READY: %v", cl)
	}
	done := <-waited
	if done == nil || !done.Done || done.State != cpv1.Operation_SUCCEEDED || done.Response.GetFields()["serviceUrl"].GetStringValue() != "pulsar://prod.alpha:6650" {
		t.Fatalf("operation after READY: %v", done)
	}
	if r := <-next; r == nil || len(r.Changes) != 1 || r.Changes[0].Cluster.State != cpv1.Cluster_READY || r.Revision <= w.Revision {
		t.Fatalf("second watch: %v", r)
	}
	code, body = h.rest(key, "GET", "/v1/organizations/alpha/clusters/prod", nil)
	if code != 200 || body["serviceUrl"] != "pulsar://prod.alpha:6650" || body["state"] != "READY" || body["operation"] != "" {
		t.Fatalf("get cluster: %d %v", code, body)
	}
	code, body = h.rest(key, "GET", "/v1/"+opName, nil)
	if code != 200 || body["state"] != "SUCCEEDED" || body["done"] != true {
		t.Fatalf("get operation: %d %v", code, body)
	}
	// ListOperations filters by target and state.
	ops := must[*cpv1.ListOperationsResponse](t)(h.ops.ListOperations(tc, &cpv1.ListOperationsRequest{Target: "organizations/alpha/clusters/prod", State: cpv1.Operation_SUCCEEDED}))
	if len(ops.Operations) != 1 || ops.Operations[0].Name != opName {
		t.Fatalf("list operations: %v", ops)
	}

	// Heartbeat reports region health.
	reg := must[*cpv1.Region](t)(h.agent.Heartbeat(op, &cpv1.HeartbeatRequest{Region: "regions/us-east", Status: &cpv1.RegionStatus{State: cpv1.RegionStatus_HEALTHY, Message: "ok"}}))
	if reg.Status.GetState() != cpv1.RegionStatus_HEALTHY || reg.Status.GetLastHeartbeat() == nil {
		t.Fatalf("heartbeat: %v", reg)
	}
	// Tenants may not act as region agents.
	_, err := h.agent.ReportClusterStatus(tc, &cpv1.ReportClusterStatusRequest{Name: "organizations/alpha/clusters/prod", State: cpv1.ReportClusterStatusRequest_FAILED})
	wantCode(t, err, codes.PermissionDenied, "")

	// The audit log has the create and the denied call.
	evs := must[*cpv1.ListAuditEventsResponse](t)(h.audit.ListAuditEvents(tc, &cpv1.ListAuditEventsRequest{Parent: "organizations/alpha", PageSize: 1000}))
	var created, denied bool
	for _, e := range evs.AuditEvents {
		created = created || (e.Method == "CreateCluster" && e.Outcome == "ok" && e.Principal == sa.Name && e.RequestId == "r-1")
		denied = denied || (e.Method == "ReportClusterStatus" && e.Outcome == "denied")
	}
	if !created || !denied {
		t.Fatalf("audit log lacks events (created %v, denied %v): %v", created, denied, evs.AuditEvents)
	}

	// Plain HTTP endpoints.
	for path, want := range map[string]string{"/healthz": "ok", "/openapi.json": `"swagger": "2.0"`, "/metrics": "magnetar_controlplane_authz_decisions_total"} {
		resp, err := http.Get(h.base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Fatalf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
}

// Organization A's key can neither read nor change B's resources, and B's
// resources never show in A's lists.
func testTenantIsolation(t *testing.T, h *harness) {
	ts := h.setup("alpha", "beta")
	a, b := ts[0], ts[1]
	ac, bc := h.authCtx(a.key), h.authCtx(b.key)
	bop := must[*cpv1.Operation](t)(h.clusters.CreateCluster(bc, &cpv1.CreateClusterRequest{Parent: b.org, ClusterId: "secret", Cluster: &cpv1.Cluster{Region: "regions/eu-west"}}))

	_, err := h.orgs.GetOrganization(ac, &cpv1.GetOrganizationRequest{Name: b.org})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: b.org + "/clusters/secret"})
	wantCode(t, err, codes.NotFound, "")
	// A cluster that does not exist looks the same as one that does.
	_, err = h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: b.org + "/clusters/nothing"})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.clusters.ListClusters(ac, &cpv1.ListClustersRequest{Parent: b.org})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.clusters.UpdateCluster(ac, &cpv1.UpdateClusterRequest{Cluster: &cpv1.Cluster{Name: b.org + "/clusters/secret", DisplayName: "pwned"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"display_name"}}})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.clusters.DeleteCluster(ac, &cpv1.DeleteClusterRequest{Name: b.org + "/clusters/secret"})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: b.org, ClusterId: "intruder", Cluster: &cpv1.Cluster{Region: "regions/eu-west"}})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.sas.CreateApiKey(ac, &cpv1.CreateApiKeyRequest{Parent: b.sa, ApiKeyId: "stolen"})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.rbs.CreateRoleBinding(ac, &cpv1.CreateRoleBindingRequest{Parent: b.org, RoleBindingId: "x",
		RoleBinding: &cpv1.RoleBinding{Role: "roles/org.admin", Member: a.sa, Resource: b.org}})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.ops.GetOperation(ac, &cpv1.GetOperationRequest{Name: bop.Name})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.ops.CancelOperation(ac, &cpv1.CancelOperationRequest{Name: bop.Name})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.ops.ListOperations(ac, &cpv1.ListOperationsRequest{Organization: b.org})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.audit.ListAuditEvents(ac, &cpv1.ListAuditEventsRequest{Parent: b.org})
	wantCode(t, err, codes.NotFound, "")
	if code, body := h.rest(a.key, "GET", "/v1/"+b.org+"/clusters/secret", nil); code != http.StatusNotFound {
		t.Fatalf("REST get of another org's cluster: %d %v", code, body)
	}
	// Operator-only and global actions: PERMISSION_DENIED, not hidden.
	_, err = h.regions.CreateRegion(ac, &cpv1.CreateRegionRequest{RegionId: "mine"})
	wantCode(t, err, codes.PermissionDenied, "")
	_, err = h.orgs.UpdateOrganization(ac, &cpv1.UpdateOrganizationRequest{Organization: &cpv1.Organization{Name: a.org, MaxClusters: 100},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_clusters"}}})
	wantCode(t, err, codes.PermissionDenied, "organization.max_clusters")

	// Lists show only the caller's own resources.
	orgs := must[*cpv1.ListOrganizationsResponse](t)(h.orgs.ListOrganizations(ac, &cpv1.ListOrganizationsRequest{}))
	if len(orgs.Organizations) != 1 || orgs.Organizations[0].Name != a.org {
		t.Fatalf("A lists organizations: %v", orgs.Organizations)
	}
	ops := must[*cpv1.ListOperationsResponse](t)(h.ops.ListOperations(ac, &cpv1.ListOperationsRequest{}))
	if len(ops.Operations) != 0 {
		t.Fatalf("A lists B's operations: %v", ops.Operations)
	}
	cls := must[*cpv1.ListClustersResponse](t)(h.clusters.ListClusters(ac, &cpv1.ListClustersRequest{Parent: a.org}))
	if len(cls.Clusters) != 0 {
		t.Fatalf("A lists clusters: %v", cls.Clusters)
	}
	all := must[*cpv1.ListOrganizationsResponse](t)(h.orgs.ListOrganizations(h.authCtx(h.opKey), &cpv1.ListOrganizationsRequest{}))
	if len(all.Organizations) != 2 {
		t.Fatalf("operator lists organizations: %v", all.Organizations)
	}
	// Every region is visible to every tenant.
	regs := must[*cpv1.ListRegionsResponse](t)(h.regions.ListRegions(ac, &cpv1.ListRegionsRequest{}))
	if len(regs.Regions) != 2 {
		t.Fatalf("regions: %v", regs.Regions)
	}
	// B's resources are untouched.
	cl := must[*cpv1.Cluster](t)(h.clusters.GetCluster(bc, &cpv1.GetClusterRequest{Name: b.org + "/clusters/secret"}))
	if cl.DisplayName != "" {
		t.Fatalf("B's cluster changed: %v", cl)
	}
}

// A replayed request_id returns the first result and creates nothing more,
// even when admission would now refuse a new create.
func testRequestIDIdempotency(t *testing.T, h *harness) {
	a := h.setup("alpha")[0]
	op := h.authCtx(h.opKey)
	must[*cpv1.Organization](t)(h.orgs.UpdateOrganization(op, &cpv1.UpdateOrganizationRequest{
		Organization: &cpv1.Organization{Name: a.org, MaxClusters: 1}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_clusters"}}}))
	ac := h.authCtx(a.key)
	req := &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "one", RequestId: "5b8e3a1c-0d7e-4c55-9d1e-2f7f4b0c9a11", Cluster: &cpv1.Cluster{Region: "regions/us-east"}}
	first := must[*cpv1.Operation](t)(h.clusters.CreateCluster(ac, req))
	again := must[*cpv1.Operation](t)(h.clusters.CreateCluster(ac, req))
	if first.Name != again.Name || first.Target != again.Target {
		t.Fatalf("replay returned another operation: %v vs %v", first, again)
	}
	// Through REST too.
	code, body := h.rest(a.key, "POST", "/v1/"+a.org+"/clusters?clusterId=one&requestId="+req.RequestId, map[string]any{"region": "regions/us-east"})
	if code != 200 || body["name"] != first.Name {
		t.Fatalf("REST replay: %d %v", code, body)
	}
	cls := must[*cpv1.ListClustersResponse](t)(h.clusters.ListClusters(ac, &cpv1.ListClustersRequest{Parent: a.org}))
	ops := must[*cpv1.ListOperationsResponse](t)(h.ops.ListOperations(ac, &cpv1.ListOperationsRequest{}))
	if len(cls.Clusters) != 1 || len(ops.Operations) != 1 {
		t.Fatalf("replays created more: %d clusters, %d operations", len(cls.Clusters), len(ops.Operations))
	}
	// A new create is over the limit: the policy's message.
	_, err := h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "two", Cluster: &cpv1.Cluster{Region: "regions/us-east"}})
	wantCode(t, err, codes.ResourceExhausted, "limit is 1")
	// The same request id for another cluster is refused.
	_, err = h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "three", RequestId: req.RequestId, Cluster: &cpv1.Cluster{Region: "regions/us-east"}})
	wantCode(t, err, codes.InvalidArgument, "request_id")

	// Plain resources: the store's request ids.
	sreq := &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: "bot", RequestId: "d2f6c1e0-4a57-4e8b-a3c5-6b1f0e9d7c22"}
	s1 := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(ac, sreq))
	s2 := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(ac, sreq))
	if s1.Uid != s2.Uid || s1.Etag != s2.Etag {
		t.Fatalf("service account replay: %v vs %v", s1, s2)
	}
	sas := must[*cpv1.ListServiceAccountsResponse](t)(h.sas.ListServiceAccounts(ac, &cpv1.ListServiceAccountsRequest{Parent: a.org}))
	if len(sas.ServiceAccounts) != 2 { // "admin" and "bot"
		t.Fatalf("service accounts: %v", sas.ServiceAccounts)
	}
	// Without a request id, a second create of the name is ALREADY_EXISTS.
	_, err = h.sas.CreateServiceAccount(ac, &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: "bot"})
	wantCode(t, err, codes.AlreadyExists, a.org+"/serviceAccounts/bot")
}

// A stale etag is refused: ABORTED over gRPC, 409 over REST.
func testStaleEtag(t *testing.T, h *harness) {
	a := h.setup("alpha")[0]
	ac := h.authCtx(a.key)
	sa := must[*cpv1.ServiceAccount](t)(h.sas.GetServiceAccount(ac, &cpv1.GetServiceAccountRequest{Name: a.sa}))
	upd := must[*cpv1.ServiceAccount](t)(h.sas.UpdateServiceAccount(ac, &cpv1.UpdateServiceAccountRequest{
		ServiceAccount: &cpv1.ServiceAccount{Name: a.sa, Etag: sa.Etag, Description: "v2"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}}))
	if upd.Etag == sa.Etag || upd.Description != "v2" {
		t.Fatalf("update: %v", upd)
	}
	_, err := h.sas.UpdateServiceAccount(ac, &cpv1.UpdateServiceAccountRequest{
		ServiceAccount: &cpv1.ServiceAccount{Name: a.sa, Etag: sa.Etag, Description: "v3"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}})
	wantCode(t, err, codes.Aborted, "etag")
	code, body := h.rest(a.key, "PATCH", "/v1/"+a.sa, map[string]any{"description": "v3", "etag": sa.Etag})
	if code != http.StatusConflict {
		t.Fatalf("REST PATCH with stale etag: %d %v", code, body)
	}
	code, body = h.rest(a.key, "PATCH", "/v1/"+a.sa, map[string]any{"description": "v3", "etag": upd.Etag})
	if code != 200 || body["description"] != "v3" || body["displayName"] != "" {
		t.Fatalf("REST PATCH with current etag: %d %v", code, body)
	}
	_, err = h.sas.DeleteServiceAccount(ac, &cpv1.DeleteServiceAccountRequest{Name: a.sa, Etag: upd.Etag})
	wantCode(t, err, codes.Aborted, "")
}

// A paginated walk visits every item that exists for the whole walk exactly
// once while other items are created concurrently.
func testPaginationWhileCreating(t *testing.T, h *harness) {
	a := h.setup("alpha")[0]
	ac := h.authCtx(a.key)
	before := map[string]bool{"organizations/alpha/users/u000": true}
	for i := 0; i < 40; i++ {
		u := must[*cpv1.User](t)(h.users.CreateUser(ac, &cpv1.CreateUserRequest{Parent: a.org, UserId: fmt.Sprintf("u%03d", i), User: &cpv1.User{Email: fmt.Sprintf("u%d@example.com", i)}}))
		before[u.Name] = true
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := h.users.CreateUser(ac, &cpv1.CreateUserRequest{Parent: a.org, UserId: fmt.Sprintf("n%03d", i), User: &cpv1.User{Email: "n@example.com"}}); err != nil {
				t.Errorf("concurrent create: %v", err)
				return
			}
		}
	}()
	seen := map[string]int{}
	token := ""
	for pages := 0; ; pages++ {
		resp, err := h.users.ListUsers(ac, &cpv1.ListUsersRequest{Parent: a.org, PageSize: 7, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Users) > 7 {
			t.Fatalf("page of %d > page_size 7", len(resp.Users))
		}
		for _, u := range resp.Users {
			seen[u.Name]++
		}
		if token = resp.NextPageToken; token == "" || pages > 1000 {
			break
		}
	}
	close(stop)
	wg.Wait()
	for name := range before {
		if seen[name] != 1 {
			t.Errorf("%s seen %d times", name, seen[name])
		}
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s seen %d times", name, n)
		}
	}
	_, err := h.users.ListUsers(ac, &cpv1.ListUsersRequest{Parent: a.org, PageSize: -1})
	wantCode(t, err, codes.InvalidArgument, "page_size")
	_, err = h.users.ListUsers(ac, &cpv1.ListUsersRequest{Parent: a.org, PageToken: "garbage"})
	wantCode(t, err, codes.InvalidArgument, "page_token")
	big := must[*cpv1.ListUsersResponse](t)(h.users.ListUsers(ac, &cpv1.ListUsersRequest{Parent: a.org, PageSize: 5000}))
	if len(big.Users) < 41 {
		t.Fatalf("page_size above the maximum must be coerced, got %d users", len(big.Users))
	}
}

// An update with a field mask changes only the masked fields.
func testFieldMaskUpdate(t *testing.T, h *harness) {
	a := h.setup("alpha")[0]
	ac := h.authCtx(a.key)
	must[*cpv1.Operation](t)(h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "prod",
		Cluster: &cpv1.Cluster{Region: "regions/us-east", DisplayName: "Prod", Size: &cpv1.ClusterSize{Brokers: 2, Bookies: 3}}}))
	name := a.org + "/clusters/prod"
	op := must[*cpv1.Operation](t)(h.clusters.UpdateCluster(ac, &cpv1.UpdateClusterRequest{
		Cluster:    &cpv1.Cluster{Name: name, DisplayName: "Production", DeletionProtection: true, Size: &cpv1.ClusterSize{Brokers: 9, Bookies: 9}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"display_name"}}}))
	if !op.Done || op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("metadata-only update must be done at once: %v", op)
	}
	cl := must[*cpv1.Cluster](t)(h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: name}))
	if cl.DisplayName != "Production" || cl.DeletionProtection || cl.Size.Brokers != 2 || cl.Size.Bookies != 3 || cl.Region != "regions/us-east" {
		t.Fatalf("masked update changed more: %v", cl)
	}
	// A nested path.
	h.report(name, cpv1.ReportClusterStatusRequest_READY)
	op = must[*cpv1.Operation](t)(h.clusters.UpdateCluster(ac, &cpv1.UpdateClusterRequest{
		Cluster: &cpv1.Cluster{Name: name, Size: &cpv1.ClusterSize{Brokers: 5, Bookies: 7}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"size.brokers"}}}))
	if op.Done {
		t.Fatalf("a resize goes to the region agent: %v", op)
	}
	cl = must[*cpv1.Cluster](t)(h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: name}))
	if cl.Size.Brokers != 5 || cl.Size.Bookies != 3 || cl.State != cpv1.Cluster_UPDATING || cl.Operation != op.Name {
		t.Fatalf("size.brokers update: %v", cl)
	}
	_, err := h.clusters.UpdateCluster(ac, &cpv1.UpdateClusterRequest{Cluster: &cpv1.Cluster{Name: name}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"bogus_field"}}})
	wantCode(t, err, codes.InvalidArgument, `"bogus_field"`)
	_, err = h.clusters.UpdateCluster(ac, &cpv1.UpdateClusterRequest{Cluster: &cpv1.Cluster{Name: name, Region: "regions/eu-west"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"region"}}})
	wantCode(t, err, codes.InvalidArgument, `"region"`)
	_, err = h.clusters.UpdateCluster(ac, &cpv1.UpdateClusterRequest{Cluster: &cpv1.Cluster{Name: name, Size: &cpv1.ClusterSize{Brokers: 0, Bookies: 1}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"size"}}})
	wantCode(t, err, codes.InvalidArgument, "cluster.size.brokers")
	// REST PATCH: the mask comes from the body's fields.
	code, body := h.rest(a.key, "PATCH", "/v1/"+name, map[string]any{"displayName": "P"})
	if code != 200 || body["done"] != true {
		t.Fatalf("REST PATCH: %d %v", code, body)
	}
	cl = must[*cpv1.Cluster](t)(h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: name}))
	if cl.DisplayName != "P" || cl.Size.Brokers != 5 {
		t.Fatalf("REST PATCH changed more: %v", cl)
	}
}

// report sends a region agent's status report as the operator.
func (h *harness) report(name string, state cpv1.ReportClusterStatusRequest_State) *cpv1.Cluster {
	h.t.Helper()
	return must[*cpv1.Cluster](h.t)(h.agent.ReportClusterStatus(h.authCtx(h.opKey), &cpv1.ReportClusterStatusRequest{
		Name: name, State: state, ServiceUrl: "pulsar://x:6650", AdminUrl: "http://x:8080"}))
}

// Missing, unknown, malformed, revoked and expired keys: UNAUTHENTICATED.
func testAuthentication(t *testing.T, h *harness) {
	a := h.setup("alpha")[0]
	get := func(key string) error {
		_, err := h.orgs.GetOrganization(h.authCtx(key), &cpv1.GetOrganizationRequest{Name: a.org})
		return err
	}
	if err := get(a.key); err != nil {
		t.Fatal(err)
	}
	_, err := h.orgs.GetOrganization(t.Context(), &cpv1.GetOrganizationRequest{Name: a.org})
	wantCode(t, err, codes.Unauthenticated, "missing authorization")
	wantCode(t, get("mgk_nosuchkey_secret"), codes.Unauthenticated, "invalid api key")
	wantCode(t, get("not-a-key"), codes.Unauthenticated, "invalid api key")
	// Right uid, wrong secret.
	uid := strings.Split(a.key, "_")[1]
	wantCode(t, get(keyPrefix+uid+"_wrongsecret"), codes.Unauthenticated, "invalid api key")
	if code, body := h.rest("", "GET", "/v1/"+a.org, nil); code != http.StatusUnauthorized {
		t.Fatalf("REST without key: %d %v", code, body)
	}

	ac := h.authCtx(a.key)
	k2 := must[*cpv1.ApiKey](t)(h.sas.CreateApiKey(ac, &cpv1.CreateApiKeyRequest{Parent: a.sa, ApiKeyId: "k2"}))
	if err := get(k2.Secret); err != nil {
		t.Fatal(err)
	}
	rev := must[*cpv1.ApiKey](t)(h.sas.RevokeApiKey(ac, &cpv1.RevokeApiKeyRequest{Name: k2.Name}))
	if rev.State != cpv1.ApiKey_REVOKED || rev.RevokeTime == nil {
		t.Fatalf("revoke: %v", rev)
	}
	wantCode(t, get(k2.Secret), codes.Unauthenticated, "revoked")

	k3 := must[*cpv1.ApiKey](t)(h.sas.CreateApiKey(ac, &cpv1.CreateApiKeyRequest{Parent: a.sa, ApiKeyId: "k3",
		ApiKey: &cpv1.ApiKey{ExpireTime: timestamppb.New(time.Now().Add(1500 * time.Millisecond))}}))
	if err := get(k3.Secret); err != nil {
		t.Fatalf("key before expiry: %v", err)
	}
	eventually(t, "the key to expire", func() bool { return get(k3.Secret) != nil })
	wantCode(t, get(k3.Secret), codes.Unauthenticated, "expired")
	k3g := must[*cpv1.ApiKey](t)(h.sas.GetApiKey(ac, &cpv1.GetApiKeyRequest{Name: k3.Name}))
	if k3g.State != cpv1.ApiKey_EXPIRED {
		t.Fatalf("expired key state: %v", k3g.State)
	}
	_, err = h.sas.CreateApiKey(ac, &cpv1.CreateApiKeyRequest{Parent: a.sa, ApiKeyId: "old", ApiKey: &cpv1.ApiKey{ExpireTime: timestamppb.New(time.Now().Add(-time.Hour))}})
	wantCode(t, err, codes.InvalidArgument, "api_key.expire_time")

	// Deleting the service account deletes its keys.
	must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(ac, &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: "tmp"}))
	tk := must[*cpv1.ApiKey](t)(h.sas.CreateApiKey(ac, &cpv1.CreateApiKeyRequest{Parent: a.org + "/serviceAccounts/tmp", ApiKeyId: "k"}))
	if _, err := h.sas.DeleteServiceAccount(ac, &cpv1.DeleteServiceAccountRequest{Name: a.org + "/serviceAccounts/tmp"}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, get(tk.Secret), codes.Unauthenticated, "invalid api key")
}

// Deletion protection refuses DeleteCluster; without it the region agent's
// DELETED report removes the cluster and completes the operation.
func testDeletionProtection(t *testing.T, h *harness) {
	a := h.setup("alpha")[0]
	ac := h.authCtx(a.key)
	name := a.org + "/clusters/keep"
	must[*cpv1.Operation](t)(h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "keep",
		Cluster: &cpv1.Cluster{Region: "regions/us-east", DeletionProtection: true}}))
	h.report(name, cpv1.ReportClusterStatusRequest_READY)
	_, err := h.clusters.DeleteCluster(ac, &cpv1.DeleteClusterRequest{Name: name})
	wantCode(t, err, codes.FailedPrecondition, "deletion_protection")
	if code, body := h.rest(a.key, "DELETE", "/v1/"+name, nil); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), "deletion_protection") {
		t.Fatalf("REST delete of a protected cluster: %d %v", code, body)
	}
	must[*cpv1.Operation](t)(h.clusters.UpdateCluster(ac, &cpv1.UpdateClusterRequest{Cluster: &cpv1.Cluster{Name: name, DeletionProtection: false},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"deletion_protection"}}}))
	del := must[*cpv1.Operation](t)(h.clusters.DeleteCluster(ac, &cpv1.DeleteClusterRequest{Name: name}))
	if del.Done || del.Type != "DeleteCluster" {
		t.Fatalf("delete operation: %v", del)
	}
	cl := must[*cpv1.Cluster](t)(h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: name}))
	if cl.State != cpv1.Cluster_DELETING {
		t.Fatalf("cluster after delete: %v", cl)
	}
	_, err = h.ops.CancelOperation(ac, &cpv1.CancelOperationRequest{Name: del.Name})
	wantCode(t, err, codes.FailedPrecondition, "cannot be cancelled")
	h.report(name, cpv1.ReportClusterStatusRequest_DELETED)
	_, err = h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: name})
	wantCode(t, err, codes.NotFound, name)
	done := must[*cpv1.Operation](t)(h.ops.WaitOperation(ac, &cpv1.WaitOperationRequest{Name: del.Name}))
	if done.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("delete operation after DELETED: %v", done)
	}
	// The long-poll reports the deletion.
	w := must[*cpv1.WatchDesiredStateResponse](t)(h.agent.WatchDesiredState(h.authCtx(h.opKey), &cpv1.WatchDesiredStateRequest{Region: "regions/us-east"}))
	if len(w.Changes) != 1 || !w.Changes[0].Deleted {
		t.Fatalf("watch after delete: %v", w)
	}
}

// Cancelling a cluster's creation cancels the operation and marks the
// cluster for deletion.
func testCancelCreate(t *testing.T, h *harness) {
	a := h.setup("alpha")[0]
	ac := h.authCtx(a.key)
	op := must[*cpv1.Operation](t)(h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "oops", Cluster: &cpv1.Cluster{Region: "regions/us-east"}}))
	code, body := h.rest(a.key, "POST", "/v1/"+op.Name+":cancel", map[string]any{})
	if code != 200 || body["state"] != "CANCELLED" || body["done"] != true {
		t.Fatalf("cancel: %d %v", code, body)
	}
	cl := must[*cpv1.Cluster](t)(h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: op.Target}))
	if cl.State != cpv1.Cluster_DELETING {
		t.Fatalf("cluster after cancel: %v", cl)
	}
	code, body = h.rest(a.key, "POST", "/v1/"+op.Name+":wait", map[string]any{"timeout": "1s"})
	if code != 200 || body["state"] != "CANCELLED" {
		t.Fatalf("wait: %d %v", code, body)
	}
	h.report(op.Target, cpv1.ReportClusterStatusRequest_DELETED)
	_, err := h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: op.Target})
	wantCode(t, err, codes.NotFound, "")
}

// Admission rules of the policy answer with the policy's code and message;
// the API's own validation names the field.
func testAdmissionAndValidation(t *testing.T, h *harness) {
	a := h.setup("alpha")[0]
	ac := h.authCtx(a.key)
	_, err := h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "eu", Cluster: &cpv1.Cluster{Region: "regions/eu-west"}})
	wantCode(t, err, codes.FailedPrecondition, "region: organization may not use region regions/eu-west")
	code, body := h.rest(a.key, "POST", "/v1/"+a.org+"/clusters?clusterId=eu", map[string]any{"region": "regions/eu-west"})
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), "may not use region") {
		t.Fatalf("REST admission: %d %v", code, body)
	}
	_, err = h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "Bad_Name", Cluster: &cpv1.Cluster{Region: "regions/us-east"}})
	wantCode(t, err, codes.InvalidArgument, "cluster_id: must match")
	_, err = h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "nowhere", Cluster: &cpv1.Cluster{}})
	wantCode(t, err, codes.InvalidArgument, "region")
	_, err = h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "big", Cluster: &cpv1.Cluster{Region: "regions/us-east", Size: &cpv1.ClusterSize{Brokers: 1000}}})
	wantCode(t, err, codes.InvalidArgument, "cluster.size.brokers")
	_, err = h.clusters.GetCluster(ac, &cpv1.GetClusterRequest{Name: "clusters/x"})
	wantCode(t, err, codes.InvalidArgument, "name")
	_, err = h.users.CreateUser(ac, &cpv1.CreateUserRequest{Parent: a.org, UserId: "bob", User: &cpv1.User{Email: "not an email"}})
	wantCode(t, err, codes.InvalidArgument, "user.email")
	_, err = h.rbs.CreateRoleBinding(ac, &cpv1.CreateRoleBindingRequest{Parent: a.org, RoleBindingId: "rb", RoleBinding: &cpv1.RoleBinding{Role: "roles/god", Member: a.sa, Resource: a.org}})
	wantCode(t, err, codes.InvalidArgument, "role_binding.role")
}

// The bootstrap key is written once: a restart over the same store leaves
// it alone and the first key keeps working.
func TestBootstrapOnce(t *testing.T) {
	dir := t.TempDir()
	dsn := "sqlite://" + filepath.Join(dir, "cp.db")
	keyFile := filepath.Join(dir, "bootstrap.key")
	st := openStore(t, dsn)
	h := startHarness(t, st, keyFile)
	first := h.opKey
	must[*cpv1.Region](t)(h.regions.CreateRegion(h.authCtx(first), &cpv1.CreateRegionRequest{RegionId: "r1"}))

	st2 := openStore(t, dsn)
	other := filepath.Join(dir, "second.key")
	h2 := startHarness(t, st2, other)
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("second start wrote a key file: %v", err)
	}
	must[*cpv1.Region](t)(h2.regions.GetRegion(h2.authCtx(first), &cpv1.GetRegionRequest{Name: "regions/r1"}))
}
