package broker_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestTopicLevelMetrics: with TopicLevelMetrics on, /metrics carries
// Pulsar's per-topic and per-subscription series for a loaded topic.
func TestTopicLevelMetrics(t *testing.T) {
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.Broker.TopicLevelMetrics = true
	sa := standalonetest.Start(t, cfg)
	client := standalonetest.NewClient(t, sa.ServiceURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := "persistent://public/default/metered"
	c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 20; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m")}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(sa.WebServiceURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The exposition sorts labels by name: subscription before topic.
	value := func(name, sub string) float64 {
		t.Helper()
		labels := `cluster="standalone",namespace="public/default",`
		if sub != "" {
			labels += `subscription="` + sub + `",`
		}
		labels += `topic="` + topic + `"`
		m := regexp.MustCompile(`(?m)^` + name + `\{` + regexp.QuoteMeta(labels) + `\} (\S+)$`).FindSubmatch(raw)
		if m == nil {
			t.Fatalf("/metrics has no %s{%s}", name, labels)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	for name, want := range map[string]float64{"pulsar_producers_count": 1, "pulsar_consumers_count": 1,
		"pulsar_subscriptions_count": 1} {
		if got := value(name, ""); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value("pulsar_storage_size", ""); got <= 0 {
		t.Errorf("pulsar_storage_size = %v", got)
	}
	if got := value("pulsar_subscription_consumers_count", "s"); got != 1 {
		t.Errorf("pulsar_subscription_consumers_count = %v", got)
	}
	// The consumer has the 20 messages dispatched and unacknowledged.
	back, unacked := value("pulsar_subscription_back_log", "s"), value("pulsar_subscription_unacked_messages", "s")
	if back != 20 || value("pulsar_msg_backlog", "") != 20 {
		t.Errorf("backlog: subscription %v, topic %v; want 20", back, value("pulsar_msg_backlog", ""))
	}
	t.Logf("unacked %v of 20 (what the consumer's receiver queue took)", unacked)
	if unacked <= 0 || unacked > 20 {
		t.Errorf("pulsar_subscription_unacked_messages = %v", unacked)
	}
	value("pulsar_rate_in", "") // present (0 until a full window has passed)
}
