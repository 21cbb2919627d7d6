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
	c, err := failover.NewControlled(context.Background(), "https://cp.example.com/v1/organizations/acme/replicationGroups/orders/failoverTarget",
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

// A client of a replication group whose clusters authenticate their
// clients (magnetar up --data-plane-auth). The endpoint names each
// member's pulsar+ssl:// URL and nothing else; the client keeps its own
// trust file and authentication on every member: the group's CA bundle
// and a token for the organization's audience, valid on all of them.
func ExampleNewControlled_authenticated() {
	c, err := failover.NewControlled(context.Background(), "https://cp.example.com/v1/organizations/acme/replicationGroups/orders/failoverTarget",
		failover.ControlledOptions{
			Header: http.Header{"Authorization": {"Bearer " + "API_KEY"}},
			Client: pulsar.ClientOptions{
				// magnetar group get acme/orders -o json | jq -r .caBundle > acme-orders-ca.pem
				TLSTrustCertsFilePath: "/etc/pulsar/acme-orders-ca.pem",
				Authentication: pulsar.NewAuthenticationOAuth2(map[string]string{
					"type":       "client_credentials",
					"issuerUrl":  "https://cp.example.com",
					"audience":   "urn:magnetar:organization:acme",
					"privateKey": "/etc/pulsar/key.json", // {"type": "client_credentials", "client_id": ..., "client_secret": ..., "issuer_url": ...}
				}),
			},
			CheckInterval: 5 * time.Second,
		})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://shop/orders/created"})
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
