package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

var update = flag.Bool("update", false, "rewrite testdata/decisions.txt from the current policies")

const (
	acme     = "organizations/acme"
	acme2    = "organizations/acme2"
	prod     = "organizations/acme/clusters/prod"
	tenant   = prod + "/tenants/t"
	ns       = tenant + "/namespaces/ns"
	topic    = ns + "/topics/orders"
	usEast   = "regions/us-east"
	euWest   = "regions/eu-west"
	apSouth  = "regions/ap-south"
	idRegexp = "^[a-z][a-z0-9-]{0,38}[a-z0-9]$"
)

func newEngine(tb testing.TB, opts ...Option) *Engine {
	tb.Helper()
	e, err := New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func operator() Principal {
	return Principal{Name: "operators/bootstrap", Kind: "operator"}
}

func member(org string, bindings ...Binding) Principal {
	return Principal{Name: org + "/serviceAccounts/ci", Kind: "service_account", Org: org, Bindings: bindings}
}

func bind(role, resource string) Binding { return Binding{Role: role, Resource: resource} }

// on builds an input for action on the resource called name in org. For
// list actions name is the collection's parent.
func on(p Principal, action, name, org string) Input {
	coll, verb, _ := strings.Cut(action, ".")
	r := Resource{Kind: coll, Name: name, Org: org}
	if verb == "list" {
		r.Name, r.Parent = "", name
	} else if i := strings.LastIndexByte(name, '/'); i >= 0 {
		r.ID = name[i+1:]
		if j := strings.LastIndexByte(name[:i], '/'); j >= 0 {
			r.Parent = name[:j]
		}
	}
	return Input{Principal: p, Action: action, Resource: r, Org: OrgFacts{Name: org}}
}

func createCluster(p Principal, id, region string, facts OrgFacts) Input {
	in := on(p, "clusters.create", acme+"/clusters/"+id, acme)
	in.Resource.ID = id
	if region != "" {
		in.Resource.Attributes = map[string]any{"region": region, "size": "small"}
	}
	facts.Name = acme
	in.Org = facts
	return in
}

type decisionCase struct {
	name string
	in   Input
	want Decision // Reasons are checked in the golden file, not here
}

func allowed() Decision                 { return Decision{Allow: true} }
func denied() Decision                  { return Decision{Denied: true} }
func rejected(code string) Decision     { return Decision{Code: code} }
func withID(in Input, id string) Input  { in.Resource.ID = id; return in }
func withKind(in Input, k string) Input { in.Resource.Kind = k; return in }

func decisionCases() []decisionCase {
	orgAdmin := member(acme, bind("roles/org.admin", acme))
	acme2Admin := member(acme2, bind("roles/org.admin", acme2))
	orgClusterAdmin := member(acme, bind("roles/cluster.admin", acme))
	prodAdmin := member(acme, bind("roles/cluster.admin", prod))
	viewer := member(acme, bind("roles/viewer", acme))
	clusterViewer := member(acme, bind("roles/viewer", prod))
	producer := member(acme, bind("roles/pulsar.producer", ns))
	consumer := member(acme, bind("roles/pulsar.consumer", ns))
	clusterProducer := member(acme, bind("roles/pulsar.producer", prod))
	nobody := member(acme)
	user := Principal{Name: "users/alice@example.com", Kind: "user", Org: acme}
	// A member of acme2 holding a (bogus) binding on acme.
	crossBound := member(acme2, bind("roles/org.admin", acme))

	return []decisionCase{
		// Operators.
		{"operator creates region", on(operator(), "regions.create", "regions/ap-south", ""), allowed()},
		{"operator deletes organization", on(operator(), "organizations.delete", acme, acme), allowed()},
		{"operator creates organization", withID(on(operator(), "organizations.create", "organizations/globex", "organizations/globex"), "globex"), allowed()},
		{"operator lists organizations", on(operator(), "organizations.list", "", ""), allowed()},
		{"operator acts in any org", on(operator(), "topics.consume", topic, acme), allowed()},
		{"operator without name is unauthenticated", on(Principal{Kind: "operator"}, "regions.create", "regions/x", ""), denied()},
		{"unknown principal kind", on(Principal{Name: "robots/r2", Kind: "robot", Org: acme, Bindings: []Binding{bind("roles/org.admin", acme)}}, "clusters.get", prod, acme), denied()},

		// Global resources.
		{"anyone gets a region", on(nobody, "regions.get", usEast, ""), allowed()},
		{"anyone lists regions", on(user, "regions.list", "", ""), allowed()},
		{"org admin cannot create region", on(orgAdmin, "regions.create", "regions/eu", ""), denied()},
		{"org admin cannot update region", on(orgAdmin, "regions.update", usEast, ""), denied()},
		{"org admin cannot delete region", on(orgAdmin, "regions.delete", usEast, ""), denied()},
		{"org admin cannot create organization", on(orgAdmin, "organizations.create", "organizations/new", "organizations/new"), denied()},
		{"org admin cannot delete own organization", on(orgAdmin, "organizations.delete", acme, acme), denied()},
		{"org admin cannot list organizations", on(orgAdmin, "organizations.list", "", ""), denied()},

		// Own organization.
		{"member gets own organization", on(nobody, "organizations.get", acme, acme), allowed()},
		{"member cannot update own organization", on(nobody, "organizations.update", acme, acme), denied()},
		{"member cannot get another organization", on(nobody, "organizations.get", acme2, acme2), denied()},
		{"member without bindings cannot list clusters", on(nobody, "clusters.list", acme, acme), denied()},

		// roles/org.admin.
		{"org admin updates organization", on(orgAdmin, "organizations.update", acme, acme), allowed()},
		{"org admin creates api key", on(orgAdmin, "apiKeys.create", acme+"/serviceAccounts/ci/apiKeys/k1", acme), allowed()},
		{"org admin creates service account", on(orgAdmin, "serviceAccounts.create", acme+"/serviceAccounts/deployer", acme), allowed()},
		{"org admin deletes user", on(orgAdmin, "users.delete", acme+"/users/bob", acme), allowed()},
		{"org admin creates role binding", on(orgAdmin, "roleBindings.create", acme+"/roleBindings/rb1", acme), allowed()},
		{"org admin lists audit events", on(orgAdmin, "auditEvents.list", acme, acme), allowed()},
		{"org admin cancels operation", on(orgAdmin, "operations.cancel", acme+"/operations/op1", acme), allowed()},
		{"org admin deletes cluster", on(orgAdmin, "clusters.delete", prod, acme), allowed()},
		{"org admin produces", on(orgAdmin, "topics.produce", topic, acme), allowed()},
		{"org admin unknown action", on(orgAdmin, "widgets.get", acme+"/widgets/w", acme), denied()},
		{"org admin malformed action", on(orgAdmin, "clusters", prod, acme), denied()},

		// Tenant isolation.
		{"isolation: acme2 admin gets acme cluster", on(acme2Admin, "clusters.get", prod, acme), denied()},
		{"isolation: acme2 admin deletes acme cluster", on(acme2Admin, "clusters.delete", prod, acme), denied()},
		{"isolation: acme2 admin lists acme clusters", on(acme2Admin, "clusters.list", acme, acme), denied()},
		{"isolation: binding on foreign org is void", on(crossBound, "clusters.get", prod, acme), denied()},
		{"isolation: resource org disagrees with name", on(member(acme, bind("roles/org.admin", acme)), "clusters.get", acme2+"/clusters/prod", acme), denied()},
		{"isolation: global resource not readable by members", on(orgAdmin, "clusters.get", acme+"/clusters/x", ""), denied()},

		// Prefix edge cases.
		{"prefix: acme viewer on acme2 cluster", on(member(acme, bind("roles/viewer", acme)), "clusters.get", acme2+"/clusters/prod", acme2), denied()},
		{"prefix: prod admin on prod2", on(prodAdmin, "clusters.update", acme+"/clusters/prod2", acme), denied()},
		{"prefix: prod admin on prod2 topic", on(prodAdmin, "topics.delete", acme+"/clusters/prod2/tenants/t/namespaces/ns/topics/orders", acme), denied()},
		{"prefix: producer on sibling namespace ns2", on(producer, "topics.produce", tenant+"/namespaces/ns2/topics/orders", acme), denied()},
		{"prefix: producer on namespace nsx starting with ns", on(producer, "topics.produce", tenant+"/namespaces/nsx/topics/orders", acme), denied()},

		// roles/cluster.admin on the organization.
		{"org cluster admin creates cluster", createCluster(orgClusterAdmin, "analytics", usEast, OrgFacts{}), allowed()},
		{"org cluster admin lists clusters", on(orgClusterAdmin, "clusters.list", acme, acme), allowed()},
		{"org cluster admin deletes topic", on(orgClusterAdmin, "topics.delete", topic, acme), allowed()},
		{"org cluster admin gets operation", on(orgClusterAdmin, "operations.get", acme+"/operations/op1", acme), allowed()},
		{"org cluster admin cannot create api key", on(orgClusterAdmin, "apiKeys.create", acme+"/serviceAccounts/ci/apiKeys/k1", acme), denied()},
		{"org cluster admin cannot bind roles", on(orgClusterAdmin, "roleBindings.create", acme+"/roleBindings/rb1", acme), denied()},
		{"org cluster admin cannot update organization", on(orgClusterAdmin, "organizations.update", acme, acme), denied()},

		// roles/cluster.admin on one cluster.
		{"cluster admin updates its cluster", on(prodAdmin, "clusters.update", prod, acme), allowed()},
		{"cluster admin creates tenant", on(prodAdmin, "tenants.create", tenant, acme), allowed()},
		{"cluster admin updates namespace", on(prodAdmin, "namespaces.update", ns, acme), allowed()},
		{"cluster admin lists topics", on(prodAdmin, "topics.list", ns, acme), allowed()},
		{"cluster admin consumes", on(prodAdmin, "topics.consume", topic, acme), allowed()},
		{"cluster admin cannot create cluster", createCluster(prodAdmin, "prod", usEast, OrgFacts{}), denied()},
		{"cluster admin cannot create other cluster", createCluster(prodAdmin, "other", usEast, OrgFacts{}), denied()},
		{"cluster admin cannot list clusters of org", on(prodAdmin, "clusters.list", acme, acme), denied()},
		{"cluster admin cannot get other cluster", on(prodAdmin, "clusters.get", acme+"/clusters/dev", acme), denied()},

		// roles/viewer.
		{"org viewer gets cluster", on(viewer, "clusters.get", prod, acme), allowed()},
		{"org viewer lists api keys", on(viewer, "apiKeys.list", acme+"/serviceAccounts/ci", acme), allowed()},
		{"org viewer lists audit events", on(viewer, "auditEvents.list", acme, acme), allowed()},
		{"org viewer cannot update cluster", on(viewer, "clusters.update", prod, acme), denied()},
		{"org viewer cannot create api key", on(viewer, "apiKeys.create", acme+"/serviceAccounts/ci/apiKeys/k2", acme), denied()},
		{"cluster viewer gets topic", on(clusterViewer, "topics.get", topic, acme), allowed()},
		{"cluster viewer lists tenants", on(clusterViewer, "tenants.list", prod, acme), allowed()},
		{"cluster viewer lists topics, parent in name", Input{Principal: clusterViewer, Action: "topics.list", Resource: Resource{Kind: "topics", Name: ns, Parent: ns, Org: acme}}, allowed()},
		{"cluster viewer cannot update namespace", on(clusterViewer, "namespaces.update", ns, acme), denied()},
		{"cluster viewer cannot consume", on(clusterViewer, "topics.consume", topic, acme), denied()},
		{"cluster viewer cannot get other cluster", on(clusterViewer, "clusters.get", acme+"/clusters/dev", acme), denied()},

		// roles/pulsar.producer and roles/pulsar.consumer.
		{"producer produces", on(producer, "topics.produce", topic, acme), allowed()},
		{"producer cannot consume", on(producer, "topics.consume", topic, acme), denied()},
		{"producer gets namespace", on(producer, "namespaces.get", ns, acme), allowed()},
		{"producer lists topics", on(producer, "topics.list", ns, acme), allowed()},
		{"producer gets topic", on(producer, "topics.get", topic, acme), allowed()},
		{"producer cannot create topic", on(producer, "topics.create", topic, acme), denied()},
		{"producer cannot update namespace", on(producer, "namespaces.update", ns, acme), denied()},
		{"producer cannot get tenant", on(producer, "tenants.get", tenant, acme), denied()},
		{"producer kind mismatch", withKind(on(producer, "topics.produce", topic, acme), "namespaces"), denied()},
		{"consumer consumes", on(consumer, "topics.consume", topic, acme), allowed()},
		{"consumer cannot produce", on(consumer, "topics.produce", topic, acme), denied()},
		{"producer bound on cluster produces below it", on(clusterProducer, "topics.produce", topic, acme), allowed()},

		// Admission: naming.
		{"cluster id ok", createCluster(orgAdmin, "prod-eu-1", usEast, OrgFacts{}), allowed()},
		{"cluster id two chars", createCluster(orgAdmin, "p1", usEast, OrgFacts{}), allowed()},
		{"cluster id one char", createCluster(orgAdmin, "p", usEast, OrgFacts{}), rejected(CodeInvalidArgument)},
		{"cluster id upper case", createCluster(orgAdmin, "Prod", usEast, OrgFacts{}), rejected(CodeInvalidArgument)},
		{"cluster id trailing dash", createCluster(orgAdmin, "prod-", usEast, OrgFacts{}), rejected(CodeInvalidArgument)},
		{"cluster id 41 chars", createCluster(orgAdmin, "a"+strings.Repeat("b", 40), usEast, OrgFacts{}), rejected(CodeInvalidArgument)},
		{"cluster id 40 chars", createCluster(orgAdmin, "a"+strings.Repeat("b", 39), usEast, OrgFacts{}), allowed()},
		{"organization id bad", withID(on(operator(), "organizations.create", "organizations/Globex", "organizations/Globex"), "Globex"), rejected(CodeInvalidArgument)},
		{"service account id bad", on(orgAdmin, "serviceAccounts.create", acme+"/serviceAccounts/ci_bot", acme), rejected(CodeInvalidArgument)},
		{"region id bad", on(operator(), "regions.create", "regions/9east", ""), rejected(CodeInvalidArgument)},
		{"region id ok", on(operator(), "regions.create", "regions/eu-north-1", ""), allowed()},
		{"tenant name pulsar chars", on(prodAdmin, "tenants.create", prod+"/tenants/Team_A.prod:1=x", acme), allowed()},
		{"tenant name slash", withID(on(prodAdmin, "tenants.create", prod+"/tenants/a", acme), "a/b"), rejected(CodeInvalidArgument)},
		{"namespace name space", on(prodAdmin, "namespaces.create", tenant+"/namespaces/my ns", acme), rejected(CodeInvalidArgument)},
		{"topic name percent", on(prodAdmin, "topics.create", ns+"/topics/a%20b", acme), rejected(CodeInvalidArgument)},
		{"topic name empty", withID(on(prodAdmin, "topics.create", ns+"/topics/", acme), ""), rejected(CodeInvalidArgument)},
		{"update does not check id", withID(on(prodAdmin, "clusters.update", prod, acme), "Legacy_Name"), allowed()},

		// Admission: allowed regions.
		{"region allowed", createCluster(orgAdmin, "prod", euWest, OrgFacts{AllowedRegions: []string{usEast, euWest}}), allowed()},
		{"region not allowed", createCluster(orgAdmin, "prod", apSouth, OrgFacts{AllowedRegions: []string{usEast, euWest}}), rejected(CodeFailedPrecondition)},
		{"region any when list empty", createCluster(orgAdmin, "prod", apSouth, OrgFacts{AllowedRegions: []string{}}), allowed()},
		{"region missing", createCluster(orgAdmin, "prod", "", OrgFacts{}), rejected(CodeInvalidArgument)},

		// Admission: maximum clusters.
		{"clusters below default limit", createCluster(orgAdmin, "prod", usEast, OrgFacts{ClusterCount: 4}), allowed()},
		{"clusters at default limit", createCluster(orgAdmin, "prod", usEast, OrgFacts{ClusterCount: 5}), rejected(CodeResourceExhausted)},
		{"clusters org limit raised", createCluster(orgAdmin, "prod", usEast, OrgFacts{ClusterCount: 5, MaxClusters: 10}), allowed()},
		{"clusters org limit lowered", createCluster(orgAdmin, "prod", usEast, OrgFacts{ClusterCount: 1, MaxClusters: 1}), rejected(CodeResourceExhausted)},
		{"clusters limit only on create", on(orgAdmin, "clusters.update", prod, acme), allowed()},

		// Several admission failures: the most severe code, every reason.
		{"invalid id beats region and quota", createCluster(orgAdmin, "Prod", apSouth, OrgFacts{AllowedRegions: []string{usEast}, ClusterCount: 9}), rejected(CodeInvalidArgument)},
		{"region beats quota", createCluster(orgAdmin, "prod", apSouth, OrgFacts{AllowedRegions: []string{usEast}, ClusterCount: 9}), rejected(CodeFailedPrecondition)},
		{"authz before admission", createCluster(viewer, "Prod", apSouth, OrgFacts{ClusterCount: 9}), denied()},
	}
}

func TestDecide(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	seen := map[string]bool{}
	for _, tc := range decisionCases() {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.Decide(ctx, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.Allow != tc.want.Allow || got.Denied != tc.want.Denied || got.Code != tc.want.Code {
				t.Fatalf("got allow=%v denied=%v code=%q reasons=%q; want allow=%v denied=%v code=%q",
					got.Allow, got.Denied, got.Code, got.Reasons, tc.want.Allow, tc.want.Denied, tc.want.Code)
			}
			if got.Allow != (len(got.Reasons) == 0) {
				t.Fatalf("reasons %q with allow=%v", got.Reasons, got.Allow)
			}
			if !slices.IsSorted(got.Reasons) {
				t.Fatalf("reasons not sorted: %q", got.Reasons)
			}
		})
	}
}

