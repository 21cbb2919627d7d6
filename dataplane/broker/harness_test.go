package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// env is one standalone and a connected Pulsar Go client.
type env struct {
	t      *testing.T
	sa     *standalone.Standalone
	client pulsar.Client
	ctx    context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	sa := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	return &env{t: t, sa: sa, client: standalonetest.NewClient(t, sa.ServiceURL()), ctx: ctx}
}

func (e *env) producer(opts pulsar.ProducerOptions) pulsar.Producer {
	e.t.Helper()
	p, err := e.client.CreateProducer(opts)
	if err != nil {
		e.t.Fatalf("create producer on %s: %v", opts.Topic, err)
	}
	e.t.Cleanup(p.Close)
	return p
}

func (e *env) consumer(opts pulsar.ConsumerOptions) pulsar.Consumer {
	e.t.Helper()
	c, err := e.client.Subscribe(opts)
	if err != nil {
		e.t.Fatalf("subscribe %s/%s: %v", opts.Topic, opts.SubscriptionName, err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func (e *env) send(p pulsar.Producer, msgs ...*pulsar.ProducerMessage) []pulsar.MessageID {
	e.t.Helper()
	var ids []pulsar.MessageID
	for _, m := range msgs {
		id, err := p.Send(e.ctx, m)
		if err != nil {
			e.t.Fatalf("send: %v", err)
		}
		ids = append(ids, id)
	}
	return ids
}

func (e *env) receive(c pulsar.Consumer) pulsar.Message {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		e.t.Fatalf("receive: %v", err)
	}
	return m
}

// expectNothing checks that c receives nothing for a short while.
func (e *env) expectNothing(c pulsar.Consumer, d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	if m, err := c.Receive(ctx); err == nil {
		e.t.Fatalf("unexpected message %q (%v)", m.Payload(), m.ID())
	}
}

// startBookie serves st as a bookie registered in md, listening on addr,
// shut down when the test ends.
func startBookie(tb testing.TB, ctx context.Context, addr, dataDir string, st storage.Storage, md metadata.Store) *bookie.Server {
	tb.Helper()
	bk, err := bookie.New(bookie.Config{ListenAddr: addr, DataDir: dataDir, Logger: standalonetest.QuietLogger()}, st, md)
	if err != nil {
		tb.Fatal(err)
	}
	if err := bk.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		bk.Shutdown(sctx)
	})
	return bk
}
