package apiserver

import (
	"context"
	"crypto/x509"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/internal/pki"
)

// fakeBroker is a TCP listener the health checks can reach, standing for a
// cluster's Pulsar port.
type fakeBroker struct {
	l  net.Listener
	wg sync.WaitGroup
}

func newFakeBroker(t *testing.T) *fakeBroker {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{l: l}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(b.close)
	return b
}

func (b *fakeBroker) url() string { return "pulsar://" + b.l.Addr().String() }
func (b *fakeBroker) close()      { b.l.Close(); b.wg.Wait() }

// agentSim plays the region agents: it reports every pending Pulsar
// resource APPLIED, as a real agent does once the data plane has it.
func (h *harness) applyPending(t *testing.T) {
	t.Helper()
	for _, k := range []*kind{kindTenant, kindNamespace} {
		objs, _, err := h.store.List(context.Background(), store.ListQuery{Kind: k.collection, PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			m, _, err := decode(k, o)
			if err != nil {
				t.Fatal(err)
			}
			st, _, etag := cpv1.PulsarResourceState(m.ProtoReflect().Get(m.ProtoReflect().Descriptor().Fields().ByName("state")).Enum()), "", o.Etag
			if st == cpv1.PulsarResourceState_APPLIED {
				continue
			}
			h.agent.ReportResourceStatus(h.authCtx(h.opKey), &cpv1.ReportResourceStatusRequest{Name: o.Name, State: cpv1.PulsarResourceState_APPLIED, ObservedEtag: etag})
		}
	}
}

func (h *harness) reportBacklog(t *testing.T, from, to string, n int64) {
	t.Helper()
	h.reportReplication(t, from, to, n, 0)
}

// reportReplication reports from's backlog toward to and the messages its
// brokers replicated there so far.
func (h *harness) reportReplication(t *testing.T, from, to string, backlog, replicated int64) {
	t.Helper()
	must[*cpv1.ReportReplicationStatusResponse](t)(h.agent.ReportReplicationStatus(h.authCtx(h.opKey), &cpv1.ReportReplicationStatusRequest{
		Cluster: from, Namespaces: []*cpv1.ReportReplicationStatusRequest_Namespace{{Namespace: "shop/orders",
			Backlog: []*cpv1.ReplicationBacklog{{Cluster: to, Messages: backlog, ReplicatedMessages: replicated}}}}}))
}

func (h *harness) namespace(t *testing.T, name string) *cpv1.Namespace {
	t.Helper()
	return must[*cpv1.Namespace](t)(cpv1.NewNamespacesClient(h.conn).GetNamespace(h.authCtx(h.opKey), &cpv1.GetNamespaceRequest{Name: name}))
}

// TestReplicationGroupRunbooks drives a group and its runbooks against
// simulated agents: the namespaces and fences the control plane writes,
// the drain check, the switch of the failover endpoint, an automatic
// unplanned failover after the active cluster stops answering health
// checks.
func TestReplicationGroupRunbooks(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	a := h.setup("solo", "acme")[1]
	ctx := h.authCtx(a.key)
	op := h.authCtx(h.opKey)
	brokers := map[string]*fakeBroker{}
	var east, west string
	for id, region := range map[string]string{"east": "regions/us-east", "west": "regions/eu-west"} {
		o := must[*cpv1.Operation](t)(h.clusters.CreateCluster(ctx, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: id, Cluster: &cpv1.Cluster{Region: region}}))
		brokers[id] = newFakeBroker(t)
		must[*cpv1.Cluster](t)(h.agent.ReportClusterStatus(op, &cpv1.ReportClusterStatusRequest{Name: o.Target,
			State: cpv1.ReportClusterStatusRequest_READY, ServiceUrl: brokers[id].url(), AdminUrl: "http://unused"}))
		if id == "east" {
			east = o.Target
		} else {
			west = o.Target
		}
	}
	groups := cpv1.NewReplicationGroupsClient(h.conn)

	// Validation.
	_, err := groups.CreateReplicationGroup(ctx, &cpv1.CreateReplicationGroupRequest{Parent: a.org, ReplicationGroupId: "g",
		ReplicationGroup: &cpv1.ReplicationGroup{Members: []string{east}}})
	wantCode(t, err, codes.InvalidArgument, "at least 2")
	_, err = groups.CreateReplicationGroup(ctx, &cpv1.CreateReplicationGroupRequest{Parent: a.org, ReplicationGroupId: "g",
		ReplicationGroup: &cpv1.ReplicationGroup{Members: []string{east, west}, Namespaces: []string{"no-slash"}}})
	wantCode(t, err, codes.InvalidArgument, "replication_group.namespaces[0]")

	cop := must[*cpv1.Operation](t)(groups.CreateReplicationGroup(ctx, &cpv1.CreateReplicationGroupRequest{Parent: a.org, ReplicationGroupId: "g",
		ReplicationGroup: &cpv1.ReplicationGroup{Members: []string{east, west}, Namespaces: []string{"shop/orders"}}}))
	gname := a.org + "/replicationGroups/g"
	var order []string
	for _, m := range must[*cpv1.ReplicationGroup](t)(groups.GetReplicationGroup(ctx, &cpv1.GetReplicationGroupRequest{Name: gname})).GetStatus().GetMembers() {
		order = append(order, m.Cluster)
	}
	if strings.Join(order, ",") != east+","+west {
		t.Fatalf("status members %v, want the members' order %s,%s", order, east, west)
	}
	eastNS, westNS := east+"/tenants/shop/namespaces/orders", west+"/tenants/shop/namespaces/orders"
	if ns := h.namespace(t, westNS); ns.FencedTo != east || strings.Join(ns.Policies.ReplicationClusters, ",") != east+","+west || ns.ReplicationGroup != gname {
		t.Fatalf("passive member's namespace: %v", ns)
	}
	if ns := h.namespace(t, eastNS); ns.FencedTo != "" {
		t.Fatalf("primary's namespace is fenced: %v", ns)
	}
	// The group owns the namespaces' replication clusters.
	_, err = cpv1.NewNamespacesClient(h.conn).UpdateNamespace(ctx, &cpv1.UpdateNamespaceRequest{Namespace: &cpv1.Namespace{Name: eastNS,
		Policies: &cpv1.NamespacePolicies{ReplicationClusters: []string{east}}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"policies.replication_clusters"}}})
	wantCode(t, err, codes.FailedPrecondition, "managed by replication group")
	h.applyPending(t)
	eventually(t, "the group's creation to complete", func() bool {
		o := must[*cpv1.Operation](t)(h.ops.GetOperation(ctx, &cpv1.GetOperationRequest{Name: cop.Name}))
		return o.Done && o.State == cpv1.Operation_SUCCEEDED
	})
	if ft := must[*cpv1.FailoverTarget](t)(groups.GetFailoverTarget(ctx, &cpv1.GetFailoverTargetRequest{Name: gname})); ft.ServiceUrl != brokers["east"].url() {
		t.Fatalf("failover target %v, want east", ft)
	}
	// The JSON the Java client reads.
	code, body := h.rest(a.key, "GET", "/v1/"+gname+"/failoverTarget", nil)
	if code != 200 || body["serviceUrl"] != brokers["east"].url() || body["authPluginClassName"] != nil || body["tlsTrustCertsFilePath"] != nil {
		t.Fatalf("REST failover target: %d %v", code, body)
	}

	// A plan changes nothing and shows the checks.
	h.reportBacklog(t, east, west, 500000)
	eventually(t, "health checks", func() bool { return h.srv.repl.healthy(east) && h.srv.repl.healthy(west) })
	plan := must[*cpv1.Operation](t)(groups.FailoverReplicationGroup(ctx, &cpv1.FailoverReplicationGroupRequest{Name: gname, TargetCluster: west, Planned: true, ValidateOnly: true}))
	if plan.Name != "" || !strings.Contains(plan.Runbook.Steps[0].Detail, "500000 entries") {
		t.Fatalf("plan: %v", plan)
	}
	// Too much backlog: the planned failover fails its check and changes nothing.
	fo := must[*cpv1.Operation](t)(groups.FailoverReplicationGroup(ctx, &cpv1.FailoverReplicationGroupRequest{Name: gname, TargetCluster: west, Planned: true}))
	eventually(t, "the check to fail", func() bool {
		o := must[*cpv1.Operation](t)(h.ops.GetOperation(ctx, &cpv1.GetOperationRequest{Name: fo.Name}))
		return o.Done && o.State == cpv1.Operation_FAILED && strings.Contains(o.Error.Message, "500000")
	})
	if ns := h.namespace(t, eastNS); ns.FencedTo != "" {
		t.Fatalf("failed check fenced the primary: %v", ns)
	}

	// Planned failover: fence, drain, open, switch; east replicates its
	// last 40 entries (40 messages) during the drain.
	h.reportReplication(t, east, west, 40, 1000)
	fo = must[*cpv1.Operation](t)(groups.FailoverReplicationGroup(ctx, &cpv1.FailoverReplicationGroupRequest{Name: gname, TargetCluster: west, Planned: true}))
	var done *cpv1.Operation
	eventually(t, "the planned failover", func() bool {
		h.applyPending(t)
		o := must[*cpv1.Operation](t)(h.ops.GetOperation(ctx, &cpv1.GetOperationRequest{Name: fo.Name}))
		if st := o.Runbook.Steps[2]; st.Id == "drain" && st.State == cpv1.RunbookStep_RUNNING {
			h.reportReplication(t, east, west, 0, 1040) // the old primary has drained
		}
		h.reportBacklog(t, west, east, 0) // the target's agent reports too
		done = o
		return o.Done
	})
	if done.State != cpv1.Operation_SUCCEEDED || done.Runbook.Report.RpoMessages != 0 || done.Runbook.Report.Rto == nil ||
		done.Runbook.Report.MessagesReplicated != 40 {
		t.Fatalf("planned failover: %v", done)
	}
	if ft := must[*cpv1.FailoverTarget](t)(groups.GetFailoverTarget(ctx, &cpv1.GetFailoverTargetRequest{Name: gname})); ft.ServiceUrl != brokers["west"].url() {
		t.Fatalf("after the failover the endpoint answers %v", ft)
	}
	if e, w := h.namespace(t, eastNS), h.namespace(t, westNS); e.FencedTo != west || w.FencedTo != "" {
		t.Fatalf("fences after the failover: east %q west %q", e.FencedTo, w.FencedTo)
	}

	// Automatic: west stops answering; after failover_delay the group
	// fails over to east, unplanned, with the last reported backlog as RPO.
	h.reportBacklog(t, west, east, 7)
	rg := must[*cpv1.Operation](t)(groups.UpdateReplicationGroup(ctx, &cpv1.UpdateReplicationGroupRequest{
		ReplicationGroup: &cpv1.ReplicationGroup{Name: gname, FailoverPolicy: &cpv1.FailoverPolicy{Mode: cpv1.FailoverPolicy_AUTOMATIC,
			FailoverDelay: durationpb.New(0), SwitchBackDelay: durationpb.New(3600e9)}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"failover_policy"}}}))
	if !rg.Done {
		t.Fatalf("policy update: %v", rg)
	}
	brokers["west"].close()
	eventually(t, "the automatic failover", func() bool {
		h.applyPending(t)
		h.reportBacklog(t, east, west, 3) // the new active cluster's agent
		g := must[*cpv1.ReplicationGroup](t)(groups.GetReplicationGroup(ctx, &cpv1.GetReplicationGroupRequest{Name: gname}))
		return g.ActiveCluster == east && g.Operation == ""
	})
	ops := must[*cpv1.ListOperationsResponse](t)(h.ops.ListOperations(ctx, &cpv1.ListOperationsRequest{Organization: a.org, Target: gname}))
	var auto *cpv1.Operation
	for _, o := range ops.Operations {
		if o.Runbook != nil && !o.Runbook.Planned {
			auto = o
		}
	}
	if auto == nil || auto.State != cpv1.Operation_SUCCEEDED || auto.Runbook.Report.RpoMessages != 7 || auto.Runbook.Steps[1].State != cpv1.RunbookStep_SKIPPED {
		t.Fatalf("automatic failover: %v", auto)
	}
	// The unreachable old primary stays fenced toward east when it returns.
	if w := h.namespace(t, westNS); w.FencedTo != east {
		t.Fatalf("west's fence after the unplanned failover: %q", w.FencedTo)
	}
}

