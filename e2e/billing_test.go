package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/backoff"
)

// meteredTraffic is known traffic, counted by the test's own clients: a
// producer that keeps up to 32 messages in flight (no send timeout, so a
// message is retried across broker restarts until the broker confirms it;
// the namespace deduplicates, so a retry of a stored message is not stored
// again) and a consumer that acknowledges everything it receives, waiting
// for the broker's answer, and counts each message once when the broker
// confirmed its acknowledgement (a redelivery after a broker's crash is not
// counted again). Both run on goroutines owned by the traffic (stop).
type meteredTraffic struct {
	client pulsar.Client
	prod   pulsar.Producer
	cons   pulsar.Consumer
	rng    *rand.Rand // used by the producer goroutine only

	mu                sync.Mutex
	sent              int64 // messages handed to the producer
	msgsIn, bytesIn   int64 // confirmed by the broker
	msgsOut, bytesOut int64 // received by the consumer, each message once
	seen              map[uint64]bool
	err               error

	consOpts     pulsar.ConsumerOptions
	resubscribed int // consumers subscribed again after a stall

	stopping chan struct{} // stops the producer
	stopOnce sync.Once
	prodDone chan struct{} // closed when the producer goroutine returns
	consStop chan struct{} // stops the consumer
	wg       sync.WaitGroup
	debug    func()
	// settled, when set, reports whether the broker holds no
	// unacknowledged message for the subscription: stop keeps consuming
	// until it does (a message counted at receipt whose acknowledgement
	// was lost is still to be redelivered and acknowledged).
	settled func() bool
}

// fastReconnect retries every 200ms, so a client finds a restarted broker
// soon after it is back.
type fastReconnect struct{}

func (fastReconnect) Next() time.Duration       { return 200 * time.Millisecond }
func (fastReconnect) IsMaxBackoffReached() bool { return false }
func (fastReconnect) Reset()                    {}

func startTraffic(t *testing.T, client pulsar.Client, topic string, seed uint64) *meteredTraffic {
	t.Helper()
	m := &meteredTraffic{client: client, rng: rand.New(rand.NewPCG(seed, 7)), seen: map[uint64]bool{}, stopping: make(chan struct{}),
		prodDone: make(chan struct{}), consStop: make(chan struct{})}
	// A test that fails mid-traffic stops the producer goroutine before the
	// client closes (cleanups run last first): pulsar-client-go panics on
	// a send to a closed producer.
	t.Cleanup(func() {
		m.stopOnce.Do(func() { close(m.stopping) })
		select {
		case <-m.prodDone:
		case <-time.After(10 * time.Second):
		}
	})
	bo := func() backoff.Policy { return fastReconnect{} }
	var err error
	m.consOpts = pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "e2e",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, BackOffPolicyFunc: bo, AckWithResponse: true}
	if m.cons, err = client.Subscribe(m.consOpts); err != nil {
		t.Fatal(err)
	}
	if m.prod, err = client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: -1,
		MaxPendingMessages: 32, BackOffPolicyFunc: bo}); err != nil {
		t.Fatal(err)
	}
	m.wg.Add(2)
	go m.produce()
	go m.consume()
	return m
}

func (m *meteredTraffic) fail(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.mu.Unlock()
}

// produce sends messages of random sizes, each starting with its index.
func (m *meteredTraffic) produce() {
	defer m.wg.Done()
	defer close(m.prodDone)
	for i := uint64(0); ; i++ {
		select {
		case <-m.stopping:
			return
		default:
		}
		// At most 300 messages ahead of the consumer's acknowledgements.
		for m.outstanding() > 300 {
			select {
			case <-m.stopping:
				return
			case <-time.After(time.Millisecond):
			}
		}
		p := make([]byte, 8+m.rng.IntN(2000))
		binary.BigEndian.PutUint64(p, i)
		m.mu.Lock()
		m.sent++
		m.mu.Unlock()
		m.prod.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: p}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				m.fail(fmt.Errorf("send %d: %w", i, err))
				return
			}
			m.mu.Lock()
			m.msgsIn++
			m.bytesIn += int64(len(p))
			m.mu.Unlock()
		})
	}
}

func (m *meteredTraffic) consume() {
	defer m.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.consStop
		cancel()
	}()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := m.cons.Receive(rctx)
		rcancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				m.stalled()
				continue
			}
			m.fail(fmt.Errorf("receive: %w", err))
			return
		}
		p := msg.Payload()
		if len(p) < 8 {
			m.fail(fmt.Errorf("a message of %d bytes", len(p)))
			return
		}
		// Counted when first received, whatever the acknowledgement's
		// answer: a broker killed after it applied an acknowledgement and
		// before it answered leaves the client with an error for a message
		// that is consumed (and metered) and never redelivered; one whose
		// acknowledgement was lost is redelivered, and seen counts it once.
		m.mu.Lock()
		if i := binary.BigEndian.Uint64(p); !m.seen[i] {
			m.seen[i] = true
			m.msgsOut++
			m.bytesOut += int64(len(p))
		}
		m.mu.Unlock()
		m.cons.Ack(msg) // an error: redelivered (after a broker's crash) or on a new consumer (stalled)
	}
}

