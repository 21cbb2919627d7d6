//go:build !race

// This test is left out of -race builds: pulsar-client-go v0.19.0 has a
// data race of its own on producer reconnection (grabCnx writes the
// producer name while the send loop serializes a message with it), which
// the race detector reports whenever a broker closes a producer.

package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestUnloadReconnects: after an unload the real client's producer and
// consumer reconnect and keep working.
func TestUnloadReconnects(t *testing.T) {
	s := cluster(t)
	a := newAdmin(t, s)
	topic := "persistent://public/default/unload-me"
	tn, _ := utils.GetTopicName(topic)
	c := newClient(t, s.ServiceURL())
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().Unload(*tn); err != nil {
		t.Fatal(err)
	}
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"before", "after"} {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != want {
			t.Fatalf("got %q, want %q", m.Payload(), want)
		}
		cons.Ack(m)
	}
}
