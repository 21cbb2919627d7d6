package pulsaradmin

import (
	"testing"

	"google.golang.org/protobuf/proto"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// The desired function maps onto Pulsar's FunctionConfig, and only a
// change of a field the control plane manages counts as a difference:
// what the worker fills in (defaults, fqfn) or reorders does not.
func TestFunctionConfigAndDiff(t *testing.T) {
	f := &cpv1.PulsarFunction{Name: "organizations/o/clusters/c/tenants/t/namespaces/n/functions/f", Runtime: cpv1.PulsarFunction_PYTHON,
		ClassName: "m.F", PackageUrl: "https://x/f.py", Inputs: []string{"persistent://t/n/b", "persistent://t/n/a"},
		UserConfig: `{"k": 1}`, Parallelism: 2, Resources: &cpv1.FunctionResources{RamBytes: 1 << 20},
		SubscriptionPosition: cpv1.SubscriptionPosition_EARLIEST, MaxMessageRetries: proto.Int32(3)}
	want, err := FunctionConfigOf(f)
	if err != nil {
		t.Fatal(err)
	}
	if want.Tenant != "t" || want.Namespace != "n" || want.Name != "f" || want.Runtime != "PYTHON" || *want.Py != "https://x/f.py" ||
		want.Parallelism != 2 || want.Resources.RAM != 1<<20 || want.Resources.CPU != 1 || want.ProcessingGuarantees != "ATLEAST_ONCE" ||
		want.SubscriptionPosition != "Earliest" || *want.MaxMessageRetries != 3 || !want.AutoAck || want.UserConfig["k"] != 1.0 {
		t.Fatalf("config %+v", want)
	}
	// As the worker answers it: inputs reordered, defaults and fqfn added.
	got := *want
	got.Inputs = []string{"persistent://t/n/a", "persistent://t/n/b"}
	got.FQFN, got.SubscriptionPosition, got.TimeoutMs = "t/n/f", "earliest", proto.Int64(5)
	if d, err := differs(want, &got, functionKeys, want.ClassName); err != nil || d {
		t.Fatalf("differs with only worker-filled changes: %v %v", d, err)
	}
	got.Parallelism = 3
	if d, _ := differs(want, &got, functionKeys, want.ClassName); !d {
		t.Fatal("a parallelism change is not a difference")
	}
	if packageOf(&got) != "https://x/f.py" {
		t.Fatalf("package %q", packageOf(&got))
	}
	// A connector's class is compared only when the API names one.
	src := &cpv1.PulsarSource{Name: "organizations/o/clusters/c/tenants/t/namespaces/n/sources/s", Archive: "builtin://gen", Topic: "persistent://t/n/x"}
	ws, archive, err := SourceConfigOf(src)
	if err != nil || archive != "builtin://gen" {
		t.Fatal(archive, err)
	}
	gs := *ws
	gs.ClassName = "org.example.GenSource"
	if d, err := differs(ws, &gs, sourceKeys, ws.ClassName); err != nil || d {
		t.Fatalf("the connector's own class counted as a difference: %v %v", d, err)
	}
	if _, _, _, err := componentNames(src.Name, "functions"); err == nil {
		t.Fatal("a source name was accepted as a function name")
	}
}

func TestSummarizeStatus(t *testing.T) {
	st := summarize(3, 1, []instance{{2, false, ""}, {0, true, ""}, {1, true, "boom"}})
	if st.NumInstances != 3 || st.NumRunning != 1 || st.FirstError.GetInstanceId() != 1 || st.FirstError.GetMessage() != "boom" {
		t.Fatalf("status %v", st)
	}
	if st := summarize(1, 0, []instance{{0, false, ""}}); st.FirstError.GetMessage() != "not running" {
		t.Fatalf("status %v", st)
	}
	if st := summarize(2, 2, []instance{{0, true, ""}, {1, true, ""}}); st.FirstError != nil {
		t.Fatalf("status %v", st)
	}
}
