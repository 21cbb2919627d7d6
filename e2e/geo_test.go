package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/auth/authtest"
)

// geoRegion is one "region" of a geo-replication test: a `magnetar
// standalone --cluster NAME` process, its admin client, and the proxies its
// replicators go through to every other region (links[remote]).
type geoRegion struct {
	name  string
	sp    *standaloneProc
	admin pulsaradmin.Client
	links map[string]*Proxy
	// tlsURL and caFile are set by startGeoSecured: the region's
	// pulsar+ssl:// URL and the PEM file of the CA its certificate is
	// signed by.
	tlsURL, caFile string
}

// startGeo starts one standalone per name and registers every cluster in
// every other, the replication links through TCP proxies (ClusterData
// proxyServiceUrl) so a test can delay and cut them. Each region gets
// tenant "geo" and namespace "geo/ns" replicated between all of them.
func startGeo(t *testing.T, names ...string) []*geoRegion {
	t.Helper()
	return startGeoWith(t, nil, names...)
}

// geoSecurity is what startGeoSecured's regions share: the secret key
// their brokers verify tokens with, each broker requiring a token for its
// own region's name as audience (--auth-token-audience).
type geoSecurity struct {
	secret     []byte
	secretFile string
	// token is valid in every region (its aud lists them all): the test's
	// admin calls and the replicators present it.
	token string
}

// mint returns a token for subject that the regions named in audiences
// accept, valid for an hour.
func (g *geoSecurity) mint(t testing.TB, subject string, audiences ...string) string {
	t.Helper()
	aud := make([]any, len(audiences))
	for i, a := range audiences {
		aud[i] = a
	}
	tok, err := auth.Mint(g.secret, auth.MintOptions{Subject: subject, Expiry: time.Hour, Claims: map[string]any{"aud": aud}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// startGeoSecured is startGeo with TLS and token authentication: each
// region's standalone serves pulsar+ssl:// too (geoRegion.tlsURL), with a
// certificate of a CA of its own (geoRegion.caFile), and refuses clients
// without a token for its name (see geoSecurity); the plain listener
// carries the replication, with the shared token.
func startGeoSecured(t *testing.T, names ...string) ([]*geoRegion, *geoSecurity) {
	t.Helper()
	secret, err := auth.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	sec := &geoSecurity{secret: secret, secretFile: filepath.Join(t.TempDir(), "secret.key")}
	if err := os.WriteFile(sec.secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	sec.token = sec.mint(t, "geo-admin", names...)
	return startGeoWith(t, sec, names...), sec
}

func startGeoWith(t *testing.T, sec *geoSecurity, names ...string) []*geoRegion {
	t.Helper()
	var rs []*geoRegion
	token := ""
	if sec != nil {
		token = sec.token
	}
	for _, n := range names {
		r := &geoRegion{name: n, links: map[string]*Proxy{}}
		args := []string{"--cluster", n}
		if sec != nil {
			ca := authtest.NewCA(t)
			cert, key := ca.Issue(t, n, "broker", "127.0.0.1", "localhost")
			tlsAddr := FreeAddr(t)
			r.tlsURL, r.caFile = "pulsar+ssl://"+tlsAddr, ca.File
			args = append(args, "--tls-addr", tlsAddr, "--tls-cert-file", cert, "--tls-key-file", key,
				"--auth-token-secret-key", sec.secretFile, "--auth-token-audience", n)
		}
		r.sp = startStandaloneProc(t, t.TempDir(), args...)
		adm, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: "http://" + r.sp.httpAddr, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		r.admin = adm
		rs = append(rs, r)
	}
	for _, r := range rs {
		for _, o := range rs {
			if o == r {
				continue
			}
			px := StartProxy(t, o.sp.brokerAddr)
			r.links[o.name] = px
			// pulsaradmin's ClusterData has no proxy fields: plain REST.
			body := fmt.Sprintf(`{"serviceUrl":"http://%s","brokerServiceUrl":"pulsar://%s","proxyServiceUrl":"pulsar://%s","proxyProtocol":"SNI"`,
				o.sp.httpAddr, o.sp.brokerAddr, px.Addr())
			if token != "" {
				body += fmt.Sprintf(`,"authenticationPlugin":"org.apache.pulsar.client.impl.auth.AuthenticationToken","authenticationParameters":"token:%s"`, token)
			}
			req, _ := http.NewRequest(http.MethodPut, "http://"+r.sp.httpAddr+"/admin/v2/clusters/"+o.name, strings.NewReader(body+"}"))
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: register cluster %s: %v", r.name, o.name, err)
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Fatalf("%s: register cluster %s: HTTP %d", r.name, o.name, resp.StatusCode)
			}
		}
	}
	for _, r := range rs {
		if err := r.admin.Tenants().Create(utils.TenantData{Name: "geo", AllowedClusters: names}); err != nil {
			t.Fatalf("%s: tenant: %v", r.name, err)
		}
		if err := r.admin.Namespaces().CreateNamespace("geo/ns"); err != nil {
			t.Fatalf("%s: namespace: %v", r.name, err)
		}
		if err := r.admin.Namespaces().SetNamespaceReplicationClusters("geo/ns", names); err != nil {
			t.Fatalf("%s: replication clusters: %v", r.name, err)
		}
		// Keep what was consumed, so the test can read every cluster's
		// topic from the start.
		if err := r.admin.Namespaces().SetRetention("geo/ns", utils.RetentionPolicies{RetentionTimeInMinutes: 60, RetentionSizeInMB: 1024}); err != nil {
			t.Fatalf("%s: retention: %v", r.name, err)
		}
	}
	return rs
}

// loadProducer sends "<prefix>-<i>" messages at about rate per second until
// stopped, and records which were acknowledged. Sends that fail (a broker
// killed) are retried by the client or given up; only acknowledged
// messages count.
type loadProducer struct {
	mu    sync.Mutex
	acked map[string]bool
	sent  int
	stop  chan struct{}
	done  chan struct{}
}

func startLoad(t *testing.T, c pulsar.Client, topic, prefix string, rate int) *loadProducer {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 20,
		BatchingMaxPublishDelay: 5 * time.Millisecond, SendTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lp := &loadProducer{acked: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(lp.done)
		defer p.Close()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-lp.stop:
				p.Flush()
				return
			case <-tick.C:
			}
			payload := fmt.Sprintf("%s-%06d", prefix, i)
			lp.mu.Lock()
			lp.sent++
			lp.mu.Unlock()
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err == nil {
						lp.mu.Lock()
						lp.acked[payload] = true
						lp.mu.Unlock()
					}
				})
		}
	}()
	return lp
}

