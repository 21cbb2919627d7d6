package broker_test

import (
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestPublishLatencyMetric: every SEND a producer makes is timed in
// magnetar_broker_publish_seconds, from its read to its receipt.
func TestPublishLatencyMetric(t *testing.T) {
	e := newEnv(t)
	p := e.producer(pulsar.ProducerOptions{Topic: "persistent://public/default/publish-metric", DisableBatching: true})
	const n = 7
	for i := range n {
		e.send(p, &pulsar.ProducerMessage{Payload: []byte{byte(i)}})
	}
	mfs, err := e.sa.Broker().Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "magnetar_broker_publish_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != n || h.GetSampleSum() <= 0 {
			t.Fatalf("publish histogram: %d samples summing to %gs, want %d with a positive sum", h.GetSampleCount(), h.GetSampleSum(), n)
		}
		return
	}
	t.Fatal("magnetar_broker_publish_seconds not registered")
}
