package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// failoverDoc is the document ControlledClusterFailover polls. Empty
// fields are left out: the Java client compares what it fetched with its
// own configuration, where unset fields are null, and an empty string
// there would count as a change and reconnect it to the same cluster.
type failoverDoc struct {
	ServiceURL            string `json:"serviceUrl"`
	TLSTrustCertsFilePath string `json:"tlsTrustCertsFilePath,omitempty"`
	AuthPluginClassName   string `json:"authPluginClassName,omitempty"`
	AuthParamsString      string `json:"authParamsString,omitempty"`
}

// httpFailoverEndpoint is an HTTP failover endpoint for the test: GET with
// "Authorization: Bearer <key>" answers the current config, anything else
// 401.
type httpFailoverEndpoint struct {
	*httptest.Server
	key string

	mu  sync.Mutex
	cfg failoverDoc

	served, refused atomic.Int64
}

func startHTTPFailoverEndpoint(t *testing.T, key string, cfg failoverDoc) *httpFailoverEndpoint {
	t.Helper()
	ep := &httpFailoverEndpoint{key: key, cfg: cfg}
	ep.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+ep.key {
			ep.refused.Add(1)
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		ep.served.Add(1)
		ep.mu.Lock()
		body, err := json.Marshal(ep.cfg)
		ep.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(ep.Close)
	return ep
}

func (ep *httpFailoverEndpoint) set(cfg failoverDoc) {
	ep.mu.Lock()
	ep.cfg = cfg
	ep.mu.Unlock()
}

// get fetches the endpoint with the given Authorization header ("" for
// none) and returns the status and body.
func (ep *httpFailoverEndpoint) get(t *testing.T, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ep.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := ep.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", ep.URL, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET %s: read: %v", ep.URL, err)
	}
	return resp.StatusCode, string(body)
}

// TestJavaControlledFailover: two standalones replicating geo/ns to each
// other; a Java producer and a Java consumer (Shared, replicated
// subscription) both follow a failover endpoint through the Java client's
// ControlledClusterFailover. The endpoint names east, then west: both
// clients move to west, the producer's sends are acknowledged there, and
// the consumer receives every acknowledged message (from east before the
// switch, from west after), in order, none lost.
func TestJavaControlledFailover(t *testing.T) {
	SkipIfNoJava(t)
	testControlledFailover(t, "java", StartJavaProducer, StartJavaConsumer, false)
}

// TestJavaControlledFailoverTLS is TestJavaControlledFailover over TLS with
// token authentication (testControlledFailover, secure).
func TestJavaControlledFailoverTLS(t *testing.T) {
	SkipIfNoJava(t)
	testControlledFailover(t, "java", StartJavaProducer, StartJavaConsumer, true)
}

// TestPythonControlledFailover is the same with pulsar-client for Python,
// which has no ControlledClusterFailover: its client follows the endpoint
// through a ServiceInfoProvider of ours (e2e/javaclient/failover_client.py).
func TestPythonControlledFailover(t *testing.T) {
	SkipIfNoPythonPulsar(t)
	testControlledFailover(t, "python", StartPythonProducer, StartPythonConsumer, false)
}

// TestPythonControlledFailoverTLS is TestPythonControlledFailover over TLS
// with token authentication (testControlledFailover, secure).
func TestPythonControlledFailoverTLS(t *testing.T) {
	SkipIfNoPythonPulsar(t)
	testControlledFailover(t, "python", StartPythonProducer, StartPythonConsumer, true)
}

// tokenPlugin is the Java client's token authentication plugin, which
// failover_client.py takes by the same name.
const tokenPlugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"