func TestDecideMessages(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	orgAdmin := member(acme, bind("roles/org.admin", acme))
	for _, tc := range []struct {
		in   Input
		want []string
	}{
		{createCluster(orgAdmin, "Prod", usEast, OrgFacts{}), []string{"cluster_id: must match " + idRegexp}},
		{createCluster(orgAdmin, "prod", apSouth, OrgFacts{AllowedRegions: []string{usEast}}), []string{"region: organization may not use region regions/ap-south"}},
		{createCluster(orgAdmin, "prod", usEast, OrgFacts{ClusterCount: 5}), []string{"organization has 5 clusters, limit is 5"}},
		{createCluster(orgAdmin, "prod", usEast, OrgFacts{ClusterCount: 3, MaxClusters: 3}), []string{"organization has 3 clusters, limit is 3"}},
		{createCluster(orgAdmin, "Prod", apSouth, OrgFacts{AllowedRegions: []string{usEast}, ClusterCount: 5}), []string{
			"cluster_id: must match " + idRegexp,
			"organization has 5 clusters, limit is 5",
			"region: organization may not use region regions/ap-south",
		}},
		{on(member(acme2, bind("roles/org.admin", acme2)), "clusters.get", prod, acme), []string{prod + " is not in the caller's organization"}},
		{on(orgAdmin, "regions.delete", usEast, ""), []string{"regions.delete is reserved to operators"}},
	} {
		got, err := e.Decide(ctx, tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Reasons, tc.want) {
			t.Errorf("%s %s: reasons %q, want %q", tc.in.Action, tc.in.Resource.Name, got.Reasons, tc.want)
		}
	}
}

