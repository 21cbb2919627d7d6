package agent_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/apiserver"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
	"github.com/magnetar-dev/magnetar/policy"
	"github.com/magnetar-dev/magnetar/regions/agent"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// TestMain checks for leaked goroutines, except the Pulsar Go client's
// producer timeout loop (v0.19.0), which outlives Producer.Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// controlPlane is a real API server (SQLite store, real policy) on a
// loopback port, with operator clients.
type controlPlane struct {
	t        *testing.T
	st       store.Store
	keyFile  string
	addr     string
	key      string
	srv      *apiserver.Server
	done     chan error
	conn     *grpc.ClientConn
	regions  cpv1.RegionsClient
	orgs     cpv1.OrganizationsClient
	clusters cpv1.ClustersClient
	ops      cpv1.OperationsClient
	change   func(*apiserver.Config)
}

func newControlPlane(t *testing.T, dsn string) *controlPlane {
	t.Helper()
	return newControlPlaneWith(t, dsn, nil)
}

// newControlPlaneWith is newControlPlane with a change to the server's
// config.
func newControlPlaneWith(t *testing.T, dsn string, change func(*apiserver.Config)) *controlPlane {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cp := &controlPlane{t: t, st: st, keyFile: filepath.Join(t.TempDir(), "bootstrap.key"), addr: "127.0.0.1:0", change: change}
	cp.start()
	raw, err := os.ReadFile(cp.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cp.key = strings.TrimSpace(string(raw))
	cp.conn, err = grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.conn.Close() })
	cp.regions, cp.orgs = cpv1.NewRegionsClient(cp.conn), cpv1.NewOrganizationsClient(cp.conn)
	cp.clusters, cp.ops = cpv1.NewClustersClient(cp.conn), cpv1.NewOperationsClient(cp.conn)
	return cp
}

// start serves on cp.addr (a free port the first time, the same after).
func (cp *controlPlane) start() {
	cp.t.Helper()
	engine, err := policy.New()
	if err != nil {
		cp.t.Fatal(err)
	}
	cfg := apiserver.Config{Listen: cp.addr, Store: cp.st, Authorizer: engine, Logger: quiet(), BootstrapKeyFile: cp.keyFile}
	if cp.change != nil {
		cp.change(&cfg)
	}
	srv, err := apiserver.New(cfg)
	if err != nil {
		cp.t.Fatal(err)
	}
	cp.srv, cp.addr, cp.done = srv, srv.Addr().String(), make(chan error, 1)
	go func(done chan error) { done <- srv.Serve(context.Background()) }(cp.done)
	cp.t.Cleanup(cp.stop)
}

// stop shuts the server down (idempotent).
func (cp *controlPlane) stop() {
	if cp.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cp.srv.Shutdown(ctx); err != nil {
		cp.t.Errorf("Shutdown: %v", err)
	}
	if err := <-cp.done; err != nil {
		cp.t.Errorf("Serve: %v", err)
	}
	cp.srv = nil
}

func (cp *controlPlane) ctx() context.Context {
	return metadata.AppendToOutgoingContext(cp.t.Context(), "authorization", "Bearer "+cp.key)
}

// must returns v, failing the test on err: must[T](t)(call()).
func must[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// setup registers region r1 and organization acme.
func (cp *controlPlane) setup() {
	must[*cpv1.Region](cp.t)(cp.regions.CreateRegion(cp.ctx(), &cpv1.CreateRegionRequest{RegionId: "r1"}))
	must[*cpv1.Organization](cp.t)(cp.orgs.CreateOrganization(cp.ctx(), &cpv1.CreateOrganizationRequest{OrganizationId: "acme"}))
}

func (cp *controlPlane) createCluster(id string, brokers int32) *cpv1.Operation {
	return must[*cpv1.Operation](cp.t)(cp.clusters.CreateCluster(cp.ctx(), &cpv1.CreateClusterRequest{Parent: "organizations/acme", ClusterId: id,
		Cluster: &cpv1.Cluster{Region: "regions/r1", Size: &cpv1.ClusterSize{Brokers: brokers, Bookies: 1}}}))
}

// wait waits for op to be done and returns it.
func (cp *controlPlane) wait(op *cpv1.Operation) *cpv1.Operation {
	cp.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := cp.ops.WaitOperation(cp.ctx(), &cpv1.WaitOperationRequest{Name: op.Name, Timeout: durationpb.New(5 * time.Second)})
		if err == nil && got.Done {
			return got
		}
		if time.Now().After(deadline) {
			cp.t.Fatalf("operation %s (%s) not done: %v %v", op.Name, op.Type, got, err)
		}
	}
}

