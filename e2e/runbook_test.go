package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/client/failover"
)

// groupLoad produces continuously through the Go failover package and
// records what was acknowledged, and by which cluster.
type groupLoad struct {
	t      *testing.T
	p      *failover.Producer
	c      *failover.Client
	mu     sync.Mutex
	acked  []int
	failed int
	stop   chan struct{}
	done   chan struct{}
}

func startGroupLoad(t *testing.T, c *failover.Client, topic string) *groupLoad {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "runbook-producer", SendTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := &groupLoad{t: t, p: p, c: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%06d", i))})
			cancel()
			l.mu.Lock()
			if err == nil {
				l.acked = append(l.acked, i)
			} else {
				l.failed++
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *groupLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *groupLoad) finish() []int {
	close(l.stop)
	<-l.done
	l.p.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// checkAllPresent fails unless every acknowledged sequence is in got, and
// reports order and duplicates.
func checkAllPresent(t *testing.T, where string, acked []int, got []string) {
	t.Helper()
	seen := map[string]int{}
	last, outOfOrder := -1, 0
	for _, m := range got {
		seen[m]++
		var n int
		if _, err := fmt.Sscanf(m, "m-%06d", &n); err == nil {
			if n < last {
				outOfOrder++
			}
			last = max(last, n)
		}
	}
	missing, dups := 0, 0
	for _, n := range acked {
		if seen[fmt.Sprintf("m-%06d", n)] == 0 {
			missing++
		}
	}
	for _, c := range seen {
		if c > 1 {
			dups += c - 1
		}
	}
	t.Logf("%s: %d acknowledged, %d stored, %d missing, %d duplicates, %d out of order", where, len(acked), len(got), missing, dups, outOfOrder)
	if missing > 0 {
		t.Fatalf("%s: %d acknowledged messages missing", where, missing)
	}
}

var (
	rtoLine        = regexp.MustCompile(`report: RTO (\S+) .*RPO (\d+) entries`)
	replicatedLine = regexp.MustCompile(`report: .* (\d+) messages replicated to `)
)

// runCLI runs a magnetar CLI command against the control plane.
func runCLI(t *testing.T, addr, keyFile string, args ...string) string {
	t.Helper()
	cmd := exec.Command(Binary(t), append(args, "--endpoint", addr, "--api-key-file", keyFile)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("magnetar %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRunbooks: two regions, each an agent process with its data plane, a
// control-plane process; a replication group of a cluster in each, and a
// producer that follows the group's failover endpoint (served by the west
// agent) through the Go failover package. (1) A planned `runbook failover` moves them with
// RPO 0; (2) a failback during which the control plane is SIGKILLed
// resumes and finishes after its restart, and the agents keep answering
// the failover endpoint while it is down; (3) every process of the active
// region is SIGKILLed and the control plane fails over by itself; (4) the
// region comes back and `runbook failback` returns, nothing acknowledged
// in either region lost.
func TestRunbooks(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	// Waits on processes and intervals: runs beside the other control-plane
	// tests, after the package's sequential ones.
	t.Parallel()
	dirs := map[string]string{"r1": t.TempDir(), "r2": t.TempDir()}
	for _, d := range dirs {
		killDataPlaneOnCleanup(t, d)
	}
	cpProc, cp, addr, keyFile, opKey := startControlPlaneProcess(t)
	cp.mustCall(opKey, "POST", "/v1/regions?regionId=r2", map[string]any{})
	agents, foAddr := map[string]*Process{}, map[string]string{}
	for _, r := range []string{"r1", "r2"} {
		foAddr[r] = FreeAddr(t)
		agents[r] = Start(t, "agent-"+r, "agent", "--region", r, "--control-plane", "http://"+addr, "--api-key-file", keyFile,
			"--data-dir", dirs[r], "--poll-timeout", "5s", "--reconcile-interval", "1s", "--failover-listen", foAddr[r],
			// Anonymous clients: the runbooks are the subject here; the
			// same over authenticated clusters is TestUpGroupFailoverAuth.
			"--data-plane-auth=false")
		interruptOnCleanup(t, agents[r])
	}
	appKey := acmeViewer(cp, opKey)

	access, tlsURLs := map[string]clusterAccess{}, map[string]string{}
	for id, region := range map[string]string{"east": "regions/r1", "west": "regions/r2"} {
		op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/clusters?clusterId="+id, map[string]any{
			"region": region, "size": map[string]any{"brokers": 1, "bookies": 1}})
		resp, _ := cp.waitOp(opKey, op["name"].(string), 2*time.Minute)["response"].(map[string]any)
		access[id] = accessCluster(t, cp.base, resp, "")
		tlsURLs[id], _ = resp["tlsServiceUrl"].(string)
	}
	logTopicStatsOnFailure(t, access, "persistent/shop/orders/events")
	retainedNamespace(cp, opKey, "east", "west")
	group := "/v1/organizations/acme/replicationGroups/g"
	op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/replicationGroups?replicationGroupId=g", map[string]any{
		"members":    []string{"organizations/acme/clusters/east", "organizations/acme/clusters/west"},
		"namespaces": []string{"shop/orders"}, "mode": "ACTIVE_PASSIVE", "replicatedSubscriptions": true})
	if done := cp.waitOp(opKey, op["name"].(string), 2*time.Minute); done["state"] != "SUCCEEDED" {
		t.Fatalf("create group: %v", done)
	}

	// The clients poll the failover endpoint of the west region's agent,
	// which forwards to the control plane and answers from its cache
	// while the control plane is down. It names the members' TLS URLs;
	// the clients trust the group's CA bundle.
	endpoint := "http://" + foAddr["r2"] + group + "/failoverTarget"
	trust := groupTrustFile(t, cp, appKey, group)
	fc := followGroup(t, endpoint, appKey, tlsURLs["east"], pulsar.ClientOptions{TLSTrustCertsFilePath: trust})
	topic := "persistent://shop/orders/events"
	load := startGroupLoad(t, fc, topic)
	java := startJavaGroupClients(t, endpoint, appKey, tlsURLs["east"], trust, topic)
	waitFor(t, "messages acknowledged by east", time.Minute, func() bool { return load.count() > 100 })

	// (1) Planned failover.
	out := runCLI(t, addr, keyFile, "runbook", "failover", "--group", "acme/g", "--to", "west")
	t.Logf("planned failover:\n%s", out)
	if m := rtoLine.FindStringSubmatch(out); m == nil || m[2] != "0" {
		t.Fatalf("planned failover report: want RPO 0, got:\n%s", out)
	}
	// Producers wrote to east until the fence: the drain replicated some.
	if m := replicatedLine.FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Fatalf("planned failover report: want messages replicated during the runbook, got:\n%s", out)
	}
	waitFor(t, "the producer to move to west", time.Minute, func() bool { return fc.ServiceURL() == tlsURLs["west"] })
	before := load.count()
	waitFor(t, "messages acknowledged by west", time.Minute, func() bool { return load.count() > before+100 })
	westClient := access["west"].client(t)
	load.mu.Lock()
	ackedSoFar := append([]int(nil), load.acked[:before]...)
	load.mu.Unlock()
	checkAllPresent(t, "west after the planned failover", ackedSoFar, readCovering(t, westClient, topic, ackedSoFar))

	// (2) Failback with the control plane killed mid-runbook.
	code, fb := cp.call(opKey, "POST", group+":failback", map[string]any{})
	if code != http.StatusOK {
		t.Fatalf("failback: %d %v", code, fb)
	}
	// r1's agent has answered nobody yet: one request, as a client would.
	req1, _ := http.NewRequest("GET", "http://"+foAddr["r1"]+group+"/failoverTarget", nil)
	req1.Header.Set("Authorization", "Bearer "+appKey)
	if resp, err := http.DefaultClient.Do(req1); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("agent r1's failover endpoint: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	cpProc.Kill()
	for _, r := range []string{"r1", "r2"} {
		req, _ := http.NewRequest("GET", "http://"+foAddr[r]+group+"/failoverTarget", nil)
		req.Header.Set("Authorization", "Bearer "+appKey)
		var got string
		waitFor(t, "agent "+r+" to answer the failover endpoint from its cache", 30*time.Second, func() bool {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			got = resp.Header.Get("X-Magnetar-Failover-Source")
			return resp.StatusCode == http.StatusOK && got == "cache"
		})
	}
	cpProc.Restart()
	cpProc.WaitListening(addr, 30*time.Second)
	if done := cp.waitOp(opKey, fb["name"].(string), 2*time.Minute); done["state"] != "SUCCEEDED" {
		t.Fatalf("failback after the control plane's restart: %v", done)
	}
	waitFor(t, "the producer to move back to east", time.Minute, func() bool { return fc.ServiceURL() == tlsURLs["east"] })

	// (3) Unplanned loss of the active region, automatic failover.
	cp.mustCall(opKey, "PATCH", group, map[string]any{"failoverPolicy": map[string]any{
		"mode": "AUTOMATIC", "failoverDelay": "3s", "switchBackDelay": "3600s"}})
	before = load.count()
	waitFor(t, "messages acknowledged by east again", time.Minute, func() bool { return load.count() > before+100 })
	killed := time.Now()
	agents["r1"].Kill()
	killRegion(t, dirs["r1"])
	waitFor(t, "the automatic failover to west", time.Minute, func() bool {
		_, g := cp.call(opKey, "GET", group, nil)
		return g["activeCluster"] == "organizations/acme/clusters/west" && g["operation"] == ""
	})
	t.Logf("unplanned: the endpoint answers west %s after the kill (failover_delay 3s)", time.Since(killed).Round(time.Millisecond))
	waitFor(t, "the producer to move to west", time.Minute, func() bool { return fc.ServiceURL() == tlsURLs["west"] })

	// (4) The region returns; failback.
	agents["r1"].Restart()
	waitFor(t, "east to pass health checks and catch up", 2*time.Minute, func() bool {
		_, g := cp.call(opKey, "GET", group, nil)
		st, _ := g["status"].(map[string]any)
		ms, _ := st["members"].([]any)
		for _, m := range ms {
			mm := m.(map[string]any)
			if mm["cluster"] == "organizations/acme/clusters/east" {
				return mm["healthy"] == true && mm["reportTime"] != nil
			}
		}
		return false
	})
	out = runCLI(t, addr, keyFile, "runbook", "failback", "--group", "acme/g")
	t.Logf("failback:\n%s", out)
	waitFor(t, "the producer to move back to east", time.Minute, func() bool { return fc.ServiceURL() == tlsURLs["east"] })
	before = load.count()
	waitFor(t, "messages acknowledged by east after the failback", time.Minute, func() bool { return load.count() > before+50 })
	acked := load.finish()
	eastClient := access["east"].client(t)
	checkAllPresent(t, "east at the end", acked, readCovering(t, eastClient, topic, acked))
	java.check(t, tlsURLs["east"])
}

// groupTrustFile writes the replication group's CA bundle (its caBundle,
// read with key) to a file and returns its path; it fails the test when
// the bundle holds no certificate.
func groupTrustFile(t *testing.T, cp cpClient, key, group string) string {
	t.Helper()
	_, g := cp.call(key, "GET", group, nil)
	bundle, _ := g["caBundle"].(string)
	if !strings.Contains(bundle, "BEGIN CERTIFICATE") {
		t.Fatalf("%s: no CA certificate in caBundle: %v", group, g)
	}
	f := filepath.Join(t.TempDir(), "group-ca.pem")
	if err := os.WriteFile(f, []byte(bundle), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// logTopicStatsOnFailure logs, when the test failed, the stats of topic
// (its producers and their connections) in each cluster.
func logTopicStatsOnFailure(t *testing.T, clusters map[string]clusterAccess, topic string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for name, a := range clusters {
			resp, err := a.http(t).Get(a.admin("/admin/v2/" + topic + "/stats"))
			if err != nil {
				t.Logf("%s: topic stats: %v", name, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("%s: topic stats: %d %s", name, resp.StatusCode, body)
		}
	})
}

// acmeViewer creates organization acme and a service account with the
// viewer role on it, and returns the account's API key (what clients poll
// the failover endpoint with).
func acmeViewer(cp cpClient, opKey string) string {
	cp.t.Helper()
	cp.mustCall(opKey, "POST", "/v1/organizations?organizationId=acme", map[string]any{})
	cp.mustCall(opKey, "POST", "/v1/organizations/acme/serviceAccounts?serviceAccountId=app", map[string]any{})
	keyOut := cp.mustCall(opKey, "POST", "/v1/organizations/acme/serviceAccounts/app/apiKeys?apiKeyId=k1", map[string]any{})
	cp.mustCall(opKey, "POST", "/v1/organizations/acme/roleBindings?roleBindingId=app-viewer", map[string]any{
		"role": "roles/viewer", "member": "organizations/acme/serviceAccounts/app", "resource": "organizations/acme"})
	key, _ := keyOut["secret"].(string)
	return key
}

// followGroup is a Go failover client polling endpoint every 200 ms with
// key, closed when the test ends; it fails the test unless the endpoint
// answers want first. opts carry the client's trust file and
// authentication, which it keeps on every cluster (OperationTimeout
// default 30 s).
func followGroup(t *testing.T, endpoint, key, want string, opts pulsar.ClientOptions) *failover.Client {
	t.Helper()
	if opts.OperationTimeout == 0 {
		opts.OperationTimeout = 30 * time.Second
	}
	fc, err := failover.NewControlled(context.Background(), endpoint, failover.ControlledOptions{
		Client: opts, Header: http.Header{"Authorization": {"Bearer " + key}}, CheckInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	if fc.ServiceURL() != want {
		t.Fatalf("failover endpoint answers %s, want %s", fc.ServiceURL(), want)
	}
	return fc
}

// retainedNamespace creates namespace shop/orders with an hour's retention
// in each of acme's clusters, for a replication group to adopt: without
// retention a cluster deletes what every subscription (the replicators'
// among them) has consumed, and the tests read whole topics back.
func retainedNamespace(cp cpClient, key string, clusters ...string) {
	cp.t.Helper()
	for _, c := range clusters {
		base := "/v1/organizations/acme/clusters/" + c
		cp.mustCall(key, "POST", base+"/tenants?tenantId=shop", map[string]any{})
		cp.mustCall(key, "POST", base+"/tenants/shop/namespaces?namespaceId=orders", map[string]any{
			"policies": map[string]any{"retention": map[string]any{"timeMinutes": 60, "sizeMb": 100}}})
	}
}

// javaGroupClients are a Java producer (50 messages per second) and a Java
// consumer on a replicated Failover subscription, both following a
// replication group's failover endpoint through ControlledClusterFailover;
// nil when Java is not on the machine.
type javaGroupClients struct {
	p *ClientProducer
	c *ClientConsumer
}

func startJavaGroupClients(t *testing.T, endpoint, key, serviceURL, trustFile, topic string) *javaGroupClients {
	t.Helper()
	if !javaAvailable() {
		t.Log("java: not on this machine; the Java clients do not run")
		return nil
	}
	jo := ClientOptions{ProviderURL: endpoint, ProviderToken: key, CheckInterval: 500 * time.Millisecond,
		ServiceURL: serviceURL, TLSTrustCertsFile: trustFile, Topic: topic, Name: "j", Rate: 50, Subscription: "java-sub", SubscriptionType: "Failover"}
	j := &javaGroupClients{c: StartJavaConsumer(t, "java-consumer", jo)}
	j.p = StartJavaProducer(t, "java-producer", jo)
	j.p.WaitAcked(20, time.Minute)
	return j
}

// check waits for the producer to use finalURL, stops both and fails
// unless the consumer received every message the producer saw
// acknowledged.
func (j *javaGroupClients) check(t *testing.T, finalURL string) {
	t.Helper()
	if j == nil {
		return
	}
	j.p.WaitURL(finalURL, time.Minute)
	// The producer works on the final cluster: sends acknowledged there.
	j.p.WaitAckedAfter(time.Now(), 20, time.Minute)
	j.p.Stop()
	want := map[string]bool{}
	for _, a := range j.p.Acked() {
		want[fmt.Sprintf("j-%06d", a.Seq)] = true
	}
	if errs := j.p.SendErrors(); len(errs) > 0 {
		t.Logf("java producer: %d sends failed (reported to the application): %v", len(errs), errs[:min(3, len(errs))])
	}
	missing := j.c.WaitReceivedAll(want, time.Minute)
	got := j.c.Received()
	distinct := map[string]bool{}
	for _, m := range got {
		distinct[m.Payload] = true
	}
	t.Logf("java: %d acknowledged to the Java producer; the Java consumer received %d messages of the topic's producers, %d of them again after a switch; URL changes %v",
		len(want), len(got), len(got)-len(distinct), j.p.URLChanges())
	if len(missing) > 0 {
		t.Fatalf("java: %d acknowledged messages never received, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	j.c.Stop()
}

// readCovering reads topic from the earliest message until every sequence
// of want has been seen or a minute has passed, and returns what it read.
func readCovering(t *testing.T, c pulsar.Client, topic string, want []int) []string {
	t.Helper()
	return readPayloadsWithin(t, c, topic, payloads("m", want), time.Minute)
}

// readPayloadsWithin reads topic from the earliest message until every
// payload of want has been seen or d has passed, and returns what it read.
func readPayloadsWithin(t *testing.T, c pulsar.Client, topic string, want []string, d time.Duration) []string {
	t.Helper()
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	missing := map[string]bool{}
	for _, p := range want {
		missing[p] = true
	}
	var out []string
	deadline := time.Now().Add(d)
	for len(missing) > 0 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m, err := r.Next(ctx)
		cancel()
		if err != nil {
			continue
		}
		out = append(out, string(m.Payload()))
		delete(missing, string(m.Payload()))
	}
	return out
}

// javaAvailable says whether the Java client can run (SkipIfNoJava's
// check, without skipping the test).
func javaAvailable() bool {
	if os.Getenv(requireJavaEnv) == "1" {
		return true // required: starting the clients fails the test if they cannot run
	}
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return false
		}
	}
	_, err := javaClasspath()
	return err == nil
}

// killRegion SIGKILLs every data-plane process an agent runs under dir.
func killRegion(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "clusters", "*", "state.json"))
	for _, f := range files {
		for _, pid := range recordedPIDs(t, f) {
			if pid > 0 && strings.HasPrefix(cmdline(pid), Binary(t)+" ") {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
}
