package broker_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/memstorage"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/brokernode"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestLoadInFlightWhenSessionLostIsNotServed: a topic load that acquired
// the topic's bundle and opened the topic is held, before the topic is
// published, while the broker's metadata session expires (its ownership
// keys vanish with it) and the broker drops its bundles; let go
// afterwards, the load must not complete: the topic is not served, the
// caller is told to retry, and the bundle is not counted as owned. A load
// started afterwards acquires the bundle again under the new session.
func TestLoadInFlightWhenSessionLostIsNotServed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	md := memstore.New()
	t.Cleanup(func() { md.Close() })
	startBookie(t, ctx, "127.0.0.1:0", t.TempDir(), memstorage.New(), md)
	node, err := brokernode.Start(ctx, brokernode.Config{
		Metadata: md, NoAuditor: true, HTTPAddr: "127.0.0.1:0",
		Broker: broker.Config{BinaryAddr: "127.0.0.1:0"}, Logger: standalonetest.QuietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := node.Shutdown(sctx); err != nil {
			t.Errorf("broker node shutdown: %v", err)
		}
	})
	s := node.Broker()
	tn, err := broker.ParseTopicName("persistent://public/default/session-lost")
	if err != nil {
		t.Fatal(err)
	}

	// The first load of the topic is held; later ones run through.
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	defer broker.SetTopicLoadHook(func(n broker.TopicName) {
		if n.String() == tn.String() {
			once.Do(func() {
				close(held)
				<-release
			})
		}
	})()
	type result struct {
		tp  *broker.Topic
		err error
	}
	loaded := make(chan result, 1)
	go func() {
		tp, err := s.GetTopic(ctx, tn, true)
		loaded <- result{tp, err}
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the load never reached its end")
	}
	if len(s.OwnedBundles()) == 0 {
		t.Fatal("no bundle owned by the loading broker")
	}
	old := broker.SessionID(s)
	if err := md.ExpireSession(old); err != nil {
		t.Fatal(err)
	}
	// The broker noticed: a new session, and the bundles owned under the
	// old one dropped.
	waitUntilCtx(t, ctx, "the broker registered again", func() bool { return broker.SessionID(s) != old })
	close(release)

	var r result
	select {
	case r = <-loaded:
	case <-ctx.Done():
		t.Fatal("the held load never returned")
	}
	if r.err == nil {
		t.Fatalf("the load begun under the lost session completed: topic %s served without ownership (open: %v, owned bundles: %v)",
			tn, broker.OpenTopicNames(s), s.OwnedBundles())
	}
	if !errors.Is(r.err, protocol.ErrServiceNotReady) {
		t.Fatalf("load error %v, want ServiceNotReady (a retry looks the topic up again)", r.err)
	}
	if slices.Contains(broker.OpenTopicNames(s), tn.String()) {
		t.Fatalf("topic %s open after the load failed", tn)
	}
	if b := s.OwnedBundles(); len(b) != 0 {
		t.Fatalf("bundles %v counted as owned with no ownership key", b)
	}

	// A new load takes the bundle under the new session and serves it.
	if _, err := s.GetTopic(ctx, tn, true); err != nil {
		t.Fatalf("load under the new session: %v", err)
	}
	if len(s.OwnedBundles()) != 1 {
		t.Fatalf("bundles owned after the new load: %v", s.OwnedBundles())
	}
}

// waitUntilCtx polls cond until it holds or ctx ends.
func waitUntilCtx(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
