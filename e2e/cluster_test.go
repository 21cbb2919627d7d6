package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/internal/pki"
)

// dataCluster is a storage cluster (real etcd, three `magnetar bookie`
// processes) plus M `magnetar broker` processes.
type dataCluster struct {
	*storageCluster
	brokers []*brokerProc
	// token is a superuser's token when the brokers authenticate
	// (newAuthDataCluster); "" otherwise.
	token string
	// caFile is the CA of the brokers' certificates when they serve TLS
	// only ("" when they serve plain text), and hc the HTTP client
	// trusting it.
	caFile string
	hc     *http.Client
}

type brokerProc struct {
	*Process
	brokerAddr, httpAddr string
}

func newDataCluster(t *testing.T, bookies, brokers int) *dataCluster {
	return newDataClusterWith(t, bookies, brokers, nil)
}

// brokerFlags are the brokers' extra flags; tests that exercise the load
// manager replace them.
var defaultBrokerFlags = []string{"--load-shedding=false"}

// newDataClusterWith lets metadataURL choose each broker's metadata endpoint
// (e.g. through a Proxy); nil means the store itself.
func newDataClusterWith(t *testing.T, bookies, brokers int, metadataURL func(c *dataCluster, i int) string) *dataCluster {
	return newDataClusterFlags(t, bookies, brokers, metadataURL, defaultBrokerFlags)
}

func newDataClusterFlags(t *testing.T, bookies, brokers int, metadataURL func(c *dataCluster, i int) string, flags []string) *dataCluster {
	return startDataCluster(t, bookies, brokers, metadataURL, flags, clusterSecurity{})
}

