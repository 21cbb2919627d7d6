package broker_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// TestUsageCounters: messages and payload bytes in and out are counted per
// namespace exactly, for single messages and batches, and served on
// /magnetar/v1/usage with the process epoch, and as Prometheus series.
func TestUsageCounters(t *testing.T) {
	e := newEnv(t)
	res := e.sa.Broker().Resources()
	if err := res.CreateNamespace(e.ctx, "public", "billed", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	before := e.sa.Broker().Usage()
	if before.Epoch == "" || len(before.Epoch) != 32 {
		t.Fatalf("epoch %q", before.Epoch)
	}

	// 7 single messages of 10..16 bytes on public/default.
	single := e.producer(pulsar.ProducerOptions{Topic: "persistent://public/default/u1", DisableBatching: true})
	cons := e.consumer(pulsar.ConsumerOptions{Topic: "persistent://public/default/u1", SubscriptionName: "s"})
	wantBytes := 0
	for i := 0; i < 7; i++ {
		p := strings.Repeat("x", 10+i)
		wantBytes += len(p)
		e.send(single, &pulsar.ProducerMessage{Payload: []byte(p)})
	}
	for i := 0; i < 7; i++ {
		cons.Ack(e.receive(cons))
	}
	// A partitioned topic in public/billed.
	if err := res.CreatePartitioned(e.ctx, broker.TopicName{Domain: broker.Persistent, Tenant: "public", Namespace: "billed", Local: "parts"}, 3, nil); err != nil {
		t.Fatal(err)
	}
	parts := e.producer(pulsar.ProducerOptions{Topic: "persistent://public/billed/parts", DisableBatching: true})
	for i := 0; i < 9; i++ {
		e.send(parts, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m%d", i)), Key: fmt.Sprint(i)})
	}

	u := e.sa.Broker().Usage()
	if u.Epoch != before.Epoch {
		t.Fatalf("epoch changed within the process: %s -> %s", before.Epoch, u.Epoch)
	}
	d := u.Namespace("public", "default")
	if d.MessagesIn != 7 || d.BytesIn != int64(wantBytes) || d.MessagesOut != 7 || d.BytesOut != int64(wantBytes) {
		t.Fatalf("public/default usage %+v, want 7 messages and %d bytes each way", d, wantBytes)
	}
	if d.Topics != 1 || d.Partitions != 1 || d.StorageBytes <= 0 {
		t.Fatalf("public/default gauges %+v", d)
	}
	b := u.Namespace("public", "billed")
	if b.MessagesIn != 9 || b.BytesIn != 18 || b.MessagesOut != 0 || b.Topics != 1 || b.Partitions != 3 {
		t.Fatalf("public/billed usage %+v", b)
	}

	// Over HTTP, as the region agent reads it.
	resp, err := http.Get(e.sa.WebServiceURL() + "/magnetar/v1/usage")
	if err != nil {
		t.Fatal(err)
	}
	var got broker.Usage
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || got.Epoch != u.Epoch || got.Namespace("public", "default").BytesIn != int64(wantBytes) {
		t.Fatalf("GET /magnetar/v1/usage: %d %+v %v", resp.StatusCode, got, err)
	}
	resp, err = http.Get(e.sa.WebServiceURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf(`magnetar_usage_in_bytes_total{namespace="default",tenant="public"} %d`, wantBytes),
		`magnetar_usage_in_messages_total{namespace="billed",tenant="public"} 9`,
		fmt.Sprintf(`magnetar_usage_epoch_info{epoch="%s"} 1`, u.Epoch),
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Geo-replication's counter.
	e.sa.Broker().CountReplicatedOut(broker.TopicName{Domain: broker.Persistent, Tenant: "public", Namespace: "billed", Local: "parts"}, 2, 40)
	if b := e.sa.Broker().Usage().Namespace("public", "billed"); b.MessagesReplicatedOut != 2 || b.BytesReplicatedOut != 40 {
		t.Fatalf("replicated out %+v", b)
	}
}

// TestUsageBatches counts the messages of a batch one by one and its
// payload (the messages with their single-message metadata).
func TestUsageBatches(t *testing.T) {
	e := newEnv(t)
	p := e.producer(pulsar.ProducerOptions{Topic: "persistent://public/default/batched", BatchingMaxMessages: 5})
	done := make(chan error, 10)
	for i := 0; i < 10; i++ {
		p.SendAsync(e.ctx, &pulsar.ProducerMessage{Payload: []byte("0123456789")}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done <- err })
	}
	p.Flush()
	for i := 0; i < 10; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	d := e.sa.Broker().Usage().Namespace("public", "default")
	if d.MessagesIn != 10 || d.BytesIn < 100 || d.BytesIn > 100+10*64 {
		t.Fatalf("batched usage %+v", d)
	}
}
