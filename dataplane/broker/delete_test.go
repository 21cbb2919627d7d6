package broker_test

import (
	"fmt"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// A forced deletion closes the topic's clients, which reconnect at once; the
// deletion must not race their reopening of the managed ledger it removes.
func TestForceDeleteWhileClientsReconnect(t *testing.T) {
	e := newEnv(t)
	a := pulsarAdmin(t, e.sa)
	for i := 0; i < 8; i++ {
		topic := fmt.Sprintf("persistent://public/default/delete-reconnect-%d", i)
		p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		e.send(p, &pulsar.ProducerMessage{Payload: []byte("x")})
		e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
		e.reader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		tn, _ := utils.GetTopicName(topic)
		if err := a.Topics().Delete(*tn, true, true); err != nil {
			t.Fatalf("round %d: forced delete with clients connected: %v", i, err)
		}
	}
}
