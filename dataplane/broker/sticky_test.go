package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// TestKeySharedStickyRanges: consumers that declare STICKY hash ranges get
// exactly the keys whose hash falls in their range.
func TestKeySharedStickyRanges(t *testing.T) {
	e := newEnv(t)
	topic := "sticky"
	ranges := [][]int{{0, 32767}, {32768, 65535}}
	var cs []pulsar.Consumer
	for _, r := range ranges {
		pol, err := pulsar.NewKeySharedPolicySticky(r)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
			Type: pulsar.KeyShared, KeySharedPolicy: pol}))
	}
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 60
	for i := 0; i < n; i++ {
		e.send(p, &pulsar.ProducerMessage{Key: fmt.Sprint("key-", i), Payload: []byte("x")})
	}
	got := 0
	for ci, c := range cs {
		for {
			ctx, cancel := contextWithTimeout(e, time.Second)
			m, err := c.Receive(ctx)
			cancel()
			if err != nil {
				break
			}
			got++
			c.Ack(m)
			h := int(broker.KeyHash(m.Key()))
			if h < ranges[ci][0] || h > ranges[ci][1] {
				t.Fatalf("key %s (hash %d) went to the consumer of %v", m.Key(), h, ranges[ci])
			}
		}
	}
	if got != n {
		t.Fatalf("received %d of %d", got, n)
	}
}
