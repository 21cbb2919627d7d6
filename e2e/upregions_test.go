package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestUpRegions runs the region runbooks through `magnetar up
// --agent-processes`, with two and with three regions: one cluster c<i> per
// region r<i>, a replication group [c1 … cN] with c1 primary, and producers
// following the group's failover endpoint (served by the last region's
// agent) through the Go failover package and, when Java is on the machine,
// ControlledClusterFailover. The scenario: (1) a planned `runbook
// failover` c1 → c2 with RPO 0; with three regions (2) an `evacuate
// --region r2` drill, which moves the group to c3, the member after c2;
// (3) `runbook failback` to c1; (4) the automatic policy on, every process
// of region r1 (its agent and its cluster) SIGKILLed: the control plane
// fails over to c2 by itself, and the acknowledged messages c2 lacks at
// that moment are counted against the RPO the runbook reports; (5) up
// starts r1's agent again (its --agent-restart-delay), which brings the
// cluster back; once it has caught up, `runbook failback`; every message
// any cluster acknowledged is then in c1.
func TestUpRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	// Mostly waiting on processes and intervals: runs beside the other
	// `magnetar up` tests, after the package's sequential tests.
	t.Parallel()
	for _, n := range []int{2, 3} {
		t.Run(strconv.Itoa(n)+"regions", func(t *testing.T) {
			t.Parallel()
			testUpRegions(t, n)
		})
	}
}

