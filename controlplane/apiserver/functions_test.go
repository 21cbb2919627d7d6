package apiserver

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
)

// functionsSuite tests Pulsar functions, sources and sinks; each runs on a
// fresh server and store.
var functionsSuite = []struct {
	name string
	fn   func(*testing.T, *harness)
}{
	{"CRUD", testFunctionsCRUD},
	{"Validation", testFunctionsValidation},
	{"Authz", testFunctionsAuthz},
	{"Limits", testFunctionsLimits},
	{"AgentWatchAndReport", testFunctionsAgent},
}

func TestFunctionsSQLite(t *testing.T) {
	for _, tc := range functionsSuite {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t, "sqlite::memory:")) })
	}
}

func TestFunctionsPostgres(t *testing.T) {
	for _, tc := range functionsSuite {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHarness(t, pgtest.DSN(t))) })
	}
}

type functionClients struct {
	functions cpv1.FunctionsClient
	sources   cpv1.SourcesClient
	sinks     cpv1.SinksClient
}

func (h *harness) functions() functionClients {
	return functionClients{cpv1.NewFunctionsClient(h.conn), cpv1.NewSourcesClient(h.conn), cpv1.NewSinksClient(h.conn)}
}

// namespaceFor creates cluster prod of tn with tenant t and namespace ns
// and returns the namespace's name.
func (h *harness) namespaceFor(tn tenant) string {
	h.t.Helper()
	cl := h.readyCluster(tn, "prod", "regions/us-east")
	p := h.pulsar()
	ctx := h.authCtx(tn.key)
	must[*cpv1.Tenant](h.t)(p.tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: cl, TenantId: "t"}))
	must[*cpv1.Namespace](h.t)(p.namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: cl + "/tenants/t", NamespaceId: "ns"}))
	return cl + "/tenants/t/namespaces/ns"
}

func pyFunction() *cpv1.PulsarFunction {
	return &cpv1.PulsarFunction{Runtime: cpv1.PulsarFunction_PYTHON, ClassName: "exclaim.Exclaim",
		PackageUrl: "https://packages.example.com/exclaim.py", Inputs: []string{"persistent://t/ns/in"},
		Output: "persistent://t/ns/out", UserConfig: `{"suffix": "!"}`}
}