// runAgent runs an agent on p until the test ends or the returned stop is called.
func runAgent(t *testing.T, cp *controlPlane, p provisioner.Provisioner) (stop func()) {
	t.Helper()
	return runAgentWith(t, cp, p, nil)
}

// runAgentWith is runAgent with a change to the agent's config.
func runAgentWith(t *testing.T, cp *controlPlane, p provisioner.Provisioner, change func(*agent.Config)) (stop func()) {
	t.Helper()
	cfg := agent.Config{Region: "r1", ControlPlaneURL: "http://" + cp.addr, APIKey: cp.key, Provisioner: p,
		Logger: quiet(), PollTimeout: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond, ReconcileInterval: time.Second}
	if change != nil {
		change(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const c1 = "organizations/acme/clusters/c1"

func TestCreateUpdateDelete(t *testing.T) {
	cp := newControlPlane(t, "sqlite::memory:")
	cp.setup()
	mem := provisioner.NewMemory()
	runAgent(t, cp, mem)

	op := cp.wait(cp.createCluster("c1", 1))
	if op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("create: %v", op)
	}
	cl := must[*cpv1.Cluster](t)(cp.clusters.GetCluster(cp.ctx(), &cpv1.GetClusterRequest{Name: c1}))
	st := must[provisioner.ClusterStatus](t)(mem.Status(t.Context(), c1))
	// A cluster that serves TLS publishes its TLS URLs as the client URLs.
	if cl.State != cpv1.Cluster_READY || cl.ServiceUrl != st.TLSServiceURL || cl.AdminUrl != st.TLSAdminURL || cl.ServiceUrl == "" {
		t.Fatalf("cluster %v; provisioner status %+v", cl, st)
	}
	if cl.TlsServiceUrl != st.TLSServiceURL || cl.TlsAdminUrl != st.TLSAdminURL || cl.CaCertificate != st.CACertPEM ||
		!strings.HasPrefix(cl.TlsServiceUrl, "pulsar+ssl://") || !strings.Contains(cl.CaCertificate, "BEGIN CERTIFICATE") {
		t.Fatalf("cluster's TLS URLs and CA %q %q %q; provisioner status %+v", cl.TlsServiceUrl, cl.TlsAdminUrl, cl.CaCertificate, st)
	}

	cl.Size.Brokers = 3
	op = cp.wait(must[*cpv1.Operation](t)(cp.clusters.UpdateCluster(cp.ctx(), &cpv1.UpdateClusterRequest{Cluster: cl,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"size"}}})))
	if op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("update: %v", op)
	}
	if st := must[provisioner.ClusterStatus](t)(mem.Status(t.Context(), c1)); st.Size.Brokers != 3 {
		t.Fatalf("after the update the provisioner has %+v", st.Size)
	}
	cl = must[*cpv1.Cluster](t)(cp.clusters.GetCluster(cp.ctx(), &cpv1.GetClusterRequest{Name: c1}))
	if cl.State != cpv1.Cluster_READY || strings.Count(cl.ServiceUrl, ",") != 2 {
		t.Fatalf("after the update: %v", cl)
	}

	// Heartbeats reach the region.
	eventually(t, "a HEALTHY heartbeat", func() bool {
		r, err := cp.regions.GetRegion(cp.ctx(), &cpv1.GetRegionRequest{Name: "regions/r1"})
		return err == nil && r.GetStatus().GetState() == cpv1.RegionStatus_HEALTHY && r.GetStatus().GetMessage() == "1 cluster, 1 ready"
	})

	op = cp.wait(must[*cpv1.Operation](t)(cp.clusters.DeleteCluster(cp.ctx(), &cpv1.DeleteClusterRequest{Name: c1})))
	if op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("delete: %v", op)
	}
	if _, err := cp.clusters.GetCluster(cp.ctx(), &cpv1.GetClusterRequest{Name: c1}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetCluster after delete: %v", err)
	}
	if _, err := mem.Status(t.Context(), c1); !errors.Is(err, provisioner.ErrNotFound) {
		t.Fatalf("provisioner still has the cluster: %v", err)
	}
}