func testUpRegions(t *testing.T, n int) {
	dir := t.TempDir()
	killDataPlaneOnCleanup(t, dir)
	killAgentsOnCleanup(t, dir)
	regions := make([]string, n)
	for i := range regions {
		regions[i] = "r" + strconv.Itoa(i+1)
	}
	// The region's agent stays down for 20 s after a crash: the unplanned
	// failover (failover_delay 3 s) happens while the region is lost.
	addr := FreeAddr(t)
	up := Start(t, "up", "up", "--data-dir", dir, "--listen", addr, "--regions", strings.Join(regions, ","),
		"--agent-processes", "--agent-restart-delay", "20s", "--reconcile-interval", "1s",
		// Anonymous clients: the runbooks are the subject here; the same
		// over authenticated clusters is TestUpGroupFailoverAuth.
		"--data-plane-auth=false")
	interruptOnCleanup(t, up)
	up.WaitListening(addr, 30*time.Second)
	keyFile := filepath.Join(dir, "bootstrap.key")
	opKey := readKey(t, keyFile)
	cp := cpClient{t: t, base: "http://" + addr}

	appKey := acmeViewer(cp, opKey)
	clusters, access, tlsURLs, ops := make([]string, n), map[string]clusterAccess{}, map[string]string{}, map[string]string{}
	for i, r := range regions {
		clusters[i] = "c" + strconv.Itoa(i+1)
		op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/clusters?clusterId="+clusters[i], map[string]any{
			"region": "regions/" + r, "size": map[string]any{"brokers": 1, "bookies": 1}})
		ops[clusters[i]] = op["name"].(string)
	}
	members := make([]string, n)
	for i, c := range clusters {
		resp, _ := cp.waitOp(opKey, ops[c], 3*time.Minute)["response"].(map[string]any)
		access[c] = accessCluster(t, cp.base, resp, "")
		tlsURLs[c], _ = resp["tlsServiceUrl"].(string)
		members[i] = "organizations/acme/clusters/" + c
	}
	retainedNamespace(cp, opKey, clusters...)
	group := "/v1/organizations/acme/replicationGroups/g"
	op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/replicationGroups?replicationGroupId=g", map[string]any{
		"members": members, "namespaces": []string{"shop/orders"}, "mode": "ACTIVE_PASSIVE", "replicatedSubscriptions": true})
	if done := cp.waitOp(opKey, op["name"].(string), 3*time.Minute); done["state"] != "SUCCEEDED" {
		t.Fatalf("create group: %v", done)
	}

	last := regions[n-1]
	var foAddr string
	waitFor(t, "the failover endpoint of "+last+"'s agent", 30*time.Second, func() bool {
		raw, err := os.ReadFile(filepath.Join(dir, "regions", last, "failover.addr"))
		foAddr = strings.TrimSpace(string(raw))
		return err == nil && foAddr != ""
	})
	endpoint := "http://" + foAddr + group + "/failoverTarget"
	trust := groupTrustFile(t, cp, appKey, group)
	fc := followGroup(t, endpoint, appKey, tlsURLs["c1"], pulsar.ClientOptions{TLSTrustCertsFilePath: trust})
	topic := "persistent://shop/orders/events"
	load := startGroupLoad(t, fc, topic)
	java := startJavaGroupClients(t, endpoint, appKey, tlsURLs["c1"], trust, topic)
	waitFor(t, "messages acknowledged by c1", time.Minute, func() bool { return load.count() > 100 })

	// moved waits for the producer to use cluster c and for 50 more
	// acknowledgements there.
	moved := func(c string) {
		t.Helper()
		waitFor(t, "the producer to move to "+c, time.Minute, func() bool { return fc.ServiceURL() == tlsURLs[c] })
		before := load.count()
		waitFor(t, "messages acknowledged by "+c, time.Minute, func() bool { return load.count() > before+50 })
	}
	planned := func(what string, args ...string) {
		t.Helper()
		out := runCLI(t, addr, keyFile, args...)
		t.Logf("%s:\n%s", what, out)
		m := rtoLine.FindAllStringSubmatch(out, -1)
		if len(m) == 0 {
			t.Fatalf("%s: no report in:\n%s", what, out)
		}
		for _, r := range m {
			if r[2] != "0" {
				t.Fatalf("%s: want RPO 0, got:\n%s", what, out)
			}
		}
	}

	// (1) Planned failover c1 → c2.
	planned("planned failover c1 → c2", "runbook", "failover", "--group", "acme/g", "--to", "c2")
	moved("c2")
	acked := load.snapshot()
	c2 := access["c2"].client(t)
	checkAllPresent(t, "c2 after the planned failover", acked, readCovering(t, c2, topic, acked))

	// (2) With three regions, an evacuation drill of r2: the group moves
	// to the member after c2.
	if n == 3 {
		out := runCLI(t, addr, keyFile, "runbook", "evacuate", "--org", "acme", "--region", "r2")
		t.Logf("evacuate r2:\n%s", out)
		rto, rpo, _ := lastRunbookReport(t, cp, opKey, "organizations/acme/replicationGroups/g")
		t.Logf("evacuate r2: the group's failover reports RTO %s, RPO %s entries", rto, rpo)
		if rpo != "0" {
			t.Fatalf("evacuate r2: want RPO 0")
		}
		moved("c3")
		acked = load.snapshot()
		c3 := access["c3"].client(t)
		checkAllPresent(t, "c3 after evacuating r2", acked, readCovering(t, c3, topic, acked))
	}

	// (3) Failback to the primary.
	planned("failback to c1", "runbook", "failback", "--group", "acme/g")
	moved("c1")

	// (4) Unplanned loss of r1, automatic failover.
	cp.mustCall(opKey, "PATCH", group, map[string]any{"failoverPolicy": map[string]any{
		"mode": "AUTOMATIC", "failoverDelay": "3s", "switchBackDelay": "3600s"}})
	before := load.count()
	waitFor(t, "messages acknowledged by c1 again", time.Minute, func() bool { return load.count() > before+100 })
	// A burst straight to c1 while c2's broker is paused (SIGSTOP) leaves
	// c1 with acknowledged messages c2 does not have when r1 is lost: the
	// unplanned RPO. c2's broker resumes at once, well within the
	// failover delay, so c2 is the healthy member the group fails over to.
	c1 := access["c1"].client(t)
	c2Brokers := brokerPIDs(t, filepath.Join(dir, "regions", "r2"))
	for _, pid := range c2Brokers {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	burst := sendBurst(t, c1, topic, "b", 3000, 4096) // 12 MiB: more than the sockets between them hold
	killed := time.Now()
	killAgent(t, dir, "r1")
	killRegion(t, filepath.Join(dir, "regions", "r1"))
	for _, pid := range c2Brokers {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	ackedAtKill := load.snapshot()
	waitFor(t, "the automatic failover to c2", time.Minute, func() bool {
		_, g := cp.call(opKey, "GET", group, nil)
		return g["activeCluster"] == "organizations/acme/clusters/c2" && g["operation"] == ""
	})
	detected := time.Since(killed)
	rto, rpo, asOf := lastRunbookReport(t, cp, opKey, "organizations/acme/replicationGroups/g")
	atKill := append(burst, payloads("m", ackedAtKill)...)
	inC2 := readPayloadsWithin(t, c2, topic, atKill, 10*time.Second)
	t.Logf("unplanned loss of r1: the group was on c2 %v after the kill (failover_delay 3s); report: RTO %s, RPO %s entries "+
		"as of c1's last report %v before the kill; counted: %d of the %d messages c1 acknowledged before the kill not in c2 (%d of them in the last burst)",
		detected.Round(time.Millisecond), rto, rpo, killed.Sub(asOf).Round(time.Millisecond), len(missingFrom(atKill, inC2)), len(atKill), len(missingFrom(burst, inC2)))
	// The RPO is c1's last report before it was lost (every 500 ms; one
	// may land while the kill is being sent).
	if asOf.IsZero() || asOf.After(killed.Add(time.Second)) || killed.Sub(asOf) > 10*time.Second {
		t.Errorf("the unplanned failover's rpo_as_of is %v; want c1's last report before the kill at %v", asOf, killed)
	}
	if detected > 3*time.Second+15*time.Second {
		t.Errorf("unplanned failover took %v after the kill; target failover_delay + 5 s", detected)
	}
	moved("c2")

	// (5) up starts r1's agent again; it restarts the cluster, which
	// catches up (fenced toward c2); then the failback.
	waitFor(t, "c1 to pass health checks and report again", 2*time.Minute, func() bool {
		_, g := cp.call(opKey, "GET", group, nil)
		st, _ := g["status"].(map[string]any)
		ms, _ := st["members"].([]any)
		for _, m := range ms {
			mm := m.(map[string]any)
			if mm["cluster"] == "organizations/acme/clusters/c1" {
				rt, _ := mm["reportTime"].(string)
				at, err := time.Parse(time.RFC3339Nano, rt)
				return mm["healthy"] == true && err == nil && at.After(killed)
			}
		}
		return false
	})
	planned("failback after r1 returned", "runbook", "failback", "--group", "acme/g")
	moved("c1")
	final := load.finish()
	java.check(t, tlsURLs["c1"])
	checkAllPresent(t, "c1 at the end", final, readCovering(t, c1, topic, final))
	if m := missingFrom(burst, readPayloadsWithin(t, c1, topic, burst, time.Minute)); len(m) > 0 {
		t.Fatalf("c1 at the end: %d of the burst's %d acknowledged messages missing, e.g. %v", len(m), len(burst), m[:min(5, len(m))])
	}
	// c2, a passive member fenced toward c1, serves entries only up to its
	// fence: the burst c1 replicated after its return is read there once
	// c2 is active again.
	planned("planned failover c1 → c2 at the end", "runbook", "failover", "--group", "acme/g", "--to", "c2")
	checkAllPresent(t, "c2 at the end", final, readCovering(t, c2, topic, final))
	if m := missingFrom(burst, readPayloadsWithin(t, c2, topic, burst, time.Minute)); len(m) > 0 {
		t.Fatalf("c2 at the end: %d of the burst's %d messages c1 acknowledged before it was lost missing, e.g. %.8s", len(m), len(burst), m[:min(5, len(m))])
	}
}

// sendBurst sends n messages "<prefix>-%06d" padded to size bytes,
// asynchronously with batching, and returns the payloads acknowledged.
func sendBurst(t *testing.T, c pulsar.Client, topic, prefix string, n, size int) []string {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "burst-" + prefix, SendTimeout: 30 * time.Second,
		BatchingMaxPublishDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for i := range n {
		payload := fmt.Sprintf("%s-%06d", prefix, i)
		payload += strings.Repeat(".", max(0, size-len(payload)))
		wg.Add(1)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err == nil {
				mu.Lock()
				acked = append(acked, payload)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked
}

func payloads(prefix string, seqs []int) []string {
	out := make([]string, len(seqs))
	for i, n := range seqs {
		out[i] = fmt.Sprintf("%s-%06d", prefix, n)
	}
	return out
}

// missingFrom is the payloads of want not in got.
func missingFrom(want, got []string) []string {
	seen := map[string]bool{}
	for _, g := range got {
		seen[g] = true
	}
	var out []string
	for _, w := range want {
		if !seen[w] {
			out = append(out, w)
		}
	}
	return out
}

// snapshot is the sequence numbers acknowledged so far.
func (l *groupLoad) snapshot() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.acked...)
}

// lastRunbookReport is the RTO, RPO and RPO time of the newest finished
// operation on target.
func lastRunbookReport(t *testing.T, cp cpClient, key, target string) (rto, rpo string, asOf time.Time) {
	t.Helper()
	out := cp.mustCall(key, "GET", "/v1/operations?organization=organizations/acme&target="+url.QueryEscape(target), nil)
	ops, _ := out["operations"].([]any)
	var newest map[string]any
	var newestAt time.Time
	for _, o := range ops {
		op := o.(map[string]any)
		ct, _ := op["createTime"].(string)
		at, err := time.Parse(time.RFC3339Nano, ct)
		if op["done"] == true && err == nil && (newest == nil || at.After(newestAt)) {
			newest, newestAt = op, at
		}
	}
	if newest == nil {
		t.Fatalf("no finished operation on %s: %v", target, out)
	}
	rb, _ := newest["runbook"].(map[string]any)
	rep, _ := rb["report"].(map[string]any)
	rto, _ = rep["rto"].(string)
	rpo, _ = rep["rpoMessages"].(string) // int64: a JSON string
	if rpo == "" {
		rpo = "0"
	}
	if at, ok := rep["rpoAsOf"].(string); ok {
		asOf, _ = time.Parse(time.RFC3339Nano, at)
	}
	return rto, rpo, asOf
}

// brokerPIDs are the broker processes of every cluster the agent under
// dir runs.
func brokerPIDs(t *testing.T, dir string) []int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "clusters", "*", "state.json"))
	var pids []int
	for _, f := range files {
		for _, b := range readRecorded(t, f).Brokers {
			pids = append(pids, b.PID)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no broker recorded under %s", dir)
	}
	return pids
}

