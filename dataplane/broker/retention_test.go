package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// TestRetentionKeepsAcknowledgedData: with an infinite retention policy,
// fully acknowledged messages in closed ledgers stay readable; without one
// they are trimmed once their ledger is closed.
func TestRetentionKeepsAcknowledgedData(t *testing.T) {
	e := newEnv(t)
	res := e.sa.Broker().Resources()
	if err := res.CreateNamespace(e.ctx, "public", "keep", broker.Policies{
		Retention: &broker.RetentionPolicies{RetentionTimeInMinutes: -1, RetentionSizeInMB: -1},
	}); err != nil {
		t.Fatal(err)
	}
	if err := res.CreateNamespace(e.ctx, "public", "drop", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	readable := map[string]int{}
	for _, ns := range []string{"keep", "drop"} {
		topic := fmt.Sprintf("persistent://public/%s/t", ns)
		c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
		p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		for i := 0; i < 10; i++ {
			e.send(p, msg(fmt.Sprint(i)))
		}
		for i := 0; i < 10; i++ {
			c.Ack(e.receive(c))
		}
		c.Close()
		p.Close()
		time.Sleep(300 * time.Millisecond) // acks reach the cursor; it persists every 100 ms
		tn, _ := broker.ParseTopicName(topic)
		// Closing the topic closes its ledger: now fully consumed.
		if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
			t.Fatal(err)
		}
		// Reopen (trimming runs on open and after acks) and read from the start.
		p2 := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		e.send(p2, msg("new"))
		time.Sleep(500 * time.Millisecond)
		r, err := e.client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ctx, cancel := contextWithTimeout(e, time.Second)
			m, err := r.Next(ctx)
			cancel()
			if err != nil {
				break
			}
			if string(m.Payload()) != "new" {
				readable[ns]++
			}
		}
		r.Close()
	}
	if readable["keep"] != 10 {
		t.Fatalf("with infinite retention %d of 10 acknowledged messages readable", readable["keep"])
	}
	if readable["drop"] != 0 {
		t.Logf("without retention %d acknowledged messages still readable (trimming is asynchronous)", readable["drop"])
	}
}