// Create, get, list, update and delete functions, sources and sinks
// through gRPC and REST, with defaults, request ids and etags.
func testFunctionsCRUD(t *testing.T, h *harness) {
	a := h.setup("acme")[0]
	ns := h.namespaceFor(a)
	f := h.functions()
	ctx := h.authCtx(a.key)

	fn := must[*cpv1.PulsarFunction](t)(f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "exclaim",
		Function: pyFunction(), RequestId: "rq-1"}))
	fName := ns + "/functions/exclaim"
	if fn.Name != fName || fn.State != cpv1.PulsarResourceState_PENDING || fn.Etag == "" || fn.Parallelism != 1 ||
		fn.ProcessingGuarantees != cpv1.ProcessingGuarantees_ATLEAST_ONCE || fn.SubscriptionPosition != cpv1.SubscriptionPosition_LATEST ||
		!proto.Equal(fn.Resources, &cpv1.FunctionResources{Cpu: 1, RamBytes: 1 << 30, DiskBytes: 10 << 30}) {
		t.Fatalf("create function (defaults filled): %v", fn)
	}
	again := must[*cpv1.PulsarFunction](t)(f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "exclaim",
		Function: pyFunction(), RequestId: "rq-1"}))
	if again.Uid != fn.Uid {
		t.Fatalf("replayed create: %v", again)
	}
	_, err := f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "exclaim", Function: pyFunction()})
	wantCode(t, err, codes.AlreadyExists, fName)
	_, err = f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns + "x", FunctionId: "f", Function: pyFunction()})
	wantCode(t, err, codes.NotFound, ns+"x")

	// REST: get, patch parallelism (the rest stays), list.
	code, body := h.rest(a.key, "GET", "/v1/"+fName, nil)
	if code != 200 || body["runtime"] != "PYTHON" || body["userConfig"] != `{"suffix": "!"}` {
		t.Fatalf("REST get function: %d %v", code, body)
	}
	code, body = h.rest(a.key, "PATCH", "/v1/"+fName, map[string]any{"parallelism": 3, "etag": fn.Etag})
	if code != 200 || body["parallelism"] != float64(3) || body["output"] != "persistent://t/ns/out" || body["state"] != "PENDING" {
		t.Fatalf("REST patch function: %d %v", code, body)
	}
	// A stale etag is refused; immutable fields are refused.
	_, err = f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: fName, Etag: fn.Etag, Parallelism: 2}})
	wantCode(t, err, codes.Aborted, "etag")
	_, err = f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: fName, Runtime: cpv1.PulsarFunction_JAVA}})
	wantCode(t, err, codes.InvalidArgument, "function.runtime: cannot be changed")
	_, err = f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: fName, SubscriptionName: "other"}})
	wantCode(t, err, codes.InvalidArgument, "function.subscription_name: cannot be changed")
	// The whole resource sent back (as a PATCH with every field) is fine.
	cur := must[*cpv1.PulsarFunction](t)(f.functions.GetFunction(ctx, &cpv1.GetFunctionRequest{Name: fName}))
	cur.Inputs = append(cur.Inputs, "persistent://t/ns/in2")
	upd := must[*cpv1.PulsarFunction](t)(f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: cur,
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"*"}}}))
	if len(upd.Inputs) != 2 || upd.Parallelism != 3 {
		t.Fatalf("update with *: %v", upd)
	}
	// Setting resources.ram_bytes alone keeps the other resources.
	upd = must[*cpv1.PulsarFunction](t)(f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{
		Function:   &cpv1.PulsarFunction{Name: fName, Resources: &cpv1.FunctionResources{RamBytes: 256 << 20}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"resources.ram_bytes"}}}))
	if upd.Resources.RamBytes != 256<<20 || upd.Resources.Cpu != 1 {
		t.Fatalf("update resources.ram_bytes: %v", upd.Resources)
	}

	// Sources and sinks: builtin connectors and package URLs.
	src := must[*cpv1.PulsarSource](t)(f.sources.CreateSource(ctx, &cpv1.CreateSourceRequest{Parent: ns, SourceId: "gen",
		Source: &cpv1.PulsarSource{Archive: "builtin://data-generator", Topic: "persistent://t/ns/in", Configs: `{"sleepBetweenMessages": 100}`}}))
	if src.Name != ns+"/sources/gen" || src.Parallelism != 1 || src.Resources.GetRamBytes() != 1<<30 {
		t.Fatalf("create source: %v", src)
	}
	code, body = h.rest(a.key, "POST", "/v1/"+ns+"/sinks?sinkId=store", map[string]any{
		"packageUrl": "http://repo.example.com/sink.nar", "className": "com.example.Sink", "inputs": []string{"persistent://t/ns/out"},
		"maxMessageRetries": 3, "deadLetterTopic": "persistent://t/ns/dlq"})
	if code != 200 || body["name"] != ns+"/sinks/store" || body["subscriptionPosition"] != "LATEST" {
		t.Fatalf("REST create sink: %d %v", code, body)
	}
	sk := must[*cpv1.PulsarSink](t)(f.sinks.UpdateSink(ctx, &cpv1.UpdateSinkRequest{Sink: &cpv1.PulsarSink{Name: ns + "/sinks/store", Parallelism: 2}}))
	if sk.Parallelism != 2 || sk.GetMaxMessageRetries() != 3 {
		t.Fatalf("update sink: %v", sk)
	}
	src = must[*cpv1.PulsarSource](t)(f.sources.UpdateSource(ctx, &cpv1.UpdateSourceRequest{Source: &cpv1.PulsarSource{Name: src.Name, Topic: "persistent://t/ns/in2"}}))
	if src.Topic != "persistent://t/ns/in2" || src.Archive != "builtin://data-generator" {
		t.Fatalf("update source: %v", src)
	}

	// Pagination.
	must[*cpv1.PulsarFunction](t)(f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "second", Function: pyFunction()}))
	l := must[*cpv1.ListFunctionsResponse](t)(f.functions.ListFunctions(ctx, &cpv1.ListFunctionsRequest{Parent: ns, PageSize: 1}))
	if len(l.Functions) != 1 || l.NextPageToken == "" || l.Functions[0].Name != fName {
		t.Fatalf("list page 1: %v", l)
	}
	l = must[*cpv1.ListFunctionsResponse](t)(f.functions.ListFunctions(ctx, &cpv1.ListFunctionsRequest{Parent: ns, PageSize: 1, PageToken: l.NextPageToken}))
	if len(l.Functions) != 1 || l.NextPageToken != "" || l.Functions[0].Name != ns+"/functions/second" {
		t.Fatalf("list page 2: %v", l)
	}
	_, err = f.functions.ListFunctions(ctx, &cpv1.ListFunctionsRequest{Parent: ns, PageSize: -1})
	wantCode(t, err, codes.InvalidArgument, "page_size")
	if sl := must[*cpv1.ListSourcesResponse](t)(f.sources.ListSources(ctx, &cpv1.ListSourcesRequest{Parent: ns})); len(sl.Sources) != 1 {
		t.Fatalf("list sources: %v", sl)
	}
	if kl := must[*cpv1.ListSinksResponse](t)(f.sinks.ListSinks(ctx, &cpv1.ListSinksRequest{Parent: ns})); len(kl.Sinks) != 1 {
		t.Fatalf("list sinks: %v", kl)
	}

	// The namespace cannot go while it has functions.
	_, err = h.pulsar().namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: ns})
	wantCode(t, err, codes.FailedPrecondition, "has 2 functions")
	must[*emptyResp](t)(f.functions.DeleteFunction(ctx, &cpv1.DeleteFunctionRequest{Name: fName}))
	must[*emptyResp](t)(f.functions.DeleteFunction(ctx, &cpv1.DeleteFunctionRequest{Name: ns + "/functions/second"}))
	_, err = h.pulsar().namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: ns})
	wantCode(t, err, codes.FailedPrecondition, "has 1 sources")
	if code, body = h.rest(a.key, "DELETE", "/v1/"+src.Name, nil); code != 200 {
		t.Fatalf("REST delete source: %d %v", code, body)
	}
	must[*emptyResp](t)(f.sinks.DeleteSink(ctx, &cpv1.DeleteSinkRequest{Name: sk.Name, Etag: sk.Etag}))
	_, err = f.functions.GetFunction(ctx, &cpv1.GetFunctionRequest{Name: fName})
	wantCode(t, err, codes.NotFound, fName)
	must[*emptyResp](t)(h.pulsar().namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: ns}))
}

