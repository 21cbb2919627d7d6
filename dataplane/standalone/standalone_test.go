package standalone_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/internal/dirlock"
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

// TestSecondStandaloneOnDataDirFails: a second standalone on a data
// directory in use fails at once naming the holder, and the first keeps
// serving.
func TestSecondStandaloneOnDataDirFails(t *testing.T) {
	dir := t.TempDir()
	first := standalonetest.Start(t, standalonetest.Config(dir, standalonetest.FreeAddr(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := standalone.Start(ctx, standalonetest.Config(dir, standalonetest.FreeAddr(t)))
	if err == nil || !errors.Is(err, dirlock.ErrInUse) || !strings.Contains(err.Error(), "PID "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Start on %s: %v, want data directory in use by PID %d", dir, err, os.Getpid())
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	c := standalonetest.NewClient(t, first.ServiceURL())
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/still-serving"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatalf("the first standalone after the refused second: %v", err)
	}
}
