package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestMessageTTLExpiresBacklog: messages older than the namespace's TTL are
// acknowledged on the subscription by the broker.
func TestMessageTTLExpiresBacklog(t *testing.T) {
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.Broker.MessageTTLCheckInterval = 200 * time.Millisecond
	sa := standalonetest.Start(t, cfg)
	client := standalonetest.NewClient(t, sa.ServiceURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ttl := 1
	if err := sa.Broker().Resources().CreateNamespace(ctx, "public", "ttl", broker.Policies{MessageTTLInSeconds: &ttl}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/ttl/t"
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // the subscription stays, with a backlog
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 5; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("old-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	tn, _ := broker.ParseTopicName(topic)
	backlog := func() int64 {
		st, err := sa.Broker().TopicStats(ctx, tn, broker.StatsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Subscriptions["s"].MsgBacklog
	}
	if b := backlog(); b != 5 {
		t.Fatalf("backlog before expiry = %d, want 5", b)
	}
	deadline := time.Now().Add(15 * time.Second)
	for backlog() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog still %d after the TTL passed", backlog())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("fresh")}); err != nil {
		t.Fatal(err)
	}
	c, err = client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.Receive(ctx)
	if err != nil || string(m.Payload()) != "fresh" {
		t.Fatalf("after expiry got %v %q, want the fresh message", err, m.Payload())
	}
}