// newAuthDataCluster starts brokers with token authentication and
// authorization on (an HS256 secret key, superuser role "admin"; the
// cluster's token is the superuser's) and, with tlsOnly, serving
// pulsar+ssl:// and https:// only, with certificates of a CA made for the
// cluster, which they also trust for their calls to each other.
func newAuthDataCluster(t *testing.T, bookies, brokers int, flags []string, tlsOnly bool) *dataCluster {
	dir := t.TempDir()
	key, err := auth.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "secret.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := auth.Mint(key, auth.MintOptions{Subject: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	flags = append(slices.Clone(flags), "--auth-token-secret-key", keyFile, "--authorization", "--superuser-roles", "admin")
	sec := clusterSecurity{token: tok}
	if tlsOnly {
		ca, err := pki.Create("e2e data cluster", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := ca.Issue("broker", []string{"127.0.0.1", "localhost"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		sec.caFile = filepath.Join(dir, "ca.pem")
		certFile, keyFile := filepath.Join(dir, "broker.pem"), filepath.Join(dir, "broker-key.pem")
		if err := errors.Join(os.WriteFile(sec.caFile, ca.CertPEM, 0o600), pki.WriteLeaf(leaf, certFile, keyFile)); err != nil {
			t.Fatal(err)
		}
		flags = append(flags, "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--broker-client-tls-trust-certs-file", sec.caFile)
	}
	return startDataCluster(t, bookies, brokers, nil, flags, sec)
}

// clusterSecurity is what newAuthDataCluster secured a cluster with.
type clusterSecurity struct{ token, caFile string }

func startDataCluster(t *testing.T, bookies, brokers int, metadataURL func(c *dataCluster, i int) string, flags []string, sec clusterSecurity) *dataCluster {
	// A real three-member etcd cluster of `magnetar metadata` processes.
	c := &dataCluster{storageCluster: newStorageClusterOnEtcdCluster(t, bookies), token: sec.token, caFile: sec.caFile, hc: http.DefaultClient}
	if sec.caFile != "" {
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(sec.caFile)
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			t.Fatalf("CA %s: %v", sec.caFile, err)
		}
		c.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	}
	for i := range brokers {
		md := c.etcdURL
		if metadataURL != nil {
			md = metadataURL(c, i)
		}
		b := &brokerProc{brokerAddr: FreeAddr(t), httpAddr: FreeAddr(t)}
		args := append([]string{"broker", "--metadata", md, "--broker-addr", b.brokerAddr, "--http-addr", b.httpAddr}, flags...)
		if sec.caFile != "" { // the same addresses, TLS only
			args = append(args, "--broker-addr", "off", "--http-addr", "off", "--tls-addr", b.brokerAddr, "--https-addr", b.httpAddr)
		}
		b.Process = Start(t, fmt.Sprintf("broker-%d", i), args...)
		c.brokers = append(c.brokers, b)
	}
	for i := range c.brokers {
		waitFor(t, "broker health", 60*time.Second, func() bool { return httpOKWith(c.hc, c.web(i)+"/admin/v2/brokers/health") })
	}
	waitFor(t, "all brokers registered", 30*time.Second, func() bool {
		var list []string
		return c.getJSON(c.web(0)+"/admin/v2/brokers/standalone", &list) == nil && len(list) == brokers
	})
	return c
}

// web is broker i's admin URL: http://, or https:// when the cluster
// serves TLS only.
func (c *dataCluster) web(i int) string {
	if c.caFile != "" {
		return "https://" + c.brokers[i].httpAddr
	}
	return "http://" + c.brokers[i].httpAddr
}

// getJSON is getJSON with the cluster's HTTP client and token.
func (c *dataCluster) getJSON(u string, v any) error {
	return getJSONWith(c.hc, u, c.token, v)
}

// clientAuth is the Pulsar client's authentication for the cluster.
func (c *dataCluster) clientAuth() pulsar.Authentication {
	if c.token == "" {
		return nil
	}
	return pulsar.NewAuthenticationToken(c.token)
}

func httpOK(u string) bool { return httpOKWith(http.DefaultClient, u) }

func httpOKWith(hc *http.Client, u string) bool {
	resp, err := hc.Get(u)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func getJSON(u string, v any) error { return getJSONWith(http.DefaultClient, u, "", v) }

// getJSONWith GETs u through hc with a bearer token ("" for none) and
// decodes v.
func getJSONWith(hc *http.Client, u, token string, v any) error {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", u, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// serviceURL lists every broker, as a client behind no load balancer would.
func (c *dataCluster) serviceURL() string {
	addrs := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		addrs[i] = b.brokerAddr
	}
	if c.caFile != "" {
		return "pulsar+ssl://" + strings.Join(addrs, ",")
	}
	return "pulsar://" + strings.Join(addrs, ",")
}

// owner returns the index of the broker serving topic, asking any live one.
func (c *dataCluster) owner(t *testing.T, topic string, alive ...int) int {
	t.Helper()
	var res map[string]string
	if err := getJSON("http://"+c.brokers[alive[0]].httpAddr+"/lookup/v2/topic/persistent/"+strings.TrimPrefix(topic, "persistent://"), &res); err != nil {
		t.Fatalf("lookup %s: %v", topic, err)
	}
	for i, b := range c.brokers {
		if res["brokerUrl"] == "pulsar://"+b.brokerAddr {
			return i
		}
	}
	t.Fatalf("lookup of %s answered %v: not one of our brokers", topic, res)
	return -1
}

func newClusterClient(t *testing.T, url string) pulsar.Client {
	return newClusterClientAuth(t, url, nil, "")
}

// newClusterClientAuth is newClusterClient with authentication and, for
// pulsar+ssl:// URLs, the CA file to trust.
func newClusterClientAuth(t *testing.T, url string, a pulsar.Authentication, caFile string) pulsar.Client {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: url, OperationTimeout: 60 * time.Second, ConnectionTimeout: 3 * time.Second, Authentication: a,
		TLSTrustCertsFilePath: caFile,
		// A paused broker keeps its TCP connections open: the client finds
		// out through its keep-alive pings (default 30s).
		KeepAliveInterval: 3 * time.Second,
		Logger:            quietPulsarLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// sequencedProducer sends "seq-N" messages one after the other and records
// which were acknowledged and when.
type sequencedProducer struct {
	mu      sync.Mutex
	acked   []int
	ackTime []time.Time
	errs    int
	stop    chan struct{}
	once    sync.Once
	done    chan struct{}
}

func produceSequence(t *testing.T, p pulsar.Producer) *sequencedProducer {
	sp := &sequencedProducer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sp.done)
		for i := 0; ; i++ {
			select {
			case <-sp.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("seq-" + strconv.Itoa(i))})
			cancel()
			sp.mu.Lock()
			if err == nil {
				sp.acked = append(sp.acked, i)
				sp.ackTime = append(sp.ackTime, time.Now())
			} else {
				sp.errs++
			}
			sp.mu.Unlock()
		}
	}()
	return sp
}

func (sp *sequencedProducer) count() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.acked)
}