func TestWithData(t *testing.T) {
	ctx := context.Background()
	orgAdmin := member(acme, bind("roles/org.admin", acme))
	in := createCluster(orgAdmin, "prod", usEast, OrgFacts{ClusterCount: 6})
	for _, tc := range []struct {
		name  string
		opt   Option
		allow bool
	}{
		{"map", WithData(map[string]any{"magnetar": map[string]any{"limits": map[string]any{"max_clusters": 7}}}), true},
		{"json bytes", WithData([]byte(`{"magnetar": {"limits": {"max_clusters": 7}}}`)), true},
		{"json string", WithData(`{"magnetar": {"limits": {"max_clusters": 6}}}`), false},
		{"raw message, other keys kept", WithData(json.RawMessage(`{"magnetar": {"other": 1}}`)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.opt)
			got, err := e.Decide(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if got.Allow != tc.allow {
				t.Fatalf("allow=%v reasons=%q, want allow=%v", got.Allow, got.Reasons, tc.allow)
			}
		})
	}

	for _, bad := range []any{42, "[1,2]", []byte("{"), "{} {}"} {
		if _, err := New(WithData(bad)); err == nil {
			t.Errorf("WithData(%#v): want error", bad)
		}
	}
}

func TestActions(t *testing.T) {
	acts := newEngine(t).Actions()
	for _, want := range []string{"clusters.create", "topics.produce", "topics.consume", "regions.get", "operations.cancel", "organizations.get"} {
		if !slices.Contains(acts, want) {
			t.Errorf("Actions() lacks %s", want)
		}
	}
	if !slices.IsSorted(acts) {
		t.Error("Actions() not sorted")
	}
	// Every action the table uses, except the deliberately unknown ones, is known.
	for _, tc := range decisionCases() {
		if tc.in.Action != "widgets.get" && tc.in.Action != "clusters" && !slices.Contains(acts, tc.in.Action) {
			t.Errorf("case %q uses unknown action %s", tc.name, tc.in.Action)
		}
	}
}