func (lp *loadProducer) finish() (acked map[string]bool, sent int) {
	close(lp.stop)
	<-lp.done
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.acked, lp.sent
}

// readTopic reads topic from the earliest message until nothing more
// arrives for quiet, and returns the payloads in arrival order.
func readTopic(t *testing.T, c pulsar.Client, topic string, quiet time.Duration) []string {
	t.Helper()
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, string(m.Payload()))
	}
}

// byPrefix splits payloads by their producer prefix, keeping order.
func byPrefix(list []string) map[string][]string {
	out := map[string][]string{}
	for _, p := range list {
		k, _, _ := strings.Cut(p, "-")
		out[k] = append(out[k], p)
	}
	return out
}

// checkReplicated checks that for every producer, every cluster holds
// exactly the sequence of messages its source cluster stored (the same
// payloads, once each, in the same order), and that every acknowledged
// message is among them. source maps a producer prefix to the index of its
// cluster in lists.
func checkReplicated(t *testing.T, names []string, lists [][]string, source map[string]int, acked map[string]map[string]bool) {
	t.Helper()
	split := make([]map[string][]string, len(lists))
	for i, l := range lists {
		split[i] = byPrefix(l)
	}
	for prefix, src := range source {
		stored := split[src][prefix]
		in := map[string]int{}
		for _, p := range stored {
			in[p]++
		}
		missing := 0
		for p := range acked[prefix] {
			if in[p] == 0 {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("%s: %d acknowledged messages of %s are not stored in their own cluster", names[src], missing, prefix)
		}
		for i := range lists {
			got := split[i][prefix]
			if len(got) != len(stored) {
				t.Errorf("%s has %d messages of %s, its source %s stored %d", names[i], len(got), prefix, names[src], len(stored))
				continue
			}
			for j := range stored {
				if got[j] != stored[j] {
					t.Errorf("%s: message %d of %s is %q, source has %q", names[i], j, prefix, got[j], stored[j])
					break
				}
			}
		}
		t.Logf("%s: %d stored in %s, %d acknowledged, identical in all %d clusters", prefix, len(stored), names[src], len(acked[prefix]), len(lists))
	}
}

// waitDrained waits until every region's replicators of topic report no
// backlog.
func waitDrained(t *testing.T, rs []*geoRegion, topic string, timeout time.Duration) {
	t.Helper()
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replication drained", timeout, func() bool {
		for _, r := range rs {
			st, err := r.admin.Topics().GetStats(*tn)
			if err != nil {
				return false
			}
			for _, o := range rs {
				if o == r {
					continue
				}
				rep, ok := st.Replication[o.name]
				if !ok || !rep.Connected || rep.ReplicationBacklog != 0 {
					return false
				}
			}
		}
		return true
	})
}

