package cli_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/apiserver"
	"github.com/magnetar-dev/magnetar/controlplane/cli"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
	"github.com/magnetar-dev/magnetar/policy"
)

func TestMain(m *testing.M) {
	for _, e := range []string{cli.EnvEndpoint, cli.EnvAPIKey, cli.EnvAPIKeyFile} {
		os.Unsetenv(e)
	}
	// A closed producer of the Go client leaves its send-timeout goroutine
	// until the timeout's timer fires (30 s); the data-plane commands'
	// producers are closed.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"))
}

// controlPlane is a real API server (in-memory SQLite, real policy) on a
// free loopback port, with the operator key and operator gRPC clients.
type controlPlane struct {
	addr     string
	opKey    string
	clusters cpv1.ClustersClient
	agent    cpv1.RegionAgentClient
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), "sqlite::memory:")
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	engine, err := policy.New()
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	keyFile := filepath.Join(t.TempDir(), "bootstrap.key")
	srv, err := apiserver.New(apiserver.Config{Listen: "127.0.0.1:0", Store: st, Authorizer: engine,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), BootstrapKeyFile: keyFile})
	if err != nil {
		t.Fatalf("apiserver.New: %v", err)
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
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatalf("bootstrap key: %v", err)
	}
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &controlPlane{addr: srv.Addr().String(), opKey: strings.TrimSpace(string(raw)),
		clusters: cpv1.NewClustersClient(conn), agent: cpv1.NewRegionAgentClient(conn)}
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is what one CLI invocation printed and returned.
type result struct {
	stdout, stderr string
	err            error
}

// exec runs "magnetar args..." through the same command tree the binary
// registers, with captured output, writing stderr to errOut if given.
func exec(t *testing.T, errOut *syncBuffer, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "magnetar", SilenceUsage: true, SilenceErrors: true}
	for _, c := range cli.Constructors() {
		root.AddCommand(c())
	}
	var out bytes.Buffer
	if errOut == nil {
		errOut = &syncBuffer{}
	}
	root.SetOut(&out)
	root.SetErr(errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	return result{stdout: out.String(), stderr: errOut.String(), err: err}
}

// as runs a command against cp with key.
func (cp *controlPlane) as(t *testing.T, key string, args ...string) result {
	t.Helper()
	return exec(t, nil, append(args, "--endpoint", cp.addr, "--api-key", key)...)
}

// ok runs a command that must succeed and returns its stdout.
func (cp *controlPlane) ok(t *testing.T, key string, args ...string) string {
	t.Helper()
	r := cp.as(t, key, args...)
	if r.err != nil {
		t.Fatalf("magnetar %s: %v\nstderr: %s", strings.Join(args, " "), r.err, r.stderr)
	}
	return r.stdout
}

func contains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("%s: want %q in:\n%s", what, w, got)
		}
	}
}