// testControlledFailover runs the failover scenario of
// TestJavaControlledFailover with the clients of one language.
//
// secure: the standalones serve TLS (startGeoSecured), each with a
// certificate of its own CA that no system trusts, and refuse clients
// without a token for their own name, and the clients connect to their
// pulsar+ssl:// URLs. The producer and the consumer then follow two
// endpoints, both naming east and then west:
//   - the producer's, as Magnetar's failover endpoint does, names URLs only:
//     the producer is started with the group's trust file (both CAs) and a
//     token for both clusters (a file:// parameter), and keeps them on west;
//   - the consumer's names west with the trust bundle and a token for west
//     (tlsTrustCertsFilePath, authPluginClassName, authParamsString), the
//     consumer being started with east's CA alone and a token for east
//     alone: it reaches west only by taking both from the endpoint's answer.
//     The Java consumer starts with the bundle: its client does not apply
//     a trust file from the answer to new connections.
func testControlledFailover(t *testing.T, lang string,
	startProducer func(testing.TB, string, ClientOptions) *ClientProducer,
	startConsumer func(testing.TB, string, ClientOptions) *ClientConsumer, secure bool) {
	var rs []*geoRegion
	var sec *geoSecurity
	if secure {
		rs, sec = startGeoSecured(t, "east", "west")
	} else {
		rs = startGeo(t, "east", "west")
	}
	east, west := "pulsar://"+rs[0].sp.brokerAddr, "pulsar://"+rs[1].sp.brokerAddr
	if secure {
		east, west = rs[0].tlsURL, rs[1].tlsURL
	}
	const key = "e2e-failover-key"
	prodEp := startHTTPFailoverEndpoint(t, key, failoverDoc{ServiceURL: east})
	consEp := prodEp
	if secure {
		consEp = startHTTPFailoverEndpoint(t, key, failoverDoc{ServiceURL: east})
	}
	endpoints := []*httpFailoverEndpoint{prodEp}
	if consEp != prodEp {
		endpoints = append(endpoints, consEp)
	}

	for _, ep := range endpoints {
		if code, _ := ep.get(t, ""); code != http.StatusUnauthorized {
			t.Fatalf("endpoint without a bearer header: HTTP %d, want 401", code)
		}
		if code, _ := ep.get(t, "Bearer wrong"); code != http.StatusUnauthorized {
			t.Fatalf("endpoint with a wrong key: HTTP %d, want 401", code)
		}
		if code, body := ep.get(t, "Bearer "+key); code != http.StatusOK || !strings.Contains(body, east) {
			t.Fatalf("endpoint with the key: HTTP %d %s", code, body)
		}
	}
	var refusedBefore, servedBefore int64
	for _, ep := range endpoints {
		refusedBefore += ep.refused.Load()
		servedBefore += ep.served.Load()
	}

	topic := "persistent://geo/ns/" + lang + "-failover"
	base := ClientOptions{ServiceURL: east, ProviderToken: key, CheckInterval: 500 * time.Millisecond, Topic: topic}
	co := base
	co.ProviderURL, co.Subscription, co.SubscriptionType = consEp.URL, "app", "Shared"
	po := base
	po.ProviderURL, po.Name, po.Rate = prodEp.URL, lang[:1]+"1", 50
	prodWest, consWest := failoverDoc{ServiceURL: west}, failoverDoc{ServiceURL: west}
	if secure {
		// The group's trust file: both regions' CAs.
		var pem []byte
		for _, r := range rs {
			b, err := os.ReadFile(r.caFile)
			if err != nil {
				t.Fatal(err)
			}
			pem = append(pem, b...)
		}
		bundle := filepath.Join(t.TempDir(), "group-ca.pem")
		if err := os.WriteFile(bundle, pem, 0o644); err != nil {
			t.Fatal(err)
		}
		groupToken := filepath.Join(t.TempDir(), "group.token")
		if err := os.WriteFile(groupToken, []byte(sec.mint(t, lang+"-app", "east", "west")), 0o600); err != nil {
			t.Fatal(err)
		}
		po.TLSTrustCertsFile, po.AuthPlugin, po.AuthParams = bundle, tokenPlugin, "file://"+groupToken
		co.TLSTrustCertsFile, co.AuthPlugin, co.AuthParams = rs[0].caFile, tokenPlugin, "token:"+sec.mint(t, lang+"-app", "east")
		if lang == "java" {
			// The Java client (4.2.4) records a trust file the endpoint
			// names but keeps verifying new connections against the one
			// it was built with: its consumer starts with the bundle.
			co.TLSTrustCertsFile = bundle
		}
		consWest = failoverDoc{ServiceURL: west, TLSTrustCertsFilePath: bundle,
			AuthPluginClassName: tokenPlugin, AuthParamsString: "token:" + sec.mint(t, lang+"-app", "west")}
	}
	cons := startConsumer(t, lang+"-consumer", co)
	prod := startProducer(t, lang+"-producer", po)

	prod.WaitAcked(100, 60*time.Second)
	cons.WaitReceived(100, 60*time.Second)

	switchAt := time.Now()
	prodEp.set(prodWest)
	consEp.set(consWest)
	pu := prod.WaitURL(west, 30*time.Second)
	cu := cons.WaitURL(west, 30*time.Second)
	prod.WaitAckedAfter(pu.At, 100, 60*time.Second)

	// Both clients' producer and consumer are attached to west, none to east.
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	var attached string
	if !pollClient(30*time.Second, nil, func() bool {
		e, w := attachedClients(rs[0], *tn), attachedClients(rs[1], *tn)
		attached = "east " + e + ", west " + w
		return e == "0 producers, 0 consumers" && w == "1 producers, 1 consumers"
	}) {
		t.Fatalf("after the switch: %s; want the producer and the consumer on west only", attached)
	}

	done, err := prod.Stop()
	if err != nil {
		t.Fatal(err)
	}
	acks := prod.Acked()
	want := map[string]bool{}
	for _, a := range acks {
		want[javaPayload(po.Name, a.Seq)] = true
	}
	if missing := cons.WaitReceivedAll(want, 60*time.Second); len(missing) > 0 {
		t.Errorf("%d of %d acknowledged messages never received, first %v", len(missing), len(want), missing[:min(5, len(missing))])
	}
	if _, err := cons.Stop(); err != nil {
		t.Error(err)
	}

	if done.Acked != len(acks) || done.Sent != done.Acked+done.Failed {
		t.Errorf("producer DONE %+v, %d ACK lines", done, len(acks))
	}
	for _, e := range prod.SendErrors() {
		t.Errorf("send %d failed: %s", e.Seq, e.Err)
	}
	for i := 1; i < len(acks); i++ {
		if acks[i].Seq <= acks[i-1].Seq {
			t.Errorf("acknowledgements out of order: %d after %d", acks[i].Seq, acks[i-1].Seq)
			break
		}
	}

	for _, jp := range []*clientProc{prod.clientProc, cons.clientProc} {
		if bad := jp.Unparsed(); len(bad) > 0 {
			t.Errorf("%s printed lines the harness does not understand: %q", jp.name, bad)
		}
	}
	msgs := cons.Received()
	order := checkClientOrder(msgs)
	if order.outOfOrder > 0 {
		t.Errorf("%d messages received after a later one of the same producer (first: %s)", order.outOfOrder, order.first)
	}
	// Before the consumer's switch it reads east, where the producer's
	// messages were stored locally until its own switch, and arrive
	// replicated from west after it. After the consumer's switch it reads
	// west: the producer's later messages are local there, east's arrive
	// replicated (when the client says so).
	ackedAt := map[int]time.Time{}
	for _, a := range acks {
		ackedAt[a.Seq] = a.At
	}
	var onEast, onWest, replicated int
	knowsOrigin := true
	for _, m := range msgs {
		if m.At.Before(cu.At) {
			onEast++
			switch m.ReplicatedFrom {
			case "", "?":
			case "west":
				if at, ok := ackedAt[m.Seq]; ok && at.Before(pu.At) {
					t.Errorf("before the switch, %s came replicated from west, though acknowledged before the producer moved there", m.Payload)
				}
			default:
				t.Errorf("before the switch, %s came replicated from %s", m.Payload, m.ReplicatedFrom)
			}
			continue
		}
		onWest++
		switch m.ReplicatedFrom {
		case "?":
			knowsOrigin = false
		case "":
		default:
			replicated++
		}
	}
	if onWest == 0 || (knowsOrigin && onWest == replicated) {
		t.Errorf("after the switch %d messages received, %d of them replicated: none produced in west", onWest, replicated)
	}
	var refused, served int64
	for _, ep := range endpoints {
		refused += ep.refused.Load()
		served += ep.served.Load()
	}
	if refused -= refusedBefore; refused != 0 {
		t.Errorf("the endpoints refused %d requests of the clients (bearer header missing?)", refused)
	}
	if served -= servedBefore; served < 3 {
		t.Errorf("the endpoints served the clients only %d times", served)
	}

	ackGap, afterSwitch := time.Duration(0), time.Duration(0)
	for i := 1; i < len(acks); i++ {
		if g := acks[i].At.Sub(acks[i-1].At); g > ackGap {
			ackGap = g
		}
		if afterSwitch == 0 && acks[i].At.After(pu.At) {
			afterSwitch = acks[i].At.Sub(switchAt)
		}
	}
	t.Logf("switch: producer on west %v and consumer %v after the endpoint changed (check interval %v); first ack after the producer's switch %v after the change; longest gap between acks %v",
		pu.At.Sub(switchAt).Round(time.Millisecond), cu.At.Sub(switchAt).Round(time.Millisecond), base.CheckInterval,
		afterSwitch.Round(time.Millisecond), ackGap.Round(time.Millisecond))
	origin := "origin not reported by the client"
	if knowsOrigin {
		origin = fmt.Sprintf("%d of them replicated from east", replicated)
	}
	t.Logf("producer: %d sent, %d acknowledged, %d failed; consumer: %d received (%d on east, %d on west, %s), %d delivered again",
		done.Sent, done.Acked, done.Failed, len(msgs), onEast, onWest, origin, order.dups)
}