// outstanding is how many confirmed messages were not yet received and
// acknowledged.
func (m *meteredTraffic) outstanding() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.msgsIn - m.msgsOut
}

// stalled handles a consumer that received nothing for 5 s while messages
// it has not received are stored: after a broker's SIGKILL the Go client's
// consumer sometimes stays without the entries the dead broker had
// dispatched to it; a new consumer on the subscription gets them again.
// It reports whether a new consumer was subscribed.
func (m *meteredTraffic) stalled() bool {
	if m.outstanding() == 0 {
		return false
	}
	m.cons.Close()
	c, err := m.client.Subscribe(m.consOpts)
	if err != nil {
		m.fail(fmt.Errorf("subscribe again: %w", err))
		return false
	}
	m.cons = c
	m.mu.Lock()
	m.resubscribed++
	m.mu.Unlock()
	return true
}

// counts returns messages handed to the producer, confirmed, and received.
func (m *meteredTraffic) counts() (sent, in, out int64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sent, m.msgsIn, m.msgsOut, m.err
}

// after waits until n more messages than now were confirmed and received
// (the traffic is the test's clock).
func (m *meteredTraffic) after(t *testing.T, n int64) {
	t.Helper()
	_, in0, out0, _ := m.counts()
	waitFor(t, fmt.Sprintf("%d more messages through the cluster", n), 3*time.Minute, func() bool {
		_, in, out, err := m.counts()
		if err != nil {
			t.Fatal(err)
		}
		return in >= in0+n && out >= out0+n
	})
}

