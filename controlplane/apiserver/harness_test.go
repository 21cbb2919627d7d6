package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
	"github.com/magnetar-dev/magnetar/policy"
)

// harness runs a real Server (SQLite store, real policy engine) on a free
// loopback port, with gRPC clients and a REST helper.
type harness struct {
	t        testing.TB
	srv      *Server
	store    store.Store
	base     string // http://127.0.0.1:port
	opKey    string
	conn     *grpc.ClientConn
	orgs     cpv1.OrganizationsClient
	sas      cpv1.ServiceAccountsClient
	rbs      cpv1.RoleBindingsClient
	regions  cpv1.RegionsClient
	clusters cpv1.ClustersClient
	ops      cpv1.OperationsClient
	agent    cpv1.RegionAgentClient
	audit    cpv1.AuditEventsClient
	users    cpv1.UsersClient
}

// TestMain checks for leaked goroutines after every test ran and the
// shared PostgreSQL server (if a test started one) stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgMain{m}) }

type pgMain struct{ m *testing.M }

func (p pgMain) Run() int { return pgtest.Main(p.m) }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openStore(t testing.TB, dsn string) store.Store {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() }) // after the servers using it stop (cleanups run in reverse)
	return st
}

func newHarness(t testing.TB, dsn string) *harness {
	t.Helper()
	st := openStore(t, dsn)
	return startHarness(t, st, filepath.Join(t.TempDir(), "bootstrap.key"))
}

func startHarness(t testing.TB, st store.Store, keyFile string) *harness {
	t.Helper()
	return startHarnessWith(t, st, keyFile, nil)
}

// startHarnessWith is startHarness with a change to the server's config.
func startHarnessWith(t testing.TB, st store.Store, keyFile string, change func(*Config)) *harness {
	t.Helper()
	engine, err := policy.New()
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	cfg := Config{Listen: "127.0.0.1:0", Store: st, Authorizer: engine, Logger: quietLogger(), BootstrapKeyFile: keyFile}
	if change != nil {
		change(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	h := &harness{t: t, srv: srv, store: st, base: "http://" + srv.Addr().String()}
	if keyFile != "" {
		if b, err := os.ReadFile(keyFile); err == nil {
			h.opKey = strings.TrimSpace(string(b))
		}
	}
	h.conn, err = grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { h.conn.Close() })
	h.orgs = cpv1.NewOrganizationsClient(h.conn)
	h.sas = cpv1.NewServiceAccountsClient(h.conn)
	h.rbs = cpv1.NewRoleBindingsClient(h.conn)
	h.regions = cpv1.NewRegionsClient(h.conn)
	h.clusters = cpv1.NewClustersClient(h.conn)
	h.ops = cpv1.NewOperationsClient(h.conn)
	h.agent = cpv1.NewRegionAgentClient(h.conn)
	h.audit = cpv1.NewAuditEventsClient(h.conn)
	h.users = cpv1.NewUsersClient(h.conn)
	return h
}

// authCtx returns a context that authenticates with key.
func (h *harness) authCtx(key string) context.Context {
	return metadata.AppendToOutgoingContext(h.t.Context(), "authorization", "Bearer "+key)
}

// rest sends a JSON request with key and decodes the JSON answer.
func (h *harness) rest(key, method, path string, body any) (int, map[string]any) {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			h.t.Fatalf("%s %s: bad JSON %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, out
}

func wantCode(t testing.TB, err error, code codes.Code, contains string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("want %v, got %v (%v)", code, st.Code(), err)
	}
	if contains != "" && !strings.Contains(st.Message(), contains) {
		t.Fatalf("want message containing %q, got %q", contains, st.Message())
	}
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// tenant is an organization with a service account, its org.admin binding
// and an API key.
type tenant struct {
	org, sa, key string
}

// setup registers region us-east and eu-west and creates a tenant per id;
// the first tenant may only use us-east.
func (h *harness) setup(ids ...string) []tenant {
	h.t.Helper()
	op := h.authCtx(h.opKey)
	for _, r := range []string{"us-east", "eu-west"} {
		must[*cpv1.Region](h.t)(h.regions.CreateRegion(op, &cpv1.CreateRegionRequest{RegionId: r, Region: &cpv1.Region{DisplayName: r}}))
	}
	var out []tenant
	for i, id := range ids {
		org := &cpv1.Organization{DisplayName: id}
		if i == 0 {
			org.AllowedRegions = []string{"regions/us-east"}
		}
		o := must[*cpv1.Organization](h.t)(h.orgs.CreateOrganization(op, &cpv1.CreateOrganizationRequest{OrganizationId: id, Organization: org}))
		sa := must[*cpv1.ServiceAccount](h.t)(h.sas.CreateServiceAccount(op, &cpv1.CreateServiceAccountRequest{Parent: o.Name, ServiceAccountId: "admin"}))
		must[*cpv1.RoleBinding](h.t)(h.rbs.CreateRoleBinding(op, &cpv1.CreateRoleBindingRequest{Parent: o.Name, RoleBindingId: "admin",
			RoleBinding: &cpv1.RoleBinding{Role: "roles/org.admin", Member: sa.Name, Resource: o.Name}}))
		key := must[*cpv1.ApiKey](h.t)(h.sas.CreateApiKey(op, &cpv1.CreateApiKeyRequest{Parent: sa.Name, ApiKeyId: "k1"}))
		out = append(out, tenant{org: o.Name, sa: sa.Name, key: key.Secret})
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