// javaPayload is the payload JavaClient sends as message seq of producer name.
func javaPayload(name string, seq int) string { return fmt.Sprintf("%s-%06d", name, seq) }

// attachedClients describes the application producers (replicators left
// out) and the consumers of subscription "app" on one region's topic.
func attachedClients(r *geoRegion, tn utils.TopicName) string {
	st, err := r.admin.Topics().GetStats(tn)
	if err != nil {
		return "stats: " + err.Error()
	}
	producers := 0
	for _, p := range st.Publishers {
		if !strings.HasPrefix(p.ProducerName, "pulsar.repl.") {
			producers++
		}
	}
	return fmt.Sprintf("%d producers, %d consumers", producers, len(st.Subscriptions["app"].Consumers))
}

// clientOrder counts, per producer, messages received again (a seq already
// received: at-least-once redelivery) and messages received after a later
// one that was not received before (a reordering).
type clientOrder struct {
	dups, outOfOrder int
	first            string
}

func checkClientOrder(msgs []ClientMessage) clientOrder {
	var o clientOrder
	seen := map[string]bool{}
	maxSeq := map[string]int{}
	for _, m := range msgs {
		if seen[m.Payload] {
			o.dups++
			continue
		}
		seen[m.Payload] = true
		if last, ok := maxSeq[m.Producer]; ok && m.Seq < last {
			o.outOfOrder++
			if o.first == "" {
				o.first = m.Payload
			}
			continue
		}
		maxSeq[m.Producer] = m.Seq
	}
	return o
}

