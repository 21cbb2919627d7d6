package broker_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// refusedWith fails the test unless err is a refusal carrying want.
func refusedWith(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want refused with %q", what, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: refused with %v, want %q", what, err, want)
	}
}

// TestLimitsRefused: the count limits refuse the producer, consumer,
// subscription or topic over them with Pulsar's errors, and what is within
// them keeps working. Topic-level policies override the namespace's.
func TestLimitsRefused(t *testing.T) {
	e := newEnv(t)
	createNamespace(e, "public/limits", map[string]string{
		"max_producers_per_topic":        "5",
		"max_consumers_per_topic":        "2",
		"max_consumers_per_subscription": "1",
		"max_subscriptions_per_topic":    "2",
		"max_topics_per_namespace":       "3",
	})
	topic := "persistent://public/limits/t"

	t.Run("maxProducers topic policy", func(t *testing.T) {
		e.producer(pulsar.ProducerOptions{Topic: topic})
		setTopicPolicy(e, topic, "maxProducers", "1") // over the namespace's 5
		var err error
		awaitCond(t, 10*time.Second, "the topic policy", func() bool {
			var p pulsar.Producer
			if p, err = e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
				p.Close()
			}
			return err != nil
		})
		refusedWith(t, "second producer", err, "Topic reached max producers limit")
	})
	t.Run("maxConsumersPerSubscription", func(t *testing.T) {
		e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s1", Type: pulsar.Shared})
		_, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s1", Type: pulsar.Shared})
		refusedWith(t, "second consumer of s1", err, "Subscription reached max consumers limit")
	})
	t.Run("maxSubscriptionsPerTopic", func(t *testing.T) {
		e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s2"})
		_, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s3"})
		refusedWith(t, "third subscription", err, "Exceed the maximum number of subscriptions of the topic")
	})
	t.Run("maxConsumers", func(t *testing.T) {
		setTopicPolicy(e, topic, "maxSubscriptionsPerTopic", "10")
		var err error
		awaitCond(t, 10*time.Second, "a third consumer to be refused by max consumers", func() bool {
			var c pulsar.Consumer
			if c, err = e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s4"}); err == nil {
				c.Close()
			}
			return err != nil && strings.Contains(err.Error(), "max consumers")
		})
		refusedWith(t, "third consumer of the topic", err, "Topic reached max consumers limit")
	})
	t.Run("maxTopicsPerNamespace", func(t *testing.T) {
		// t exists; two more fit.
		for _, n := range []string{"t2", "t3"} {
			e.producer(pulsar.ProducerOptions{Topic: "persistent://public/limits/" + n})
		}
		_, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/limits/t4"})
		refusedWith(t, "a fourth topic", err, "Exceed maximum number of topics in namespace")
		// An existing topic still opens.
		e.producer(pulsar.ProducerOptions{Topic: "persistent://public/limits/t2"})
	})
}

// TestSubscribeRate: subscribeRate allows a consumer identity (client
// host, consumer name, consumer id) so many subscribes per period; the
// next is refused with Pulsar's NotAllowed error.
func TestSubscribeRate(t *testing.T) {
	e := newEnv(t)
	createNamespace(e, "public/subscriberate", map[string]string{
		"clusterSubscribeRate": `{"standalone":{"subscribeThrottlingRatePerConsumer":2,"ratePeriodInSecond":300}}`,
	})
	topic := "persistent://public/subscriberate/t"
	subscribe := func() error {
		// A fresh client: its first consumer has the same id every time,
		// as a reconnecting consumer keeps its id.
		cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: e.sa.ServiceURL(), Logger: plog.NewLoggerWithSlog(standalonetest.QuietLogger())})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Name: "c1"})
		if err == nil {
			c.Close()
		}
		return err
	}
	for i := range 2 {
		if err := subscribe(); err != nil {
			t.Fatalf("subscribe %d within the rate: %v", i, err)
		}
	}
	refusedWith(t, "third subscribe in the period", subscribe(), "Subscribe limited by subscribe rate limit per consumer.")
	// Another consumer name is another identity.
	c, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Name: "c2"})
	if err != nil {
		t.Fatalf("another consumer: %v", err)
	}
	c.Close()
}