// poll retries cond until it holds or 20s pass.
func poll(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// setupOrg registers region local-a and organization acme (operator),
// then a service account with org.admin and its API key through the CLI;
// it returns the tenant's key.
func (cp *controlPlane) setupOrg(t *testing.T) string {
	t.Helper()
	out := cp.ok(t, cp.opKey, "region", "create", "local-a", "--display-name", "Local A")
	contains(t, "region create", out, "NAME", "local-a", "Local A")
	out = cp.ok(t, cp.opKey, "org", "create", "acme", "--display-name", "Acme Corp", "--allowed-regions", "local-a", "--max-clusters", "3")
	contains(t, "org create", out, "acme", "Acme Corp", "local-a")
	cp.ok(t, cp.opKey, "serviceaccount", "create", "acme", "ci", "--description", "CI jobs")
	cp.ok(t, cp.opKey, "rolebinding", "create", "acme", "--role", "org.admin", "--member", "organizations/acme/serviceAccounts/ci")
	r := cp.as(t, cp.opKey, "apikey", "create", "acme", "ci", "--expire-in", "720h", "--output", "json")
	if r.err != nil {
		t.Fatalf("apikey create: %v", r.err)
	}
	var key cpv1.ApiKey
	if err := protojson.Unmarshal([]byte(r.stdout), &key); err != nil {
		t.Fatalf("apikey create json %q: %v", r.stdout, err)
	}
	if !strings.HasPrefix(key.GetSecret(), "mgk_") || key.GetExpireTime() == nil {
		t.Fatalf("apikey create: %v", &key)
	}
	return key.GetSecret()
}

func TestOrganizations(t *testing.T) {
	cp := startControlPlane(t)
	cp.setupOrg(t)
	cp.ok(t, cp.opKey, "org", "create", "globex")

	out := cp.ok(t, cp.opKey, "org", "list")
	contains(t, "org list", out, "NAME", "DISPLAY NAME", "acme", "Acme Corp", "globex")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("org list: want header and 2 rows, got:\n%s", out)
	}
	// Columns are aligned: every row starts its second column where the header does.
	col := strings.Index(lines[0], "DISPLAY NAME")
	for _, l := range lines[1:] {
		if l[col-1] != ' ' || l[col] == ' ' {
			t.Fatalf("org list: misaligned row %q under %q", l, lines[0])
		}
	}

	out = cp.ok(t, cp.opKey, "org", "get", "organizations/acme", "-o", "json")
	var org cpv1.Organization
	if err := protojson.Unmarshal([]byte(out), &org); err != nil {
		t.Fatalf("org get json: %v\n%s", err, out)
	}
	if org.GetName() != "organizations/acme" || org.GetDisplayName() != "Acme Corp" || org.GetMaxClusters() != 3 ||
		len(org.GetAllowedRegions()) != 1 || org.GetAllowedRegions()[0] != "regions/local-a" {
		t.Fatalf("org get: %v", &org)
	}

	out = cp.ok(t, cp.opKey, "org", "list", "--output", "json")
	var list cpv1.ListOrganizationsResponse
	if err := protojson.Unmarshal([]byte(out), &list); err != nil || len(list.GetOrganizations()) != 2 {
		t.Fatalf("org list json (%v): %s", err, out)
	}

	contains(t, "region list", cp.ok(t, cp.opKey, "region", "list"), "local-a")
	contains(t, "sa list", cp.ok(t, cp.opKey, "serviceaccount", "list", "acme"), "acme/ci", "CI jobs")
	contains(t, "apikey list", cp.ok(t, cp.opKey, "apikey", "list", "acme/ci"), "ACTIVE")
	contains(t, "rolebinding list", cp.ok(t, cp.opKey, "rolebinding", "list", "acme"), "roles/org.admin", "organizations/acme/serviceAccounts/ci")
	contains(t, "org delete", cp.ok(t, cp.opKey, "org", "delete", "globex"), "deleted organizations/globex")

	// The tenant's key is not an operator's.
	r := cp.as(t, cp.setupKeyOnly(t), "region", "create", "local-z")
	if r.err == nil || !strings.HasPrefix(r.err.Error(), "PERMISSION_DENIED: ") {
		t.Fatalf("tenant region create: want PERMISSION_DENIED, got %v", r.err)
	}
}

// setupKeyOnly makes a second key for acme's ci account.
func (cp *controlPlane) setupKeyOnly(t *testing.T) string {
	t.Helper()
	out := cp.ok(t, cp.opKey, "apikey", "create", "acme", "ci", "--id", "k2")
	i := strings.Index(out, "SECRET: ")
	if i < 0 {
		t.Fatalf("apikey create: no secret in %q", out)
	}
	return strings.TrimSpace(out[i+len("SECRET: "):])
}

