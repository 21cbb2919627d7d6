package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// newFastPolicyEnv is newEnv with the periodic backlog-quota and TTL passes
// every interval.
func newFastPolicyEnv(t *testing.T, interval time.Duration) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.Broker.BacklogQuotaCheckInterval = interval
	cfg.Broker.MessageTTLCheckInterval = interval
	sa := standalonetest.Start(t, cfg)
	return &env{t: t, sa: sa, client: standalonetest.NewClient(t, sa.ServiceURL()), ctx: ctx}
}

// quotaMap is a backlog_quota_map policy value.
func quotaMap(t *testing.T, quotas map[string]map[string]any) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(quotas)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// setNamespaceField sets (nil: removes) one field of a namespace's
// policies the way the admin API stores it.
func setNamespaceField(e *env, ns, field string, value json.RawMessage) {
	e.t.Helper()
	tenant, name, _ := strings.Cut(ns, "/")
	if err := e.sa.Broker().Resources().UpdateNamespaceFields(e.ctx, tenant, name, func(m map[string]json.RawMessage) error {
		if value == nil {
			delete(m, field)
		} else {
			m[field] = value
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// backlogOf returns a subscription's message backlog from the topic stats.
func backlogOf(e *env, topic, sub string) int64 {
	e.t.Helper()
	tn, err := broker.ParseTopicName(topic)
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := e.sa.Broker().TopicStats(e.ctx, tn, broker.StatsOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	ss, ok := st.Subscriptions[sub]
	if !ok {
		e.t.Fatalf("subscription %s of %s not in stats", sub, topic)
	}
	return ss.MsgBacklog
}

// awaitCond polls cond every 50 ms until it holds, failing the test after
// timeout.
func awaitCond(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBacklogQuotaEvictionKeepsNewest: with a destination_storage quota and
// consumer_backlog_eviction, a producer far over the quota keeps
// publishing, the periodic pass cuts the idle subscription's backlog to
// within the quota, and the subscription then receives only the newest
// messages, in order.
func TestBacklogQuotaEvictionKeepsNewest(t *testing.T) {
	e := newFastPolicyEnv(t, 100*time.Millisecond)
	const limit = 10 << 10 // bytes
	const payload = 1000   // bytes per message, plus its metadata
	const total = 60
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", "evict", broker.Policies{Other: map[string]json.RawMessage{
		"backlog_quota_map": quotaMap(t, map[string]map[string]any{
			"destination_storage": {"limitSize": limit, "limitTime": -1, "policy": "consumer_backlog_eviction"},
		}),
	}}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/evict/t"
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "slow"}).Close() // a durable subscription that never acks
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	pad := strings.Repeat("x", payload)
	for i := range total {
		// Send fails if the broker blocks the producer instead of evicting.
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%03d%s", i, pad))})
		cancel()
		if err != nil {
			t.Fatalf("send %d over a consumer_backlog_eviction quota: %v", i, err)
		}
	}
	maxEntries := int64(limit / payload) // an upper bound: entries are larger than the payload
	awaitCond(t, 15*time.Second, "the backlog to be evicted to within the quota", func() bool {
		return backlogOf(e, topic, "slow") <= maxEntries
	})
	kept := backlogOf(e, topic, "slow")
	if kept == 0 {
		t.Fatal("eviction dropped the whole backlog; it should keep up to 90% of the quota")
	}

	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "slow"})
	for want := total - int(kept); want < total; want++ {
		m := e.receive(c)
		got, err := strconv.Atoi(string(m.Payload()[:3]))
		if err != nil || got != want {
			t.Fatalf("received message %q..., want %03d: only the newest %d messages must remain", m.Payload()[:3], want, kept)
		}
		c.Ack(m)
	}
	e.expectNothing(c, 300*time.Millisecond)
}

// TestBacklogQuotaEvictionByMessageAge: with a message_age quota and
// consumer_backlog_eviction, messages older than limitTime leave the
// backlog; a message published afterwards is delivered.
func TestBacklogQuotaEvictionByMessageAge(t *testing.T) {
	e := newFastPolicyEnv(t, 100*time.Millisecond)
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", "age", broker.Policies{Other: map[string]json.RawMessage{
		"backlog_quota_map": quotaMap(t, map[string]map[string]any{
			"message_age": {"limitSize": -1, "limitTime": 2, "policy": "consumer_backlog_eviction"},
		}),
	}}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/age/t"
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"}).Close()
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 5 {
		e.send(p, msg(fmt.Sprint("old-", i)))
	}
	if b := backlogOf(e, topic, "s"); b == 0 {
		t.Fatal("backlog evicted before the messages were two seconds old")
	}
	awaitCond(t, 15*time.Second, "messages older than limitTime to be evicted", func() bool {
		return backlogOf(e, topic, "s") == 0
	})
	// Connected first, so the fresh message is dispatched before it can
	// age out itself.
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	e.send(p, msg("fresh"))
	if m := e.receive(c); string(m.Payload()) != "fresh" {
		t.Fatalf("got %q, want the fresh message", m.Payload())
	}
}

// TestBacklogQuotaMessageAgeBlocksProducers: with a message_age quota and
// producer_exception, a producer is refused once the oldest unacknowledged
// message is older than limitTime, and accepted again once the backlog is
// cleared.
func TestBacklogQuotaMessageAgeBlocksProducers(t *testing.T) {
	e := newFastPolicyEnv(t, 100*time.Millisecond)
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", "hold", broker.Policies{Other: map[string]json.RawMessage{
		"backlog_quota_map": quotaMap(t, map[string]map[string]any{
			"message_age": {"limitSize": -1, "limitTime": 1, "policy": "producer_exception"},
		}),
	}}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/hold/t"
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"}).Close()
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	e.send(p, msg("first")) // younger than limitTime: accepted
	var sendErr error
	awaitCond(t, 15*time.Second, "the producer to be blocked by the message_age quota", func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		_, sendErr = p.Send(ctx, msg("more"))
		return sendErr != nil
	})
	if !errors.Is(sendErr, pulsar.ErrProducerBlockedQuotaExceeded) {
		t.Fatalf("send over the quota failed with %v, want ErrProducerBlockedQuotaExceeded", sendErr)
	}
	if _, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil ||
		!strings.Contains(err.Error(), "ProducerBlockedQuotaExceededException") {
		t.Fatalf("new producer over the quota: %v, want ProducerBlockedQuotaExceededException", err)
	}

	tn, _ := broker.ParseTopicName(topic)
	if err := e.sa.Broker().ClearBacklog(e.ctx, tn, "s"); err != nil {
		t.Fatal(err)
	}
	var p2 pulsar.Producer
	awaitCond(t, 10*time.Second, "a producer to be accepted after the backlog was cleared", func() bool {
		var err error
		p2, err = e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		return err == nil
	})
	defer p2.Close()
	e.send(p2, msg("after"))
}
