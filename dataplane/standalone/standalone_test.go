package standalone_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestProduceConsumeWithRealClient: the Apache Pulsar Go client produces and
// consumes through the standalone, and after a clean restart on the same
// directory the unacknowledged rest is delivered again.
func TestProduceConsumeWithRealClient(t *testing.T) {
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.JournalNoSync = false
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := standalone.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := standalonetest.NewClient(t, s.ServiceURL())

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
	// The admin listener's /metrics holds the bookie's series next to the
	// broker's: every message was one add.
	if adds := scrape(t, s.WebServiceURL()+"/metrics", `magnetar_bookie_requests_total{op="add",result="ok"}`); adds < n {
		t.Errorf("bookie adds in /metrics = %v, want >= %d", adds, n)
	}
	if syncs := scrape(t, s.WebServiceURL()+"/metrics", "magnetar_bookie_journal_sync_seconds_count"); syncs < 1 {
		t.Errorf("journal syncs in /metrics = %v", syncs)
	}
	prod.Close()
	cons.Close()
	c.Close()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	s = standalonetest.Start(t, cfg)
	c = standalonetest.NewClient(t, s.ServiceURL())
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

// scrape fetches a Prometheus text page and returns the value of series.
func scrape(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("%s not in %s", series, url)
	return 0
}
