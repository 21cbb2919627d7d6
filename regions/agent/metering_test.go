package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/regions/agent"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/provisioner/provisionertest"
)

// runMeteringAgent runs an agent that meters into dir every 100ms.
func runMeteringAgent(t *testing.T, cp *controlPlane, p provisioner.Provisioner, dir string) (stop func()) {
	t.Helper()
	return runAgentWith(t, cp, p, func(c *agent.Config) { c.MeteringDir, c.MeteringInterval = dir, 100*time.Millisecond })
}

// usageTotals sums the control plane's usage of acme per meter.
func (cp *controlPlane) usageTotals() map[string]int64 {
	resp, err := cpv1.NewBillingClient(cp.conn).ListUsageRecords(cp.ctx(), &cpv1.ListUsageRecordsRequest{Parent: "organizations/acme",
		Aggregation: cpv1.ListUsageRecordsRequest_METER})
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, b := range resp.GetBuckets() {
		out[b.GetMeter()] = b.GetQuantity()
	}
	return out
}

// traffic sends n messages of size bytes and receives them; it returns the
// payload bytes.
func traffic(t *testing.T, client pulsar.Client, topic string, n, size int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "meter", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var bytes int64
	for i := 0; i < n; i++ {
		p := make([]byte, size+i%7)
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: p}); err != nil {
			t.Fatal(err)
		}
		bytes += int64(len(p))
	}
	for i := 0; i < n; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cons.Ack(m)
	}
	return bytes
}

// TestMetering: traffic through a provisioned cluster is counted exactly
// in the control plane's usage, across an agent restart and a control
// plane outage (the totals wait on disk), with one record per meter and
// hour.
func TestMetering(t *testing.T) {
	cp := newControlPlane(t, "sqlite://"+filepath.Join(t.TempDir(), "cp.db"))
	cp.setup()
	p := provisionertest.NewStandalones(t)
	dir := t.TempDir()
	stop := runMeteringAgent(t, cp, p, dir)
	cp.wait(cp.createCluster("c1", 1))
	st, err := p.Status(t.Context(), c1)
	if err != nil {
		t.Fatal(err)
	}
	client := standalonetest.NewClient(t, st.ServiceURL)

	wantMsgs, wantBytes := int64(40), traffic(t, client, "persistent://public/default/m1", 40, 100)
	check := func(what string) {
		t.Helper()
		var got map[string]int64
		eventually(t, what, func() bool {
			got = cp.usageTotals()
			return got["messages_in"] == wantMsgs && got["bytes_in"] == wantBytes && got["messages_out"] == wantMsgs && got["bytes_out"] == wantBytes
		})
		if got["broker_hours"] != 1 || got["bookie_hours"] != 1 || got["topics"] < 1 || got["storage_bytes"] <= 0 {
			t.Fatalf("%s: gauges %v", what, got)
		}
	}
	check("the first traffic to be metered")

	// Agent restarted: it resumes from its file; nothing counted twice.
	stop()
	stop = runMeteringAgent(t, cp, p, dir)
	n, b := int64(25), traffic(t, client, "persistent://public/default/m2", 25, 300)
	wantMsgs, wantBytes = wantMsgs+n, wantBytes+b
	check("traffic after an agent restart")

	// Control plane down: the agent keeps scraping into its file; a second
	// restart while it is down; then everything arrives once.
	cp.stop()
	n, b = 30, traffic(t, client, "persistent://public/default/m3", 30, 50)
	wantMsgs, wantBytes = wantMsgs+n, wantBytes+b
	eventually(t, "the outage's traffic in the agent's file", func() bool {
		raw, err := os.ReadFile(filepath.Join(dir, "usage.json"))
		return err == nil && len(raw) > 0 && fileHasPending(raw)
	})
	stop()
	stop = runMeteringAgent(t, cp, p, dir)
	cp.start()
	check("the outage's traffic after the control plane returned")
	defer stop()

	// One record per (cluster, meter, hour).
	resp, err := cpv1.NewBillingClient(cp.conn).ListUsageRecords(cp.ctx(), &cpv1.ListUsageRecordsRequest{Parent: "organizations/acme", PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range resp.GetRecords() {
		k := fmt.Sprintf("%s %s %s", r.GetCluster(), r.GetMeter(), r.GetHour().AsTime())
		if seen[k] || r.GetKind() != cpv1.UsageRecord_USAGE {
			t.Fatalf("a second record or an adjustment for %s: %v", k, r)
		}
		seen[k] = true
	}
}

// fileHasPending reports whether a usage.json holds a total not yet
// acknowledged.
func fileHasPending(raw []byte) bool {
	var f struct {
		Totals map[string]struct{ Revision, Sent int64 }
	}
	if json.Unmarshal(raw, &f) != nil {
		return false
	}
	for _, t := range f.Totals {
		if t.Revision > t.Sent {
			return true
		}
	}
	return false
}
