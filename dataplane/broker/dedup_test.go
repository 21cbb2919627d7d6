package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

func seqMsg(seq int64) *pulsar.ProducerMessage {
	return &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("m", seq)), SequenceID: &seq}
}

// TestDeduplication: with deduplication enabled on the namespace, a
// producer re-sending sequence ids is stored once, and a producer with the
// same name learns the last sequence id, also after the topic is reopened
// (from the snapshot) and when the state is rebuilt from the entries.
func TestDeduplication(t *testing.T) {
	e := newEnv(t)
	res := e.sa.Broker().Resources()
	on := true
	if err := res.CreateNamespace(e.ctx, "public", "dedup", broker.Policies{DeduplicationEnabled: &on}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/dedup/t"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "dp", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []int64{0, 1, 2, 1, 2, 3} {
		if _, err := p.Send(e.ctx, seqMsg(s)); err != nil {
			t.Fatal(err)
		}
	}
	for want := int64(0); want <= 3; want++ {
		m := e.receive(c)
		if string(m.Payload()) != fmt.Sprint("m", want) {
			t.Fatalf("got %q, want m%d (duplicates must not be stored)", m.Payload(), want)
		}
		c.Ack(m)
	}
	e.expectNothing(c, 300*time.Millisecond)
	p.Close()

	// Reopen the topic: the snapshot written at close restores the state.
	tn, _ := broker.ParseTopicName(topic)
	if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	p2, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "dp", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	// The client numbers its next message from the last sequence id the
	// broker returned (3).
	if _, err := p2.Send(e.ctx, msg("next")); err != nil {
		t.Fatal(err)
	}
	if got := p2.LastSequenceID(); got != 4 {
		t.Fatalf("sequence id of the first message after reopen = %d, want 4", got)
	}
	if m := e.receive(c); string(m.Payload()) != "next" {
		t.Fatalf("got %q", m.Payload())
	}
	if _, err := p2.Send(e.ctx, seqMsg(2)); err != nil {
		t.Fatal(err)
	}
	e.expectNothing(c, 300*time.Millisecond)
}

// TestDeduplicationRebuiltFromEntries: enabling deduplication on a topic
// that already holds messages rebuilds each producer's last sequence id by
// replaying the entries (no snapshot exists yet).
func TestDeduplicationRebuiltFromEntries(t *testing.T) {
	e := newEnv(t)
	res := e.sa.Broker().Resources()
	if err := res.CreateNamespace(e.ctx, "public", "later", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/later/t"
	// A subscription retains the entries (without one Pulsar keeps nothing).
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "keep"})
	p, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "rp", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(0); s <= 5; s++ {
		if _, err := p.Send(e.ctx, seqMsg(s)); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	on := true
	if err := res.UpdateNamespace(e.ctx, "public", "later", func(p *broker.Policies) error {
		p.DeduplicationEnabled = &on
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tn, _ := broker.ParseTopicName(topic)
	if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	p2 := e.producer(pulsar.ProducerOptions{Topic: topic, Name: "rp", DisableBatching: true})
	if _, err := p2.Send(e.ctx, msg("next")); err != nil {
		t.Fatal(err)
	}
	if got := p2.LastSequenceID(); got != 6 {
		t.Fatalf("first sequence id after enabling dedup = %d, want 6", got)
	}
}
