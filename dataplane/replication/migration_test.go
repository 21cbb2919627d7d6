package replication_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// adminCall sends one admin REST request and returns the status and body.
func adminCall(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// topicStats reads the raw stats of a topic.
func topicStats(t *testing.T, r *region, topic string) map[string]json.RawMessage {
	t.Helper()
	code, body := adminCall(t, http.MethodGet, r.S.WebServiceURL()+"/admin/v2/persistent/"+strings.TrimPrefix(topic, "persistent://")+"/stats", "")
	if code != http.StatusOK {
		t.Fatalf("%s stats: %d %s", r.Name, code, body)
	}
	var st map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// eventually polls cond every 10 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not after %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// seqOf is the number of a payload "p-000123".
func seqOf(t *testing.T, payload string) int {
	_, n, _ := strings.Cut(payload, "-")
	i, err := strconv.Atoi(n)
	if err != nil {
		t.Fatalf("payload %q", payload)
	}
	return i
}

// migrationRegions starts clusters a and b replicating namespace geo/ns,
// with a client of each.
func migrationRegions(t *testing.T, ns string) (a, b *region, ca, cb pulsar.Client, ctx context.Context) {
	rs := startRegions(t, "a", "b")
	replicatedNamespace(t, rs, "geo", ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return rs[0], rs[1], standalonetest.NewClient(t, rs[0].S.ServiceURL()), standalonetest.NewClient(t, rs[1].S.ServiceURL()), ctx
}

// checkSequence reads topic from the start in a new subscription and
// checks it holds p-000000 ... p-(n-1) once each, in order, and nothing
// more.
func checkSequence(t *testing.T, ctx context.Context, c pulsar.Client, topic, where string, n int) {
	t.Helper()
	v, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "verify-" + where,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for next := 0; next < n; next++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := v.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: received %d of %d: %v", where, next, n, err)
		}
		v.Ack(m)
		if got := seqOf(t, string(m.Payload())); got != next {
			t.Fatalf("%s: message %d is p-%06d (duplicate, loss or reorder)", where, next, got)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if m, err := v.Receive(rctx); err == nil {
		t.Fatalf("%s: extra message %s after all %d", where, m.Payload(), n)
	}
}

// TestMigrationFence: a planned failover of a namespace from a to b. A
// producer sending continuously to a ends up on b without being recreated;
// every message it saw acknowledged is in b exactly once and in order; a
// new producer on a is refused naming b; a consumer on a moves to b once
// it drained a; clearing the fence reopens a, which then holds everything
// b received (replicated back).
func TestMigrationFence(t *testing.T) {
	a, b, ca, cb, ctx := migrationRegions(t, "mig")
	topic := "persistent://geo/mig/orders"

	cons, err := ca.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "app",
		ReplicateSubscriptionState: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var (
		mu       sync.Mutex
		received []int
		acked    = map[int]bool{}
		sendErrs int
	)
	consDone := make(chan struct{})
	go func() {
		defer close(consDone)
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			cons.Ack(m)
			if !strings.HasPrefix(string(m.Payload()), "p-") {
				continue
			}
			mu.Lock()
			received = append(received, seqOf(t, string(m.Payload())))
			mu.Unlock()
		}
	}()

	prod, err := ca.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	prodDone := make(chan int)
	go func() {
		i := 0
		for {
			select {
			case <-stop:
				prodDone <- i
				return
			default:
			}
			n := i
			prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "p-%06d", n)},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						sendErrs++
						return
					}
					acked[n] = true
				})
			i++
			if i%50 == 0 {
				time.Sleep(5 * time.Millisecond) // ~10k msg/s at most
			}
		}
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	eventually(t, time.Minute, "500 messages acknowledged by a", func() bool { return ackedCount() >= 500 })

	// Fence a toward b.
	target := fmt.Sprintf(`{"migrated":true,"migratedClusterUrl":{"serviceUrl":%q,"brokerServiceUrl":%q}}`,
		b.S.WebServiceURL(), b.S.ServiceURL())
	if code, body := adminCall(t, http.MethodPost, a.S.WebServiceURL()+"/admin/v2/namespaces/geo/mig/migration", target); code != http.StatusNoContent {
		t.Fatalf("fence: %d %s", code, body)
	}
	fenced := eventually(t, 10*time.Second, "a's topic stats show migrated", func() bool {
		return string(topicStats(t, a, topic)["migrated"]) == "true"
	})
	t.Logf("fence applied (stats) %v after the policy write", fenced)
	atFence := ackedCount()

	// A new producer on a is refused, naming b.
	_, err = ca.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "cluster b") || !strings.Contains(err.Error(), b.S.ServiceURL()) {
		t.Fatalf("new producer on fenced a: %v, want a refusal naming cluster b and %s", err, b.S.ServiceURL())
	}
	t.Logf("new producer on a: %v", err)

	// The producer moves to b (TopicMigrated) and keeps being acknowledged.
	moved := eventually(t, 30*time.Second, "the producer publishes on b", func() bool {
		return clientPublishers(t, b, topic) == 1
	})
	t.Logf("producer on b %v after the fence", moved)
	eventually(t, time.Minute, "500 more messages acknowledged by b", func() bool { return ackedCount() >= atFence+500 })
	if n := clientPublishers(t, a, topic); n != 0 {
		t.Fatalf("a still has %d client publishers", n)
	}
	// Now that the producers moved, a producer arriving at a (say one
	// bounced back by another fenced cluster) is sent to b before being
	// refused, so its reconnection goes there.
	frames := rawProducer(t, a.S.ServiceURL(), topic)
	if len(frames) != 2 || frames[0].GetType() != pb.BaseCommand_TOPIC_MIGRATED || frames[1].GetType() != pb.BaseCommand_ERROR ||
		frames[0].GetTopicMigrated().GetBrokerServiceUrl() != b.S.ServiceURL() || frames[1].GetError().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("PRODUCER on a after the move answered %v, want TOPIC_MIGRATED to %s then ServiceNotReady", frames, b.S.ServiceURL())
	}
	close(stop)
	sent := <-prodDone
	if err := prod.Flush(); err != nil {
		t.Fatalf("flush on b: %v", err)
	}
	prod.Close()
	mu.Lock()
	total, errs := len(acked), sendErrs
	mu.Unlock()
	t.Logf("sent %d, acknowledged %d (%d at the fence), failed %d", sent, total, atFence, errs)
	if errs > 0 || total != sent {
		t.Fatalf("%d sends failed, %d of %d acknowledged", errs, total, sent)
	}

	// b holds every acknowledged message exactly once, in order.
	check := func(c pulsar.Client, where string) { checkSequence(t, ctx, c, topic, where, sent) }
	check(cb, "b")

	// The consumer drained a and moved to b, where it gets the rest.
	eventually(t, time.Minute, "the consumer received every message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen := map[int]bool{}
		for _, s := range received {
			seen[s] = true
		}
		return len(seen) == sent
	})
	mu.Lock()
	dups := len(received) - sent
	mu.Unlock()
	var subA struct {
		Subscriptions map[string]struct {
			Consumers []json.RawMessage `json:"consumers"`
		} `json:"subscriptions"`
	}
	json.Unmarshal(mustJSON(t, topicStats(t, a, topic)), &subA)
	if n := len(subA.Subscriptions["app"].Consumers); n != 0 {
		t.Fatalf("the consumer is still on a (%d consumers)", n)
	}
	t.Logf("consumer: %d messages, %d delivered twice across the move", sent, dups)

	// Unfence: a takes writes again, and holds what b received.
	if code, body := adminCall(t, http.MethodPost, a.S.WebServiceURL()+"/admin/v2/namespaces/geo/mig/migration", "false"); code != http.StatusNoContent {
		t.Fatalf("unfence: %d %s", code, body)
	}
	eventually(t, 10*time.Second, "a's topic stats show not migrated", func() bool {
		return string(topicStats(t, a, topic)["migrated"]) == "false"
	})
	check(ca, "a")
	pa, err := ca.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer on unfenced a: %v", err)
	}
	defer pa.Close()
	if _, err := pa.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatalf("send on unfenced a: %v", err)
	}
}

