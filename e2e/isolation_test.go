package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/internal/accesstoken"
)

// isolationOrg is one organization of TestUpTenantIsolation: its cluster
// and two service accounts, app (bound as producer and consumer on
// shop/orders) and idle (no binding).
type isolationOrg struct {
	name, cluster, aud string
	tlsURL             string
	adminURL, caFile   string
	appKey, appUID     string
	idleKey, idleUID   string
	appBindings        []string
}

// TestUpTenantIsolation: `magnetar up --data-plane-auth` (one region, its
// agent a process); organizations acme and globex each get a cluster, a
// namespace and two service accounts. With the Go client's OAuth2 plugin
// against the control plane as issuer, over pulsar+ssl:// with the
// cluster's CA: each organization's bound account produces and consumes
// on its own namespace; it is refused on the other organization's
// cluster (audience) and cannot get a token for it; its unbound account
// is refused on its own namespace; anonymous clients are refused; the
// admin API likewise; deleting the binding revokes the permission; and
// revoking the account's API key ends its live broker connections within
// seconds, though its token lives an hour (the default): the brokers fetch
// the control plane's revocation list.
func TestUpTenantIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	// Mostly waiting on processes and intervals: runs beside the other
	// `magnetar up` tests, after the package's sequential tests.
	t.Parallel()
	dir := t.TempDir()
	killDataPlaneOnCleanup(t, dir)
	killAgentsOnCleanup(t, dir)
	addr := FreeAddr(t)
	up := Start(t, "up", "up", "--data-dir", dir, "--listen", addr, "--regions", "r1",
		"--agent-processes", "--reconcile-interval", "1s", "--data-plane-auth")
	interruptOnCleanup(t, up)
	up.WaitListening(addr, 30*time.Second)
	opKey := readKey(t, filepath.Join(dir, "bootstrap.key"))
	cp := cpClient{t: t, base: "http://" + addr}
	issuerURL := "http://" + addr

	orgs, ops := map[string]*isolationOrg{}, map[string]string{}
	for _, name := range []string{"acme", "globex"} {
		o := &isolationOrg{name: name, cluster: "organizations/" + name + "/clusters/main"}
		o.aud = issuer.ClusterAudience(o.cluster)
		base := "/v1/organizations/" + name
		cp.mustCall(opKey, "POST", "/v1/organizations?organizationId="+name, map[string]any{})
		op := cp.mustCall(opKey, "POST", base+"/clusters?clusterId=main", map[string]any{
			"region": "regions/r1", "size": map[string]any{"brokers": 1, "bookies": 1}})
		orgs[name], ops[name] = o, op["name"].(string)
	}
	for _, o := range orgs {
		done := cp.waitOp(opKey, ops[o.name], 3*time.Minute)
		resp, _ := done["response"].(map[string]any)
		o.tlsURL, _ = resp["tlsServiceUrl"].(string)
		if resp["serviceUrl"] != o.tlsURL {
			t.Fatalf("%s's cluster: serviceUrl %v is not its TLS URL %s", o.name, resp["serviceUrl"], o.tlsURL)
		}
		o.adminURL, _ = resp["tlsAdminUrl"].(string)
		ca, _ := resp["caCertificate"].(string)
		if !strings.HasPrefix(o.tlsURL, "pulsar+ssl://") || !strings.HasPrefix(o.adminURL, "https://") || !strings.Contains(ca, "BEGIN CERTIFICATE") {
			t.Fatalf("%s's cluster: want TLS URLs and a CA certificate, got %v", o.name, done)
		}
		o.caFile = filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(o.caFile, []byte(ca), 0o600); err != nil {
			t.Fatal(err)
		}
		base := "/v1/" + o.cluster
		cp.mustCall(opKey, "POST", base+"/tenants?tenantId=shop", map[string]any{})
		cp.mustCall(opKey, "POST", base+"/tenants/shop/namespaces?namespaceId=orders", map[string]any{})
		org := "/v1/organizations/" + o.name
		for _, sa := range []string{"app", "idle"} {
			cp.mustCall(opKey, "POST", org+"/serviceAccounts?serviceAccountId="+sa, map[string]any{})
			k := cp.mustCall(opKey, "POST", org+"/serviceAccounts/"+sa+"/apiKeys?apiKeyId=k1", map[string]any{})
			if sa == "app" {
				o.appKey, o.appUID = k["secret"].(string), k["uid"].(string)
			} else {
				o.idleKey, o.idleUID = k["secret"].(string), k["uid"].(string)
			}
		}
		ns := o.cluster + "/tenants/shop/namespaces/orders"
		o.appBindings = nil
		for _, role := range []string{"producer", "consumer"} {
			id := "app-" + role
			cp.mustCall(opKey, "POST", org+"/roleBindings?roleBindingId="+id, map[string]any{
				"role": "roles/pulsar." + role, "member": "organizations/" + o.name + "/serviceAccounts/app", "resource": ns})
			o.appBindings = append(o.appBindings, org+"/roleBindings/"+id)
		}
	}
	topic := "persistent://shop/orders/events"

	for _, o := range orgs {
		other := orgs["globex"]
		if o.name == "globex" {
			other = orgs["acme"]
		}
		// The bound account produces and consumes on its own cluster once
		// the agent has turned its bindings into permissions.
		app := oauthClient(t, o.tlsURL, o.caFile, issuerURL, o.appUID, o.appKey, o.aud)
		var payload string
		waitFor(t, o.name+"'s app to produce and consume on its namespace", time.Minute, func() bool {
			payload = fmt.Sprintf("%s-%d", o.name, time.Now().UnixNano())
			return roundTripErr(app, topic, payload) == nil
		})
		// ... not on the other organization's cluster: its token's audience
		// is refused there,
		cross := oauthClientWithin(t, refusedWithin, other.tlsURL, other.caFile, issuerURL, o.appUID, o.appKey, o.aud)
		// (The Go client retries a connection refused for its credentials
		// until its operation timeout; the admin API below shows the 401.)
		if err := produceOnce(cross, topic); err == nil {
			t.Fatalf("%s's app produced on %s's cluster", o.name, other.name)
		} else {
			t.Logf("%s's app on %s's cluster: %v", o.name, other.name, err)
		}
		// ... and the issuer gives it no token for that cluster.
		crossAud := oauthClientWithin(t, refusedWithin, other.tlsURL, other.caFile, issuerURL, o.appUID, o.appKey, other.aud)
		if err := produceOnce(crossAud, topic); err == nil {
			t.Fatalf("%s's app got a token for %s's cluster", o.name, other.name)
		}
		if code, body := tokenRequest(t, issuerURL, o.appUID, o.appKey, other.aud); code != http.StatusBadRequest || !strings.Contains(body, "invalid_target") {
			t.Fatalf("%s's app asking for %s's audience: %d %s", o.name, other.name, code, body)
		}
		// Its organization's audience, which its own clusters accept, is
		// refused by the other organization's brokers too.
		orgAud := oauthClientWithin(t, refusedWithin, other.tlsURL, other.caFile, issuerURL, o.appUID, o.appKey, issuer.OrganizationAudience(o.name))
		if err := produceOnce(orgAud, topic); err == nil {
			t.Fatalf("%s's app produced on %s's cluster with its organization's audience", o.name, other.name)
		}
		// The unbound account is refused on its own namespace.
		idle := oauthClient(t, o.tlsURL, o.caFile, issuerURL, o.idleUID, o.idleKey, o.aud)
		if err := produceOnce(idle, topic); err == nil {
			t.Fatalf("%s's unbound account produced", o.name)
		} else {
			t.Logf("%s's unbound account: %v", o.name, err)
		}
		// Anonymous clients are refused.
		anon, err := pulsar.NewClient(pulsar.ClientOptions{URL: o.tlsURL, TLSTrustCertsFilePath: o.caFile,
			OperationTimeout: refusedWithin, Logger: quietPulsarLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := produceOnce(anon, topic); err == nil {
			t.Fatalf("%s: an anonymous client produced", o.name)
		}
		anon.Close()

		// The admin API: the app's token reads its topic's stats (produce
		// or consume suffices), is refused the tenant's admin calls (403)
		// and is unknown on the other organization's cluster (401);
		// without a token, 401.
		tok := accessToken(t, issuerURL, o.appUID, o.appKey, o.aud)
		hc := tlsHTTPClient(t, o.caFile)
		stats := "/admin/v2/persistent/shop/orders/events/stats"
		if code, body := adminGet(hc, o.adminURL+stats, tok); code != http.StatusOK || !strings.Contains(body, "msgInCounter") {
			t.Fatalf("%s's app reading its topic's stats: %d %s", o.name, code, body)
		}
		if code, body := adminGet(hc, o.adminURL+"/admin/v2/namespaces/shop/orders/permissions", tok); code != http.StatusForbidden {
			t.Fatalf("%s's app reading permissions: %d %s, want 403", o.name, code, body)
		}
		if code, body := adminGet(tlsHTTPClient(t, other.caFile), other.adminURL+stats, tok); code != http.StatusUnauthorized {
			t.Fatalf("%s's app on %s's admin API: %d %s, want 401", o.name, other.name, code, body)
		}
		if code, body := adminGet(hc, o.adminURL+stats, ""); code != http.StatusUnauthorized {
			t.Fatalf("anonymous on %s's admin API: %d %s, want 401", o.name, code, body)
		}
	}

	// The CLI's data-plane commands on an authenticated cluster: with the
	// app's API key they find the TLS URLs and the CA in the cluster
	// resource and exchange the key for access tokens; the idle account's
	// produce is refused by the broker. The app reads the cluster resource
	// through its roles/pulsar.* bindings on the namespace; the idle
	// account through roles/viewer on the cluster, which gives nothing on
	// the data plane.
	acme := orgs["acme"]
	cp.mustCall(opKey, "POST", "/v1/organizations/acme/roleBindings?roleBindingId=idle-viewer", map[string]any{
		"role": "roles/viewer", "member": "organizations/acme/serviceAccounts/idle", "resource": acme.cluster})
	keyDir := t.TempDir()
	appKeyFile, idleKeyFile := filepath.Join(keyDir, "app.key"), filepath.Join(keyDir, "idle.key")
	for f, k := range map[string]string{appKeyFile: acme.appKey, idleKeyFile: acme.idleKey} {
		if err := os.WriteFile(f, []byte(k+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cliTopic := "acme/main/shop/orders/cli"
	cliStart := time.Now()
	if out := runCLI(t, addr, appKeyFile, "topic", "produce", cliTopic, "-m", "hello over tls"); !strings.Contains(out, "produced 1 message to persistent://shop/orders/cli") {
		t.Fatalf("magnetar topic produce: %s", out)
	}
	if out := runCLI(t, addr, appKeyFile, "topic", "consume", cliTopic, "-s", "cli", "-n", "1"); !strings.Contains(out, "hello over tls") {
		t.Fatalf("magnetar topic consume: %s", out)
	}
	if out := runCLI(t, addr, appKeyFile, "topic", "stats", cliTopic); !strings.Contains(out, "persistent://shop/orders/cli") {
		t.Fatalf("magnetar topic stats: %s", out)
	}
	out, err := exec.Command(Binary(t), "topic", "produce", cliTopic, "-m", "refused", "--endpoint", addr, "--api-key-file", idleKeyFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "AuthorizationError") {
		t.Fatalf("magnetar topic produce with the unbound account's key: %v\n%s", err, out)
	}
	t.Logf("magnetar topic produce with the unbound account's key: %s", lastLine(string(out)))
	t.Logf("the CLI's data-plane commands ran in %v", time.Since(cliStart).Round(100*time.Millisecond))

	// roles/cluster.admin on the cluster makes a member an admin of its
	// tenants: it reads the namespace's permissions the app may not.
	cp.mustCall(opKey, "POST", "/v1/organizations/acme/serviceAccounts?serviceAccountId=ops", map[string]any{})
	k := cp.mustCall(opKey, "POST", "/v1/organizations/acme/serviceAccounts/ops/apiKeys?apiKeyId=k1", map[string]any{})
	cp.mustCall(opKey, "POST", "/v1/organizations/acme/roleBindings?roleBindingId=ops-admin", map[string]any{
		"role": "roles/cluster.admin", "member": "organizations/acme/serviceAccounts/ops", "resource": acme.cluster})
	hc := tlsHTTPClient(t, acme.caFile)
	waitFor(t, "acme's cluster admin to administer tenant shop", time.Minute, func() bool {
		opsTok := accessToken(t, issuerURL, k["uid"].(string), k["secret"].(string), acme.aud)
		code, body := adminGet(hc, acme.adminURL+"/admin/v2/namespaces/shop/orders/permissions", opsTok)
		return code == http.StatusOK && strings.Contains(body, "organizations:acme:serviceAccounts:app")
	})

	// A binding deleted in the control plane is revoked in the data plane.
	cp.mustCall(opKey, "DELETE", acme.appBindings[0], nil) // the producer binding
	app := oauthClient(t, acme.tlsURL, acme.caFile, issuerURL, acme.appUID, acme.appKey, acme.aud)
	waitFor(t, "acme's app to lose produce after its binding was deleted", time.Minute, func() bool {
		return produceOnce(app, topic) != nil
	})
	// It still consumes: only the producer binding went.
	if _, err := app.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "iso"}); err != nil {
		t.Fatalf("acme's app lost consume with its producer binding: %v", err)
	}

	// Revoking an API key ends the broker connections it authenticated: at
	// its token's expiry the broker challenges the client, whose OAuth2
	// plugin cannot get a new token, and closes the connection.
	globex := orgs["globex"]
	live := oauthClient(t, globex.tlsURL, globex.caFile, issuerURL, globex.appUID, globex.appKey, globex.aud)
	lp, err := live.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "live"})
	if err != nil {
		t.Fatalf("globex's app producer: %v", err)
	}
	defer lp.Close()
	if err := sendOnce(lp); err != nil {
		t.Fatalf("globex's app sending: %v", err)
	}
	opUID, _ := accesstoken.APIKeyUID(opKey)
	ghc := tlsHTTPClient(t, globex.caFile)
	publishing := func() bool {
		var st struct {
			Publishers []struct {
				Name string `json:"producerName"`
			} `json:"publishers"`
		}
		code, body := adminGet(ghc, globex.adminURL+"/admin/v2/persistent/shop/orders/events/stats", accessToken(t, issuerURL, opUID, opKey, globex.aud))
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("operator reading globex's topic stats: %d %s", code, body)
		}
		for _, p := range st.Publishers {
			if p.Name == "live" {
				return true
			}
		}
		return false
	}
	if !publishing() {
		t.Fatal("globex's live producer is not in its topic's stats")
	}
	revoked := time.Now()
	cp.mustCall(opKey, "POST", "/v1/organizations/globex/serviceAccounts/app/apiKeys/k1:revoke", map[string]any{})
	// The token expires in an hour: only the revocation list ends the
	// connection within this wait.
	waitFor(t, "the revoked key's producer to be disconnected", 30*time.Second, func() bool { return !publishing() })
	t.Logf("the revoked key's producer was disconnected %v after the revocation (token lifetime 1 h)", time.Since(revoked).Round(100*time.Millisecond))
	if err := sendOnce(lp); err == nil {
		t.Fatal("the revoked key's producer still sends")
	}
}