// Bad specs are refused with INVALID_ARGUMENT naming the field.
func testFunctionsValidation(t *testing.T, h *harness) {
	a := h.setup("acme")[0]
	ns := h.namespaceFor(a)
	f := h.functions()
	ctx := h.authCtx(a.key)
	fnCases := []struct {
		edit func(*cpv1.PulsarFunction)
		msg  string
	}{
		{func(fn *cpv1.PulsarFunction) { fn.Runtime = 0 }, "function.runtime: required"},
		{func(fn *cpv1.PulsarFunction) { fn.ClassName = "" }, "function.class_name: required for PYTHON"},
		{func(fn *cpv1.PulsarFunction) { fn.PackageUrl = "" }, "function.package_url: required"},
		{func(fn *cpv1.PulsarFunction) { fn.PackageUrl = "file:///etc/passwd" }, "function.package_url: file: URLs are not accepted"},
		{func(fn *cpv1.PulsarFunction) { fn.PackageUrl = "ftp://x/y.py" }, "function.package_url: must be an https:// or http:// URL"},
		{func(fn *cpv1.PulsarFunction) { fn.PackageUrl = "https://u:p@x/y.py" }, "function.package_url: must not carry credentials"},
		{func(fn *cpv1.PulsarFunction) { fn.Inputs = nil }, "function.inputs: at least one"},
		{func(fn *cpv1.PulsarFunction) { fn.Inputs = []string{"in"} }, "function.inputs[0]: \"in\" is not a full topic name"},
		{func(fn *cpv1.PulsarFunction) { fn.Output = fn.Inputs[0] }, "function.output: persistent://t/ns/in is also an input topic"},
		{func(fn *cpv1.PulsarFunction) { fn.Parallelism = -1 }, "function.parallelism: must be between 1"},
		{func(fn *cpv1.PulsarFunction) { fn.ProcessingGuarantees = cpv1.ProcessingGuarantees_EFFECTIVELY_ONCE },
			"function.processing_guarantees: EFFECTIVELY_ONCE is not supported by Python functions"},
		{func(fn *cpv1.PulsarFunction) { fn.UserConfig = "[1]" }, "function.user_config: must be a JSON object"},
		{func(fn *cpv1.PulsarFunction) { fn.Resources = &cpv1.FunctionResources{RamBytes: -1} }, "function.resources.ram_bytes"},
		{func(fn *cpv1.PulsarFunction) { fn.DeadLetterTopic = "persistent://t/ns/dlq" }, "function.dead_letter_topic: needs max_message_retries"},
	}
	for _, c := range fnCases {
		fn := pyFunction()
		c.edit(fn)
		_, err := f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "f", Function: fn})
		wantCode(t, err, codes.InvalidArgument, c.msg)
	}
	_, err := f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "a/b", Function: pyFunction()})
	wantCode(t, err, codes.InvalidArgument, "function_id: must match")
	// A Go function needs no class.
	must[*cpv1.PulsarFunction](t)(f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "gofn",
		Function: &cpv1.PulsarFunction{Runtime: cpv1.PulsarFunction_GO, PackageUrl: "https://x/fn", Inputs: []string{"persistent://t/ns/in"}}}))

	srcCases := []struct {
		src *cpv1.PulsarSource
		msg string
	}{
		{&cpv1.PulsarSource{Topic: "persistent://t/ns/x"}, "source.archive: required"},
		{&cpv1.PulsarSource{Archive: "builtin://gen", PackageUrl: "https://x/y.nar", Topic: "persistent://t/ns/x"}, "not both"},
		{&cpv1.PulsarSource{Archive: "https://x/y.nar", Topic: "persistent://t/ns/x"}, "source.archive: must be builtin://"},
		{&cpv1.PulsarSource{PackageUrl: "https://x/y.nar", Topic: "persistent://t/ns/x"}, "source.class_name: required with a package_url"},
		{&cpv1.PulsarSource{Archive: "builtin://gen"}, "source.topic: required"},
		{&cpv1.PulsarSource{Archive: "builtin://gen", Topic: "persistent://t/ns/x", Configs: "nope"}, "source.configs: must be a JSON object"},
	}
	for _, c := range srcCases {
		_, err := f.sources.CreateSource(ctx, &cpv1.CreateSourceRequest{Parent: ns, SourceId: "s", Source: c.src})
		wantCode(t, err, codes.InvalidArgument, c.msg)
	}
	_, err = f.sinks.CreateSink(ctx, &cpv1.CreateSinkRequest{Parent: ns, SinkId: "k", Sink: &cpv1.PulsarSink{Archive: "builtin://x"}})
	wantCode(t, err, codes.InvalidArgument, "sink.inputs: at least one")
	_, err = f.sinks.CreateSink(ctx, &cpv1.CreateSinkRequest{Parent: ns, SinkId: "k", Sink: &cpv1.PulsarSink{Archive: "builtin://x",
		Inputs: []string{"persistent://t/ns/a", "persistent://t/ns/a"}}})
	wantCode(t, err, codes.InvalidArgument, "sink.inputs[1]: persistent://t/ns/a is listed twice")
}

