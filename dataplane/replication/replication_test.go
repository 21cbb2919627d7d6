package replication_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/dataplane/replication/replicationtest"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

type region = replicationtest.Region

func startRegions(t *testing.T, names ...string) []*region {
	return replicationtest.StartRegions(t, names...)
}

func replicatedNamespace(t *testing.T, rs []*region, tenant, ns string) {
	replicationtest.ReplicatedNamespace(t, rs, tenant, ns)
}

// produce sends n messages "<prefix>-<i>" and returns their payloads.
func produce(t *testing.T, ctx context.Context, c pulsar.Client, topic, prefix string, n int) []string {
	t.Helper()
	return produceWith(t, ctx, c, pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 10}, prefix, n)
}

func produceWith(t *testing.T, ctx context.Context, c pulsar.Client, opts pulsar.ProducerOptions, prefix string, n int) []string {
	t.Helper()
	p, err := c.CreateProducer(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var sent []string
	errs := make(chan error, n)
	for i := range n {
		payload := fmt.Sprintf("%s-%05d", prefix, i)
		sent = append(sent, payload)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			errs <- err
		})
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	return sent
}

// receiveAll reads from topic until want messages arrived and a further
// second brings nothing, and checks each producer's messages arrived once
// and in order.
func receiveAll(t *testing.T, ctx context.Context, c pulsar.Client, topic, sub string, want map[string][]string) {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	total := 0
	for _, v := range want {
		total += len(v)
	}
	got := map[string][]string{}
	n := 0
	for {
		wait := 60 * time.Second
		if n >= total {
			wait = time.Second
		}
		rctx, cancel := context.WithTimeout(ctx, wait)
		m, err := cons.Receive(rctx)
		cancel()
		if err != nil {
			if n >= total {
				break
			}
			t.Fatalf("%s: received %d of %d: %v", topic, n, total, err)
		}
		cons.Ack(m)
		prefix, _, _ := strings.Cut(string(m.Payload()), "-")
		got[prefix] = append(got[prefix], string(m.Payload()))
		n++
	}
	for prefix, w := range want {
		g := got[prefix]
		if len(g) != len(w) {
			t.Fatalf("%s: %d messages of %s, want %d (duplicates or losses)", topic, len(g), prefix, len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("%s: message %d of %s = %q, want %q", topic, i, prefix, g[i], w[i])
			}
		}
	}
	if n != total {
		t.Fatalf("%s: %d messages, want %d", topic, n, total)
	}
}