func (sp *sequencedProducer) finish() []int {
	sp.halt()
	return sp.acked
}

// halt stops sending (idempotent).
func (sp *sequencedProducer) halt() {
	sp.once.Do(func() { close(sp.stop) })
	<-sp.done
}

// firstAckAfter returns the first acknowledgement time after t0.
func (sp *sequencedProducer) firstAckAfter(t0 time.Time) (time.Time, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, at := range sp.ackTime {
		if at.After(t0) {
			return at, true
		}
	}
	return time.Time{}, false
}

// checkConsumed reads the topic from the start and checks that every
// acknowledged sequence number is there, with first occurrences in order.
func checkConsumed(t *testing.T, cl pulsar.Client, topic string, acked []int, adminURL string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			resp, err := http.Get(adminURL + "/admin/v2/persistent/" + strings.TrimPrefix(topic, "persistent://") + "/internalStats")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("internal stats: %s", b)
			}
		}
	}()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "verify",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	want := map[int]bool{}
	for _, s := range acked {
		want[s] = true
	}
	last := -1
	seen := map[int]bool{}
	for len(want) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("receive with %d acknowledged messages missing (e.g. %v): %v", len(want), firstKeys(want), err)
		}
		cons.Ack(m)
		s, _ := strconv.Atoi(strings.TrimPrefix(string(m.Payload()), "seq-"))
		if seen[s] {
			continue // a retried send persisted twice: allowed without dedup
		}
		seen[s] = true
		if s < last {
			t.Fatalf("seq-%d after seq-%d: out of order", s, last)
		}
		last = s
		delete(want, s)
	}
}

// busyTopic creates the "verify" subscription (so the topic keeps what is
// produced), then a producer sending "seq-N" messages one after the other,
// and waits for its first n acknowledgements. The producer closes when the
// test ends.
func busyTopic(t *testing.T, cl pulsar.Client, topic string, n int) *sequencedProducer {
	t.Helper()
	precreateSubscription(t, cl, topic)
	p, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 60 * time.Second, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	sp := produceSequence(t, p)
	t.Cleanup(func() {
		sp.halt()
		p.Close()
	})
	waitFor(t, "first acknowledgements", 30*time.Second, func() bool { return sp.count() >= n })
	return sp
}

func precreateSubscription(t *testing.T, cl pulsar.Client, topic string) {
	t.Helper()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "verify",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	cons.Close()
}

func firstKeys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out[:min(5, len(out))]
}

