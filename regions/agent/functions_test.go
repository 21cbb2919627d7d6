package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/provisioner/provisionertest"

	"github.com/magnetar-dev/magnetar/dataplane/functions/pyinstance/pyinstancetest"
)

const exclaimPy = `from pulsar import Function

class Exclaim(Function):
    def process(self, input, context):
        return input + context.get_user_config_value('suffix')
`

// TestFunctionResources creates a Python function through the API with its
// package at an http:// URL: the agent creates it on the cluster's
// function worker, which downloads the package and runs it (a message in
// comes out changed), and reports APPLIED with its instances running. A
// parallelism change reaches the worker; an unchanged function is neither
// updated nor re-reported; a function whose class is missing reports the
// failing instance; deletion removes it from the worker.
func TestFunctionResources(t *testing.T) {
	pyinstancetest.Require(t)
	cp := newControlPlane(t, "sqlite::memory:")
	cp.setup()
	sp := provisionertest.NewStandalones(t)
	runAgent(t, cp, sp)
	if op := cp.wait(cp.createCluster("c1", 1)); op.State != cpv1.Operation_SUCCEEDED {
		t.Fatalf("create cluster: %v", op)
	}
	st := must[provisioner.ClusterStatus](t)(sp.Status(t.Context(), c1))
	pkgs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/exclaim.py" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(exclaimPy))
	}))
	defer pkgs.Close()

	pc := cp.pulsar()
	must[*cpv1.Tenant](t)(pc.tenants.CreateTenant(cp.ctx(), &cpv1.CreateTenantRequest{Parent: c1, TenantId: "t1"}))
	must[*cpv1.Namespace](t)(pc.namespaces.CreateNamespace(cp.ctx(), &cpv1.CreateNamespaceRequest{Parent: t1, NamespaceId: "ns1"}))
	fns := cpv1.NewFunctionsClient(cp.conn)
	in, out := "persistent://t1/ns1/in", "persistent://t1/ns1/out"
	fName := ns1 + "/functions/exclaim"
	must[*cpv1.PulsarFunction](t)(fns.CreateFunction(cp.ctx(), &cpv1.CreateFunctionRequest{Parent: ns1, FunctionId: "exclaim",
		Function: &cpv1.PulsarFunction{Runtime: cpv1.PulsarFunction_PYTHON, ClassName: "exclaim.Exclaim",
			PackageUrl: pkgs.URL + "/exclaim.py", Inputs: []string{in}, Output: out, UserConfig: `{"suffix": "!"}`,
			SubscriptionPosition: cpv1.SubscriptionPosition_EARLIEST,
			Resources:            &cpv1.FunctionResources{RamBytes: 128 << 20}}}))

	running := func(n int32) func() bool {
		return func() bool {
			f, err := fns.GetFunction(cp.ctx(), &cpv1.GetFunctionRequest{Name: fName})
			return err == nil && f.State == cpv1.PulsarResourceState_APPLIED && f.StatusMessage == "" &&
				f.GetStatus().GetNumInstances() == n && f.GetStatus().GetNumRunning() == n && f.GetStatus().GetFirstError() == nil
		}
	}
	eventuallyFor(t, 90*time.Second, "the function APPLIED with its instance running", running(1))

	// The worker has the config the API asked for.
	var cfg struct {
		Runtime     string         `json:"runtime"`
		ClassName   string         `json:"className"`
		Inputs      []string       `json:"inputs"`
		Output      string         `json:"output"`
		Parallelism int            `json:"parallelism"`
		UserConfig  map[string]any `json:"userConfig"`
		Py          string         `json:"py"`
		Resources   struct {
			RAM int64 `json:"ram"`
		} `json:"resources"`
	}
	if code := adminGet(t, st.AdminURL, "/admin/v3/functions/t1/ns1/exclaim", &cfg); code != http.StatusOK ||
		cfg.Runtime != "PYTHON" || cfg.ClassName != "exclaim.Exclaim" || len(cfg.Inputs) != 1 || cfg.Inputs[0] != in ||
		cfg.Output != out || cfg.Parallelism != 1 || cfg.UserConfig["suffix"] != "!" || cfg.Py != pkgs.URL+"/exclaim.py" ||
		cfg.Resources.RAM != 128<<20 {
		t.Fatalf("function on the worker: %d %+v", code, cfg)
	}

	// It runs: a message in comes out with the suffix.
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: st.ServiceURL, OperationTimeout: 30 * time.Second, Logger: plog.NewLoggerWithSlog(quiet())})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: out, SubscriptionName: "verify", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: in})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatalf("receive the function's output: %v", err)
	}
	if string(m.Payload()) != "hello!" {
		t.Fatalf("function output %q, want hello!", m.Payload())
	}
	cons.Ack(m)

	// A settled function is neither updated on the worker nor re-reported:
	// its record keeps its etag across status reads.
	_, _, etag := cp.functionState(fName)
	time.Sleep(3 * time.Second) // three reconcile intervals of status reads
	if _, _, now := cp.functionState(fName); now != etag {
		t.Fatalf("an unchanged function was rewritten: etag %s, was %s", now, etag)
	}

	// Parallelism 2 reaches the worker; both instances run.
	must[*cpv1.PulsarFunction](t)(fns.UpdateFunction(cp.ctx(), &cpv1.UpdateFunctionRequest{
		Function: &cpv1.PulsarFunction{Name: fName, Parallelism: 2}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"parallelism"}}}))
	eventuallyFor(t, 90*time.Second, "two instances running", running(2))
	if code := adminGet(t, st.AdminURL, "/admin/v3/functions/t1/ns1/exclaim", &cfg); code != http.StatusOK || cfg.Parallelism != 2 {
		t.Fatalf("function on the worker after the update: %d %+v", code, cfg)
	}

	// A class the package does not have: applied, and the failing
	// instance is reported.
	bName := ns1 + "/functions/broken"
	must[*cpv1.PulsarFunction](t)(fns.CreateFunction(cp.ctx(), &cpv1.CreateFunctionRequest{Parent: ns1, FunctionId: "broken",
		Function: &cpv1.PulsarFunction{Runtime: cpv1.PulsarFunction_PYTHON, ClassName: "exclaim.Missing",
			PackageUrl: pkgs.URL + "/exclaim.py", Inputs: []string{"persistent://t1/ns1/in2"}}}))
	eventuallyFor(t, 90*time.Second, "the broken function's failing instance reported", func() bool {
		f, err := fns.GetFunction(cp.ctx(), &cpv1.GetFunctionRequest{Name: bName})
		return err == nil && f.State == cpv1.PulsarResourceState_APPLIED && f.GetStatus().GetNumInstances() == 1 &&
			f.GetStatus().GetFirstError().GetMessage() != ""
	})

	// Deletion removes them from the worker.
	for _, n := range []string{fName, bName} {
		must[*emptypb.Empty](t)(fns.DeleteFunction(cp.ctx(), &cpv1.DeleteFunctionRequest{Name: n}))
	}
	eventuallyFor(t, 30*time.Second, "the functions gone from the worker", func() bool {
		return adminGet(t, st.AdminURL, "/admin/v3/functions/t1/ns1/exclaim", nil) == http.StatusNotFound &&
			adminGet(t, st.AdminURL, "/admin/v3/functions/t1/ns1/broken", nil) == http.StatusNotFound
	})
	if _, err := fns.GetFunction(cp.ctx(), &cpv1.GetFunctionRequest{Name: fName}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetFunction after delete: %v", err)
	}
}

// functionState reads a function's state, message and etag.
func (cp *controlPlane) functionState(name string) (cpv1.PulsarResourceState, string, string) {
	f, err := cpv1.NewFunctionsClient(cp.conn).GetFunction(cp.ctx(), &cpv1.GetFunctionRequest{Name: name})
	if err != nil {
		return 0, err.Error(), ""
	}
	return f.GetState(), f.GetStatusMessage(), f.GetEtag()
}

// eventuallyFor polls cond until it holds or d passes.
func eventuallyFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