// TestJavaFailoverDocExample compiles the Java example of
// docs/client-failover.md and runs it against a standalone, with a failover
// endpoint naming that standalone (the example is done before its first
// check, 5 s in: it runs on its default URL; the switch is what
// TestJavaControlledFailover tests).
func TestJavaFailoverDocExample(t *testing.T) {
	SkipIfNoJava(t)
	page, err := os.ReadFile(filepath.Join("..", "docs", "client-failover.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "```java\n")
	src, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(src, "public class FailoverExample") {
		t.Fatal("docs/client-failover.md has no java block with class FailoverExample")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "FailoverExample.java"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cp, _ := javaClasspath()
	if out, err := exec.Command("javac", "-cp", cp, "-d", dir, filepath.Join(dir, "FailoverExample.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}

	sp := startStandaloneProc(t, t.TempDir())
	url := "pulsar://" + sp.brokerAddr
	const key = "doc-example-key"
	ep := startHTTPFailoverEndpoint(t, key, failoverDoc{ServiceURL: url})
	cmd := exec.Command("java", "-cp", cp+string(os.PathListSeparator)+dir, "FailoverExample",
		ep.URL, key, url, "persistent://public/default/doc-example")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		err = <-exited
	}
	want := "received 10 of 10 via " + url
	if err != nil || !strings.Contains(out.String(), want) {
		t.Fatalf("FailoverExample: %v, want %q in its output:\n%s", err, want, tailBytes(out.Bytes(), 8<<10))
	}
	t.Log(want)
}

// TestJavaClientPlainURL runs the Java client without a failover endpoint,
// on one standalone: a producer of 100 messages that exits by itself, then
// one stopped with SIGTERM mid-run; every acknowledged message is received
// once, in order, and each client prints DONE with its counts on the way
// out.
func TestJavaClientPlainURL(t *testing.T) {
	SkipIfNoJava(t)
	sp := startStandaloneProc(t, t.TempDir())
	o := ClientOptions{ServiceURL: "pulsar://" + sp.brokerAddr, Topic: "persistent://public/default/java-plain"}
	co := o
	co.Subscription, co.SubscriptionType = "plain", "Exclusive"
	cons := StartJavaConsumer(t, "consumer", co)
	po := o
	po.Name, po.Count, po.Rate, po.Key = "a", 100, 200, "k1"
	a := StartJavaProducer(t, "producer-a", po)
	da, err := a.Wait(60 * time.Second) // it exits after its 100 messages
	if err != nil {
		t.Fatal(err)
	}
	po.Name, po.Count = "b", 0
	b := StartJavaProducer(t, "producer-b", po)
	b.WaitAcked(50, 30*time.Second)
	db, err := b.Terminate()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range []*ClientProducer{a, b} {
		for _, ack := range p.Acked() {
			want[javaPayload(strings.TrimPrefix(p.name, "producer-"), ack.Seq)] = true
		}
	}
	if db.Sent != db.Acked || db.Failed != 0 || db.Acked != len(b.Acked()) || db.Acked < 50 {
		t.Errorf("producer b after SIGTERM: DONE %+v, %d ACK lines, want every send acknowledged", db, len(b.Acked()))
	}
	if da.Sent != 100 || da.Acked != 100 || len(a.Acked()) != 100 {
		t.Errorf("producer a: DONE %+v, %d ACK lines", da, len(a.Acked()))
	}
	if missing := cons.WaitReceivedAll(want, 30*time.Second); len(missing) > 0 {
		t.Errorf("%d acknowledged messages not received: %v", len(missing), missing[:min(5, len(missing))])
	}
	dc, err := cons.Stop()
	if err != nil {
		t.Fatal(err)
	}
	msgs := cons.Received()
	if order := checkClientOrder(msgs); order.dups != 0 || order.outOfOrder != 0 {
		t.Errorf("consumer: %d duplicates, %d out of order", order.dups, order.outOfOrder)
	}
	if dc.Sent != len(msgs) || len(cons.URLChanges()) != 1 {
		t.Errorf("consumer: DONE %+v, %d MSG lines, URL lines %v", dc, len(msgs), cons.URLChanges())
	}
	t.Logf("producer a (100 messages): %+v; producer b (SIGTERM): %+v; consumer received %d", da, db, len(msgs))
}