// lastLine is the last non-empty line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// refusedWithin is the operation timeout of the clients expected to be
// refused: the Go client retries a refused CONNECT until it.
const refusedWithin = 3 * time.Second

// sendOnce sends one message through p within 10 s.
func sendOnce(p pulsar.Producer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")})
	return err
}

// oauthClient is a Pulsar client over pulsar+ssl:// trusting caFile, with
// the OAuth2 plugin (client_credentials) against the control plane as a
// tenant configures it; closed when the test ends.
func oauthClient(t *testing.T, url, caFile, issuerURL, clientID, secret, aud string) pulsar.Client {
	t.Helper()
	return oauthClientWithin(t, 10*time.Second, url, caFile, issuerURL, clientID, secret, aud)
}

// oauthClientWithin is oauthClient with operation timeout op: a client
// whose credentials a broker refuses retries until that timeout.
func oauthClientWithin(t *testing.T, op time.Duration, url, caFile, issuerURL, clientID, secret, aud string) pulsar.Client {
	t.Helper()
	keyFile, _ := json.Marshal(map[string]string{"type": "client_credentials", "client_id": clientID, "client_secret": secret, "issuer_url": issuerURL})
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, TLSTrustCertsFilePath: caFile, OperationTimeout: op,
		Authentication: pulsar.NewAuthenticationOAuth2(map[string]string{
			"type": "client_credentials", "issuerUrl": issuerURL, "audience": aud, "clientId": clientID,
			"privateKey": "data:application/json;base64," + base64.StdEncoding.EncodeToString(keyFile)}),
		Logger: quietPulsarLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// produceOnce creates a producer on topic and sends one message.
func produceOnce(c pulsar.Client, topic string) error {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	return sendOnce(p)
}

// roundTripErr subscribes, produces payload and receives it.
func roundTripErr(c pulsar.Client, topic, payload string) error {
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "iso"})
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
		return err
	}
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			return err
		}
		cons.Ack(m)
		if string(m.Payload()) == payload {
			return nil
		}
	}
}

// tokenRequest asks the control plane's token endpoint for a token.
func tokenRequest(t *testing.T, issuerURL, clientID, secret, aud string) (int, string) {
	t.Helper()
	form := "grant_type=client_credentials&client_id=" + clientID + "&client_secret=" + secret + "&audience=" + aud
	resp, err := http.Post(issuerURL+issuer.TokenPath, "application/x-www-form-urlencoded", strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// accessToken is a token for aud, or fails the test.
func accessToken(t *testing.T, issuerURL, clientID, secret, aud string) string {
	t.Helper()
	code, body := tokenRequest(t, issuerURL, clientID, secret, aud)
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &tr) != nil || tr.AccessToken == "" {
		t.Fatalf("token for %s: %d %s", aud, code, body)
	}
	return tr.AccessToken
}

// tlsHTTPClient trusts caFile.
func tlsHTTPClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	hc, err := httpsClient(caFile)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

// adminGet GETs url with a bearer token (none when empty).
func adminGet(hc *http.Client, url, token string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// httpsClient is an HTTP client trusting the PEM certificates of caFile.
func httpsClient(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate in " + caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, nil
}