// Authorization is the topics': another organization sees nothing, a
// viewer reads and may not write, a cluster admin on the cluster writes.
func testFunctionsAuthz(t *testing.T, h *harness) {
	ts := h.setup("acme", "rival")
	a, b := ts[0], ts[1]
	ns := h.namespaceFor(a)
	f := h.functions()
	must[*cpv1.PulsarFunction](t)(f.functions.CreateFunction(h.authCtx(a.key), &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "f", Function: pyFunction()}))
	bc := h.authCtx(b.key)
	_, err := f.functions.GetFunction(bc, &cpv1.GetFunctionRequest{Name: ns + "/functions/f"})
	wantCode(t, err, codes.NotFound, "")
	_, err = f.functions.ListFunctions(bc, &cpv1.ListFunctionsRequest{Parent: ns})
	wantCode(t, err, codes.NotFound, "")
	_, err = f.sinks.CreateSink(bc, &cpv1.CreateSinkRequest{Parent: ns, SinkId: "x", Sink: &cpv1.PulsarSink{Archive: "builtin://x", Inputs: []string{"persistent://t/ns/a"}}})
	wantCode(t, err, codes.NotFound, "")
	if code, _ := h.rest(b.key, "DELETE", "/v1/"+ns+"/functions/f", nil); code != 404 {
		t.Fatalf("REST delete by another org: %d", code)
	}

	// A viewer and a cluster admin of acme's cluster.
	op := h.authCtx(h.opKey)
	cl := clusterOf(ns)
	keyFor := func(id, role, resource string) string {
		sa := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(op, &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: id}))
		must[*cpv1.RoleBinding](t)(h.rbs.CreateRoleBinding(op, &cpv1.CreateRoleBindingRequest{Parent: a.org, RoleBindingId: id,
			RoleBinding: &cpv1.RoleBinding{Role: role, Member: sa.Name, Resource: resource}}))
		return must[*cpv1.ApiKey](t)(h.sas.CreateApiKey(op, &cpv1.CreateApiKeyRequest{Parent: sa.Name, ApiKeyId: "k"})).Secret
	}
	viewer := h.authCtx(keyFor("viewer", "roles/viewer", a.org))
	must[*cpv1.PulsarFunction](t)(f.functions.GetFunction(viewer, &cpv1.GetFunctionRequest{Name: ns + "/functions/f"}))
	must[*cpv1.ListFunctionsResponse](t)(f.functions.ListFunctions(viewer, &cpv1.ListFunctionsRequest{Parent: ns}))
	_, err = f.functions.UpdateFunction(viewer, &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: ns + "/functions/f", Parallelism: 2}})
	wantCode(t, err, codes.PermissionDenied, "functions.update")
	_, err = f.functions.DeleteFunction(viewer, &cpv1.DeleteFunctionRequest{Name: ns + "/functions/f"})
	wantCode(t, err, codes.PermissionDenied, "functions.delete")
	producer := h.authCtx(keyFor("producer", "roles/pulsar.producer", ns))
	_, err = f.functions.CreateFunction(producer, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "p", Function: pyFunction()})
	wantCode(t, err, codes.PermissionDenied, "functions.create")
	admin := h.authCtx(keyFor("ops", "roles/cluster.admin", cl))
	must[*cpv1.PulsarSource](t)(f.sources.CreateSource(admin, &cpv1.CreateSourceRequest{Parent: ns, SourceId: "gen",
		Source: &cpv1.PulsarSource{Archive: "builtin://data-generator", Topic: "persistent://t/ns/in"}}))
	must[*emptyResp](t)(f.functions.DeleteFunction(admin, &cpv1.DeleteFunctionRequest{Name: ns + "/functions/f"}))
	// Tenants may not report status.
	_, err = h.agent.ReportResourceStatus(h.authCtx(a.key), &cpv1.ReportResourceStatusRequest{Name: ns + "/sources/gen", State: cpv1.PulsarResourceState_APPLIED})
	wantCode(t, err, codes.PermissionDenied, "")
}

