package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/hashicorp/consul/api"

	"github.com/magnetar-dev/magnetar/regions/discovery/consul/consultest"
)

// TestUpConsul runs `magnetar up --discovery consul` with two regions, each
// a Consul datacenter of its own (dev agents up starts, WAN-joined):
//   - both clusters are registered with passing checks, visible from the
//     other datacenter (?dc=) and in the control plane's regions;
//   - Consul DNS resolves <cluster>.<org>.service.<dc>.consul to the
//     cluster's broker and a Pulsar Go client connects through the answer;
//   - a replication group with automatic failover fails over when its active
//     member's broker hangs (SIGSTOP: its Pulsar port still accepts TCP
//     connections, so only the agent's health check, through Consul, sees
//     it), with the runbook record of an unplanned failover;
//   - Consul SIGKILLed in both datacenters: the clusters keep serving, the
//     agents keep running and deregister nothing, the control plane keeps
//     its last view and says it is stale.
//
// Skipped without a consul v1.16 binary unless MAGNETAR_REQUIRE_CONSUL=1.
func TestUpConsul(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	consultest.Require(t)
	dir := t.TempDir()
	killDataPlaneOnCleanup(t, dir)
	killConsulOnCleanup(t, dir)
	addr := FreeAddr(t)
	up := Start(t, "up", "up", "--data-dir", dir, "--listen", addr, "--regions", "r1,r2",
		"--discovery", "consul", "--consul-check-interval", "500ms", "--consul-check-ttl", "30s",
		"--reconcile-interval", "1s", "--data-plane-auth=false", "--insecure-data-planes")
	interruptOnCleanup(t, up)
	up.WaitListening(addr, time.Minute)
	opKey := readKey(t, filepath.Join(dir, "bootstrap.key"))
	cp := cpClient{t: t, base: "http://" + addr}
	acmeViewer(cp, opKey)

	consulHTTP := map[string]string{}
	for _, r := range []string{"r1", "r2"} {
		consulHTTP[r] = readAddrFile(t, filepath.Join(dir, "consul", r, "http.addr"))
	}
	dnsAddr := readAddrFile(t, filepath.Join(dir, "consul", "r1", "dns.addr"))

	ops := map[string]string{}
	for c, r := range map[string]string{"c1": "r1", "c2": "r2"} {
		op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/clusters?clusterId="+c, map[string]any{
			"region": "regions/" + r, "size": map[string]any{"brokers": 1, "bookies": 1}})
		ops[c] = op["name"].(string)
	}
	access := map[string]clusterAccess{}
	for _, c := range []string{"c1", "c2"} {
		resp, _ := cp.waitOp(opKey, ops[c], 3*time.Minute)["response"].(map[string]any)
		access[c] = accessCluster(t, cp.base, resp, "")
		// A namespace of each cluster's own for the clients below (the
		// group's namespace is fenced on its passive member).
		base := "/v1/organizations/acme/clusters/" + c
		cp.mustCall(opKey, "POST", base+"/tenants?tenantId=dns", map[string]any{})
		cp.mustCall(opKey, "POST", base+"/tenants/dns/namespaces?namespaceId=demo", map[string]any{})
	}
	for _, c := range []string{"c1", "c2"} {
		waitFor(t, "dns/demo applied in "+c, time.Minute, func() bool {
			_, ns := cp.call(opKey, "GET", "/v1/organizations/acme/clusters/"+c+"/tenants/dns/namespaces/demo", nil)
			return ns["state"] == "APPLIED"
		})
	}

	// (1) Registered: r2's cluster read through r1's Consul with ?dc=r2,
	// and each region's health in the control plane.
	r1Consul := consulClient(t, consulHTTP["r1"])
	start := time.Now()
	var c2Entries []*api.ServiceEntry
	waitFor(t, "c2 passing in datacenter r2, read through r1", time.Minute, func() bool {
		es, _, err := r1Consul.Health().Service("acme", "c2", true, &api.QueryOptions{Datacenter: "r2"})
		c2Entries = es
		return err == nil && len(es) == 1
	})
	m := c2Entries[0].Service.Meta
	if m["region"] != "r2" || m["service_url"] != access["c2"].serviceURL || m["admin_url"] == "" {
		t.Fatalf("c2's instance in consul: %v; cluster URL %s", m, access["c2"].serviceURL)
	}
	waitFor(t, "both regions' consul health in the control plane", time.Minute, func() bool {
		for _, r := range []string{"r1", "r2"} {
			_, reg := cp.call(opKey, "GET", "/v1/regions/"+r, nil)
			c, _ := reg["consul"].(map[string]any)
			if c["datacenter"] != r || c["health"] != "passing" || c["clustersPassing"] != float64(1) || c["stale"] == true {
				return false
			}
		}
		return true
	})
	_, reg := cp.call(opKey, "GET", "/v1/regions/r2", nil)
	t.Logf("registered and seen by the control plane %v after both clusters were ready: GET /v1/regions/r2 consul = %v", time.Since(start).Round(time.Millisecond), reg["consul"])

	// (2) Consul DNS, asked at r1's agent for r2's cluster, and a Pulsar
	// client through the answer.
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dnsAddr)
	}}
	name := "c2.acme.service.r2.consul"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ips, err := res.LookupHost(ctx, name)
	if err != nil || len(ips) != 1 {
		t.Fatalf("DNS A %s: %v %v", name, ips, err)
	}
	_, srvs, err := res.LookupSRV(ctx, "", "", name)
	if err != nil || len(srvs) != 1 {
		t.Fatalf("DNS SRV %s: %v %v", name, srvs, err)
	}
	resolved := "pulsar://" + net.JoinHostPort(ips[0], strconv.Itoa(int(srvs[0].Port)))
	t.Logf("DNS %s: A %v, SRV %s:%d; the cluster's service URL %s", name, ips, srvs[0].Target, srvs[0].Port, access["c2"].serviceURL)
	if resolved != access["c2"].serviceURL {
		t.Fatalf("DNS resolves %s to %s, want the cluster's %s", name, resolved, access["c2"].serviceURL)
	}
	viaDNS := clusterAccess{serviceURL: resolved}
	produceConsume(t, viaDNS.client(t), "persistent://dns/demo/via-consul-dns")

	// (3) Automatic failover on Consul's health.
	retainedNamespace(cp, opKey, "c1", "c2")
	group := "/v1/organizations/acme/replicationGroups/g"
	op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/replicationGroups?replicationGroupId=g", map[string]any{
		"members":    []string{"organizations/acme/clusters/c1", "organizations/acme/clusters/c2"},
		"namespaces": []string{"shop/orders"}, "mode": "ACTIVE_PASSIVE"})
	if done := cp.waitOp(opKey, op["name"].(string), 3*time.Minute); done["state"] != "SUCCEEDED" {
		t.Fatalf("create group: %v", done)
	}
	cp.mustCall(opKey, "PATCH", group, map[string]any{"failoverPolicy": map[string]any{
		"mode": "AUTOMATIC", "failoverDelay": "3s", "switchBackDelay": "3600s"}})
	c1Brokers := brokerPIDs(t, filepath.Join(dir, "regions", "r1"))
	for _, pid := range c1Brokers {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, pid := range c1Brokers {
				syscall.Kill(pid, syscall.SIGCONT)
			}
		}
	}
	t.Cleanup(resume)
	waitFor(t, "c1 critical in consul", time.Minute, func() bool {
		es, _, err := r1Consul.Health().Service("acme", "c1", false, nil)
		return err == nil && len(es) == 1 && es[0].Checks.AggregatedStatus() == api.HealthCritical
	})
	critical := time.Since(stopped)
	// The hung broker's port still accepts connections: the control
	// plane's TCP probe alone would call it healthy.
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(access["c1"].serviceURL, "pulsar://"), time.Second); err != nil {
		t.Fatalf("the stopped broker's port: %v", err)
	} else {
		c.Close()
	}
	waitFor(t, "the automatic failover to c2", 2*time.Minute, func() bool {
		_, g := cp.call(opKey, "GET", group, nil)
		return g["activeCluster"] == "organizations/acme/clusters/c2" && g["operation"] == ""
	})
	failedOver := time.Since(stopped)
	rto, rpo, _ := lastRunbookReport(t, cp, opKey, "organizations/acme/replicationGroups/g")
	t.Logf("c1's broker stopped: critical in consul after %v, group on c2 after %v (failover_delay 3s); runbook report RTO %s, RPO %s entries",
		critical.Round(time.Millisecond), failedOver.Round(time.Millisecond), rto, rpo)
	if rto == "" {
		t.Fatalf("the automatic failover has no runbook report")
	}
	resume()
	waitFor(t, "c1 passing in consul again", time.Minute, func() bool {
		es, _, err := r1Consul.Health().Service("acme", "c1", true, nil)
		return err == nil && len(es) == 1
	})

	// (4) Consul SIGKILLed in both datacenters.
	for _, r := range []string{"r1", "r2"} {
		syscall.Kill(readPID(t, filepath.Join(dir, "consul", r, "consul.pid")), syscall.SIGKILL)
	}
	killed := time.Now()
	waitFor(t, "the control plane to call both regions stale", time.Minute, func() bool {
		for _, r := range []string{"r1", "r2"} {
			_, reg := cp.call(opKey, "GET", "/v1/regions/"+r, nil)
			c, _ := reg["consul"].(map[string]any)
			if c["stale"] != true || c["health"] != "passing" || c["clusters"] != float64(1) {
				return false
			}
		}
		return true
	})
	_, reg = cp.call(opKey, "GET", "/v1/regions/r1", nil)
	t.Logf("consul killed: stale after %v; GET /v1/regions/r1 consul = %v", time.Since(killed).Round(time.Millisecond), reg["consul"])
	// The agents keep running: heartbeats after the kill.
	waitFor(t, "heartbeats after consul's death", time.Minute, func() bool {
		for _, r := range []string{"r1", "r2"} {
			_, reg := cp.call(opKey, "GET", "/v1/regions/"+r, nil)
			st, _ := reg["status"].(map[string]any)
			hb, _ := st["lastHeartbeat"].(string)
			at, err := time.Parse(time.RFC3339Nano, hb)
			if err != nil || !at.After(killed.Add(time.Second)) || st["state"] != "HEALTHY" {
				return false
			}
		}
		return true
	})
	// The clusters keep serving.
	for _, c := range []string{"c1", "c2"} {
		produceConsume(t, access[c].client(t), "persistent://dns/demo/after-consul-"+c)
	}
	if strings.Contains(up.Output(), "deregistered from consul") {
		t.Fatalf("something was deregistered:\n%s", up.Output())
	}
}

// produceConsume sends a message on topic and reads it back.
func produceConsume(t *testing.T, c pulsar.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer %s: %v", topic, err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("hello " + topic)}); err != nil {
		t.Fatalf("send %s: %v", topic, err)
	}
	msg, err := cons.Receive(ctx)
	if err != nil || string(msg.Payload()) != "hello "+topic {
		t.Fatalf("receive %s: %v %v", topic, msg, err)
	}
	cons.Ack(msg)
}

func consulClient(t *testing.T, addr string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = addr
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readAddrFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(raw)) == "" {
		t.Fatalf("read %s: %v", path, err)
	}
	return strings.TrimSpace(string(raw))
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(readAddrFile(t, path))
	if err != nil || pid <= 0 {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// killConsulOnCleanup kills the Consul agents `up` recorded under dir
// (consul/<dc>/consul.pid) when the test ends, in case up could not stop
// them.
func killConsulOnCleanup(t *testing.T, dir string) {
	t.Cleanup(func() {
		files, _ := filepath.Glob(filepath.Join(dir, "consul", "*", "consul.pid"))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
			if err != nil || pid <= 0 {
				continue
			}
			if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && filepath.Base(exe) == "consul" {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}
