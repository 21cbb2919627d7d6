package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// buildGoFunction builds one of client/functions/pf's example functions.
func buildGoFunction(t *testing.T, example string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), example)
	cmd := exec.Command("go", "build", "-o", bin, "github.com/magnetar-dev/magnetar/client/functions/pf/examples/"+example)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", example, err, out)
	}
	return bin
}

// TestGoPulsarAdminDrivesFunctions drives every functions endpoint with
// the Go client's pulsaradmin (API V3) against a Go function (our pf
// package's exclamation example) running on the standalone's worker.
func TestGoPulsarAdminDrivesFunctions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go function")
	}
	bin := buildGoFunction(t, "exclamation")
	s := startStandalone(t)
	adm, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: s.WebServiceURL(), PulsarAPIVersion: config.V3})
	if err != nil {
		t.Fatal(err)
	}
	fns := adm.Functions()
	in, out := "persistent://public/default/pa-in", "persistent://public/default/pa-out"
	goRuntime := utils.GoRuntime
	cfg := &utils.FunctionConfig{
		Tenant: "public", Namespace: "default", Name: "excl", Runtime: goRuntime, Go: &bin,
		Inputs: []string{in}, Output: out, Parallelism: 1, AutoAck: true, CleanupSubscription: true,
		ForwardSourceMessageProperty: true,
	}
	if err := fns.CreateFunc(cfg, bin); err != nil {
		t.Fatalf("CreateFunc: %v", err)
	}
	var rerr rest.Error
	if err := fns.CreateFunc(cfg, bin); !errors.As(err, &rerr) || rerr.Code != 400 {
		t.Fatalf("CreateFunc twice: %v, want 400", err)
	}
	waitRunning := func(n int) {
		t.Helper()
		eventually(t, 60*time.Second, "instances running", func() (bool, string) {
			st, err := fns.GetFunctionStatus("public", "default", "excl")
			return err == nil && st.NumRunning == n, ""
		})
	}
	waitRunning(1)
	names, err := fns.GetFunctions("public", "default")
	if err != nil || !slices.Contains(names, "excl") {
		t.Fatalf("GetFunctions: %v %v", names, err)
	}
	got, err := fns.GetFunction("public", "default", "excl")
	if err != nil || got.Runtime != "GO" || got.Output != out || !slices.Contains(got.Inputs, in) {
		t.Fatalf("GetFunction: %+v %v", got, err)
	}

	cl := standalonetest.NewClient(t, s.ServiceURL())
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: out, SubscriptionName: "check"})
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
	for range 10 {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("go")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(msg.Payload()) != "go!" {
			t.Fatalf("output %q", msg.Payload())
		}
		cons.Ack(msg)
	}
	// The instance counts a message processed once its output is
	// acknowledged, which may be a moment after a consumer saw it.
	eventually(t, 10*time.Second, "instance status counts", func() (bool, string) {
		st, err := fns.GetFunctionStatusWithInstanceID("public", "default", "excl", 0)
		return err == nil && st.Running && st.NumReceived >= 10 && st.NumSuccessfullyProcessed >= 10, fmt.Sprintf("%+v %v", st, err)
	})
	stats, err := fns.GetFunctionStats("public", "default", "excl")
	if err != nil || stats.ProcessedSuccessfullyTotal < 10 {
		t.Fatalf("stats: %+v %v", stats, err)
	}
	if is, err := fns.GetFunctionStatsWithInstanceID("public", "default", "excl", 0); err != nil || is.ReceivedTotal < 10 {
		t.Fatalf("instance stats: %+v %v", is, err)
	}
	// pulsaradmin v0.19.0 discards the answer's body (it returns ""), so
	// the value is checked on a plain call too.
	if _, err := fns.TriggerFunction("public", "default", "excl", in, "hey", ""); err != nil {
		t.Fatalf("TriggerFunction: %v", err)
	}
	body, ct := multipartBody(t, map[string]string{"data": "ho", "topic": in}, nil, "")
	if code, b := call(t, "POST", s.WebServiceURL()+"/admin/v3/functions/public/default/excl/trigger", body, ct); code != 200 || string(b) != "ho!" {
		t.Fatalf("trigger: %d %q", code, b)
	}
	if err := fns.PutFunctionState("public", "default", "excl", utils.FunctionState{Key: "k", StringValue: "v"}); err != nil {
		t.Fatalf("PutFunctionState: %v", err)
	}
	if fs, err := fns.GetFunctionState("public", "default", "excl", "k"); err != nil || fs.StringValue != "v" {
		t.Fatalf("GetFunctionState: %+v %v", fs, err)
	}
	if err := fns.StopFunction("public", "default", "excl"); err != nil {
		t.Fatal(err)
	}
	waitRunning(0)
	if err := fns.StartFunction("public", "default", "excl"); err != nil {
		t.Fatal(err)
	}
	waitRunning(1)
	if err := fns.RestartFunctionWithID("public", "default", "excl", 0); err != nil {
		t.Fatal(err)
	}
	cfg.Parallelism = 2
	if err := fns.UpdateFunction(cfg, "", nil); err != nil {
		t.Fatalf("UpdateFunction: %v", err)
	}
	waitRunning(2)
	dl := filepath.Join(t.TempDir(), "pkg")
	if err := fns.DownloadFunctionByNs(dl, "public", "default", "excl"); err != nil {
		t.Fatalf("DownloadFunctionByNs: %v", err)
	}
	if err := fns.DeleteFunction("public", "default", "excl"); err != nil {
		t.Fatal(err)
	}
	if _, err := fns.GetFunction("public", "default", "excl"); !errors.As(err, &rerr) || rerr.Code != 404 {
		t.Fatalf("GetFunction after delete: %v, want 404", err)
	}
	if _, err := adm.Sources().GetBuiltInSources(); err != nil {
		t.Fatalf("GetBuiltInSources: %v", err)
	}
	if _, err := adm.Sinks().GetBuiltInSinks(); err != nil {
		t.Fatalf("GetBuiltInSinks: %v", err)
	}
}
