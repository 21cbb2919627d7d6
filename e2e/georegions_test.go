package e2e

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/internal/accesstoken"
)

// TestUpCrossRegionReplication: through the control plane only, a cluster
// in each of `magnetar up`'s two regions and a namespace in each naming
// the other as a replication cluster; the region agents register each
// other's cluster in their data planes, and messages produced in either
// region arrive in the other, once each and in order.
//
// Subtest auth runs the default, authenticated clusters: the agents give
// each cluster's brokers the other's CA and a token for its audience to
// replicate with, and the test's clients connect over pulsar+ssl:// with
// the operator's credentials. Subtest anonymous runs them with
// --data-plane-auth=false: the brokers replicate over TLS with the
// other's CA and no token, and the clients are anonymous. Access
// tokens live 8 s there and the load runs 20 s: the replicators' and the
// clients' connections are challenged and answer with renewed tokens
// (the agents rewrite the peers' token files).
func TestUpCrossRegionReplication(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	// Mostly waiting on processes and intervals: runs beside the other
	// `magnetar up` tests, after the package's sequential tests.
	t.Parallel()
	for _, auth := range []bool{false, true} {
		name := "anonymous"
		if auth {
			name = "auth"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testUpCrossRegion(t, auth)
		})
	}
}

func testUpCrossRegion(t *testing.T, auth bool) {
	dir := t.TempDir()
	killDataPlaneOnCleanup(t, dir)
	addr := FreeAddr(t)
	args := []string{"up", "--data-dir", dir, "--listen", addr, "--data-plane-auth=false"}
	load := 3 * time.Second
	if auth {
		args = []string{"up", "--data-dir", dir, "--listen", addr, "--access-token-ttl", "8s"}
		load = 20 * time.Second
	}
	p := Start(t, "up", args...)
	interruptOnCleanup(t, p)
	p.WaitListening(addr, 30*time.Second)
	key := readKey(t, filepath.Join(dir, "bootstrap.key"))
	cp := cpClient{t: t, base: "http://" + addr}
	waitFor(t, "the regions to be registered", 30*time.Second, func() bool {
		code, out := cp.call(key, "GET", "/v1/regions", nil)
		regs, _ := out["regions"].([]any)
		return code == http.StatusOK && len(regs) == 2
	})
	cp.mustCall(key, "POST", "/v1/organizations?organizationId=acme", map[string]any{"displayName": "Acme"})
	clusters := map[string]string{"east": "regions/local-a", "west": "regions/local-b"}
	ops := map[string]string{}
	for id, region := range clusters {
		op := cp.mustCall(key, "POST", "/v1/organizations/acme/clusters?clusterId="+id, map[string]any{
			"region": region, "size": map[string]any{"brokers": 1, "bookies": 1}})
		ops[id] = op["name"].(string)
	}
	clients := map[string]pulsar.Client{}
	for id, op := range ops {
		resp, _ := cp.waitOp(key, op, 2*time.Minute)["response"].(map[string]any)
		if !auth {
			clients[id] = accessCluster(t, cp.base, resp, "").client(t)
			continue
		}
		a := accessCluster(t, cp.base, resp, "")
		uid, _ := accesstoken.APIKeyUID(key)
		clients[id] = oauthClient(t, a.serviceURL, a.caFile, "http://"+addr, uid, key, issuer.ClusterAudience("organizations/acme/clusters/"+id))
	}
	for id := range clusters {
		other := "west"
		if id == "west" {
			other = "east"
		}
		base := "/v1/organizations/acme/clusters/" + id
		cp.mustCall(key, "POST", base+"/tenants?tenantId=shop", map[string]any{})
		cp.mustCall(key, "POST", base+"/tenants/shop/namespaces?namespaceId=orders", map[string]any{
			"policies": map[string]any{
				"retention":           map[string]any{"timeMinutes": 60, "sizeMb": 100},
				"replicationClusters": []string{"organizations/acme/clusters/" + other},
			}})
	}
	for id := range clusters {
		res := "/v1/organizations/acme/clusters/" + id + "/tenants/shop/namespaces/orders"
		var last map[string]any
		waitFor(t, res+" to be APPLIED", 2*time.Minute, func() bool {
			code, out := cp.call(key, "GET", res, nil)
			last = out
			return code == http.StatusOK && out["state"] == "APPLIED"
		})
		if msg, _ := last["statusMessage"].(string); msg != "" {
			t.Fatalf("%s: %v", res, last)
		}
	}

	topic := "persistent://shop/orders/events"
	ce, cw := clients["east"], clients["west"]
	le, lw := startLoad(t, ce, topic, "e", 200), startLoad(t, cw, topic, "w", 200)
	time.Sleep(load) // two-way load
	ae, _ := le.finish()
	aw, _ := lw.finish()
	waitFor(t, "both directions drained", time.Minute, func() bool {
		return len(readTopic(t, ce, topic, time.Second)) == len(readTopic(t, cw, topic, time.Second)) &&
			len(readTopic(t, cw, topic, time.Second)) >= len(ae)+len(aw)
	})
	lists := [][]string{readTopic(t, ce, topic, 2*time.Second), readTopic(t, cw, topic, 2*time.Second)}
	checkReplicated(t, []string{"east", "west"}, lists, map[string]int{"e": 0, "w": 1},
		map[string]map[string]bool{"e": ae, "w": aw})
}