// TestBrokerKill9 kills the broker that owns a busy topic: the other broker
// takes the bundle once the dead one's session expires, fences its ledger,
// and the producer's writes resume; nothing acknowledged is lost.
//
// MAGNETAR_E2E_SESSION_TTL (a duration) runs the brokers with that
// --session-ttl instead of the default, to measure its effect.
func TestBrokerKill9(t *testing.T) {
	flags := defaultBrokerFlags
	if ttl := os.Getenv("MAGNETAR_E2E_SESSION_TTL"); ttl != "" {
		flags = append(slices.Clone(flags), "--session-ttl", ttl)
	}
	c := newDataClusterFlags(t, 3, 2, nil, flags)
	cl := newClusterClient(t, c.serviceURL())
	topic := "persistent://public/default/busy-kill"
	// Without a subscription (or retention) Pulsar keeps nothing: create
	// the one that verifies everything before producing.
	sp := busyTopic(t, cl, topic, 200)
	victim := c.owner(t, topic, 0)
	survivor := 1 - victim
	killed := time.Now()
	c.brokers[victim].Kill()
	before := sp.count()
	waitFor(t, "writes to resume on the surviving broker", 60*time.Second, func() bool { return sp.count() >= before+200 })
	resumed, _ := sp.firstAckAfter(killed)
	t.Logf("broker kill -9: writes resumed %v after the kill", resumed.Sub(killed).Round(time.Millisecond))
	fmt.Printf("e2e TestBrokerKill9: writes resumed %v after kill -9 of the owning broker\n", resumed.Sub(killed).Round(time.Millisecond))
	// Where the time went, from the surviving broker's log: the held
	// lookup, the bundle's acquisition and the topic's load (with the
	// recovery of the ledger the dead broker left open).
	for _, step := range logSteps(c.brokers[survivor].Output(), killed, "bundle owner refuses connections",
		"bundle owner wait ended", "bundle acquired", "ledger left open recovered", "topic loaded") {
		t.Log(step)
		fmt.Println("e2e TestBrokerKill9:", step)
	}
	if got := c.owner(t, topic, survivor); got != survivor {
		t.Fatalf("topic owned by broker %d after the kill", got)
	}
	acked := sp.finish()
	checkConsumed(t, cl, topic, acked, "http://"+c.brokers[survivor].httpAddr)
}

// TestBrokerPausedIsFenced pauses the owning broker longer than its session
// lease: the other broker takes the topic, and when the paused one resumes
// it must not append again (its ledger was fenced by the new owner's
// recovery; its session is gone, so it closes its topics).
func TestBrokerPausedIsFenced(t *testing.T) {
	c := newDataCluster(t, 3, 2)
	cl := newClusterClient(t, c.serviceURL())
	topic := "persistent://public/default/busy-pause"
	// Without a subscription (or retention) Pulsar keeps nothing: create
	// the one that verifies everything before producing.
	sp := busyTopic(t, cl, topic, 200)
	victim := c.owner(t, topic, 0)
	survivor := 1 - victim
	c.brokers[victim].Stop()
	waitFor(t, "the surviving broker to take the topic", 60*time.Second, func() bool {
		var res map[string]string
		err := getJSON("http://"+c.brokers[survivor].httpAddr+"/lookup/v2/topic/persistent/"+strings.TrimPrefix(topic, "persistent://"), &res)
		return err == nil && res["brokerUrl"] == "pulsar://"+c.brokers[survivor].brokerAddr
	})
	before := sp.count()
	waitFor(t, "writes to resume", 60*time.Second, func() bool { return sp.count() >= before+100 })
	c.brokers[victim].Cont()
	// The resumed broker must notice its lost session and give the topic up.
	waitFor(t, "the resumed broker to drop its bundles", 30*time.Second, func() bool {
		var owned map[string]any
		err := getJSON("http://"+c.brokers[victim].httpAddr+"/admin/v2/brokers/standalone/"+c.brokers[victim].httpAddr+"/ownedNamespaces", &owned)
		return err == nil && len(owned) == 0
	})
	before = sp.count()
	waitFor(t, "more writes after the resume", 60*time.Second, func() bool { return sp.count() >= before+100 })
	if got := c.owner(t, topic, victim); got != survivor {
		t.Fatalf("resumed broker answers that broker %d owns the topic", got)
	}
	acked := sp.finish()
	checkConsumed(t, cl, topic, acked, "http://"+c.brokers[survivor].httpAddr)
}

// logSteps returns the lines of a process's log (slog text) whose message
// is one of msgs and whose time is after since, each as "+<offset> line".
func logSteps(out string, since time.Time, msgs ...string) []string {
	var steps []string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "time=") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time="))
		if err != nil || at.Before(since) {
			continue
		}
		for _, m := range msgs {
			if strings.Contains(line, `msg="`+m) {
				steps = append(steps, fmt.Sprintf("+%v %s", at.Sub(since).Round(time.Millisecond), strings.TrimSpace(line)))
			}
		}
	}
	return steps
}