// TestMaxUnackedPerConsumer: a Shared consumer holding
// max_unacked_messages_per_consumer unacknowledged messages gets no more
// until it acknowledges half of them.
func TestMaxUnackedPerConsumer(t *testing.T) {
	e := newEnv(t)
	const limit = 10
	createNamespace(e, "public/unacked", map[string]string{"max_unacked_messages_per_consumer": fmt.Sprint(limit)})
	topic := "persistent://public/unacked/t"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 3 * limit {
		e.send(p, msg(fmt.Sprint(i)))
	}
	var held []pulsar.Message
	for range limit {
		held = append(held, e.receive(c))
	}
	e.expectNothing(c, 500*time.Millisecond)
	for _, m := range held[:limit/2] {
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// Unblocked at half the limit: the rest arrives (acknowledged as it
	// comes, so it does not block again).
	for _, m := range held[limit/2:] {
		c.Ack(m)
	}
	for range 2 * limit {
		c.Ack(e.receive(c))
	}
}

// TestMaxUnackedPerSubscription: a Shared subscription whose consumers
// hold max_unacked_messages_per_subscription (a topic-level policy)
// unacknowledged messages stops dispatching to all of them until half are
// acknowledged.
func TestMaxUnackedPerSubscription(t *testing.T) {
	e := newEnv(t)
	const limit = 10
	createNamespace(e, "public/unackedsub", nil)
	topic := "persistent://public/unackedsub/t"
	type received struct {
		c pulsar.Consumer
		m pulsar.Message
	}
	ch := make(chan received, 3*limit)
	var cs []pulsar.Consumer
	for range 2 {
		c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
		cs = append(cs, c)
	}
	setTopicPolicy(e, topic, "maxUnackedMessagesOnSubscription", fmt.Sprint(limit))
	awaitCond(t, 10*time.Second, "the topic policy", func() bool {
		_, sub := loadedTopic(e, topic).MaxUnacked()
		return sub == limit
	})
	for _, c := range cs {
		go func(c pulsar.Consumer) {
			for {
				m, err := c.Receive(e.ctx)
				if err != nil {
					return
				}
				ch <- received{c, m}
			}
		}(c)
	}
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 3 * limit {
		e.send(p, msg(fmt.Sprint(i)))
	}
	next := func() received {
		select {
		case r := <-ch:
			return r
		case <-e.ctx.Done():
			t.Fatal("timed out receiving")
		}
		return received{}
	}
	var held []received
	for range limit {
		held = append(held, next())
	}
	select {
	case r := <-ch:
		t.Fatalf("message %q over the subscription's unacked limit", r.m.Payload())
	case <-time.After(500 * time.Millisecond):
	}
	for _, r := range held[:limit/2] {
		r.c.Ack(r.m)
	}
	for _, r := range held[limit/2:] {
		r.c.Ack(r.m)
	}
	for range 2 * limit {
		r := next()
		r.c.Ack(r.m)
	}
}

// TestTopicPolicyScopes: a global-scope topic policy applies where no
// local one is set; the local scope overrides it, live.
func TestTopicPolicyScopes(t *testing.T) {
	e := newEnv(t)
	createNamespace(e, "public/scopes", nil)
	topic := "persistent://public/scopes/t"
	tn, err := broker.ParseTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	if err := e.sa.Broker().Resources().UpdateTopicPolicies(e.ctx, tn, true, func(m map[string]json.RawMessage) error {
		m["maxConsumersPerSubscription"] = json.RawMessage("1")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var second pulsar.Consumer
	awaitCond(t, 10*time.Second, "the global policy to refuse a second consumer", func() bool {
		second, err = e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
		if err == nil {
			second.Close()
		}
		return err != nil
	})
	refusedWith(t, "second consumer under the global policy", err, "Subscription reached max consumers limit")
	setTopicPolicy(e, topic, "maxConsumersPerSubscription", "2")
	awaitCond(t, 10*time.Second, "the local policy to allow a second consumer", func() bool {
		second, err = e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
		return err == nil
	})
	second.Close()
}

// TestMaxUnackedPerSubscriptionBacklog: a backlog handed out in one
// dispatch round (a batch of entries read together) stops at the
// subscription's unacknowledged-message limit inside that batch.
func TestMaxUnackedPerSubscriptionBacklog(t *testing.T) {
	e := newEnv(t)
	const limit = 10
	createNamespace(e, "public/unackedbacklog", map[string]string{"max_unacked_messages_per_subscription": fmt.Sprint(limit)})
	topic := "persistent://public/unackedbacklog/t"
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared}
	e.consumer(opts).Close() // the subscription stays; what follows is its backlog
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 3 * limit {
		e.send(p, msg(fmt.Sprint(i)))
	}
	c := e.consumer(opts)
	seen := map[string]bool{}
	for len(seen) < 3*limit {
		var held []pulsar.Message
		for range min(limit, 3*limit-len(seen)) {
			m := e.receive(c)
			seen[string(m.Payload())] = true
			held = append(held, m)
		}
		e.expectNothing(c, 300*time.Millisecond) // held at the limit
		for _, m := range held {
			c.Ack(m)
		}
	}
}