func TestProvisioningFailure(t *testing.T) {
	cp := newControlPlane(t, "sqlite::memory:")
	cp.setup()
	mem := provisioner.NewMemory()
	mem.FailApply(c1, "no capacity left")
	runAgent(t, cp, mem)
	op := cp.wait(cp.createCluster("c1", 1))
	if op.State != cpv1.Operation_FAILED || !strings.Contains(op.GetError().GetMessage(), "no capacity left") {
		t.Fatalf("want a FAILED operation naming the cause, got %v", op)
	}
	cl := must[*cpv1.Cluster](t)(cp.clusters.GetCluster(cp.ctx(), &cpv1.GetClusterRequest{Name: c1}))
	if cl.State != cpv1.Cluster_FAILED {
		t.Fatalf("cluster %v", cl)
	}
	// Once the provisioner recovers, the periodic reconcile makes it READY.
	mem.FailApply(c1, "")
	eventually(t, "the cluster to recover", func() bool {
		cl, err := cp.clusters.GetCluster(cp.ctx(), &cpv1.GetClusterRequest{Name: c1})
		return err == nil && cl.State == cpv1.Cluster_READY
	})
}

// TestRestartResyncs restarts the agent: the full resync changes nothing
// that did not change, and a deletion made while the agent was down is
// carried out.
func TestRestartResyncs(t *testing.T) {
	cp := newControlPlane(t, "sqlite::memory:")
	cp.setup()
	mem := provisioner.NewMemory()
	stop := runAgent(t, cp, mem)
	cp.wait(cp.createCluster("c1", 1))
	cp.wait(cp.createCluster("c2", 1))
	stop()

	// While the agent is down: delete c2, create c3.
	delOp := must[*cpv1.Operation](t)(cp.clusters.DeleteCluster(cp.ctx(), &cpv1.DeleteClusterRequest{Name: "organizations/acme/clusters/c2"}))
	createOp := cp.createCluster("c3", 1)

	runAgent(t, cp, mem)
	if op := cp.wait(createOp); op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("create while the agent was down: %v", op)
	}
	if op := cp.wait(delOp); op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("delete while the agent was down: %v", op)
	}
	if n := mem.Changes(c1); n != 1 {
		t.Fatalf("the resync re-applied the unchanged cluster c1: %d changes, want 1", n)
	}
	names := must[[]string](t)(mem.List(t.Context()))
	if strings.Join(names, " ") != c1+" organizations/acme/clusters/c3" {
		t.Fatalf("provisioner holds %v", names)
	}
}

// TestControlPlaneOutage stops the control plane: the data plane stays, and
// the agent resumes when the control plane is back.
func TestControlPlaneOutage(t *testing.T) {
	cp := newControlPlane(t, "sqlite://"+filepath.Join(t.TempDir(), "cp.db"))
	cp.setup()
	mem := provisioner.NewMemory()
	runAgent(t, cp, mem)
	cp.wait(cp.createCluster("c1", 1))

	cp.stop()
	// The agent keeps retrying; the data plane is untouched.
	if st, err := mem.Status(t.Context(), c1); err != nil || st.State != provisioner.StateReady {
		t.Fatalf("during the outage: %+v %v", st, err)
	}
	cp.start()
	op := cp.wait(cp.createCluster("c2", 1))
	if op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("create after the outage: %v", op)
	}
	if n := mem.Changes(c1); n != 1 {
		t.Fatalf("c1 changed %d times, want 1", n)
	}
}
