package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestTopicFlowCounters: the stats' msgInCounter, bytesInCounter,
// msgOutCounter and bytesOutCounter count what flowed through the topic and
// its subscription, batched and not, and keep their values after the
// clients closed.
func TestTopicFlowCounters(t *testing.T) {
	sa := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	client := standalonetest.NewClient(t, sa.ServiceURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := "persistent://public/default/flow"
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	const unbatched, batched = 10, 40
	payload := []byte("0123456789") // 10 bytes
	for i, opts := range []pulsar.ProducerOptions{{Topic: topic, DisableBatching: true}, {Topic: topic, BatchingMaxPublishDelay: 50 * time.Millisecond}} {
		p, err := client.CreateProducer(opts)
		if err != nil {
			t.Fatal(err)
		}
		n := unbatched
		if i == 1 {
			n = batched
		}
		for j := 0; j < n; j++ {
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					t.Error(err)
				}
			})
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	for i := 0; i < unbatched+batched; i++ {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Ack(m)
	}
	tn, _ := broker.ParseTopicName(topic)
	var st *broker.TopicStats
	waitUntil := time.Now().Add(10 * time.Second)
	for {
		if st, err = sa.Broker().TopicStats(ctx, tn, broker.StatsOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(st.Subscriptions["s"].Consumers) == 1 || time.Now().After(waitUntil) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := st.Subscriptions["s"].Consumers[0].MsgOutCounter; got != unbatched+batched {
		t.Errorf("consumer msgOutCounter = %d, want %d", got, unbatched+batched)
	}
	c.Close()
	if st, err = sa.Broker().TopicStats(ctx, tn, broker.StatsOptions{}); err != nil {
		t.Fatal(err)
	}
	want := int64(unbatched + batched)
	sub := st.Subscriptions["s"]
	t.Logf("in %d msgs %d bytes, out %d msgs %d bytes; subscription out %d msgs %d bytes",
		st.MsgInCounter, st.BytesInCounter, st.MsgOutCounter, st.BytesOutCounter, sub.MsgOutCounter, sub.BytesOutCounter)
	for name, got := range map[string]int64{"msgInCounter": st.MsgInCounter, "msgOutCounter": st.MsgOutCounter, "subscription msgOutCounter": sub.MsgOutCounter} {
		if got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	// Bytes are the stored entries' (metadata included), so at least the
	// payloads.
	minBytes := want * int64(len(payload))
	for name, got := range map[string]int64{"bytesInCounter": st.BytesInCounter, "bytesOutCounter": st.BytesOutCounter, "subscription bytesOutCounter": sub.BytesOutCounter} {
		if got < minBytes {
			t.Errorf("%s = %d, want at least %d", name, got, minBytes)
		}
	}
}