// TestGroupTLSTargetAndCABundle: the failover endpoint answers the active
// member's TLS URL when it has one and its plain URL otherwise, never a
// trust file or credentials; a group's ca_bundle is its members' CA
// certificates, each once, in member order, and a client cannot set it.
func TestGroupTLSTargetAndCABundle(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	a := h.setup("solo", "acme")[1]
	ctx, op := h.authCtx(a.key), h.authCtx(h.opKey)
	caEast, err := pki.Create("east CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caWest, err := pki.Create("west CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// east and east2 share their region's CA; plain serves no TLS.
	clusters := map[string]string{}
	for _, c := range []struct {
		id, region string
		ca         *pki.CA
	}{{"east", "regions/us-east", caEast}, {"west", "regions/eu-west", caWest}, {"east2", "regions/us-east", caEast}, {"plain", "regions/us-east", nil}} {
		o := must[*cpv1.Operation](t)(h.clusters.CreateCluster(ctx, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: c.id, Cluster: &cpv1.Cluster{Region: c.region}}))
		req := &cpv1.ReportClusterStatusRequest{Name: o.Target, State: cpv1.ReportClusterStatusRequest_READY,
			ServiceUrl: "pulsar://" + c.id + ":6650", AdminUrl: "http://" + c.id + ":8080"}
		if c.ca != nil {
			req.TlsServiceUrl, req.TlsAdminUrl, req.CaCertificate = "pulsar+ssl://"+c.id+":6651", "https://"+c.id+":8443", string(c.ca.CertPEM)
		}
		must[*cpv1.Cluster](t)(h.agent.ReportClusterStatus(op, req))
		clusters[c.id] = o.Target
	}
	groups := cpv1.NewReplicationGroupsClient(h.conn)
	create := func(id string, members ...string) string {
		t.Helper()
		must[*cpv1.Operation](t)(groups.CreateReplicationGroup(ctx, &cpv1.CreateReplicationGroupRequest{Parent: a.org, ReplicationGroupId: id,
			ReplicationGroup: &cpv1.ReplicationGroup{Members: members, Namespaces: []string{"shop/" + id}, CaBundle: "not a certificate"}}))
		return a.org + "/replicationGroups/" + id
	}
	tlsGroup := create("tls", clusters["east"], clusters["west"], clusters["east2"])
	mixed := create("mixed", clusters["plain"], clusters["west"])

	if ft := must[*cpv1.FailoverTarget](t)(groups.GetFailoverTarget(ctx, &cpv1.GetFailoverTargetRequest{Name: tlsGroup})); ft.ServiceUrl != "pulsar+ssl://east:6651" {
		t.Fatalf("failover target of a TLS member: %v, want its TLS URL", ft)
	}
	code, body := h.rest(a.key, "GET", "/v1/"+tlsGroup+"/failoverTarget", nil)
	if code != 200 || body["serviceUrl"] != "pulsar+ssl://east:6651" || len(body) != 1 {
		t.Fatalf("REST failover target: %d %v, want only serviceUrl", code, body)
	}
	if ft := must[*cpv1.FailoverTarget](t)(groups.GetFailoverTarget(ctx, &cpv1.GetFailoverTargetRequest{Name: mixed})); ft.ServiceUrl != "pulsar://plain:6650" {
		t.Fatalf("failover target of a member without TLS: %v, want its plain URL", ft)
	}

	want := string(caEast.CertPEM) + string(caWest.CertPEM)
	if rg := must[*cpv1.ReplicationGroup](t)(groups.GetReplicationGroup(ctx, &cpv1.GetReplicationGroupRequest{Name: tlsGroup})); rg.CaBundle != want {
		t.Fatalf("ca_bundle:\n%s\nwant east's then west's CA once each:\n%s", rg.CaBundle, want)
	}
	code, body = h.rest(a.key, "GET", "/v1/"+mixed, nil)
	if code != 200 || body["caBundle"] != string(caWest.CertPEM) {
		t.Fatalf("REST group with a plain member: %d caBundle %q, want west's CA only", code, body["caBundle"])
	}
	list := must[*cpv1.ListReplicationGroupsResponse](t)(groups.ListReplicationGroups(ctx, &cpv1.ListReplicationGroupsRequest{Parent: a.org}))
	for _, rg := range list.ReplicationGroups {
		if (rg.Name == tlsGroup && rg.CaBundle != want) || (rg.Name == mixed && rg.CaBundle != string(caWest.CertPEM)) {
			t.Fatalf("listed %s with ca_bundle %q", rg.Name, rg.CaBundle)
		}
	}
	// The bundle is a trust file: both CAs verify.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(want)) {
		t.Fatal("the bundle does not parse")
	}
	for _, ca := range []*pki.CA{caEast, caWest} {
		if _, err := ca.Cert.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
			t.Fatalf("%s against the bundle: %v", ca.Cert.Subject, err)
		}
	}
}
