package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/regions/agent"
	"github.com/magnetar-dev/magnetar/regions/provisioner/provisionertest"
)

// runAgent runs a real region agent for local-a until the test ends; its
// clusters are in-process standalones.
func (cp *controlPlane) runAgent(t *testing.T) *provisionertest.Standalones {
	t.Helper()
	sp := provisionertest.NewStandalones(t)
	a, err := agent.New(agent.Config{Region: "local-a", ControlPlaneURL: "http://" + cp.addr, APIKey: cp.opKey, Provisioner: sp,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PollTimeout: 2 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond, ReconcileInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})
	return sp
}

// waitState polls "KIND get NAME" until it shows state.
func (cp *controlPlane) waitState(t *testing.T, key, kind, name, state string) {
	t.Helper()
	var last string
	if err := poll(t.Context(), func() bool {
		last = cp.ok(t, key, kind, "get", name)
		return strings.Contains(last, state)
	}); err != nil {
		t.Fatalf("%s %s never %s:\n%s", kind, name, state, last)
	}
}

// row returns the line of a text table whose first column is first.
func row(t *testing.T, out, first string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no row %q in:\n%s", first, out)
	return nil
}

type peeked struct {
	Topic    string `json:"topic"`
	Messages []struct {
		ID         string            `json:"messageId"`
		Key        string            `json:"key"`
		Properties map[string]string `json:"properties"`
		Payload    string            `json:"payload"`
	} `json:"messages"`
}

func payloads(p peeked) []string {
	var out []string
	for _, m := range p.Messages {
		out = append(out, m.Payload)
	}
	return out
}