func TestClusterNoWaitAndPulsarResources(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)

	r := cp.as(t, key, "cluster", "create", "acme", "dev", "--region", "local-a", "--brokers", "2", "--bookies", "3", "--no-wait", "-o", "json")
	if r.err != nil {
		t.Fatalf("cluster create --no-wait: %v", r.err)
	}
	var op cpv1.Operation
	if err := protojson.Unmarshal([]byte(r.stdout), &op); err != nil {
		t.Fatalf("operation json: %v\n%s", err, r.stdout)
	}
	if op.GetType() != "CreateCluster" || op.GetTarget() != "organizations/acme/clusters/dev" || op.GetDone() {
		t.Fatalf("operation: %v", &op)
	}
	out := cp.ok(t, key, "operation", "get", op.GetName())
	contains(t, "operation get", out, "CreateCluster", "acme/dev", "PENDING")
	id := strings.TrimPrefix(op.GetName(), "operations/")
	contains(t, "operation get by id", cp.ok(t, key, "operation", "get", id), id)
	contains(t, "operation list", cp.ok(t, key, "operation", "list", "--org", "acme", "--state", "pending"), id, "PENDING")
	contains(t, "cluster get", cp.ok(t, key, "cluster", "get", "acme/dev"), "CREATING", "local-a", "2", "3")
	contains(t, "cluster list", cp.ok(t, key, "cluster", "list", "acme"), "acme/dev", "CREATING")

	contains(t, "tenant create", cp.ok(t, key, "tenant", "create", "acme/dev/shop", "--admin-roles", "shop-admin"), "acme/dev/shop", "PENDING", "shop-admin")
	out = cp.ok(t, key, "namespace", "create", "acme/dev/shop/orders", "--retention-minutes", "60", "--retention-mb", "100", "--message-ttl", "1h")
	contains(t, "namespace create", out, "acme/dev/shop/orders", "60m/100MB", "1h0m0s")
	cp.ok(t, key, "namespace", "create", "organizations/acme/clusters/dev/tenants/shop/namespaces/audit")
	contains(t, "topic create", cp.ok(t, key, "topic", "create", "acme/dev/shop/orders/payments", "--partitions", "3"), "acme/dev/shop/orders/payments", "3")
	cp.ok(t, key, "topic", "create", "acme", "dev", "shop", "orders", "events")

	contains(t, "tenant list", cp.ok(t, key, "tenant", "list", "acme/dev"), "acme/dev/shop")
	out = cp.ok(t, key, "namespace", "list", "acme/dev/shop")
	contains(t, "namespace list", out, "acme/dev/shop/orders", "acme/dev/shop/audit")
	out = cp.ok(t, key, "topic", "list", "acme/dev/shop/orders", "--managed", "-o", "json")
	var topics cpv1.ListTopicsResponse
	if err := protojson.Unmarshal([]byte(out), &topics); err != nil {
		t.Fatalf("topic list json: %v\n%s", err, out)
	}
	if len(topics.GetTopics()) != 2 {
		t.Fatalf("topic list: %v", &topics)
	}
	for _, tp := range topics.GetTopics() {
		if tp.GetName() == "organizations/acme/clusters/dev/tenants/shop/namespaces/orders/topics/payments" && tp.GetPartitions() != 3 {
			t.Fatalf("topic payments: %v", tp)
		}
	}
	var ns cpv1.Namespace
	if err := protojson.Unmarshal([]byte(cp.ok(t, key, "namespace", "get", "acme/dev/shop/orders", "-o", "json")), &ns); err != nil ||
		ns.GetPolicies().GetRetention().GetSizeMb() != 100 || ns.GetPolicies().GetMessageTtlSeconds() != 3600 {
		t.Fatalf("namespace get (%v): %v", err, &ns)
	}

	r = cp.as(t, key, "namespace", "delete", "acme/dev/shop/orders")
	if r.err == nil || !strings.HasPrefix(r.err.Error(), "FAILED_PRECONDITION: ") {
		t.Fatalf("namespace delete with topics: want FAILED_PRECONDITION, got %v", r.err)
	}
	contains(t, "topic delete", cp.ok(t, key, "topic", "delete", "acme/dev/shop/orders/events"), "deleted")
	if out := cp.ok(t, key, "topic", "list", "acme/dev/shop/orders"); strings.Contains(out, "events") {
		t.Fatalf("topic list after delete: %s", out)
	}

	// Without an agent the wait gives up at --timeout and says how to resume.
	// (--timeout covers the create call too: 300 ms was sometimes spent
	// before the operation existed on a loaded machine.)
	r = cp.as(t, key, "cluster", "create", "acme/dev2", "--region", "local-a", "--timeout", "2s")
	if r.err == nil {
		t.Fatalf("cluster create without an agent: want an error")
	}
	contains(t, "timeout", r.err.Error(), "--timeout reached", "still PENDING", "magnetar operation wait ")
	contains(t, "timeout progress", r.stderr, "CreateCluster acme/dev2: PENDING")

	// Cancelling the creation ends the operation CANCELLED; waiting for it fails.
	contains(t, "operation cancel", cp.ok(t, key, "operation", "cancel", id), "CANCELLED")
	r = cp.as(t, key, "operation", "wait", id)
	if r.err == nil || !strings.Contains(r.err.Error(), "CANCELLED") {
		t.Fatalf("operation wait on a cancelled operation: want an error, got %v", r.err)
	}
}

