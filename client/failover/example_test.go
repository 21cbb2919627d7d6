package failover_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/client/failover"
)

// A client that follows a replication group's failover endpoint.
func ExampleNewControlled() {
	c, err := failover.NewControlled(context.Background(), "https://cp.example.com/v1/organizations/acme/replicationGroups/orders:failoverTarget",
		failover.ControlledOptions{
			Header:        http.Header{"Authorization": {"Bearer " + "API_KEY"}},
			CheckInterval: 5 * time.Second,
		})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://acme/orders/created"})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("order 42")}); err != nil {
		log.Fatal(err)
	}
}

// A client that fails over from a primary to a secondary cluster on its
// own, and back.
func ExampleNewAutomatic() {
	c, err := failover.NewAutomatic(failover.AutomaticOptions{
		Primary:         failover.Cluster{ServiceURL: "pulsar+ssl://east.example.com:6651", AuthPlugin: "token", AuthParams: "file:///etc/pulsar/token"},
		Secondaries:     []failover.Cluster{{ServiceURL: "pulsar+ssl://west.example.com:6651", AuthPlugin: "token", AuthParams: "file:///etc/pulsar/token"}},
		FailoverDelay:   30 * time.Second,
		SwitchBackDelay: 5 * time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: "persistent://acme/orders/created", SubscriptionName: "billing",
		Type: pulsar.Shared, ReplicateSubscriptionState: true})
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()
	for {
		m, err := cons.Receive(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("%s", m.Payload())
		cons.Ack(m)
	}
}
