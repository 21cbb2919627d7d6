package broker_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/billing"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

func sourceOf(u broker.Usage, name string) (billing.SourceUsage, bool) {
	for _, s := range u.Sources {
		if s.Source == name {
			return s, true
		}
	}
	return billing.SourceUsage{}, false
}

// TestUsageDurable: a persistent topic's in counter and its durable
// subscription's out counter count every stored and every consumed
// message once, and come back with the same values and epochs when the
// topic is unloaded and loaded again (recounted from their checkpoint).
func TestUsageDurable(t *testing.T) {
	e := newEnv(t)
	const topic = "persistent://public/default/durable-usage"
	prod := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	cons := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	wantBytes := int64(0)
	for i := 0; i < 20; i++ {
		p := strings.Repeat("y", 5+i)
		wantBytes += int64(len(p))
		e.send(prod, &pulsar.ProducerMessage{Payload: []byte(p)})
	}
	outBytes := int64(0)
	for i := 0; i < 12; i++ {
		m := e.receive(cons)
		outBytes += int64(len(m.Payload()))
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	in, out := "in "+topic, "out "+topic+" s"
	var before broker.Usage
	waitFor(t, e, "the acknowledgements counted", func() bool {
		before = e.sa.Broker().Usage()
		o, ok := sourceOf(before, out)
		return ok && o.MessagesOut == 12
	})
	i1, _ := sourceOf(before, in)
	o1, _ := sourceOf(before, out)
	if i1.MessagesIn != 20 || i1.BytesIn != wantBytes || o1.BytesOut != outBytes || i1.Epoch == "" || o1.Epoch == "" {
		t.Fatalf("sources %+v %+v, want 20 messages %d bytes in, 12 messages %d bytes out", i1, o1, wantBytes, outBytes)
	}
	if d := before.Namespace("public", "default"); d.NonPersistentMessagesIn != 0 {
		t.Fatalf("persistent traffic counted as non-persistent: %+v", d)
	}

	// The clients closed first: the Go client's producer reconnecting
	// after an unload races with itself under the race detector.
	prod.Close()
	cons.Close()
	tn, _ := broker.ParseTopicName(topic)
	if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	prod = e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := 0; i < 3; i++ {
		e.send(prod, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("after-", i))})
	}
	var after broker.Usage
	waitFor(t, e, "the topic loaded again", func() bool {
		after = e.sa.Broker().Usage()
		s, ok := sourceOf(after, in)
		return ok && s.MessagesIn == 23
	})
	i2, _ := sourceOf(after, in)
	o2, ok := sourceOf(after, out)
	if !ok || i2.Epoch != i1.Epoch || o2.Epoch != o1.Epoch || o2.MessagesOut != 12 || o2.BytesOut != outBytes ||
		i2.BytesIn != wantBytes+int64(3*len("after-0")) {
		t.Fatalf("after the reload: %+v %+v; before: %+v %+v", i2, o2, i1, o1)
	}
}

// TestAckDoesNotWaitForUsageRecount: acknowledgements move the
// subscription's out counter by reading the entries they pass, which may
// be on the bookies (an old ledger). That recount must not run on the
// acknowledgement's path: with every read of it held, acknowledgements
// (with responses) still complete; once the reads are let go, the counter
// reaches the same value as before.
func TestAckDoesNotWaitForUsageRecount(t *testing.T) {
	e := newEnv(t)
	const topic = "persistent://public/default/ack-no-recount"
	prod := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	cons := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", AckWithResponse: true})
	const n = 5
	outBytes := int64(0)
	for i := 0; i < n; i++ {
		e.send(prod, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("message-", i))})
	}
	var msgs []pulsar.Message
	for i := 0; i < n; i++ {
		m := e.receive(cons)
		outBytes += int64(len(m.Payload()))
		msgs = append(msgs, m)
	}

	reading := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	defer letGo()
	defer broker.SetUsageReadHook(func(tn broker.TopicName) {
		if tn.String() == topic {
			select {
			case reading <- struct{}{}:
			default:
			}
			<-release
		}
	})()

	for _, m := range msgs {
		acked := make(chan error, 1)
		go func() { acked <- cons.Ack(m) }()
		select {
		case err := <-acked:
			if err != nil {
				t.Fatalf("ack %v: %v", m.ID(), err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("ack %v not answered while a usage recount read is held: the ack waits for storage reads", m.ID())
		}
	}
	select {
	case <-reading: // the recount runs, off the acknowledgements' path
	case <-e.ctx.Done():
		t.Fatal("no usage recount after the acknowledgements")
	}
	letGo()
	out := "out " + topic + " s"
	waitFor(t, e, "the acknowledgements counted", func() bool {
		o, ok := sourceOf(e.sa.Broker().Usage(), out)
		return ok && o.MessagesOut == n
	})
	o, _ := sourceOf(e.sa.Broker().Usage(), out)
	if o.BytesOut != outBytes {
		t.Fatalf("out counter %+v, want %d messages, %d bytes", o, n, outBytes)
	}
}