// playAgent acts as the region agent of cluster: once the cluster exists it
// reports PROGRESSING, waits until the CLI printed RUNNING on progress, then
// reports final. The returned channel yields the goroutine's error.
func (cp *controlPlane) playAgent(t *testing.T, progress *syncBuffer, cluster string, final cpv1.ReportClusterStatusRequest_State, msg string) <-chan error {
	done := make(chan error, 1)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+cp.opKey)
	go func() {
		done <- func() error {
			if err := poll(ctx, func() bool {
				_, err := cp.clusters.GetCluster(ctx, &cpv1.GetClusterRequest{Name: cluster})
				return err == nil
			}); err != nil {
				return errors.New("cluster never appeared")
			}
			// The CLI shows the operation's first state before the agent
			// moves it on (reporting at once, the agent could move it to
			// RUNNING before the CLI's first look, and PENDING was never
			// shown).
			if err := poll(ctx, func() bool { return strings.Contains(progress.String(), "PENDING") }); err != nil {
				return errors.New("the CLI never showed PENDING")
			}
			if _, err := cp.agent.ReportClusterStatus(ctx, &cpv1.ReportClusterStatusRequest{Name: cluster,
				State: cpv1.ReportClusterStatusRequest_PROGRESSING, Message: "starting brokers"}); err != nil {
				return err
			}
			if err := poll(ctx, func() bool { return strings.Contains(progress.String(), "RUNNING") }); err != nil {
				return errors.New("the CLI never showed RUNNING")
			}
			_, err := cp.agent.ReportClusterStatus(ctx, &cpv1.ReportClusterStatusRequest{Name: cluster, State: final,
				ServiceUrl: "pulsar://127.0.0.1:16650", AdminUrl: "http://127.0.0.1:18080", Message: msg})
			return err
		}()
	}()
	return done
}

func TestClusterCreateWaitsUntilReady(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	progress := &syncBuffer{}
	agent := cp.playAgent(t, progress, "organizations/acme/clusters/dev", cpv1.ReportClusterStatusRequest_READY, "")
	r := exec(t, progress, "cluster", "create", "acme", "dev", "--region", "regions/local-a", "--deletion-protection",
		"--endpoint", cp.addr, "--api-key", key)
	if err := <-agent; err != nil {
		t.Fatalf("agent: %v", err)
	}
	if r.err != nil {
		t.Fatalf("cluster create: %v\nstderr: %s", r.err, r.stderr)
	}
	contains(t, "progress", r.stderr, "CreateCluster acme/dev: PENDING", "CreateCluster acme/dev: RUNNING", "CreateCluster acme/dev: SUCCEEDED")
	contains(t, "cluster create output", r.stdout, "SERVICE URL", "acme/dev", "READY", "pulsar://127.0.0.1:16650")

	contains(t, "cluster get", cp.ok(t, key, "cluster", "get", "acme", "dev"), "READY", "pulsar://127.0.0.1:16650", "true")

	// Deletion protection refuses the delete with the API's code and message.
	r = cp.as(t, key, "cluster", "delete", "acme/dev")
	if r.err == nil || !strings.HasPrefix(r.err.Error(), "FAILED_PRECONDITION: ") || !strings.Contains(r.err.Error(), "deletion_protection") {
		t.Fatalf("cluster delete while protected: %v", r.err)
	}
	// Changing only the protection completes at once.
	contains(t, "cluster update", cp.ok(t, key, "cluster", "update", "acme/dev", "--deletion-protection=false"), "false")
}

