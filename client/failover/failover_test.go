package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/client/failover"
	"github.com/magnetar-dev/magnetar/dataplane/replication/replicationtest"
	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/internal/tcpproxy"
)

var quietClient = pulsar.ClientOptions{OperationTimeout: 10 * time.Second, ConnectionTimeout: 3 * time.Second,
	Logger: plog.NewLoggerWithSlog(standalonetest.QuietLogger())}

// endpoint serves the controlled-failover JSON for whichever URL is set.
type endpoint struct {
	mu  sync.Mutex
	url string
}

func (e *endpoint) set(url string) {
	e.mu.Lock()
	e.url = url
	e.mu.Unlock()
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer org-key" {
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]string{"serviceUrl": e.url})
}

// exchange sends n messages through p and receives them through c,
// acknowledging each; it fails on a loss, a duplicate or disorder.
func exchange(t *testing.T, p *failover.Producer, c *failover.Consumer, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%03d", prefix, i))}); err != nil {
			t.Fatalf("send %s-%d: %v", prefix, i, err)
		}
	}
	for i := range n {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %s-%d: %v", prefix, i, err)
		}
		if want := fmt.Sprintf("%s-%03d", prefix, i); string(m.Payload()) != want {
			t.Fatalf("received %q, want %q", m.Payload(), want)
		}
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSwitch waits up to 10 s for the switch the OnSwitch callback sends
// on switched, and fails the test unless it went to want.
func waitSwitch(t *testing.T, switched <-chan string, want string) {
	t.Helper()
	select {
	case to := <-switched:
		if to != want {
			t.Fatalf("switched to %s, want %s", to, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no switch to %s", want)
	}
}

// TestControlledFailover: the endpoint names east, then west: the same
// producer and consumer handles move, the consumer's replicated
// subscription brings what was acknowledged in east, and nothing is lost
// or delivered twice.
func TestControlledFailover(t *testing.T) {
	rs := replicationtest.StartRegions(t, "east", "west")
	replicationtest.ReplicatedNamespace(t, rs, "geo", "app")
	ep := &endpoint{url: rs[0].S.ServiceURL()}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	switched := make(chan string, 4)
	c, err := failover.NewControlled(context.Background(), srv.URL, failover.ControlledOptions{
		Client: quietClient, Header: http.Header{"Authorization": {"Bearer org-key"}},
		CheckInterval: 200 * time.Millisecond, OnSwitch: func(_, to string) { switched <- to },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "persistent://geo/app/orders"
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "svc", Type: pulsar.Shared,
		ReplicateSubscriptionState: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, prod, cons, "east", 100)
	time.Sleep(2500 * time.Millisecond) // the subscription's state reaches west (sent every second)

	ep.set(rs[1].S.ServiceURL())
	waitSwitch(t, switched, rs[1].S.ServiceURL())
	exchange(t, prod, cons, "west", 100) // fails if east's 100 come again first
	if got := c.ServiceURL(); got != rs[1].S.ServiceURL() {
		t.Fatalf("client on %s", got)
	}
}

// TestAutomaticFailover: the primary's listener goes away; after the
// failover delay the client is on the secondary and the same handles keep
// working.
func TestAutomaticFailover(t *testing.T) {
	rs := replicationtest.StartRegions(t, "east", "west")
	replicationtest.ReplicatedNamespace(t, rs, "geo", "auto")
	// Clients reach east through a proxy the test can take away; lookups
	// answer with east's own address, which stays up: the test cuts what
	// the probes see, as a lost region would be seen.
	px, err := tcpproxy.Start(strings.TrimPrefix(rs[0].S.ServiceURL(), "pulsar://"))
	if err != nil {
		t.Fatal(err)
	}
	switched := make(chan string, 4)
	c, err := failover.NewAutomatic(failover.AutomaticOptions{
		Client:        quietClient,
		Primary:       failover.Cluster{ServiceURL: "pulsar://" + px.Addr()},
		Secondaries:   []failover.Cluster{{ServiceURL: rs[1].S.ServiceURL()}},
		FailoverDelay: time.Second, SwitchBackDelay: time.Minute, CheckInterval: 100 * time.Millisecond,
		OnSwitch: func(_, to string) { switched <- to },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "persistent://geo/auto/events"
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "svc", Type: pulsar.Shared,
		ReplicateSubscriptionState: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, prod, cons, "before", 50)
	time.Sleep(2500 * time.Millisecond)
	cut := time.Now()
	px.Close()
	select {
	case to := <-switched:
		t.Logf("switched to %s %v after the primary went away (failover delay 1s)", to, time.Since(cut).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("no failover")
	}
	exchange(t, prod, cons, "after", 50)
}

// TestSwitchBackAfterOutage: east goes away while the client is on it; the
// endpoint names west, then east again once east is back. The producer
// closed at the first switch was retrying its lookup of east, and
// pulsar-client-go completes such a reconnection when east returns,
// registering at east a producer nothing closes, which holds the producer's
// name there. Back on east, the handle must still get its own producer
// there, and none may be left on west.
func TestSwitchBackAfterOutage(t *testing.T) {
	var px *tcpproxy.Proxy
	rs := replicationtest.StartConfiguredRegions(t, func(name string, cfg *standalone.Config) {
		if name != "east" {
			return
		}
		// Clients reach east's broker only through the proxy, its
		// advertised address: the test takes east away and brings it back.
		addr := standalonetest.FreeAddr(t)
		var err error
		if px, err = tcpproxy.Start(addr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(px.Close)
		cfg.BrokerAddr, cfg.Broker.AdvertisedAddr = addr, px.Addr()
	}, "east", "west")
	replicationtest.ReplicatedNamespace(t, rs, "geo", "back")
	east, west := "pulsar://"+px.Addr(), rs[1].S.ServiceURL()
	ep := &endpoint{url: east}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	switched := make(chan string, 4)
	c, err := failover.NewControlled(context.Background(), srv.URL, failover.ControlledOptions{
		Client: quietClient, Header: http.Header{"Authorization": {"Bearer org-key"}},
		CheckInterval: 200 * time.Millisecond, OnSwitch: func(_, to string) { switched <- to },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "persistent://geo/back/orders"
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "fixed", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := func(what string) {
		t.Helper()
		for i := range 5 {
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s-%d", what, i)}); err != nil {
				t.Fatalf("send %s-%d: %v", what, i, err)
			}
		}
	}
	send("east")

	px.Down()
	time.Sleep(1500 * time.Millisecond) // the producer now retries its lookup of east
	ep.set(west)
	waitSwitch(t, switched, west)
	send("west")
	if err := px.Up(); err != nil {
		t.Fatal(err)
	}
	holders := func(r *replicationtest.Region) int {
		tn, _ := utils.GetTopicName(topic)
		st, err := r.Admin.Topics().GetStats(*tn)
		if err != nil {
			return -1
		}
		n := 0
		for _, p := range st.Publishers {
			if p.ProducerName == "fixed" {
				n++
			}
		}
		return n
	}
	// The closed producer's reconnection lands on east once its lookup's
	// backoff ends.
	deadline := time.Now().Add(20 * time.Second)
	for holders(rs[0]) != 1 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := holders(rs[0]); n != 1 {
		t.Fatalf("east has %d producers named fixed after it returned, want the closed one's ghost", n)
	}

	ep.set(east)
	waitSwitch(t, switched, east)
	deadline = time.Now().Add(15 * time.Second)
	for holders(rs[1]) != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := holders(rs[1]); n != 0 {
		t.Fatalf("west still has %d producers named fixed after the switch back to east", n)
	}
	send("back")
	if n := holders(rs[0]); n != 1 {
		t.Fatalf("east has %d producers named fixed, want 1", n)
	}
}