// stop stops sending, waits for every message sent to be confirmed and
// received, then stops the consumer.
func (m *meteredTraffic) stop(t *testing.T) {
	t.Helper()
	m.stopOnce.Do(func() { close(m.stopping) })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sent, in, out, err := m.counts()
		if err != nil {
			t.Fatal(err)
		}
		if in == sent && out == sent && (m.settled == nil || m.settled()) {
			break
		}
		if time.Now().After(deadline) {
			if m.debug != nil {
				m.debug()
			}
			t.Fatalf("after 2m: %d messages sent, %d confirmed, %d received", sent, in, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(m.consStop)
	m.wg.Wait()
	m.prod.Flush()
	m.prod.Close()
	m.cons.Close()
}

func (m *meteredTraffic) want() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return map[string]int64{"messages_in": m.msgsIn, "bytes_in": m.bytesIn, "messages_out": m.msgsOut, "bytes_out": m.bytesOut}
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
func startControlPlaneProcess(t *testing.T, extra ...string) (p *Process, cp cpClient, addr, keyFile, opKey string) {
	t.Helper()
	cpDir := t.TempDir()
	addr = FreeAddr(t)
	p = Start(t, "controlplane", append([]string{"controlplane", "--data-dir", cpDir, "--listen", addr}, extra...)...)
	p.WaitListening(addr, 30*time.Second)
	keyFile = filepath.Join(cpDir, "bootstrap.key")
	opKey = readKey(t, keyFile)
	cp = cpClient{t: t, base: "http://" + addr}
	cp.mustCall(opKey, "POST", "/v1/regions?regionId=r1", map[string]any{})
	return p, cp, addr, keyFile, opKey
}

// TestBillingExactlyOnce: known traffic through a cluster the control
// plane provisioned is metered exactly once while the broker and the region
// agent are SIGKILLed and restarted at random moments (after random amounts
// of traffic, with messages in flight and acknowledgements not yet stored;
// seeded, the seed logged) and the control plane is down for a while: at
// the end the usage equals the clients' own count for messages and bytes
// in and out, and every (cluster, meter, hour) has one record.
func TestBillingExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	// Waits on processes and intervals: runs beside the other control-plane
	// tests, after the package's sequential ones.
	t.Parallel()
	agentDir := t.TempDir()
	killDataPlaneOnCleanup(t, agentDir)
	// The control plane is down for minutes below: the clients' tokens
	// (an hour by default) outlive the outage, and the broker restarted
	// during it has the issuer's keys from its cache.
	cpProc, cp, addr, keyFile, opKey := startControlPlaneProcess(t)
	cp.mustCall(opKey, "POST", "/v1/organizations?organizationId=acme", map[string]any{})
	agentProc := Start(t, "agent", "agent", "--region", "r1", "--control-plane", "http://"+addr, "--api-key-file", keyFile,
		"--data-dir", agentDir, "--poll-timeout", "5s", "--metering-interval", "100ms", "--reconcile-interval", "1s")
	interruptOnCleanup(t, agentProc)

	op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/clusters?clusterId=c1", map[string]any{
		"region": "regions/r1", "size": map[string]any{"brokers": 1, "bookies": 1}})
	cp.waitOp(opKey, op["name"].(string), 2*time.Minute)
	// The cluster authenticates (the default): the operator's tokens are a
	// superuser's.
	c1 := accessCluster(t, cp.base, cp.mustCall(opKey, "GET", "/v1/organizations/acme/clusters/c1", nil), opKey)
	hc := c1.http(t)
	// Deduplication, so that a message the broker stored but could not
	// confirm before it died is not stored again when the client retries.
	req, _ := http.NewRequest("POST", c1.admin("/admin/v2/namespaces/public/default/deduplication"), strings.NewReader("true"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("enable deduplication: %s", resp.Status)
	}

	client, err := pulsar.NewClient(c1.options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MAGNETAR_E2E_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	tr := startTraffic(t, client, "persistent://public/default/billed", seed)

	tr.debug = func() {
		for _, p := range []string{"/admin/v2/persistent/public/default/billed/stats", "/admin/v2/persistent/public/default/billed/internalStats"} {
			resp, err := hc.Get(c1.admin(p))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("%s: %s", p, b)
			}
		}
		b, _ := os.ReadFile(filepath.Join(agentDir, "clusters", "acme-c1", "broker-0.log"))
		t.Logf("broker log tail: %s", b[max(0, len(b)-6000):])
	}
	tr.settled = func() bool {
		resp, err := hc.Get(c1.admin("/admin/v2/persistent/public/default/billed/stats"))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st struct {
			Subscriptions map[string]struct{ MsgBacklog int64 }
		}
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&st) == nil &&
			st.Subscriptions["e2e"].MsgBacklog == 0
	}
	state := filepath.Join(agentDir, "clusters", "acme-c1", "state.json")
	brokerKills := 0
	killBroker := func() {
		t.Helper()
		pids := recordedPIDs(t, state)
		pid := pids[len(pids)-1]
		syscall.Kill(pid, syscall.SIGKILL)
		brokerKills++
		waitFor(t, "the agent to restart the broker", 90*time.Second, func() bool {
			p := recordedPIDs(t, state)
			return p[len(p)-1] != pid
		})
	}
	agentUp := true
	killAgent := func() { agentProc.Kill(); agentUp = false }
	startAgent := func() { agentProc.StartAgain(); agentUp = true }

	tr.after(t, 50)
	// Random kills while traffic flows: the broker (restarted by the agent,
	// so only while the agent runs), the agent, or both.
	for i := 0; i < 6; i++ {
		tr.after(t, 1+rng.Int64N(150))
		switch rng.IntN(3) {
		case 0:
			killBroker()
		case 1:
			killAgent()
			tr.after(t, 1+rng.Int64N(100)) // traffic while no agent runs
			startAgent()
		default:
			killAgent()
			startAgent()
			tr.after(t, rng.Int64N(30))
			killBroker()
		}
	}
	// The control plane down: the agent buffers on disk, is killed and
	// restarted meanwhile, the broker is killed, and everything is sent
	// once the control plane is back.
	cpProc.Kill()
	tr.after(t, 1+rng.Int64N(100))
	killAgent()
	tr.after(t, 1+rng.Int64N(50))
	startAgent()
	tr.after(t, 1+rng.Int64N(50))
	killBroker()
	tr.after(t, 1+rng.Int64N(100))
	cpProc.StartAgain()
	cpProc.WaitListening(addr, 30*time.Second)
	tr.after(t, 1+rng.Int64N(100))
	if !agentUp {
		startAgent()
	}
	tr.stop(t)

	want := tr.want()
	var got map[string]int64
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var ok bool
		got, ok = usageTotals(cp, opKey, "acme")
		equal := ok
		for m, w := range want {
			equal = equal && got[m] == w
		}
		if equal {
			break
		}
		if time.Now().After(deadline) {
			if resp, err := hc.Get(c1.admin("/magnetar/v1/usage")); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("broker usage: %s", b)
			}
			b, _ := os.ReadFile(filepath.Join(agentDir, "metering", "usage.json"))
			t.Logf("agent roll-up: %.3000s", b)
			tr.debug()
			t.Fatalf("after 90s the usage is %v; the clients counted %v", got, want)
		}
	}
	t.Logf("%d broker kills; clients counted %v (a consumer subscribed again %d times); usage %v", brokerKills, want, tr.resubscribed, got)

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
	hours := map[string]bool{}
	for k := range seen {
		hours[k[strings.LastIndexByte(k, ' ')+1:]] = true
	}
	// Gauges have a record for every hour metered; counters for the hours
	// they moved in (at least one).
	for h := range hours {
		for _, m := range []string{"broker_hours", "bookie_hours", "topics", "partitions"} {
			if !seen["organizations/acme/clusters/c1 "+m+" "+h] {
				t.Fatalf("no %s record for hour %s in %v", m, h, seen)
			}
		}
	}
	for _, m := range []string{"messages_in", "bytes_in", "messages_out", "bytes_out"} {
		n := 0
		for h := range hours {
			if seen["organizations/acme/clusters/c1 "+m+" "+h] {
				n++
			}
		}
		if n == 0 {
			t.Fatalf("no %s record in %v", m, seen)
		}
	}
}