// TestTopicDataPlane runs the data-plane commands against a real cluster: a
// standalone the region agent provisioned for the control plane.
func TestTopicDataPlane(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	sp := cp.runAgent(t)
	contains(t, "cluster create", cp.ok(t, key, "cluster", "create", "acme/dev", "--region", "local-a", "--timeout", "2m"), "READY", "pulsar://")
	cp.ok(t, key, "tenant", "create", "acme/dev/shop")
	cp.ok(t, key, "namespace", "create", "acme/dev/shop/orders")
	cp.ok(t, key, "topic", "create", "acme/dev/shop/orders/payments", "--partitions", "2")
	cp.waitState(t, key, "topic", "acme/dev/shop/orders/payments", "APPLIED")

	// A missing namespace or tenant is named as such, not as a missing topic.
	for topic, want := range map[string]string{
		"acme/dev/shop/nons/t": "namespace shop/nons does not exist on cluster acme/dev (create it: magnetar namespace create acme/dev/shop/nons)",
		"acme/dev/nope/ns/t":   "tenant nope does not exist on cluster acme/dev (create it: magnetar tenant create acme/dev/nope)",
	} {
		if r := cp.as(t, key, "topic", "produce", topic, "-m", "x"); r.err == nil || r.err.Error() != want {
			t.Errorf("produce to %s: %v, want %q", topic, r.err, want)
		}
		if r := cp.as(t, key, "topic", "consume", topic, "-s", "s"); r.err == nil || r.err.Error() != want {
			t.Errorf("consume from %s: %v, want %q", topic, r.err, want)
		}
	}

	// A topic that a client creates by producing to it.
	const events = "acme/dev/shop/orders/events"
	out := cp.ok(t, key, "topic", "produce", events, "-m", "hello", "-m", "world", "-k", "k1", "-p", "source=cli")
	contains(t, "produce", out, "produced 2 messages to persistent://shop/orders/events")

	// topic list merges the data plane's topics with the managed ones.
	out = cp.ok(t, key, "topic", "list", "acme/dev/shop/orders")
	if r := row(t, out, "acme/dev/shop/orders/events"); strings.Join(r[1:], " ") != "0 true no - -" {
		t.Fatalf("topic list: events row %v\n%s", r, out)
	}
	if r := row(t, out, "acme/dev/shop/orders/payments"); strings.Join(r[1:], " ") != "2 true yes APPLIED -" {
		t.Fatalf("topic list: payments row %v\n%s", r, out)
	}
	var list struct {
		Topics []struct {
			Name        string          `json:"name"`
			PulsarTopic string          `json:"pulsarTopic"`
			Partitions  int             `json:"partitions"`
			Managed     bool            `json:"managed"`
			OnDataPlane bool            `json:"onDataPlane"`
			Resource    json.RawMessage `json:"resource"`
		} `json:"topics"`
	}
	if err := json.Unmarshal([]byte(cp.ok(t, key, "topic", "list", "acme/dev/shop/orders", "-o", "json")), &list); err != nil || len(list.Topics) != 2 {
		t.Fatalf("topic list json (%v): %+v", err, list)
	}
	for _, tp := range list.Topics {
		if !tp.OnDataPlane || tp.Managed != (tp.PulsarTopic == "persistent://shop/orders/payments") {
			t.Fatalf("topic list json: %+v", tp)
		}
		if tp.Managed {
			var res cpv1.Topic
			if err := protojson.Unmarshal(tp.Resource, &res); err != nil || res.GetPartitions() != 2 {
				t.Fatalf("topic list json resource (%v): %s", err, tp.Resource)
			}
		}
	}
	if out := cp.ok(t, key, "topic", "list", "acme/dev/shop/orders", "--managed"); strings.Contains(out, "events") {
		t.Fatalf("topic list --managed lists a topic clients created:\n%s", out)
	}

	// peek without a subscription reads the topic from its first message;
	// the Go client batched both messages into one entry.
	var p peeked
	if err := json.Unmarshal([]byte(cp.ok(t, key, "topic", "peek", events, "-n", "5", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(payloads(p), ","); got != "hello,world" || p.Topic != "persistent://shop/orders/events" {
		t.Fatalf("peek: %+v", p)
	}
	if m := p.Messages[0]; m.Key != "k1" || m.Properties["source"] != "cli" || strings.Count(m.ID, ":") < 2 {
		t.Fatalf("peek: first message %+v", m)
	}

	// consume one through a new subscription, which starts at the earliest message.
	out = cp.ok(t, key, "topic", "consume", events, "-s", "sub", "-n", "1")
	contains(t, "consume", out, "hello", "k1", "source=cli")
	if strings.Contains(out, "world") {
		t.Fatalf("consume -n 1 printed two messages:\n%s", out)
	}
	// The next consume gets the other message of the batch: the first one's
	// acknowledgement reached the broker on its own.
	out = cp.ok(t, key, "topic", "consume", events, "-s", "sub", "-n", "1")
	if !strings.Contains(out, "world") || strings.Contains(out, "hello") {
		t.Fatalf("second consume -n 1: want world only:\n%s", out)
	}
	// The subscription's backlog now holds only what is produced next.
	cp.ok(t, key, "topic", "produce", events, "-m", "third", "-p", "source=cli")
	p = peeked{}
	if err := json.Unmarshal([]byte(cp.ok(t, key, "topic", "peek", events, "-s", "sub", "-n", "5", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(payloads(p), ","); got != "third" {
		t.Fatalf("peek -s sub: %q, want third", got)
	}
	contains(t, "peek text", cp.ok(t, key, "topic", "peek", events, "-s", "sub"), "MESSAGE ID", "PAYLOAD", "third", "source=cli")

	// stats count what flowed and the subscription's backlog.
	var st struct {
		MsgInCounter  int64 `json:"msgInCounter"`
		MsgOutCounter int64 `json:"msgOutCounter"`
		Subscriptions map[string]struct {
			MsgBacklog int64 `json:"msgBacklog"`
		} `json:"subscriptions"`
	}
	if err := json.Unmarshal([]byte(cp.ok(t, key, "topic", "stats", events, "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.MsgInCounter != 3 || st.MsgOutCounter < 2 || st.Subscriptions["sub"].MsgBacklog != 1 {
		t.Fatalf("stats: %+v", st)
	}
	out = cp.ok(t, key, "topic", "stats", events)
	if r := row(t, out, "persistent://shop/orders/events"); r[2] != "3" {
		t.Fatalf("stats: MSG IN %v\n%s", r, out)
	}
	if r := row(t, out, "sub"); r[1] != "Exclusive" || r[2] != "1" {
		t.Fatalf("stats: subscription row %v\n%s", r, out)
	}

	// Adding a partition reaches the data plane.
	contains(t, "topic update", cp.ok(t, key, "topic", "update", "acme/dev/shop/orders/payments", "--partitions", "3"), "3", "PENDING")
	cp.waitState(t, key, "topic", "acme/dev/shop/orders/payments", "APPLIED")

	// With the cluster's URLs given, no API key is needed: a partitioned
	// topic, produced to and consumed from without the control plane.
	dp := sp.Standalone("organizations/acme/clusters/dev")
	urls := []string{"--service-url", dp.ServiceURL(), "--endpoint", "127.0.0.1:1"}
	const payments = "any/where/shop/orders/payments"
	// 6 messages to the topic (the client picks the partitions), 4 to its
	// partition 2 by name.
	r := exec(t, nil, append([]string{"topic", "produce", payments, "-m", "p", "-n", "6", "-o", "json"}, urls...)...)
	if r.err != nil {
		t.Fatalf("produce with URLs: %v\n%s", r.err, r.stderr)
	}
	var ids struct {
		MessageIDs []string `json:"messageIds"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ids); err != nil || len(ids.MessageIDs) != 6 {
		t.Fatalf("produce json (%v): %s", err, r.stdout)
	}
	r = exec(t, nil, append([]string{"topic", "produce", payments + "-partition-2", "-m", "p", "-n", "4", "-o", "json"}, urls...)...)
	if err := json.Unmarshal([]byte(r.stdout), &ids); r.err != nil || err != nil || len(ids.MessageIDs) != 4 || !strings.HasSuffix(ids.MessageIDs[0], ":2:0") {
		t.Fatalf("produce to a partition (%v, %v): %s", r.err, err, r.stdout)
	}
	r = exec(t, nil, append([]string{"topic", "consume", payments, "-s", "s2", "-n", "10", "-o", "json"}, urls...)...)
	if r.err != nil {
		t.Fatalf("consume with URLs: %v\n%s", r.err, r.stderr)
	}
	if n := strings.Count(r.stdout, `"payload":"p"`); n != 10 {
		t.Fatalf("consume: %d messages, want 10:\n%s", n, r.stdout)
	}
	r = exec(t, nil, "topic", "stats", payments, "--admin-url", dp.WebServiceURL(), "--endpoint", "127.0.0.1:1")
	if r.err != nil {
		t.Fatalf("stats with URLs: %v", r.err)
	}
	if f := row(t, r.stdout, "persistent://shop/orders/payments"); f[1] != "3" || f[2] != "10" {
		t.Fatalf("stats of the partitioned topic: %v\n%s", f, r.stdout)
	}
	// The subscription's figures are summed over the partitions too.
	if f := row(t, r.stdout, "s2"); f[2] != "0" || f[4] != "10" {
		t.Fatalf("stats of the partitioned topic: subscription %v\n%s", f, r.stdout)
	}
	// Without URLs or a key the command says what it needs.
	r = exec(t, nil, "topic", "stats", payments, "--endpoint", cp.addr)
	if r.err == nil || !strings.Contains(r.err.Error(), "no API key") || !strings.Contains(r.err.Error(), "--admin-url") {
		t.Fatalf("stats without key or URLs: %v", r.err)
	}
}

// TestPulsarUpdates changes tenants, namespaces and topics through their
// Update methods and field masks.
func TestPulsarUpdates(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	cp.ok(t, key, "cluster", "create", "acme/dev", "--region", "local-a", "--no-wait")
	cp.ok(t, key, "cluster", "create", "acme/dr", "--region", "local-a", "--no-wait")
	cp.ok(t, key, "tenant", "create", "acme/dev/shop", "--admin-roles", "a")
	contains(t, "tenant update", cp.ok(t, key, "tenant", "update", "acme/dev/shop", "--admin-roles", "b,c"), "b,c", "PENDING")

	const ns = "acme/dev/shop/orders"
	cp.ok(t, key, "namespace", "create", ns, "--retention-minutes", "60", "--retention-mb", "100", "--message-ttl", "1h", "--bundles", "8")
	out := cp.ok(t, key, "namespace", "update", ns, "--message-ttl", "30m", "--deduplication",
		"--backlog-quota-limit", "1048576", "--backlog-quota-policy", "producer_exception",
		"--auto-topic-creation", "partitioned", "--auto-topic-partitions", "4", "--schema-compatibility", "full-transitive",
		"--replication-clusters", "dev,dr")
	contains(t, "namespace update", out, "60m/100MB", "30m0s")
	var got cpv1.Namespace
	if err := protojson.Unmarshal([]byte(cp.ok(t, key, "namespace", "get", ns, "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	p := got.GetPolicies()
	if p.GetMessageTtlSeconds() != 1800 || !p.GetDeduplicationEnabled() || p.GetRetention().GetTimeMinutes() != 60 || p.GetBundles() != 8 ||
		p.GetBacklogQuota().GetLimitBytes() != 1<<20 || p.GetBacklogQuota().GetPolicy() != cpv1.NamespacePolicies_BacklogQuota_PRODUCER_EXCEPTION ||
		p.GetAutoTopicCreation().GetType() != cpv1.NamespacePolicies_AutoTopicCreation_PARTITIONED || p.GetAutoTopicCreation().GetDefaultPartitions() != 4 ||
		p.GetSchemaCompatibilityStrategy() != cpv1.NamespacePolicies_FULL_TRANSITIVE ||
		strings.Join(p.GetReplicationClusters(), ",") != "organizations/acme/clusters/dev,organizations/acme/clusters/dr" {
		t.Fatalf("namespace after update: %v", p)
	}
	// --unset stops managing a policy; the others stay.
	cp.ok(t, key, "namespace", "update", ns, "--unset", "retention,message-ttl")
	got.Reset()
	if err := protojson.Unmarshal([]byte(cp.ok(t, key, "namespace", "get", ns, "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if p := got.GetPolicies(); p.Retention != nil || p.MessageTtlSeconds != nil || !p.GetDeduplicationEnabled() {
		t.Fatalf("namespace after --unset: %v", p)
	}

	cp.ok(t, key, "topic", "create", ns+"/payments", "--partitions", "2")
	contains(t, "topic update", cp.ok(t, key, "topic", "update", ns+"/payments", "--partitions", "5"), "5")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "update", ns + "/payments", "--partitions", "3"}, "INVALID_ARGUMENT: "},
		{[]string{"topic", "update", ns + "/payments"}, "nothing to change"},
		{[]string{"namespace", "update", ns}, "nothing to change"},
		{[]string{"namespace", "update", ns, "--unset", "bundles"}, `--unset "bundles"`},
		{[]string{"namespace", "update", ns, "--message-ttl", "1h", "--unset", "message-ttl"}, "--unset message-ttl and a value"},
		{[]string{"namespace", "update", ns, "--schema-compatibility", "sideways"}, "full_transitive"},
		{[]string{"namespace", "update", ns, "--backlog-quota-policy", "producer_exception"}, "needs --backlog-quota-limit"},
		{[]string{"namespace", "update", ns, "--auto-topic-creation", "maybe"}, "off, non-partitioned or partitioned"},
		{[]string{"tenant", "update", "acme/dev/shop"}, "nothing to change"},
	} {
		r := cp.as(t, key, tc.args...)
		if r.err == nil || !strings.Contains(r.err.Error(), tc.want) {
			t.Fatalf("magnetar %s: want an error with %q, got %v", strings.Join(tc.args, " "), tc.want, r.err)
		}
	}
}

func TestUsersAndAudit(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	contains(t, "user create", cp.ok(t, key, "user", "create", "acme/ann", "--email", "ann@example.com", "--display-name", "Ann"),
		"acme/ann", "Ann", "ann@example.com")
	cp.ok(t, key, "user", "create", "acme", "bob", "--email", "bob@example.com")
	contains(t, "user list", cp.ok(t, key, "user", "list", "acme"), "acme/ann", "acme/bob")
	contains(t, "user update", cp.ok(t, key, "user", "update", "acme/ann", "--email", "ann@example.org"), "ann@example.org", "Ann")
	var u cpv1.User
	if err := protojson.Unmarshal([]byte(cp.ok(t, key, "user", "get", "organizations/acme/users/ann", "-o", "json")), &u); err != nil ||
		u.GetEmail() != "ann@example.org" || u.GetDisplayName() != "Ann" {
		t.Fatalf("user get (%v): %v", err, &u)
	}
	contains(t, "user delete", cp.ok(t, key, "user", "delete", "acme/bob"), "deleted organizations/acme/users/bob")
	if r := cp.as(t, key, "user", "create", "acme/eve"); r.err == nil || !strings.Contains(r.err.Error(), "--email is required") {
		t.Fatalf("user create without email: %v", r.err)
	}

	out := cp.ok(t, key, "audit", "list", "acme")
	contains(t, "audit list", out, "SEQ", "PRINCIPAL", "CreateUser", "UpdateUser", "DeleteUser", "organizations/acme/serviceAccounts/ci", "acme/ann")
	var evs cpv1.ListAuditEventsResponse
	if err := protojson.Unmarshal([]byte(cp.ok(t, key, "audit", "list", "acme", "--method", "createuser", "-o", "json")), &evs); err != nil {
		t.Fatal(err)
	}
	if len(evs.GetAuditEvents()) != 2 {
		t.Fatalf("audit list --method createuser: %v", &evs)
	}
	for _, e := range evs.GetAuditEvents() {
		if e.GetMethod() != "CreateUser" || e.GetOutcome() != "ok" {
			t.Fatalf("audit list --method createuser: %v", e)
		}
	}
	out = cp.ok(t, key, "audit", "list", "acme", "--last", "1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "DeleteUser") {
		t.Fatalf("audit list --last 1:\n%s", out)
	}
}
