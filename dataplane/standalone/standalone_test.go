package standalone

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startStandalone runs a standalone on free ports in a temp dir.
func startStandalone(t *testing.T, dir string, bookieAddr string) *Standalone {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{DataDir: dir, BrokerAddr: "127.0.0.1:0", BookieAddr: bookieAddr,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newClient(t *testing.T, url string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: url, OperationTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestProduceConsumeWithRealClient: the Apache Pulsar Go client produces and
// consumes through the standalone, and after a restart the unacknowledged
// rest is delivered again.
func TestProduceConsumeWithRealClient(t *testing.T) {
	dir := t.TempDir()
	bookieAddr := freeAddr(t)
	s := startStandalone(t, dir, bookieAddr)
	defer func() { s.Shutdown(context.Background()) }()
	c := newClient(t, s.ServiceURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	topic := "persistent://public/default/real-client"
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := 0; i < n; i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("msg-%03d", i)), Key: fmt.Sprint(i % 7)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := 0; i < n; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if want := fmt.Sprintf("msg-%03d", i); string(m.Payload()) != want {
			t.Fatalf("message %d = %q, want %q", i, m.Payload(), want)
		}
		if i < n/2 {
			if err := cons.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	prod.Close()
	cons.Close()
	c.Close()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	s = startStandalone(t, dir, bookieAddr)
	c = newClient(t, s.ServiceURL())
	cons, err = c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := n / 2; i < n; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after restart %d: %v", i, err)
		}
		if want := fmt.Sprintf("msg-%03d", i); string(m.Payload()) != want {
			t.Fatalf("after restart, message = %q, want %q", m.Payload(), want)
		}
		cons.Ack(m)
	}
}