// rawProducer sends CONNECT and then PRODUCER for topic to the broker at
// serviceURL, and returns the frames that answer the PRODUCER up to its
// outcome (PRODUCER_SUCCESS or ERROR).
func rawProducer(t *testing.T, serviceURL, topic string) []*pb.BaseCommand {
	t.Helper()
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(serviceURL, "pulsar://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	w, rd := bufio.NewWriter(nc), protocol.NewReader(nc)
	write := func(cmd *pb.BaseCommand) {
		if err := protocol.WriteCommand(w, cmd); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	write(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: new("raw-test"), ProtocolVersion: new(int32(21))}})
	if f, err := rd.ReadFrame(); err != nil || f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT: %v %v", f.Cmd, err)
	}
	write(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: new(topic), ProducerId: new(uint64(7)), RequestId: new(uint64(1))}})
	var out []*pb.BaseCommand
	for {
		f, err := rd.ReadFrame()
		if err != nil {
			t.Fatalf("after PRODUCER, got %v then %v", out, err)
		}
		out = append(out, f.Cmd)
		if typ := f.Cmd.GetType(); typ == pb.BaseCommand_PRODUCER_SUCCESS || typ == pb.BaseCommand_ERROR {
			return out
		}
	}
}

// clientPublishers counts a topic's publishers that are not replicators.
func clientPublishers(t *testing.T, r *region, topic string) int {
	t.Helper()
	var pubs []struct {
		Name string `json:"producerName"`
	}
	json.Unmarshal(topicStats(t, r, topic)["publishers"], &pubs)
	n := 0
	for _, p := range pubs {
		if !strings.HasPrefix(p.Name, "pulsar.repl.") {
			n++
		}
	}
	return n
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMigrationFenceClusterLevel: migrating the whole cluster (its own
// record, Pulsar's clusters/{c}/migrate) fences its namespaces the same
// way; a synchronous producer keeps sending across the move.
func TestMigrationFenceClusterLevel(t *testing.T) {
	a, b, ca, cb, ctx := migrationRegions(t, "all")
	topic := "persistent://geo/all/events"
	// Batching on: with DisableBatching, pulsar-client-go v0.19.0 races
	// (detector) between a reconnect and single sends of its event loop.
	prod, err := ca.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	send := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "p-%06d", i)}); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	send(0, 100)
	body := fmt.Sprintf(`{"serviceUrl":%q,"brokerServiceUrl":%q}`, b.S.WebServiceURL(), b.S.ServiceURL())
	if code, resp := adminCall(t, http.MethodPost, a.S.WebServiceURL()+"/admin/v2/clusters/a/migrate?migrated=true", body); code != http.StatusNoContent {
		t.Fatalf("migrate cluster a: %d %s", code, resp)
	}
	if _, resp := adminCall(t, http.MethodGet, a.S.WebServiceURL()+"/admin/v2/clusters/a", ""); !strings.Contains(resp, `"migrated":true`) {
		t.Fatalf("cluster a record: %s", resp)
	}
	eventually(t, 10*time.Second, "a's topic stats show migrated", func() bool {
		return string(topicStats(t, a, topic)["migrated"]) == "true"
	})
	send(100, 200) // acknowledged by b once the producer moved
	if n := clientPublishers(t, b, topic); n != 1 {
		t.Fatalf("b has %d client publishers, want the moved producer", n)
	}
	_, err = ca.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err == nil || !strings.Contains(err.Error(), "cluster b") {
		t.Fatalf("new producer on migrated cluster a: %v", err)
	}
	checkSequence(t, ctx, cb, topic, "b", 200)
	if code, resp := adminCall(t, http.MethodPost, a.S.WebServiceURL()+"/admin/v2/clusters/a/migrate?migrated=false", ""); code != http.StatusNoContent {
		t.Fatalf("clear cluster migration: %d %s", code, resp)
	}
	eventually(t, 10*time.Second, "a's topic unfenced", func() bool {
		return string(topicStats(t, a, topic)["migrated"]) == "false"
	})
}

