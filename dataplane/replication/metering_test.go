package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestReplicationMetered: what a replicator sends is metered at the source
// as replicated out (messages and payload bytes), and not as messages in
// at the remote.
func TestReplicationMetered(t *testing.T) {
	rs := startRegions(t, "east", "west")
	replicatedNamespace(t, rs, "geo", "ns")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	east := standalonetest.NewClient(t, rs[0].S.ServiceURL())
	west := standalonetest.NewClient(t, rs[1].S.ServiceURL())
	topic := "persistent://geo/ns/metered"
	sent := produceWith(t, ctx, east, pulsar.ProducerOptions{Topic: topic, DisableBatching: true}, "m", 120)
	var bytes int64
	for _, p := range sent {
		bytes += int64(len(p))
	}
	receiveAll(t, ctx, west, topic, "check", map[string][]string{"m": sent})

	deadline := time.Now().Add(30 * time.Second)
	for {
		e := rs[0].S.Broker().Usage().Namespace("geo", "ns")
		if e.MessagesReplicatedOut == 120 && e.BytesReplicatedOut == bytes {
			if e.MessagesIn != 120 || e.BytesIn != bytes {
				t.Fatalf("east usage %+v, want 120 messages and %d bytes in", e, bytes)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("east usage %+v, want 120 messages and %d bytes replicated out", e, bytes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w := rs[1].S.Broker().Usage().Namespace("geo", "ns")
	if w.MessagesIn != 0 || w.BytesIn != 0 || w.MessagesReplicatedOut != 0 {
		t.Fatalf("west bills the replicated messages: %+v", w)
	}
	if w.MessagesOut != 120 || w.BytesOut != bytes {
		t.Fatalf("west's consumer: %+v, want 120 messages and %d bytes out", w, bytes)
	}
}