// The organization's function limits: instances and RAM summed over its
// functions, sources and sinks, the defaults and an operator's override.
func testFunctionsLimits(t *testing.T, h *harness) {
	a := h.setup("acme")[0]
	ns := h.namespaceFor(a)
	f := h.functions()
	ctx := h.authCtx(a.key)
	withPar := func(p int32, ram int64) *cpv1.PulsarFunction {
		fn := pyFunction()
		fn.Parallelism = p
		fn.Resources = &cpv1.FunctionResources{RamBytes: ram}
		return fn
	}
	// Alone over the default of 32 instances: INVALID_ARGUMENT.
	_, err := f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "big", Function: withPar(33, 1<<20)})
	wantCode(t, err, codes.InvalidArgument, "function.parallelism: 33 instances exceed the organization's limit of 32 function instances (max_function_instances)")
	// 20 + 10 instances fit; 3 more do not, with the others: FAILED_PRECONDITION.
	must[*cpv1.PulsarFunction](t)(f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "a", Function: withPar(20, 1<<20)}))
	must[*cpv1.PulsarSource](t)(f.sources.CreateSource(ctx, &cpv1.CreateSourceRequest{Parent: ns, SourceId: "s",
		Source: &cpv1.PulsarSource{Archive: "builtin://gen", Topic: "persistent://t/ns/x", Parallelism: 10, Resources: &cpv1.FunctionResources{RamBytes: 1 << 20}}}))
	_, err = f.sinks.CreateSink(ctx, &cpv1.CreateSinkRequest{Parent: ns, SinkId: "k", Sink: &cpv1.PulsarSink{Archive: "builtin://x",
		Inputs: []string{"persistent://t/ns/a"}, Parallelism: 3, Resources: &cpv1.FunctionResources{RamBytes: 1 << 20}}})
	wantCode(t, err, codes.FailedPrecondition, "max_function_instances: the organization's functions, sources and sinks would run 33 instances (30 besides this one), limit is 32")
	// An update counts the resource once: 20 -> 22 fits, 20 -> 23 does not.
	must[*cpv1.PulsarFunction](t)(f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: ns + "/functions/a", Parallelism: 22}}))
	_, err = f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: ns + "/functions/a", Parallelism: 23}})
	wantCode(t, err, codes.FailedPrecondition, "would run 33 instances (10 besides this one)")
	// RAM: the default limit is 32 GiB; 22 x 2 GiB is over it on its own.
	_, err = f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: ns + "/functions/a", Resources: &cpv1.FunctionResources{RamBytes: 2 << 30}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"resources.ram_bytes"}}})
	wantCode(t, err, codes.InvalidArgument, "function.resources.ram_bytes: parallelism x ram_bytes is 47244640256 bytes, over the organization's limit of 34359738368 bytes of function RAM (max_function_ram_bytes)")
	// Tenants may not raise their limits; operators may.
	_, err = h.orgs.UpdateOrganization(ctx, &cpv1.UpdateOrganizationRequest{Organization: &cpv1.Organization{Name: a.org, MaxFunctionInstances: 100},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_function_instances"}}})
	wantCode(t, err, codes.PermissionDenied, "organization.max_function_instances: only operators may change it")
	must[*cpv1.Organization](t)(h.orgs.UpdateOrganization(h.authCtx(h.opKey), &cpv1.UpdateOrganizationRequest{
		Organization: &cpv1.Organization{Name: a.org, MaxFunctionInstances: 40, MaxFunctionRamBytes: 1 << 30},
		UpdateMask:   &fieldmaskpb.FieldMask{Paths: []string{"max_function_instances", "max_function_ram_bytes"}}}))
	must[*cpv1.PulsarSink](t)(f.sinks.CreateSink(ctx, &cpv1.CreateSinkRequest{Parent: ns, SinkId: "k", Sink: &cpv1.PulsarSink{Archive: "builtin://x",
		Inputs: []string{"persistent://t/ns/a"}, Parallelism: 3, Resources: &cpv1.FunctionResources{RamBytes: 1 << 20}}}))
	// 35 instances of 1 MiB = 35 MiB used; a 1 GiB instance is over 1 GiB.
	_, err = f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "b", Function: withPar(1, 1<<30)})
	wantCode(t, err, codes.FailedPrecondition, "max_function_ram_bytes: the organization's functions, sources and sinks would use 1110441984 bytes of RAM (36700160 besides this one), limit is 1073741824")
	// Deleting frees the room.
	must[*emptyResp](t)(f.functions.DeleteFunction(ctx, &cpv1.DeleteFunctionRequest{Name: ns + "/functions/a"}))
	must[*cpv1.PulsarFunction](t)(f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "b", Function: withPar(20, 1<<20)}))
}