// TestMigrationFenceHeldThenCleared: while the target cannot be reached
// the backlog cannot drain, so the producer stays, its SENDs unstored and
// unanswered; clearing the fence makes it re-send them here, once each.
func TestMigrationFenceHeldThenCleared(t *testing.T) {
	rs := startRegions(t, "a", "b")
	a, b := rs[0], rs[1]
	replicatedNamespace(t, rs, "geo", "held")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca := standalonetest.NewClient(t, a.S.ServiceURL())
	topic := "persistent://geo/held/t"
	// b stops: what a stores from now on cannot drain to it.
	b.S.Shutdown(ctx)
	prod, err := ca.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 10 {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "p-%06d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	target := fmt.Sprintf(`{"migrated":true,"migratedClusterName":"b","migratedClusterUrl":{"brokerServiceUrl":%q}}`, b.S.ServiceURL())
	if code, body := adminCall(t, http.MethodPost, a.S.WebServiceURL()+"/admin/v2/namespaces/geo/held/migration", target); code != http.StatusNoContent {
		t.Fatalf("fence: %d %s", code, body)
	}
	eventually(t, 10*time.Second, "fenced", func() bool { return string(topicStats(t, a, topic)["migrated"]) == "true" })
	var mu sync.Mutex
	acked := 0
	for i := 10; i < 30; i++ {
		prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "p-%06d", i)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
			mu.Lock()
			acked++
			mu.Unlock()
		})
	}
	// Flush writes the batch out, then waits for a receipt that does not
	// come while the fence holds.
	fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if err := prod.FlushWithCtx(fctx); err == nil {
		t.Fatal("flush acknowledged while fenced without a drain")
	}
	fcancel()
	mu.Lock()
	held := acked
	mu.Unlock()
	if held != 0 || clientPublishers(t, a, topic) != 1 {
		t.Fatalf("while fenced without a drain: %d acknowledged, %d publishers on a", held, clientPublishers(t, a, topic))
	}
	if code, body := adminCall(t, http.MethodPost, a.S.WebServiceURL()+"/admin/v2/namespaces/geo/held/migration", "false"); code != http.StatusNoContent {
		t.Fatalf("unfence: %d %s", code, body)
	}
	eventually(t, time.Minute, "the held messages acknowledged by a", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acked == 20
	})
	checkSequence(t, ctx, ca, topic, "a", 30)
}
