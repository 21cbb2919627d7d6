package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/client/failover"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/internal/accesstoken"
)

// TestUpGroupFailoverAuth: `magnetar up --data-plane-auth` with two
// regions, a cluster in each, a replication group of both with namespace
// shop/orders, and a service account bound as producer and consumer on
// the organization (and viewer of the group, to read its failover
// endpoint). One Go client follows the group's failover endpoint through
// client/failover.NewControlled, authenticating with the OAuth2 plugin for
// the organization's audience and trusting the group's CA bundle: it
// produces and consumes on east over pulsar+ssl://; a planned `runbook
// failover` moves the group to west, where the same producer and consumer
// handles go on over TLS with the same credential. Every acknowledged
// message is then in west's topic exactly once, and the consumer received
// each one. A token for east's cluster audience is refused by west.
func TestUpGroupFailoverAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	// Waits on processes and intervals: runs beside the other `magnetar up`
	// tests.
	t.Parallel()
	dir := t.TempDir()
	killDataPlaneOnCleanup(t, dir)
	addr := FreeAddr(t)
	up := Start(t, "up", "up", "--data-dir", dir, "--listen", addr, "--regions", "r1,r2",
		"--reconcile-interval", "1s", "--data-plane-auth")
	interruptOnCleanup(t, up)
	up.WaitListening(addr, 30*time.Second)
	keyFile := filepath.Join(dir, "bootstrap.key")
	opKey := readKey(t, keyFile)
	cp := cpClient{t: t, base: "http://" + addr}
	issuerURL := "http://" + addr
	waitFor(t, "the regions to be registered", 30*time.Second, func() bool {
		code, out := cp.call(opKey, "GET", "/v1/regions", nil)
		regs, _ := out["regions"].([]any)
		return code == http.StatusOK && len(regs) == 2
	})

	cp.mustCall(opKey, "POST", "/v1/organizations?organizationId=acme", map[string]any{})
	ops := map[string]string{}
	for id, region := range map[string]string{"east": "regions/r1", "west": "regions/r2"} {
		op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/clusters?clusterId="+id, map[string]any{
			"region": region, "size": map[string]any{"brokers": 1, "bookies": 1}})
		ops[id] = op["name"].(string)
	}
	tlsURLs, tlsAdmins := map[string]string{}, map[string]string{}
	for id, op := range ops {
		done := cp.waitOp(opKey, op, 2*time.Minute)
		resp, _ := done["response"].(map[string]any)
		tlsURLs[id], _ = resp["tlsServiceUrl"].(string)
		tlsAdmins[id], _ = resp["tlsAdminUrl"].(string)
		if !strings.HasPrefix(tlsURLs[id], "pulsar+ssl://") || !strings.HasPrefix(tlsAdmins[id], "https://") {
			t.Fatalf("cluster %s: want TLS URLs, got %v", id, done)
		}
	}
	retainedNamespace(cp, opKey, "east", "west")
	groupName := "organizations/acme/replicationGroups/g"
	group := "/v1/" + groupName
	op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/replicationGroups?replicationGroupId=g", map[string]any{
		"members":    []string{"organizations/acme/clusters/east", "organizations/acme/clusters/west"},
		"namespaces": []string{"shop/orders"}, "mode": "ACTIVE_PASSIVE", "replicatedSubscriptions": true})
	if done := cp.waitOp(opKey, op["name"].(string), 2*time.Minute); done["state"] != "SUCCEEDED" {
		t.Fatalf("create group: %v", done)
	}

	// The application's service account: producer and consumer on the
	// organization, viewer of the group.
	org := "/v1/organizations/acme"
	cp.mustCall(opKey, "POST", org+"/serviceAccounts?serviceAccountId=app", map[string]any{})
	k := cp.mustCall(opKey, "POST", org+"/serviceAccounts/app/apiKeys?apiKeyId=k1", map[string]any{})
	appKey, appUID := k["secret"].(string), k["uid"].(string)
	for role, res := range map[string]string{"pulsar.producer": "organizations/acme", "pulsar.consumer": "organizations/acme", "viewer": groupName} {
		cp.mustCall(opKey, "POST", org+"/roleBindings?roleBindingId=app-"+strings.ReplaceAll(role, ".", "-"), map[string]any{
			"role": "roles/" + role, "member": "organizations/acme/serviceAccounts/app", "resource": res})
	}

	// The group's CA bundle, as the application reads it with its own key:
	// one trust file for both regions' CAs.
	bundleFile := groupTrustFile(t, cp, appKey, group)
	if raw, err := os.ReadFile(bundleFile); err != nil || strings.Count(string(raw), "BEGIN CERTIFICATE") != 2 {
		t.Fatalf("the group's caBundle: want the two regions' CA certificates, got %q (%v)", raw, err)
	}

	// One credential for both clusters: the organization's audience. West
	// refuses a token for east's audience and takes the organization's.
	orgAud := issuer.OrganizationAudience("organizations/acme")
	hc := tlsHTTPClient(t, bundleFile)
	stats := "/admin/v2/persistent/shop/orders/events/stats"
	eastTok := accessToken(t, issuerURL, appUID, appKey, issuer.ClusterAudience("organizations/acme/clusters/east"))
	if code, body := adminGet(hc, tlsAdmins["west"]+stats, eastTok); code != http.StatusUnauthorized {
		t.Fatalf("west's admin API with a token for east's audience: %d %s, want 401", code, body)
	}
	// West's agent grants the bindings within its 5 s pass (east's: the
	// consumer below waits for it). The operator reads the permissions
	// with a token for the organization's audience too.
	opUID, _ := accesstoken.APIKeyUID(opKey)
	opTok := accessToken(t, issuerURL, opUID, opKey, orgAud)
	perms := tlsAdmins["west"] + "/admin/v2/namespaces/shop/orders/permissions"
	if code, body := adminGet(hc, perms, opTok); code == http.StatusUnauthorized {
		t.Fatalf("west's admin API refuses a token for the organization's audience: %d %s", code, body)
	}
	waitFor(t, "west's agent to grant the app's bindings", time.Minute, func() bool {
		code, body := adminGet(hc, perms, opTok)
		return code == http.StatusOK && strings.Contains(body, "organizations:acme:serviceAccounts:app")
	})

	var foAddr string
	waitFor(t, "the failover endpoint of r2's agent", 30*time.Second, func() bool {
		raw, err := os.ReadFile(filepath.Join(dir, "regions", "r2", "failover.addr"))
		foAddr = strings.TrimSpace(string(raw))
		return err == nil && foAddr != ""
	})
	endpoint := "http://" + foAddr + group + "/failoverTarget"
	keyJSON, _ := json.Marshal(map[string]string{"type": "client_credentials", "client_id": appUID, "client_secret": appKey, "issuer_url": issuerURL})
	fc := followGroup(t, endpoint, appKey, tlsURLs["east"], pulsar.ClientOptions{
		TLSTrustCertsFilePath: bundleFile, Logger: quietPulsarLogger(),
		Authentication: pulsar.NewAuthenticationOAuth2(map[string]string{
			"type": "client_credentials", "issuerUrl": issuerURL, "audience": orgAud, "clientId": appUID,
			"privateKey": "data:application/json;base64," + base64.StdEncoding.EncodeToString(keyJSON)}),
	})

	topic := "persistent://shop/orders/events"
	recv := startGroupConsumer(t, fc, topic)
	load := startGroupLoad(t, fc, topic)
	waitFor(t, "messages acknowledged by east and received", time.Minute, func() bool {
		return load.count() > 50 && recv.count() > 50
	})

	// Planned failover to west.
	out := runCLI(t, addr, keyFile, "runbook", "failover", "--group", "acme/g", "--to", "west")
	t.Logf("planned failover:\n%s", out)
	if m := rtoLine.FindStringSubmatch(out); m == nil || m[2] != "0" {
		t.Fatalf("planned failover report: want RPO 0, got:\n%s", out)
	}
	waitFor(t, "the client to follow the endpoint to west's TLS URL", time.Minute, func() bool { return fc.ServiceURL() == tlsURLs["west"] })
	switched := load.count()
	lastBefore := load.snapshot()[switched-1]
	waitFor(t, "messages acknowledged by west", time.Minute, func() bool { return load.count() > switched+50 })
	// Received from west: produced after the switch and not replicated.
	waitFor(t, "the consumer to receive messages west's producer wrote", time.Minute, func() bool {
		return recv.localAfter(lastBefore) > 20
	})
	acked := load.finish()

	// Every acknowledged message is in west's topic once, and the consumer
	// received each.
	west := oauthClient(t, tlsURLs["west"], bundleFile, issuerURL, appUID, appKey, orgAud)
	got := readCovering(t, west, topic, acked)
	checkAllPresent(t, "west after the planned failover", acked, got)
	count := map[string]int{}
	for _, p := range got {
		count[p]++
	}
	var dups []string
	for _, n := range acked {
		if p := fmt.Sprintf("m-%06d", n); count[p] > 1 {
			dups = append(dups, p)
		}
	}
	if len(dups) > 0 {
		t.Fatalf("west: %d acknowledged messages stored more than once, e.g. %v", len(dups), dups[:min(5, len(dups))])
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(recv.missing(acked)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if m := recv.missing(acked); len(m) > 0 {
		t.Fatalf("the consumer never received %d of %d acknowledged messages, e.g. %v", len(m), len(acked), m[:min(5, len(m))])
	}
	t.Logf("%d acknowledged (%d before the switch); the consumer received %d messages, %d of them from west's producer",
		len(acked), switched, recv.count(), recv.localAfter(lastBefore))
}

// groupConsumer receives through a failover consumer (Shared, replicated
// subscription, from the earliest message) and records the payloads.
type groupConsumer struct {
	c     *failover.Consumer
	mu    sync.Mutex
	got   map[string]int
	local map[int]bool // sequences received from the cluster that stored them (not replicated)
	stop  context.CancelFunc
	done  chan struct{}
}

func startGroupConsumer(t *testing.T, fc *failover.Client, topic string) *groupConsumer {
	t.Helper()
	// Refused until the agent has granted the bindings (every 5 s).
	var c *failover.Consumer
	var err error
	for deadline := time.Now().Add(time.Minute); ; {
		c, err = fc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "app", Type: pulsar.Shared,
			ReplicateSubscriptionState: true, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscribing on %s with the organization's token: %v", fc.ServiceURL(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &groupConsumer{c: c, got: map[string]int{}, local: map[int]bool{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			m, err := c.Receive(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			c.Ack(m)
			p := string(m.Payload())
			var n int
			_, serr := fmt.Sscanf(p, "m-%06d", &n)
			r.mu.Lock()
			r.got[p]++
			if serr == nil && m.GetReplicatedFrom() == "" {
				r.local[n] = true
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
		c.Close()
	})
	return r
}

// count is the number of distinct payloads received.
func (r *groupConsumer) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// localAfter counts the sequences above seq received from the cluster
// that stored them.
func (r *groupConsumer) localAfter(seq int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for s := range r.local {
		if s > seq {
			n++
		}
	}
	return n
}

// missing lists the sequences of acked never received.
func (r *groupConsumer) missing(acked []int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, n := range acked {
		if r.got[fmt.Sprintf("m-%06d", n)] == 0 {
			out = append(out, n)
		}
	}
	return out
}
