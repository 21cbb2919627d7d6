package broker_test

import (
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestProducerAccessModes: an exclusive producer keeps shared and other
// exclusive producers out; a WaitForExclusive producer is held until the
// exclusive one leaves, then gets the topic and can publish.
func TestProducerAccessModes(t *testing.T) {
	e := newEnv(t)
	topic := "persistent://public/default/access-modes"
	first := e.producer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	if _, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
		t.Fatal("a shared producer was let in next to an exclusive one")
	}
	if _, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic,
		ProducerAccessMode: pulsar.ProducerAccessModeExclusive}); err == nil {
		t.Fatal("a second exclusive producer was let in")
	}

	got := make(chan pulsar.Producer, 1)
	errs := make(chan error, 1)
	go func() {
		p, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic,
			ProducerAccessMode: pulsar.ProducerAccessModeWaitForExclusive})
		if err != nil {
			errs <- err
			return
		}
		got <- p
	}()
	select {
	case <-got:
		t.Fatal("WaitForExclusive producer admitted while the exclusive one is connected")
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(500 * time.Millisecond):
	}
	e.send(first, msg("from the first"))
	first.Close()
	select {
	case p := <-got:
		defer p.Close()
		e.send(p, msg("from the waiter"))
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("WaitForExclusive producer not admitted after the exclusive one left")
	}
}
