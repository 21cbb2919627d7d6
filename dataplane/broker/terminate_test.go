//go:build !race

// This test is left out of -race builds, as dataplane/admin's unload test:
// pulsar-client-go v0.19.0 closes a producer's event channel while a Send
// may still be writing to it (partitionProducer.doClose during
// reconnectToBroker against internalSendAsync), which the race detector
// reports in the test process. The termination makes the client do exactly
// that. make test runs it without the race detector.

package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

func TestTerminatedTopicRefusesProducers(t *testing.T) {
	e := newEnv(t)
	topic := "persistent://public/default/terminate-me"
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 5 * time.Second})
	e.send(p, msg("before"))
	tn, _ := broker.ParseTopicName(topic)
	if _, err := e.sa.Broker().TerminateTopic(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A send racing the client's own close of the producer can block
		// for good (the client bug below): each attempt gets a deadline.
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		_, err := p.Send(ctx, msg("after"))
		cancel()
		if errors.Is(err, pulsar.ErrTopicTerminated) || errors.Is(err, pulsar.ErrProducerClosed) {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("send to a terminated topic: %v", err)
		}
	}
	if _, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
		t.Fatal("producer created on a terminated topic")
	}
}