func TestReplicationTwoWay(t *testing.T) {
	rs := startRegions(t, "east", "west")
	replicatedNamespace(t, rs, "geo", "ns")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	east := standalonetest.NewClient(t, rs[0].S.ServiceURL())
	west := standalonetest.NewClient(t, rs[1].S.ServiceURL())
	topic := "persistent://geo/ns/two-way"
	want := map[string][]string{
		"e": produce(t, ctx, east, topic, "e", 500),
		"w": produce(t, ctx, west, topic, "w", 500),
	}
	receiveAll(t, ctx, east, topic, "check", want)
	receiveAll(t, ctx, west, topic, "check", want)

	st, err := rs[0].Admin.Topics().GetStats(mustTopic(t, topic))
	if err != nil {
		t.Fatal(err)
	}
	rep, ok := st.Replication["west"]
	if !ok {
		t.Fatalf("east's stats have no replication entry for west: %+v", st.Replication)
	}
	if !rep.Connected || rep.ReplicationBacklog != 0 {
		t.Fatalf("replication to west: connected %v backlog %d", rep.Connected, rep.ReplicationBacklog)
	}
	if rep.InboundConnection == "" {
		t.Fatalf("east's stats show no inbound replicator from west: %+v", rep)
	}
	body := scrape(t, rs[0].S.WebServiceURL()+"/metrics")
	for _, series := range []string{
		`pulsar_replication_backlog{cluster="east",namespace="geo/ns",remote_cluster="west"} 0`,
		`pulsar_replication_connected_count{cluster="east",namespace="geo/ns",remote_cluster="west"} 1`,
	} {
		if !strings.Contains(body, series) {
			t.Errorf("east /metrics lacks %s", series)
		}
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReplicationMeshOfThreePartitioned(t *testing.T) {
	rs := startRegions(t, "r1", "r2", "r3")
	replicatedNamespace(t, rs, "geo", "mesh")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := "persistent://geo/mesh/parts"
	if err := rs[0].Admin.Topics().Create(mustTopic(t, topic), 3); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	var clients []pulsar.Client
	for i, r := range rs {
		c := standalonetest.NewClient(t, r.S.ServiceURL())
		clients = append(clients, c)
		if i == 0 {
			continue
		}
	}
	// The partitioned topic exists only in r1: replication creates it in
	// the others. Produce in r1 first, then everywhere.
	want["a"] = produce(t, ctx, clients[0], topic, "a", 300)
	waitPartitioned(t, ctx, rs[1], topic, 3)
	waitPartitioned(t, ctx, rs[2], topic, 3)
	want["b"] = produce(t, ctx, clients[1], topic, "b", 300)
	want["c"] = produce(t, ctx, clients[2], topic, "c", 300)
	for _, c := range clients {
		receiveAllPartitioned(t, ctx, c, topic, want)
	}
}

// receiveAllPartitioned checks totals and per-producer order within each
// partition's share (a producer's messages are spread over partitions, so
// order is checked per key prefix over what arrived in order overall).
func receiveAllPartitioned(t *testing.T, ctx context.Context, c pulsar.Client, topic string, want map[string][]string) {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	total := 0
	wantSet := map[string]bool{}
	for _, v := range want {
		total += len(v)
		for _, p := range v {
			wantSet[p] = true
		}
	}
	seen := map[string]bool{}
	for len(seen) < total {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		m, err := cons.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: received %d of %d: %v", topic, len(seen), total, err)
		}
		cons.Ack(m)
		p := string(m.Payload())
		if !wantSet[p] {
			t.Fatalf("unexpected message %q", p)
		}
		if seen[p] {
			t.Fatalf("duplicate %q", p)
		}
		seen[p] = true
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if m, err := cons.Receive(rctx); err == nil {
		t.Fatalf("extra message %q", m.Payload())
	}
}

func waitPartitioned(t *testing.T, ctx context.Context, r *region, topic string, n int) {
	t.Helper()
	for ctx.Err() == nil {
		md, err := r.Admin.Topics().GetMetadata(mustTopic(t, topic))
		if err == nil && md.Partitions == n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: partitioned topic %s not created by replication", r.Name, topic)
}

func mustTopic(t *testing.T, s string) utils.TopicName {
	t.Helper()
	tn, err := utils.GetTopicName(s)
	if err != nil {
		t.Fatal(err)
	}
	return *tn
}

// TestReplicatedSubscriptionFailover: a consumer of a replicated
// subscription in east acknowledges out of order (every tenth message
// left unacknowledged); a consumer of the same subscription in west then
// receives exactly the unacknowledged messages: none missing, none of the
// acknowledged ones again.
func TestReplicatedSubscriptionFailover(t *testing.T) {
	rs := startRegions(t, "east", "west")
	replicatedNamespace(t, rs, "geo", "subs")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	east := standalonetest.NewClient(t, rs[0].S.ServiceURL())
	west := standalonetest.NewClient(t, rs[1].S.ServiceURL())
	topic := "persistent://geo/subs/orders"
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "billing", Type: pulsar.Shared,
		ReplicateSubscriptionState: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}
	ce, err := east.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	// One message per entry: a partly acknowledged batch counts as
	// unacknowledged (the Go client acknowledges a batch once all of it is).
	sent := produceWith(t, ctx, east, pulsar.ProducerOptions{Topic: topic, DisableBatching: true}, "m", 1000)
	unacked := map[string]bool{}
	for i := range len(sent) {
		m, err := ce.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if i%10 == 3 {
			unacked[string(m.Payload())] = true
			continue
		}
		ce.Ack(m)
	}
	// Let the acknowledgements reach the cursor and two states go out.
	time.Sleep(3 * time.Second)
	ce.Close()

	cw, err := west.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cw.Close()
	got, dups := map[string]bool{}, 0
	for {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := cw.Receive(rctx)
		cancel()
		if err != nil {
			break
		}
		p := string(m.Payload())
		if !unacked[p] {
			dups++
		}
		got[p] = true
		cw.Ack(m)
	}
	for p := range unacked {
		if !got[p] {
			t.Errorf("unacknowledged %s not delivered in west", p)
		}
	}
	t.Logf("west delivered %d of %d unacknowledged, %d acknowledged in east again", len(got)-dups, len(unacked), dups)
	if dups > 0 {
		t.Errorf("%d messages acknowledged in east were delivered again in west", dups)
	}
}

// TestReplicationClusterRemoved: a cluster removed from a namespace's
// replication clusters no longer receives its messages, and a cluster whose
// own record no longer lists it deletes the namespace's topics (Pulsar's
// behaviour).
func TestReplicationClusterRemoved(t *testing.T) {
	rs := startRegions(t, "east", "west")
	replicatedNamespace(t, rs, "geo", "rm")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	east := standalonetest.NewClient(t, rs[0].S.ServiceURL())
	west := standalonetest.NewClient(t, rs[1].S.ServiceURL())
	topic := "persistent://geo/rm/t"
	want := map[string][]string{"a": produce(t, ctx, east, topic, "a", 50)}
	receiveAll(t, ctx, west, topic, "check", want)

	for _, r := range rs {
		if err := r.Admin.Namespaces().SetNamespaceReplicationClusters("geo/rm", []string{"east"}); err != nil {
			t.Fatal(err)
		}
	}
	tn := mustTopic(t, topic)
	ns, err := utils.GetNameSpaceName("geo", "rm")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		parts, topics, err := rs[1].Admin.Topics().List(*ns)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts)+len(topics) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("west still has %v after leaving the replication clusters", topics)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := rs[0].Admin.Topics().GetStats(tn)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Replication["west"]; ok {
		t.Fatalf("east still replicates to west: %+v", st.Replication)
	}
	is, err := rs[0].Admin.Topics().GetInternalStats(tn)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := is.Cursors["pulsar.repl.west"]; ok {
		t.Fatal("east kept the replicator cursor of west")
	}
}

// TestReplicationScopes: a topic-level replication policy narrows the
// namespace's clusters; a message sent with DisableReplication stays
// local; the other messages of the topic are replicated.
func TestReplicationScopes(t *testing.T) {
	rs := startRegions(t, "east", "west")
	replicatedNamespace(t, rs, "geo", "scopes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	east := standalonetest.NewClient(t, rs[0].S.ServiceURL())
	west := standalonetest.NewClient(t, rs[1].S.ServiceURL())

	localOnly := "persistent://geo/scopes/local-only"
	produce(t, ctx, east, localOnly, "x", 1) // the topic exists before its policy is set
	if err := rs[0].Admin.Topics().SetReplicationClusters(mustTopic(t, localOnly), []string{"east"}); err != nil {
		t.Fatal(err)
	}
	mixed := "persistent://geo/scopes/mixed"
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: mixed, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var want []string
	for i := range 20 {
		msg := &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%02d", i)), DisableReplication: i%2 == 1}
		if _, err := p.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			want = append(want, string(msg.Payload))
		}
	}
	receiveAll(t, ctx, west, mixed, "check", map[string][]string{"m": want})

	// The topic policy reaches the topic's replicators through the policy
	// watch: wait until east stops replicating it, then produce.
	deadline := time.Now().Add(20 * time.Second)
	for {
		// (west's replicator still produces here: the stats keep an
		// inbound entry for west; the outbound cursor is what goes.)
		is, err := rs[0].Admin.Topics().GetInternalStats(mustTopic(t, localOnly))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := is.Cursors["pulsar.repl.west"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("east still replicates a topic whose policy names only east")
		}
		time.Sleep(100 * time.Millisecond)
	}
	produce(t, ctx, east, localOnly, "y", 10)
	c, err := west.Subscribe(pulsar.ConsumerOptions{Topic: localOnly, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := c.Receive(rctx)
		cancel()
		if err != nil {
			break
		}
		if strings.HasPrefix(string(m.Payload()), "y-") {
			t.Fatalf("west received %q from a topic replicated only to east", m.Payload())
		}
	}
}

// TestReplicatorsShareConnections: the replicators of many topics reach
// the remote broker over one connection (each with its own producer).
func TestReplicatorsShareConnections(t *testing.T) {
	rs := startRegions(t, "east", "west")
	replicatedNamespace(t, rs, "geo", "many")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	east := standalonetest.NewClient(t, rs[0].S.ServiceURL())
	west := standalonetest.NewClient(t, rs[1].S.ServiceURL())
	addrs := map[string]bool{}
	for i := range 10 {
		topic := fmt.Sprintf("persistent://geo/many/t%d", i)
		want := map[string][]string{"m": produce(t, ctx, east, topic, "m", 5)}
		receiveAll(t, ctx, west, topic, "check", want)
		st, err := rs[1].Admin.Topics().GetStats(mustTopic(t, topic))
		if err != nil {
			t.Fatal(err)
		}
		addrs[st.Replication["east"].InboundConnection] = true
	}
	if len(addrs) != 1 {
		t.Fatalf("east's replicators of 10 topics came from %d connections: %v", len(addrs), addrs)
	}
}
