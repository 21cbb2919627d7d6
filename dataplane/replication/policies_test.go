package replication_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestReplicatorDispatchRate: with replicatorDispatchRate at 10 msg/s,
// 60 messages stored at once in east take seconds to reach west (fewer
// than all after 2 s), and all arrive.
func TestReplicatorDispatchRate(t *testing.T) {
	rs := startRegions(t, "east", "west")
	replicatedNamespace(t, rs, "geo", "paced")
	ns, _ := utils.GetNameSpaceName("geo", "paced")
	if err := rs[0].Admin.Namespaces().SetReplicatorDispatchRate(*ns, utils.DispatchRate{
		DispatchThrottlingRateInMsg: 10, DispatchThrottlingRateInByte: -1, RatePeriodInSecond: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	east := standalonetest.NewClient(t, rs[0].S.ServiceURL())
	west := standalonetest.NewClient(t, rs[1].S.ServiceURL())
	topic := "persistent://geo/paced/t"
	c, err := west.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	produceWith(t, ctx, east, pulsar.ProducerOptions{Topic: topic, DisableBatching: true}, "m", 60)
	stored := time.Now()
	got := 0
	for got < 60 {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of 60: %v", got, err)
		}
		c.Ack(m)
		got++
		if got == 60 && time.Since(stored) < 2*time.Second {
			t.Fatalf("all 60 replicated %v after they were stored, at a rate of 10 msg/s", time.Since(stored))
		}
	}
	t.Logf("60 messages replicated in %v at 10 msg/s", time.Since(stored).Round(10*time.Millisecond))
}

type order struct {
	ID   int    `json:"id"`
	Item string `json:"item"`
}

const orderSchema = `{"type":"record","name":"Order","fields":[{"name":"id","type":"int"},{"name":"item","type":"string"}]}`

// TestReplicationCarriesSchemas: messages produced with a JSON schema in
// east are read with that schema in west, where the schema was registered
// by the replicator.
func TestReplicationCarriesSchemas(t *testing.T) {
	rs := startRegions(t, "east", "west")
	replicatedNamespace(t, rs, "geo", "typed")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	east := standalonetest.NewClient(t, rs[0].S.ServiceURL())
	west := standalonetest.NewClient(t, rs[1].S.ServiceURL())
	topic := "persistent://geo/typed/orders"
	p, err := east.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(orderSchema, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 5 {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: order{ID: i, Item: fmt.Sprintf("item-%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := west.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, Schema: pulsar.NewJSONSchema(orderSchema, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var o order
		if err := m.GetSchemaValue(&o); err != nil {
			t.Fatal(err)
		}
		if o.ID != i || o.Item != fmt.Sprintf("item-%d", i) {
			t.Fatalf("message %d decoded as %+v", i, o)
		}
		if len(m.SchemaVersion()) == 0 {
			t.Fatalf("message %d has no schema version", i)
		}
	}
	info, err := rs[1].Admin.Schemas().GetSchemaInfo(topic)
	if err != nil {
		t.Fatalf("west has no schema for %s: %v", topic, err)
	}
	if info.Type != "JSON" {
		t.Fatalf("west's schema is %s", info.Type)
	}
}