// The region agent's long-poll carries functions, sources and sinks after
// their namespace; reports set state and the instances' status, and a
// report that changes nothing writes nothing.
func testFunctionsAgent(t *testing.T, h *harness) {
	a := h.setup("acme")[0]
	ns := h.namespaceFor(a)
	f := h.functions()
	ctx := h.authCtx(a.key)
	op := h.authCtx(h.opKey)
	fn := must[*cpv1.PulsarFunction](t)(f.functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: ns, FunctionId: "f", Function: pyFunction()}))
	must[*cpv1.PulsarSink](t)(f.sinks.CreateSink(ctx, &cpv1.CreateSinkRequest{Parent: ns, SinkId: "k", Sink: &cpv1.PulsarSink{Archive: "builtin://x", Inputs: []string{"persistent://t/ns/out"}}}))
	w := must[*cpv1.WatchDesiredStateResponse](t)(h.agent.WatchDesiredState(op, &cpv1.WatchDesiredStateRequest{Region: "regions/us-east", Timeout: durationpb.New(10 * time.Second)}))
	var names []string
	for _, c := range w.PulsarChanges {
		n, _ := pulsarChangeName(c)
		names = append(names, n)
	}
	if len(names) != 4 || names[1] != ns || names[2] != fn.Name || names[3] != ns+"/sinks/k" {
		t.Fatalf("pulsar changes: %v", names)
	}
	if w.PulsarChanges[2].GetFunction().GetUserConfig() != `{"suffix": "!"}` {
		t.Fatalf("desired function: %v", w.PulsarChanges[2])
	}
	st := &cpv1.FunctionInstanceStatus{NumInstances: 1, NumRunning: 0,
		FirstError: &cpv1.FunctionInstanceStatus_InstanceError{InstanceId: 0, Message: "not running"}}
	got := must[*cpv1.PulsarResourceChange](t)(h.agent.ReportResourceStatus(op, &cpv1.ReportResourceStatusRequest{
		Name: fn.Name, State: cpv1.PulsarResourceState_APPLIED, ObservedEtag: fn.Etag, InstanceStatus: st}))
	if got.GetFunction().GetState() != cpv1.PulsarResourceState_APPLIED || !proto.Equal(got.GetFunction().GetStatus(), st) {
		t.Fatalf("report: %v", got)
	}
	// The same report again writes nothing; a new status writes.
	rev, _ := h.store.Revision(t.Context())
	must[*cpv1.PulsarResourceChange](t)(h.agent.ReportResourceStatus(op, &cpv1.ReportResourceStatusRequest{
		Name: fn.Name, State: cpv1.PulsarResourceState_APPLIED, InstanceStatus: st}))
	if rev2, _ := h.store.Revision(t.Context()); rev2 != rev {
		t.Fatalf("an unchanged report wrote: %d -> %d", rev, rev2)
	}
	code, body := h.rest(h.opKey, "POST", "/v1/"+fn.Name+":reportStatus", map[string]any{"state": "APPLIED",
		"instanceStatus": map[string]any{"numInstances": 1, "numRunning": 1}})
	if code != 200 || body["function"].(map[string]any)["status"].(map[string]any)["numRunning"] != float64(1) {
		t.Fatalf("REST report: %d %v", code, body)
	}
	// A client cannot set the status.
	cur := must[*cpv1.PulsarFunction](t)(f.functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: fn.Name,
		Parallelism: 2, Status: &cpv1.FunctionInstanceStatus{NumRunning: 9}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"parallelism", "status"}}}))
	if cur.State != cpv1.PulsarResourceState_PENDING || cur.Status.GetNumRunning() != 1 {
		t.Fatalf("after update: %v", cur)
	}
	// Deleting the cluster's data plane removes them with it.
	cl := clusterOf(ns)
	must[*cpv1.Operation](t)(h.clusters.DeleteCluster(ctx, &cpv1.DeleteClusterRequest{Name: cl}))
	h.report(cl, cpv1.ReportClusterStatusRequest_DELETED)
	for _, n := range []string{"functions", "sinks", "namespaces"} {
		if c, err := h.store.Count(t.Context(), storeQuery(n)); err != nil || c != 0 {
			t.Fatalf("%s left after the cluster: %d (%v)", n, c, err)
		}
	}
}
