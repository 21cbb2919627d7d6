//go:build !race

// Built without the race detector: the Apache Pulsar Go client (v0.19.0)
// races with itself when its producer reconnects (grabCnx), which the
// unloads here trigger; `make test` runs this file on its non-race line.

package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// TestDeduplicationChunkedAcrossUnload: chunked messages sent while the
// topic is unloaded twice (the producer's connection to it is closed and
// it re-sends what was not receipted, partly sent messages included):
// every receipted message arrives exactly once and intact.
func TestDeduplicationChunkedAcrossUnload(t *testing.T) {
	e := newEnv(t)
	dedupNamespace(e, "dedupcrash")
	topic := "persistent://public/dedupcrash/t"
	tn, _ := broker.ParseTopicName(topic)
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, Name: "cp", DisableBatching: true,
		EnableChunking: true, ChunkMaxMessageSize: 1000})
	const n, size = 40, 3500
	var mu sync.Mutex
	receipted := map[int]bool{}
	var failed int
	settled := make(chan struct{}, n)
	for i := range n {
		p.SendAsync(e.ctx, &pulsar.ProducerMessage{Payload: chunkPayload(i, size)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				mu.Lock()
				if err != nil {
					failed++
				} else {
					receipted[i] = true
				}
				mu.Unlock()
				settled <- struct{}{}
			})
		if i == 10 || i == 25 {
			// Unload while messages (and chunks of them) are in flight.
			if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.FlushWithCtx(e.ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		<-settled
	}
	mu.Lock()
	want := len(receipted)
	t.Logf("%d receipted, %d failed", want, failed)
	mu.Unlock()
	// The consumer was connected through the unloads too: it may get a
	// message it already had again (redelivery after its reconnection, at
	// least once, as in Pulsar). The same message stored twice would come
	// with another message id: that is what deduplication must prevent.
	seen, ids := map[int]int{}, map[int]string{}
	for len(seen) < want {
		m := e.receive(c)
		i := chunkIndex(t, m.Payload())
		if !bytes.Equal(m.Payload(), chunkPayload(i, size)) {
			t.Fatalf("message %d arrived damaged (%d bytes)", i, len(m.Payload()))
		}
		id := fmt.Sprintf("%d:%d", m.ID().LedgerID(), m.ID().EntryID())
		if prev, ok := ids[i]; ok {
			if prev != id {
				t.Fatalf("message %d stored twice: at %s and at %s", i, prev, id)
			}
			c.Ack(m) // redelivered
			continue
		}
		ids[i] = id
		seen[i]++
		c.Ack(m)
	}
	for i := range receipted {
		if seen[i] != 1 {
			t.Fatalf("receipted message %d delivered %d times", i, seen[i])
		}
	}
	// Nothing else is stored: whatever still comes is a redelivery.
	for {
		ctx, cancel := context.WithTimeout(e.ctx, 500*time.Millisecond)
		m, err := c.Receive(ctx)
		cancel()
		if err != nil {
			break
		}
		i := chunkIndex(t, m.Payload())
		if id := fmt.Sprintf("%d:%d", m.ID().LedgerID(), m.ID().EntryID()); ids[i] != id {
			t.Fatalf("message %d (%s) stored again, or stored without a receipt (first at %q)", i, id, ids[i])
		}
		c.Ack(m)
	}
}
