package standalone_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/apiserver"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/policy"
)

// oidcAudience is the audience the standalone accepts and the control
// plane issues tokens for (Config.TokenAudiences).
const oidcAudience = "urn:magnetar:test:standalone"

// tokenTTL is the control plane's access token lifetime in these tests.
const tokenTTL = 3 * time.Second

// issuerSetup is a control plane (the issuer) and a standalone that trusts
// it, with authorization on and superuser "admin" (a static HS256 token).
type issuerSetup struct {
	cp       *apiserver.Server
	op       context.Context // operator credentials for the control plane
	sas      cpv1.ServiceAccountsClient
	org      string
	sc       *secured
	adminTok string
}

func startIssuerSetup(t *testing.T) *issuerSetup {
	t.Helper()
	return startIssuerSetupWith(t, tokenTTL, 0)
}

// startIssuerSetupWith is startIssuerSetup with access tokens living ttl
// and the broker fetching the revocation list every revokedRefresh (0:
// the default).
func startIssuerSetupWith(t *testing.T, ttl, revokedRefresh time.Duration) *issuerSetup {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlstore.Open(context.Background(), "sqlite://"+filepath.Join(dir, "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := policy.New()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "bootstrap.key")
	cp, err := apiserver.New(apiserver.Config{Listen: "127.0.0.1:0", Store: st, Authorizer: eng, Logger: standalonetest.QuietLogger(),
		BootstrapKeyFile: keyFile, AccessTokenTTL: ttl, TokenAudiences: []string{oidcAudience}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cp.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cp.Shutdown(ctx)
		<-done
	})
	opKey, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cp.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	is := &issuerSetup{cp: cp, sas: cpv1.NewServiceAccountsClient(conn),
		op: metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+strings.TrimSpace(string(opKey)))}
	org, err := cpv1.NewOrganizationsClient(conn).CreateOrganization(is.op, &cpv1.CreateOrganizationRequest{OrganizationId: "acme", Organization: &cpv1.Organization{DisplayName: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	is.org = org.Name

	secret, err := auth.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	static, err := auth.NewTokenProvider(auth.TokenConfig{SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	oidc, err := auth.NewOIDCProvider(auth.OIDCConfig{Issuers: []auth.OIDCIssuer{{URL: cp.IssuerURL()}}, Audiences: []string{oidcAudience},
		Fallback: static, RevokedRefresh: revokedRefresh, Logger: standalonetest.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator("", oidc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.Broker.Authenticator = a
	cfg.Broker.Authorizer = auth.NewAuthorizer(eng, []string{"admin"})
	s := standalonetest.Start(t, cfg)
	t.Cleanup(func() { oidc.Close() }) // after the standalone stops (cleanups run in reverse)
	is.sc = &secured{s: s, secret: secret}
	is.adminTok = is.sc.token(t, "admin", time.Hour)
	return is
}

// serviceAccount creates service account id with a key and grants its
// role produce and consume on public/default; it returns the key.
func (is *issuerSetup) serviceAccount(t *testing.T, id string) *cpv1.ApiKey {
	t.Helper()
	sa, err := is.sas.CreateServiceAccount(is.op, &cpv1.CreateServiceAccountRequest{Parent: is.org, ServiceAccountId: id})
	if err != nil {
		t.Fatal(err)
	}
	key, err := is.sas.CreateApiKey(is.op, &cpv1.CreateApiKeyRequest{Parent: sa.Name, ApiKeyId: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	role := issuer.Role(sa.Name)
	if code, body := is.sc.admin(t, http.MethodPost, "/admin/v2/namespaces/public/default/permissions/"+url.PathEscape(role), is.adminTok, `["produce","consume"]`); code/100 != 2 {
		t.Fatalf("grant %s: %d %s", role, code, body)
	}
	return key
}

// oauth2Client is a Pulsar Go client using its OAuth2 plugin
// (client_credentials) against the control plane, with key as the client
// credentials, as a tenant configures it.
func (is *issuerSetup) oauth2Client(t *testing.T, key *cpv1.ApiKey, audience string) pulsar.Client {
	t.Helper()
	keyFile, _ := json.Marshal(map[string]string{"type": "client_credentials", "client_id": key.Uid, "client_secret": key.Secret, "issuer_url": is.cp.IssuerURL()})
	return newClient(t, pulsar.ClientOptions{
		URL: is.sc.s.ServiceURL(),
		Authentication: pulsar.NewAuthenticationOAuth2(map[string]string{
			"type":       "client_credentials",
			"issuerUrl":  is.cp.IssuerURL(),
			"audience":   audience,
			"clientId":   key.Uid,
			"privateKey": "data:application/json;base64," + base64.StdEncoding.EncodeToString(keyFile),
		}),
		Logger: plog.NewLoggerWithSlog(standalonetest.QuietLogger()),
	})
}

// publishers is how many producers the broker has on topic (stats).
func (is *issuerSetup) publishers(t *testing.T, topic string) int {
	t.Helper()
	code, body := is.sc.admin(t, http.MethodGet, "/admin/v2/persistent/public/default/"+topic+"/stats", is.adminTok, "")
	if code != 200 {
		t.Fatalf("stats of %s: %d %s", topic, code, body)
	}
	var st struct {
		Publishers []json.RawMessage `json:"publishers"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	return len(st.Publishers)
}

// waitFor polls cond every 100 ms for up to limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestOIDCControlPlaneIssuer: service accounts of the control plane
// produce and consume on a standalone that trusts the control plane as its
// OIDC issuer, with the real Go client's OAuth2 plugin; tokens live 3 s and
// are refreshed on the live connection through AUTH_CHALLENGE; revoking a
// key closes its connections; a token for another audience is refused.
func TestOIDCControlPlaneIssuer(t *testing.T) {
	is := startIssuerSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ciKey := is.serviceAccount(t, "ci")
	batchKey := is.serviceAccount(t, "batch")

	ci := is.oauth2Client(t, ciKey, oidcAudience)
	if err := roundTrip(ctx, ci, "persistent://public/default/ci-orders", "s1", "hello"); err != nil {
		t.Fatalf("ci round trip: %v", err)
	}

	// Two producers stay connected past several token lifetimes: each
	// expiry is challenged and answered with a new token from the issuer.
	ciProd, err := ci.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/ci-live"})
	if err != nil {
		t.Fatal(err)
	}
	defer ciProd.Close()
	batch := is.oauth2Client(t, batchKey, oidcAudience)
	batchProd, err := batch.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/batch-live"})
	if err != nil {
		t.Fatal(err)
	}
	defer batchProd.Close()
	end := time.Now().Add(2*tokenTTL + time.Second)
	for i := 0; time.Now().Before(end); i++ {
		for _, p := range []pulsar.Producer{ciProd, batchProd} {
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatalf("send %d on %s: %v", i, p.Topic(), err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := is.publishers(t, "batch-live"); n != 1 {
		t.Fatalf("batch-live has %d publishers, want 1", n)
	}

	// Revoking batch's key: at its token's expiry the broker challenges,
	// the client cannot get a new token, and the connection ends; the
	// producer cannot come back. ci is unaffected.
	if _, err := is.sas.RevokeApiKey(is.op, &cpv1.RevokeApiKeyRequest{Name: batchKey.Name}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	waitFor(t, time.Minute, "the revoked key's producer to be disconnected", func() bool { return is.publishers(t, "batch-live") == 0 })
	t.Logf("revoked key's producer gone %v after the revocation (token lifetime %v)", time.Since(revoked).Round(100*time.Millisecond), tokenTTL)
	for i := 0; i < 3*int(tokenTTL/time.Second); i++ {
		if n := is.publishers(t, "batch-live"); n != 0 {
			t.Fatalf("the revoked key's producer is back (%d publishers)", n)
		}
		if _, err := ciProd.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("still here")}); err != nil {
			t.Fatalf("ci send after batch's revocation: %v", err)
		}
		time.Sleep(time.Second)
	}

	// A token of the same issuer for another audience is refused by the
	// broker; an audience the issuer does not serve gets no token at all.
	for _, aud := range []string{is.cp.IssuerURL(), "urn:magnetar:cluster:acme/elsewhere"} {
		c := is.oauth2Client(t, ciKey, aud)
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/ci-orders"})
		if err == nil {
			p.Close()
			t.Fatalf("audience %s: producer created", aud)
		}
	}
}

// TestOIDCRevocationList: with hour-long access tokens, revoking a key
// still ends its live connection within seconds (the broker fetches the
// issuer's revocation list, named in its discovery document), its token is
// refused by the admin API and a new connection with it is refused, while
// another key's producer keeps sending.
func TestOIDCRevocationList(t *testing.T) {
	is := startIssuerSetupWith(t, time.Hour, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ciKey, batchKey := is.serviceAccount(t, "ci"), is.serviceAccount(t, "batch")
	ciProd, err := is.oauth2Client(t, ciKey, oidcAudience).CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/ci-rl"})
	if err != nil {
		t.Fatal(err)
	}
	defer ciProd.Close()
	batchProd, err := is.oauth2Client(t, batchKey, oidcAudience).CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/batch-rl"})
	if err != nil {
		t.Fatal(err)
	}
	defer batchProd.Close()
	if _, err := batchProd.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	batchTok := fetchAccessToken(t, is.cp.IssuerURL(), batchKey, oidcAudience)
	if code, body := is.sc.admin(t, http.MethodGet, "/admin/v2/persistent/public/default/batch-rl/stats", batchTok, ""); code != http.StatusOK {
		t.Fatalf("stats with batch's token before the revocation: %d %s", code, body)
	}

	if _, err := is.sas.RevokeApiKey(is.op, &cpv1.RevokeApiKeyRequest{Name: batchKey.Name}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	// An hour-long token expires long after this wait: only the
	// revocation list can end the connection.
	waitFor(t, 30*time.Second, "the revoked key's producer to be disconnected", func() bool { return is.publishers(t, "batch-rl") == 0 })
	t.Logf("revoked key's producer gone %v after the revocation (token lifetime 1h)", time.Since(revoked).Round(100*time.Millisecond))
	if code, body := is.sc.admin(t, http.MethodGet, "/admin/v2/persistent/public/default/batch-rl/stats", batchTok, ""); code != http.StatusUnauthorized {
		t.Fatalf("stats with the revoked key's unexpired token: %d %s, want 401", code, body)
	}
	for i := 0; i < 3; i++ {
		if n := is.publishers(t, "batch-rl"); n != 0 {
			t.Fatalf("the revoked key's producer is back (%d publishers)", n)
		}
		if _, err := ciProd.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("still here")}); err != nil {
			t.Fatalf("ci send after batch's revocation: %v", err)
		}
		time.Sleep(time.Second)
	}
}

// fetchAccessToken gets an access token for key and aud from the issuer.
func fetchAccessToken(t *testing.T, issuerURL string, key *cpv1.ApiKey, aud string) string {
	t.Helper()
	resp, err := http.PostForm(issuerURL+issuer.TokenPath, url.Values{"grant_type": {"client_credentials"},
		"client_id": {key.Uid}, "client_secret": {key.Secret}, "audience": {aud}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil || tr.AccessToken == "" {
		t.Fatalf("token: %s %v", resp.Status, err)
	}
	return tr.AccessToken
}

// TestOIDCBrokerClosesStaleCredentials: a client that answers the
// broker's AUTH_CHALLENGE with its expired token (as a client whose
// issuer refuses it a new one might) is disconnected by the broker, and
// the broker's admin API takes the issuer's tokens as Bearer credentials.
func TestOIDCBrokerClosesStaleCredentials(t *testing.T) {
	is := startIssuerSetup(t)
	key := is.serviceAccount(t, "stale")
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {key.Uid}, "client_secret": {key.Secret}, "audience": {oidcAudience}}
	resp, err := http.PostForm(is.cp.IssuerURL()+issuer.TokenPath, form)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if tr.AccessToken == "" {
		t.Fatalf("token endpoint: %s", resp.Status)
	}
	if code, body := is.sc.admin(t, http.MethodGet, "/lookup/v2/topic/persistent/public/default/stale", tr.AccessToken, ""); code != 200 {
		t.Fatalf("HTTP lookup with the access token: %d %s", code, body)
	}
	if code, body := is.sc.admin(t, http.MethodGet, "/lookup/v2/topic/persistent/public/default/stale", tr.AccessToken[:len(tr.AccessToken)-4]+"AAAA", ""); code != 401 {
		t.Fatalf("HTTP lookup with a forged access token: %d %s", code, body)
	}
	var mu sync.Mutex
	calls := 0
	c := newClient(t, pulsar.ClientOptions{URL: is.sc.s.ServiceURL(), Logger: plog.NewLoggerWithSlog(standalonetest.QuietLogger()),
		Authentication: pulsar.NewAuthenticationTokenFromSupplier(func() (string, error) {
			mu.Lock()
			calls++
			mu.Unlock()
			return tr.AccessToken, nil
		})})
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/stale"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n := is.publishers(t, "stale"); n != 1 {
		t.Fatalf("%d publishers, want 1", n)
	}
	waitFor(t, time.Minute, "the broker to close the connection whose token expired", func() bool { return is.publishers(t, "stale") == 0 })
	mu.Lock()
	defer mu.Unlock()
	if calls < 2 {
		t.Fatalf("the client was asked for credentials %d times: never challenged", calls)
	}
}