// TestGeoReplicationLinkCut: producers in both of two regions; both links
// are cut for 30 s under load, then healed. Every message stored in either
// cluster is in the other once, in order.
func TestGeoReplicationLinkCut(t *testing.T) {
	rs := startGeo(t, "east", "west")
	topic := "persistent://geo/ns/cut"
	ce, cw := pulsarClient(t, rs[0].sp.brokerAddr), pulsarClient(t, rs[1].sp.brokerAddr)
	le, lw := startLoad(t, ce, topic, "e", 100), startLoad(t, cw, topic, "w", 100)
	time.Sleep(3 * time.Second) // load before the cut
	rs[0].links["west"].Cut()
	rs[1].links["east"].Cut()
	time.Sleep(30 * time.Second) // the outage being tested
	rs[0].links["west"].Restore()
	rs[1].links["east"].Restore()
	time.Sleep(3 * time.Second) // load after the heal
	ae, _ := le.finish()
	aw, _ := lw.finish()
	waitDrained(t, rs, topic, 90*time.Second)
	lists := [][]string{readTopic(t, ce, topic, 2*time.Second), readTopic(t, cw, topic, 2*time.Second)}
	checkReplicated(t, []string{"east", "west"}, lists, map[string]int{"e": 0, "w": 1},
		map[string]map[string]bool{"e": ae, "w": aw})
}

// TestGeoReplicationKill: a producer in east over a link with 50 ms each
// way; the source standalone is killed with SIGKILL mid-replication and
// restarted, then the target is. What east stored is in west once, in
// order.
func TestGeoReplicationKill(t *testing.T) {
	rs := startGeo(t, "east", "west")
	for _, r := range rs {
		for _, px := range r.links {
			px.SetDelay(50 * time.Millisecond)
		}
	}
	topic := "persistent://geo/ns/kill"
	ce := pulsarClient(t, rs[0].sp.brokerAddr)
	le := startLoad(t, ce, topic, "e", 200)
	time.Sleep(3 * time.Second)
	rs[0].sp.Kill() // the source, mid-replication
	rs[0].sp.StartAgain()
	rs[0].sp.waitReady(t)
	time.Sleep(3 * time.Second)
	rs[1].sp.Kill() // the target
	rs[1].sp.StartAgain()
	rs[1].sp.waitReady(t)
	time.Sleep(3 * time.Second)
	ae, _ := le.finish()
	waitDrained(t, rs, topic, 90*time.Second)
	cw := pulsarClient(t, rs[1].sp.brokerAddr)
	lists := [][]string{readTopic(t, ce, topic, 2*time.Second), readTopic(t, cw, topic, 2*time.Second)}
	checkReplicated(t, []string{"east", "west"}, lists, map[string]int{"e": 0}, map[string]map[string]bool{"e": ae})
}

// TestGeoReplicationUnload: the namespace is unloaded in the source (its
// topics and replicators move) while a producer writes; then in the
// target.
func TestGeoReplicationUnload(t *testing.T) {
	rs := startGeo(t, "east", "west")
	topic := "persistent://geo/ns/unload"
	ce, cw := pulsarClient(t, rs[0].sp.brokerAddr), pulsarClient(t, rs[1].sp.brokerAddr)
	le := startLoad(t, ce, topic, "e", 200)
	time.Sleep(2 * time.Second)
	for _, r := range []*geoRegion{rs[0], rs[1], rs[0]} {
		if err := r.admin.Namespaces().Unload("geo/ns"); err != nil {
			t.Fatalf("%s: unload: %v", r.name, err)
		}
		time.Sleep(2 * time.Second)
	}
	ae, _ := le.finish()
	waitDrained(t, rs, topic, 60*time.Second)
	lists := [][]string{readTopic(t, ce, topic, 2*time.Second), readTopic(t, cw, topic, 2*time.Second)}
	checkReplicated(t, []string{"east", "west"}, lists, map[string]int{"e": 0}, map[string]map[string]bool{"e": ae})
}