// agentPID is the agent process `magnetar up --agent-processes` runs for
// region under dir (regions/<region>/agent.pid), 0 when none runs.
func agentPID(t *testing.T, dir, region string) int {
	raw, _ := os.ReadFile(filepath.Join(dir, "regions", region, "agent.pid"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 || !strings.HasPrefix(cmdline(pid), Binary(t)+" agent ") {
		return 0
	}
	return pid
}

// killAgent SIGKILLs region's agent process.
func killAgent(t *testing.T, dir, region string) {
	t.Helper()
	pid := agentPID(t, dir, region)
	if pid == 0 {
		t.Fatalf("no agent process runs for region %s", region)
	}
	syscall.Kill(-pid, syscall.SIGKILL)
}

// killAgentsOnCleanup SIGKILLs the agent processes up recorded under dir
// when the test ends, should up not have stopped them.
func killAgentsOnCleanup(t *testing.T, dir string) {
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join(dir, "regions", "*"))
		for _, d := range dirs {
			if pid := agentPID(t, dir, filepath.Base(d)); pid != 0 {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})
}

// TestUpAgentProcessesAdopt: an up killed with SIGKILL leaves its agent
// processes running (as a region's agent outlives a control plane); the
// next up on the data directory stops them before it starts its own, so a
// region never has two agents.
func TestUpAgentProcessesAdopt(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	dir := t.TempDir()
	killAgentsOnCleanup(t, dir)
	addr := FreeAddr(t)
	up := Start(t, "up", "up", "--data-dir", dir, "--listen", addr, "--regions", "r1", "--agent-processes")
	up.WaitListening(addr, 30*time.Second)
	waitFor(t, "the agent process", 30*time.Second, func() bool { return agentPID(t, dir, "r1") != 0 })
	first := agentPID(t, dir, "r1")
	up.Kill()
	time.Sleep(500 * time.Millisecond)
	if !strings.HasPrefix(cmdline(first), Binary(t)+" agent ") {
		t.Fatalf("the agent %d did not outlive up's SIGKILL", first)
	}
	up.StartAgain()
	interruptOnCleanup(t, up)
	up.WaitListening(addr, 30*time.Second)
	waitFor(t, "a new agent process", 30*time.Second, func() bool {
		pid := agentPID(t, dir, "r1")
		return pid != 0 && pid != first
	})
	waitFor(t, "the old agent to be stopped", 30*time.Second, func() bool { return !strings.HasPrefix(cmdline(first), Binary(t)+" agent ") })
}