func TestClusterCreateFailed(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	progress := &syncBuffer{}
	agent := cp.playAgent(t, progress, "organizations/acme/clusters/dev", cpv1.ReportClusterStatusRequest_FAILED, "no capacity left in region")
	r := exec(t, progress, "cluster", "create", "acme/dev", "--region", "local-a", "--endpoint", cp.addr, "--api-key", key)
	if err := <-agent; err != nil {
		t.Fatalf("agent: %v", err)
	}
	if r.err == nil {
		t.Fatalf("cluster create: want an error, got stdout %q", r.stdout)
	}
	contains(t, "error", r.err.Error(), "FAILED", "no capacity left in region")
	contains(t, "progress", r.stderr, "PENDING", "FAILED")
	contains(t, "cluster get", cp.ok(t, key, "cluster", "get", "acme/dev"), "FAILED", "no capacity left in region")
}

func TestErrors(t *testing.T) {
	cp := startControlPlane(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("mgk_nope_nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"bad key", []string{"org", "list", "--endpoint", cp.addr, "--api-key", "mgk_bad_key"}, []string{"UNAUTHENTICATED: "}},
		{"bad key file", []string{"org", "list", "--endpoint", cp.addr, "--api-key-file", keyFile}, []string{"UNAUTHENTICATED: "}},
		{"no key", []string{"org", "list", "--endpoint", cp.addr}, []string{"no API key"}},
		{"missing args", []string{"cluster", "get", "--endpoint", cp.addr, "--api-key", cp.opKey}, []string{"missing ORG/CLUSTER", "Usage: magnetar cluster get"}},
		{"too many args", []string{"org", "get", "a", "b", "--api-key", cp.opKey}, []string{"too many arguments"}},
		{"bad path", []string{"cluster", "create", "acme", "--region", "local-a", "--endpoint", cp.addr, "--api-key", cp.opKey}, []string{`invalid resource "acme"`, "ORG/CLUSTER"}},
		{"missing region", []string{"cluster", "create", "acme/dev", "--endpoint", cp.addr, "--api-key", cp.opKey}, []string{"--region is required", "Usage:"}},
		{"zero brokers", []string{"cluster", "create", "acme/dev", "--region", "local-a", "--brokers", "0", "--endpoint", cp.addr, "--api-key", cp.opKey}, []string{"--brokers and --bookies must be at least 1"}},
		{"zero bookies on update", []string{"cluster", "update", "acme/dev", "--bookies", "0", "--endpoint", cp.addr, "--api-key", cp.opKey}, []string{"--brokers and --bookies must be at least 1"}},
		{"no subcommand", []string{"topic"}, []string{"missing subcommand"}},
		{"bad output", []string{"org", "list", "-o", "yaml", "--api-key", cp.opKey}, []string{"--output must be text or json"}},
		{"not found", []string{"org", "get", "nope", "--endpoint", cp.addr, "--api-key", cp.opKey}, []string{"NOT_FOUND: "}},
		{"retention half", []string{"namespace", "create", "a/b/c/d", "--retention-mb", "1", "--endpoint", cp.addr, "--api-key", cp.opKey}, []string{"both --retention-minutes and --retention-mb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := exec(t, nil, tc.args...)
			if r.err == nil {
				t.Fatalf("want an error, got stdout %q", r.stdout)
			}
			contains(t, "error", r.err.Error(), tc.want...)
		})
	}

	// The key may come from the environment.
	t.Setenv(cli.EnvEndpoint, cp.addr)
	t.Setenv(cli.EnvAPIKey, cp.opKey)
	if r := exec(t, nil, "region", "list"); r.err != nil {
		t.Fatalf("region list with env key: %v", r.err)
	}
}

// TestFunctionCommands creates, reads, updates and deletes a function, a
// source and a sink through the CLI's flags; API refusals come back as
// "CODE: message".
func TestFunctionCommands(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	cp.ok(t, key, "cluster", "create", "acme", "dev", "--region", "local-a", "--no-wait")
	cp.ok(t, key, "tenant", "create", "acme/dev/shop")
	cp.ok(t, key, "namespace", "create", "acme/dev/shop/orders")

	out := cp.ok(t, key, "function", "create", "acme/dev/shop/orders/exclaim", "--runtime", "python", "--class-name", "exclaim.Exclaim",
		"--package-url", "https://packages.example.com/exclaim.py", "--inputs", "persistent://shop/orders/in,persistent://shop/orders/in2",
		"--output", "persistent://shop/orders/out", "--user-config", `{"suffix":"!"}`, "--ram", "256Mi", "--subscription-position", "earliest")
	contains(t, "function create", out, "acme/dev/shop/orders/exclaim", "PENDING", "PYTHON", "persistent://shop/orders/in,persistent://shop/orders/in2")
	var fn cpv1.PulsarFunction
	if err := protojson.Unmarshal([]byte(cp.ok(t, key, "function", "get", "acme/dev/shop/orders/exclaim", "-o", "json")), &fn); err != nil ||
		fn.GetResources().GetRamBytes() != 256<<20 || fn.GetResources().GetCpu() != 1 || fn.GetUserConfig() != `{"suffix":"!"}` ||
		fn.GetSubscriptionPosition() != cpv1.SubscriptionPosition_EARLIEST || fn.GetParallelism() != 1 {
		t.Fatalf("function get (%v): %v", err, &fn)
	}
	contains(t, "function update", cp.ok(t, key, "function", "update", "acme/dev/shop/orders/exclaim", "--parallelism", "3"), "exclaim", "3")
	contains(t, "function list", cp.ok(t, key, "function", "list", "acme/dev/shop/orders"), "acme/dev/shop/orders/exclaim", "PYTHON", "3")
	// runtime is fixed once created: update has no such flag.
	if r := cp.as(t, key, "function", "update", "acme/dev/shop/orders/exclaim", "--runtime", "JAVA"); r.err == nil {
		t.Fatal("function update --runtime: want an error")
	}
	r := cp.as(t, key, "function", "create", "acme/dev/shop/orders/bad", "--runtime", "PYTHON", "--class-name", "x.Y",
		"--package-url", "file:///tmp/x.py", "--inputs", "persistent://shop/orders/in")
	if r.err == nil || !strings.HasPrefix(r.err.Error(), "INVALID_ARGUMENT: function.package_url: file: URLs are not accepted") {
		t.Fatalf("function create with a file: URL: %v", r.err)
	}
	r = cp.as(t, key, "function", "create", "acme/dev/shop/orders/big", "--runtime", "PYTHON", "--class-name", "x.Y",
		"--package-url", "https://x/y.py", "--inputs", "persistent://shop/orders/in", "--parallelism", "40")
	if r.err == nil || !strings.Contains(r.err.Error(), "max_function_instances") {
		t.Fatalf("function create over the limit: %v", r.err)
	}
	if r := cp.as(t, key, "function", "create", "acme/dev/shop/orders/x", "--runtime", "COBOL"); r.err == nil ||
		!strings.Contains(r.err.Error(), "want one of JAVA, PYTHON, GO") {
		t.Fatalf("function create --runtime COBOL: %v", r.err)
	}

	out = cp.ok(t, key, "source", "create", "acme/dev/shop/orders/gen", "--archive", "builtin://data-generator",
		"--topic", "persistent://shop/orders/in", "--configs", `{"sleepBetweenMessages":"1000"}`)
	contains(t, "source create", out, "acme/dev/shop/orders/gen", "builtin://data-generator", "persistent://shop/orders/in")
	contains(t, "source update", cp.ok(t, key, "source", "update", "acme/dev/shop/orders/gen", "--parallelism", "2"), "gen", "2")
	out = cp.ok(t, key, "sink", "create", "acme/dev/shop/orders/store", "--package-url", "https://x/sink.nar", "--class-name", "com.example.Sink",
		"--inputs", "persistent://shop/orders/out", "--max-message-retries", "3", "--dead-letter-topic", "persistent://shop/orders/dlq")
	contains(t, "sink create", out, "acme/dev/shop/orders/store", "https://x/sink.nar", "persistent://shop/orders/out")
	contains(t, "sink list", cp.ok(t, key, "sink", "list", "acme/dev/shop/orders"), "store")

	for _, c := range [][]string{{"function", "exclaim"}, {"source", "gen"}, {"sink", "store"}} {
		contains(t, c[0]+" delete", cp.ok(t, key, c[0], "delete", "acme/dev/shop/orders/"+c[1]), "deleted")
	}
	if out := cp.ok(t, key, "function", "list", "acme/dev/shop/orders"); strings.Contains(out, "exclaim") {
		t.Fatalf("function list after delete: %s", out)
	}
}
