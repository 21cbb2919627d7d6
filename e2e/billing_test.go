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
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

// meteredTraffic is the test's own count of what its clients did.
type meteredTraffic struct {
	t                 *testing.T
	client            pulsar.Client
	prod              pulsar.Producer
	cons              pulsar.Consumer
	rng               *rand.Rand
	msgsIn, bytesIn   int64 // acknowledged by the broker
	msgsOut, bytesOut int64 // received by the consumer
}

// open starts a consumer and a non-batching producer on topic.
func (m *meteredTraffic) open(topic string) {
	m.t.Helper()
	var err error
	if m.cons, err = m.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "e2e",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}); err != nil {
		m.t.Fatal(err)
	}
	if m.prod, err = m.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true}); err != nil {
		m.t.Fatal(err)
	}
}

func (m *meteredTraffic) close() {
	m.prod.Close()
	m.cons.Close()
}

func (m *meteredTraffic) want() map[string]int64 {
	return map[string]int64{"messages_in": m.msgsIn, "bytes_in": m.bytesIn, "messages_out": m.msgsOut, "bytes_out": m.bytesOut}
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
// control plane is down for a while, and then the broker is SIGKILLed and
// restarted by the agent: at the end the usage equals the clients' own
// count for messages and bytes in and out, and every (cluster, meter,
// hour) has one record.
func TestBillingExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	agentDir := t.TempDir()
	killDataPlaneOnCleanup(t, agentDir)
	cpProc, cp, addr, keyFile, opKey := startControlPlaneProcess(t)
	cp.mustCall(opKey, "POST", "/v1/organizations?organizationId=acme", map[string]any{})
	agentProc := Start(t, "agent", "agent", "--region", "r1", "--control-plane", "http://"+addr, "--api-key-file", keyFile,
		"--data-dir", agentDir, "--poll-timeout", "5s", "--metering-interval", "100ms", "--reconcile-interval", "1s")
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
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	tr := &meteredTraffic{t: t, client: client, rng: rand.New(rand.NewPCG(seed, 7))}
	tr.open("persistent://public/default/billed")
	metered := func(what string) map[string]int64 {
		t.Helper()
		want := tr.want()
		var got map[string]int64
		waitFor(t, what, 60*time.Second, func() bool {
			var ok bool
			if got, ok = usageTotals(cp, opKey, "acme"); !ok {
				return false
			}
			for m, w := range want {
				if got[m] != w {
					return false
				}
			}
			return true
		})
		return got
	}

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

	got := metered("usage to equal the clients' count")
	t.Logf("clients counted %v; usage %v", tr.want(), got)

	// The broker SIGKILLed once what it counted was metered: its successor
	// has a new epoch and counters from zero, counted from there, once.
	// (A new topic afterwards, so nothing is redelivered.)
	tr.close()
	metered("the traffic before the broker's kill")
	state := filepath.Join(agentDir, "clusters", "acme-c1", "state.json")
	pids := recordedPIDs(t, state)
	brokerPID := pids[len(pids)-1]
	syscall.Kill(brokerPID, syscall.SIGKILL)
	adminURL, _ := cp.mustCall(opKey, "GET", "/v1/organizations/acme/clusters/c1", nil)["adminUrl"].(string)
	waitFor(t, "the agent to restart the broker", 90*time.Second, func() bool {
		p := recordedPIDs(t, state)
		if p[len(p)-1] == brokerPID {
			return false
		}
		resp, err := http.Get(adminURL + "/admin/v2/brokers/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	tr.open("persistent://public/default/billed-after-broker-restart")
	tr.round(40)
	// A last agent kill, and more traffic: still exact.
	agentProc.Kill()
	agentProc.StartAgain()
	tr.round(5)
	got = metered("the traffic after the broker's restart")
	t.Logf("after the broker's restart: clients counted %v; usage %v", tr.want(), got)

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