// TestGeoReplicatedSubscriptionFailover: a consumer of a replicated
// subscription in east acknowledges out of order (every seventh message
// left unacknowledged) while a producer writes; then east's links are cut
// and east is killed with SIGKILL, and a consumer of the same subscription
// starts in west. Every unacknowledged message that reached west is
// delivered there, and the acknowledged ones delivered again are at most
// those acknowledged in the last two seconds before the cut (the state is
// sent every second).
func TestGeoReplicatedSubscriptionFailover(t *testing.T) {
	rs := startGeo(t, "east", "west")
	topic := "persistent://geo/ns/failover"
	ce, cw := pulsarClient(t, rs[0].sp.brokerAddr), pulsarClient(t, rs[1].sp.brokerAddr)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "app", Type: pulsar.Shared,
		ReplicateSubscriptionState: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}
	cons, err := ce.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ce.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	go func() {
		for i := range n {
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", i))}, nil)
			time.Sleep(2 * time.Millisecond) // about 500 msg/s: the load, not synchronization
		}
		p.Flush()
	}()
	ackedAt := map[string]time.Time{}
	unacked := map[string]bool{}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("east: receive %d: %v", i, err)
		}
		if i%7 == 3 {
			unacked[string(m.Payload())] = true
			continue
		}
		cons.Ack(m)
		ackedAt[string(m.Payload())] = time.Now()
	}
	cut := time.Now()
	rs[0].links["west"].Cut()
	rs[1].links["east"].Cut()
	rs[0].sp.Kill()
	bound := 0
	for _, at := range ackedAt {
		if cut.Sub(at) < 2*time.Second {
			bound++
		}
	}

	inWest := map[string]bool{}
	for _, m := range readTopic(t, cw, topic, 3*time.Second) {
		inWest[m] = true
	}
	cw2, err := cw.Subscribe(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cw2.Close()
	got, dups := map[string]bool{}, 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		m, err := cw2.Receive(ctx)
		cancel()
		if err != nil {
			break
		}
		cw2.Ack(m)
		pl := string(m.Payload())
		if _, acked := ackedAt[pl]; acked {
			dups++
		}
		got[pl] = true
	}
	missing := 0
	for pl := range unacked {
		if inWest[pl] && !got[pl] {
			missing++
		}
	}
	t.Logf("west holds %d of %d messages; %d of %d unacknowledged delivered; %d acknowledged in east delivered again (bound %d: acknowledged in the last 2 s)",
		len(inWest), n, len(unacked)-missing, len(unacked), dups, bound)
	if missing > 0 {
		t.Errorf("%d unacknowledged messages present in west were not delivered", missing)
	}
	if dups > bound {
		t.Errorf("%d acknowledged messages delivered again in west, more than the %d acknowledged in the last 2 s", dups, bound)
	}
}

// TestGeoReplicationMeshOfThree: three regions replicating to each other,
// every link through a proxy adding 50 ms each way, a producer in each:
// every cluster holds every producer's messages once, in order (nothing is
// sent back or forwarded twice).
func TestGeoReplicationMeshOfThree(t *testing.T) {
	names := []string{"r1", "r2", "r3"}
	rs := startGeo(t, names...)
	for _, r := range rs {
		for _, px := range r.links {
			px.SetDelay(50 * time.Millisecond)
		}
	}
	topic := "persistent://geo/ns/mesh"
	var clients []pulsar.Client
	var loads []*loadProducer
	for i, r := range rs {
		c := pulsarClient(t, r.sp.brokerAddr)
		clients = append(clients, c)
		loads = append(loads, startLoad(t, c, topic, fmt.Sprintf("p%d", i), 100))
	}
	time.Sleep(4 * time.Second) // the load
	acked := map[string]map[string]bool{}
	source := map[string]int{}
	for i, l := range loads {
		a, _ := l.finish()
		acked[fmt.Sprintf("p%d", i)] = a
		source[fmt.Sprintf("p%d", i)] = i
	}
	waitDrained(t, rs, topic, 90*time.Second)
	var lists [][]string
	for _, c := range clients {
		lists = append(lists, readTopic(t, c, topic, 2*time.Second))
	}
	checkReplicated(t, names, lists, source, acked)
}