// TestInputValueMatchesJSON checks the hand-built AST input against OPA's own
// conversion of the JSON encoding.
func TestInputValueMatchesJSON(t *testing.T) {
	ins := []Input{{}}
	for _, tc := range decisionCases() {
		ins = append(ins, tc.in)
	}
	ins = append(ins, Input{Resource: Resource{Attributes: map[string]any{
		"n": 3, "f": 1.5, "list": []string{"a"}, "nested": map[string]any{"b": true, "x": nil}, "u": uint8(7),
	}}}, Input{Org: OrgFacts{Name: "organizations/a", BudgetExceeded: true, BudgetMessage: "over"}},
		Input{Org: OrgFacts{Name: "organizations/a", MaxFunctionInstances: 4, MaxFunctionRAMBytes: 1 << 40, FunctionInstances: 3, FunctionRAMBytes: 3 << 30}})
	for _, in := range ins {
		raw, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		want, err := ast.InterfaceToValue(doc)
		if err != nil {
			t.Fatal(err)
		}
		if got := inputValue(&in); got.Compare(want) != 0 {
			t.Errorf("input %s:\n got %v\nwant %v", raw, got, want)
		}
	}
}

func TestConcurrentDecide(t *testing.T) {
	e := newEngine(t)
	cases := decisionCases()
	ctx := context.Background()
	want := make([]Decision, len(cases))
	for i, tc := range cases {
		d, err := e.Decide(ctx, tc.in)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = d
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range cases {
				j := (i + g*7) % len(cases)
				d, err := e.Decide(ctx, cases[j].in)
				if err == nil && !reflect.DeepEqual(d, want[j]) {
					err = fmt.Errorf("case %q: got %+v, want %+v", cases[j].name, d, want[j])
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDecideCanceledContext(t *testing.T) {
	e := newEngine(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := e.Decide(ctx, on(operator(), "regions.create", "regions/eu-north", ""))
	if err == nil {
		// OPA may finish a tiny evaluation before it looks at ctx; then
		// the decision must still be the right one.
		if !d.Allow {
			t.Fatalf("no error but not allowed: %+v", d)
		}
		return
	}
	if !errors.Is(err, ErrEvaluation) || d.Allow {
		t.Fatalf("got %+v, %v; want a denial wrapping ErrEvaluation", d, err)
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEngine(t, WithLogger(log))
	if _, err := e.Decide(context.Background(), on(member(acme), "clusters.delete", prod, acme)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "policy denied request") || !strings.Contains(buf.String(), "clusters.delete") {
		t.Fatalf("log = %q", buf.String())
	}
}

// TestGoldenDecisions pins the full decision, reasons included, for every
// table case. Refresh with `go test ./policy -run TestGoldenDecisions -update`.
func TestGoldenDecisions(t *testing.T) {
	e := newEngine(t)
	var buf bytes.Buffer
	buf.WriteString("# Policy decisions for the cases in engine_test.go (decisionCases).\n")
	buf.WriteString("# Generated: go test ./policy -run TestGoldenDecisions -update\n")
	for _, tc := range decisionCases() {
		d, err := e.Decide(context.Background(), tc.in)
		if err != nil {
			t.Fatal(err)
		}
		in, err := json.Marshal(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&buf, "\n### %s\ninput: %s\ndecision: %s\n", tc.name, in, out)
	}
	golden := filepath.Join("testdata", "decisions.txt")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, buf.Bytes()) {
		gotLines, wantLines := strings.Split(buf.String(), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			var g, w string
			if i < len(gotLines) {
				g = gotLines[i]
			}
			if i < len(wantLines) {
				w = wantLines[i]
			}
			if g != w {
				t.Fatalf("%s differs at line %d (run with -update if intended):\n got: %s\nwant: %s", golden, i+1, g, w)
			}
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	e := newEngine(b)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		in   Input
	}{
		{"allow-produce", on(member(acme, bind("roles/viewer", acme), bind("roles/pulsar.producer", ns)), "topics.produce", topic, acme)},
		{"allow-create-cluster", createCluster(member(acme, bind("roles/org.admin", acme)), "prod", usEast, OrgFacts{AllowedRegions: []string{usEast, euWest}, ClusterCount: 2})},
		{"deny-isolation", on(member(acme2, bind("roles/org.admin", acme2)), "clusters.get", prod, acme)},
		{"reject-admission", createCluster(member(acme, bind("roles/org.admin", acme)), "Prod", apSouth, OrgFacts{AllowedRegions: []string{usEast}, ClusterCount: 9})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Decide(ctx, bc.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInput compares building the input by hand with OPA's conversion
// of the struct (a JSON round trip), which rego.EvalInput would do per call.
func BenchmarkInput(b *testing.B) {
	in := createCluster(member(acme, bind("roles/org.admin", acme), bind("roles/viewer", prod)), "prod", usEast, OrgFacts{AllowedRegions: []string{usEast, euWest}, ClusterCount: 2})
	b.Run("ast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = inputValue(&in)
		}
	})
	b.Run("json-roundtrip", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ast.InterfaceToValue(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
