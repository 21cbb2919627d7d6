package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

// meteredTraffic is the test's own count of what its clients did.
type meteredTraffic struct {
	t                 *testing.T
	prod              pulsar.Producer
	cons              pulsar.Consumer
	rng               *rand.Rand
	msgsIn, bytesIn   int64 // acknowledged by the broker
	msgsOut, bytesOut int64 // received by the consumer
	outstanding       int   // sent, not yet received
}

// round sends n messages of random sizes (no batching, so each message is
// one entry) and receives as many.
func (m *meteredTraffic) round(n int) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		p := make([]byte, 1+m.rng.IntN(2000))
		if _, err := m.prod.Send(ctx, &pulsar.ProducerMessage{Payload: p}); err != nil {
			m.t.Fatalf("send: %v", err)
		}
		m.msgsIn++
		m.bytesIn += int64(len(p))
	}
	for i := 0; i < n; i++ {
		msg, err := m.cons.Receive(ctx)
		if err != nil {
			m.t.Fatalf("receive: %v", err)
		}
		m.msgsOut++
		m.bytesOut += int64(len(msg.Payload()))
		m.cons.Ack(msg)
	}
}

// usageTotals sums the organization's usage per meter (REST, as a tenant
// would read it).
func usageTotals(cp cpClient, key, org string) (map[string]int64, bool) {
	code, out := cp.call(key, "GET", "/v1/organizations/"+org+"/usageRecords?aggregation=METER", nil)
	if code != http.StatusOK {
		return nil, false
	}
	got := map[string]int64{}
	buckets, _ := out["buckets"].([]any)
	for _, b := range buckets {
		bm := b.(map[string]any)
		var q int64
		fmt.Sscan(fmt.Sprint(bm["quantity"]), &q)
		got[bm["meter"].(string)] = q
	}
	return got, true
}

// startControlPlaneProcess runs `magnetar controlplane` on a free port
// with region r1 registered, and returns it, a REST client, its address,
// the operator key file and the key.
func startControlPlaneProcess(t *testing.T) (p *Process, cp cpClient, addr, keyFile, opKey string) {
	t.Helper()
	cpDir := t.TempDir()
	addr = FreeAddr(t)
	p = Start(t, "controlplane", "controlplane", "--data-dir", cpDir, "--listen", addr)
	p.WaitListening(addr, 30*time.Second)
	keyFile = filepath.Join(cpDir, "bootstrap.key")
	opKey = readKey(t, keyFile)
	cp = cpClient{t: t, base: "http://" + addr}
	cp.mustCall(opKey, "POST", "/v1/regions?regionId=r1", map[string]any{})
	return p, cp, addr, keyFile, opKey
}

// TestBillingExactlyOnce: known traffic through a cluster the control
// plane provisioned is metered exactly once while the region agent is
// SIGKILLed and restarted at random moments (mid-hour, mid-scrape) and the
// control plane is down for a while: at the end the usage equals the
// clients' own count for messages and bytes in and out, and every
// (cluster, meter, hour) has one record.
func TestBillingExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	agentDir := t.TempDir()
	killDataPlaneOnCleanup(t, agentDir)
	cpProc, cp, addr, keyFile, opKey := startControlPlaneProcess(t)
	cp.mustCall(opKey, "POST", "/v1/organizations?organizationId=acme", map[string]any{})
	agentProc := Start(t, "agent", "agent", "--region", "r1", "--control-plane", "http://"+addr, "--api-key-file", keyFile,
		"--data-dir", agentDir, "--poll-timeout", "5s", "--metering-interval", "100ms")
	interruptOnCleanup(t, agentProc)

	op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/clusters?clusterId=c1", map[string]any{
		"region": "regions/r1", "size": map[string]any{"brokers": 1, "bookies": 1}})
	done := cp.waitOp(opKey, op["name"].(string), 2*time.Minute)
	url, _ := done["response"].(map[string]any)["serviceUrl"].(string)

	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: "persistent://public/default/billed", SubscriptionName: "e2e",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/billed", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	tr := &meteredTraffic{t: t, prod: prod, cons: cons, rng: rand.New(rand.NewPCG(seed, 7))}

	tr.round(50)
	// The agent killed at random moments while it scrapes every 100ms:
	// between, before or after a scrape's write and its send.
	for i := 0; i < 4; i++ {
		tr.round(1 + tr.rng.IntN(60)) // the kill lands after a random amount of traffic
		agentProc.Kill()
		tr.round(10 + tr.rng.IntN(20)) // traffic while no agent runs
		agentProc.StartAgain()
	}
	// The control plane down: the agent buffers on disk, is killed and
	// restarted meanwhile, and sends everything once it is back.
	cpProc.Kill()
	tr.round(60)
	agentProc.Kill()
	tr.round(15)
	agentProc.StartAgain()
	tr.round(25)
	cpProc.StartAgain()
	cpProc.WaitListening(addr, 30*time.Second)
	tr.round(30)

	want := map[string]int64{"messages_in": tr.msgsIn, "bytes_in": tr.bytesIn, "messages_out": tr.msgsOut, "bytes_out": tr.bytesOut}
	var got map[string]int64
	waitFor(t, "usage to equal the clients' count", 60*time.Second, func() bool {
		var ok bool
		got, ok = usageTotals(cp, opKey, "acme")
		if !ok {
			return false
		}
		for m, w := range want {
			if got[m] != w {
				return false
			}
		}
		return true
	})
	t.Logf("clients counted %v; usage %v", want, got)
	for m, w := range want {
		if got[m] > w {
			t.Fatalf("%s counted twice: %d > %d", m, got[m], w)
		}
	}
	// Still exact after more scrapes and a last agent restart (nothing
	// late adds to it).
	agentProc.Kill()
	agentProc.StartAgain()
	tr.round(5)
	for _, m := range []string{"messages_in", "messages_out"} {
		want[m] += 5
	}
	want["bytes_in"], want["bytes_out"] = tr.bytesIn, tr.bytesOut
	waitFor(t, "the last round to be metered", 60*time.Second, func() bool {
		got, _ = usageTotals(cp, opKey, "acme")
		for m, w := range want {
			if got[m] != w {
				return false
			}
		}
		return true
	})

	// One record per (cluster, meter, hour), none an adjustment.
	code, out := cp.call(opKey, "GET", "/v1/organizations/acme/usageRecords?pageSize=1000", nil)
	if code != http.StatusOK {
		t.Fatalf("list usage: %d %v", code, out)
	}
	recs, _ := out["records"].([]any)
	seen := map[string]bool{}
	for _, r := range recs {
		rm := r.(map[string]any)
		k := fmt.Sprint(rm["cluster"], " ", rm["meter"], " ", rm["hour"])
		if seen[k] || rm["kind"] != "USAGE" {
			t.Fatalf("a second record or an adjustment for %s: %v", k, rm)
		}
		seen[k] = true
	}
	for _, m := range []string{"messages_in", "bytes_in", "messages_out", "bytes_out", "broker_hours"} {
		n := 0
		for k := range seen {
			if strings.HasPrefix(k, "organizations/acme/clusters/c1 "+m+" ") {
				n++
			}
		}
		if n == 0 {
			t.Fatalf("no %s record in %v", m, seen)
		}
	}
}
