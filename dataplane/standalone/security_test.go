package standalone_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/auth/authtest"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/policy"
)

// secured is a standalone with TLS, token and TLS authentication and
// authorization on, superuser "admin", and what a test needs to reach it.
type secured struct {
	s         *standalone.Standalone
	secret    []byte
	ca        *authtest.CA
	clientPEM [2]string // cert, key with CN admin
	tlsURL    string
	httpsURL  string
}

func startSecured(t *testing.T) *secured {
	t.Helper()
	ca := authtest.NewCA(t)
	certFile, keyFile := ca.Issue(t, "broker", "broker", "127.0.0.1", "localhost")
	ccert, ckey := ca.Issue(t, "client", "admin")
	secret, err := auth.NewSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokenProvider(auth.TokenConfig{SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator("", tokens, auth.TLSProvider{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New()
	if err != nil {
		t.Fatal(err)
	}
	r, err := auth.NewCertReloader(auth.TLSFiles{CertFile: certFile, KeyFile: keyFile, TrustFile: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	cfg := standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t))
	cfg.HTTPSAddr = "127.0.0.1:0"
	cfg.Broker.TLSAddr = "127.0.0.1:0"
	cfg.Broker.TLSConfig = r.ServerConfig()
	cfg.Broker.Authenticator = a
	cfg.Broker.Authorizer = auth.NewAuthorizer(eng, []string{"admin"})
	s := standalonetest.Start(t, cfg)
	return &secured{s: s, secret: secret, ca: ca, clientPEM: [2]string{ccert, ckey},
		tlsURL: s.Broker().ServiceURLTLS(), httpsURL: s.Broker().Config().WebServiceURLTLS}
}

func (sc *secured) token(t *testing.T, sub string, expiry time.Duration) string {
	t.Helper()
	tok, err := auth.Mint(sc.secret, auth.MintOptions{Subject: sub, Expiry: expiry})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// admin calls the plain-text admin API with a bearer token ("" for none).
func (sc *secured) admin(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, sc.s.WebServiceURL()+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return do(t, req)
}

// do sends req and returns its status and body.
func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func newClient(t *testing.T, opts pulsar.ClientOptions) pulsar.Client {
	t.Helper()
	opts.OperationTimeout = 5 * time.Second
	opts.ConnectionTimeout = 5 * time.Second
	c, err := pulsar.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func roundTrip(ctx context.Context, c pulsar.Client, topic, sub, payload string) error {
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer prod.Close()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if string(m.Payload()) != payload {
		return fmt.Errorf("received %q, want %q", m.Payload(), payload)
	}
	return cons.Ack(m)
}

// TestSecurityTokensAndPermissions: with authentication and authorization
// on, a role produces and consumes only where it was granted, tenant
// admins and superusers administer, and bad credentials of every kind are
// refused while a good client on the same broker keeps working.
func TestSecurityTokensAndPermissions(t *testing.T) {
	sc := startSecured(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adminTok := sc.token(t, "admin", time.Hour)
	appTok := sc.token(t, "app", time.Hour)

	// Admin REST: 401 without credentials, 403 for a role without rights.
	if code, body := sc.admin(t, http.MethodGet, "/admin/v2/tenants", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", code, body)
	}
	if code, body := sc.admin(t, http.MethodGet, "/admin/v2/tenants", "not-a-jwt", ""); code != http.StatusUnauthorized || !strings.Contains(body, "malformed token") {
		t.Fatalf("garbage token: %d %s", code, body)
	}
	if code, body := sc.admin(t, http.MethodPut, "/admin/v2/tenants/acme", appTok, `{"adminRoles":["acme-admin"],"allowedClusters":["standalone"]}`); code != http.StatusForbidden {
		t.Fatalf("non-superuser creating a tenant: %d %s", code, body)
	}
	for _, step := range []struct{ method, path, body string }{
		{http.MethodPut, "/admin/v2/tenants/acme", `{"adminRoles":["acme-admin"],"allowedClusters":["standalone"]}`},
		{http.MethodPut, "/admin/v2/namespaces/acme/orders", ""},
		{http.MethodPost, "/admin/v2/namespaces/acme/orders/permissions/app", `["produce","consume"]`},
	} {
		if code, body := sc.admin(t, step.method, step.path, adminTok, step.body); code/100 != 2 {
			t.Fatalf("%s %s: %d %s", step.method, step.path, code, body)
		}
	}
	// The tenant admin manages its tenant's namespaces but not another's.
	tenantAdmin := sc.token(t, "acme-admin", time.Hour)
	if code, body := sc.admin(t, http.MethodGet, "/admin/v2/namespaces/acme", tenantAdmin, ""); code != http.StatusOK {
		t.Fatalf("tenant admin listing its namespaces: %d %s", code, body)
	}
	if code, body := sc.admin(t, http.MethodGet, "/admin/v2/namespaces/public", tenantAdmin, ""); code != http.StatusForbidden {
		t.Fatalf("tenant admin listing another tenant: %d %s", code, body)
	}
	if code, body := sc.admin(t, http.MethodGet, "/admin/v2/brokers/health", "", ""); code != http.StatusOK {
		t.Fatalf("health must stay open for probes: %d %s", code, body)
	}

	// A good client keeps working beside every bad one.
	good := newClient(t, pulsar.ClientOptions{URL: sc.s.ServiceURL(), Authentication: pulsar.NewAuthenticationToken(appTok)})
	if err := roundTrip(ctx, good, "persistent://acme/orders/t1", "s1", "granted"); err != nil {
		t.Fatalf("granted role: %v", err)
	}

	wrongKey, _ := auth.Mint([]byte("another secret key of thirty-two bytes!!"), auth.MintOptions{Subject: "app"})
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "admin"})
	noneTok, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	huge := strings.Repeat("a", 1<<20)
	expired, _ := auth.Mint(sc.secret, auth.MintOptions{Subject: "app", Now: time.Now().Add(-2 * time.Hour), Expiry: time.Hour})
	bad := map[string]pulsar.Authentication{
		"no credentials":  nil,
		"wrong signature": pulsar.NewAuthenticationToken(wrongKey),
		"alg none":        pulsar.NewAuthenticationToken(noneTok),
		"expired":         pulsar.NewAuthenticationToken(expired),
		"1 MB token":      pulsar.NewAuthenticationToken(huge),
	}
	for name, a := range bad {
		c := newClient(t, pulsar.ClientOptions{URL: sc.s.ServiceURL(), Authentication: a})
		_, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://acme/orders/t1"})
		if err == nil {
			t.Fatalf("%s: producer created", name)
		}
		if err := roundTrip(ctx, good, "persistent://acme/orders/t1", "s1", "after "+name); err != nil {
			t.Fatalf("good client after %s: %v", name, err)
		}
	}

	// Authorized, but not everywhere: no grant on public/default, no
	// produce on a consume-only grant.
	if _, err := good.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/t"}); err == nil {
		t.Fatal("producer on a namespace without a grant")
	}
	if code, body := sc.admin(t, http.MethodPost, "/admin/v2/namespaces/acme/orders/permissions/reader", adminTok, `["consume"]`); code/100 != 2 {
		t.Fatalf("grant consume: %d %s", code, body)
	}
	reader := newClient(t, pulsar.ClientOptions{URL: sc.s.ServiceURL(), Authentication: pulsar.NewAuthenticationToken(sc.token(t, "reader", time.Hour))})
	if _, err := reader.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://acme/orders/t1"}); err == nil {
		t.Fatal("consume-only role created a producer")
	}
	cons, err := reader.Subscribe(pulsar.ConsumerOptions{Topic: "persistent://acme/orders/t1", SubscriptionName: "r"})
	if err != nil {
		t.Fatalf("consume-only role subscribing: %v", err)
	}
	cons.Close()

	// Revoking a grant applies to new producers (the cache is dropped by
	// the policy watch).
	if code, body := sc.admin(t, http.MethodDelete, "/admin/v2/namespaces/acme/orders/permissions/app", adminTok, ""); code/100 != 2 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := good.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://acme/orders/t2"})
		if err != nil {
			break
		}
		p.Close()
		if time.Now().After(deadline) {
			t.Fatal("producer still allowed 10 s after the grant was revoked")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every refusal above is counted, by surface and action.
	for series, least := range map[string]float64{
		"pulsar_authentication_failures_total":                                               7, // two admin requests, five clients
		`magnetar_broker_authorization_denials_total{action="lookup",surface="binary"}`:      1, // no grant at all
		`magnetar_broker_authorization_denials_total{action="produce",surface="binary"}`:     1, // consume only
		`magnetar_broker_authorization_denials_total{action="superuser",surface="admin"}`:    1,
		`magnetar_broker_authorization_denials_total{action="tenant_admin",surface="admin"}`: 1,
	} {
		if got := metricValue(t, sc.s.WebServiceURL(), series); got < least {
			t.Errorf("%s = %v, want at least %v", series, got, least)
		}
	}
}

// metricValue reads one series from base's /metrics (0 when absent).
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// TestSecurityTLS: pulsar+ssl:// and https:// serve with the configured
// certificate; a client certificate's CN is its role; a plain-text client
// and garbage on the TLS port are refused without hurting a TLS client;
// certificates re-read from disk rotate without a restart.
func TestSecurityTLS(t *testing.T) {
	sc := startSecured(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if !strings.HasPrefix(sc.tlsURL, "pulsar+ssl://") || !strings.HasPrefix(sc.httpsURL, "https://") {
		t.Fatalf("advertised URLs %q %q", sc.tlsURL, sc.httpsURL)
	}
	// Client certificate CN=admin: a superuser.
	c := newClient(t, pulsar.ClientOptions{URL: sc.tlsURL, TLSTrustCertsFilePath: sc.ca.File, TLSValidateHostname: true,
		Authentication: pulsar.NewAuthenticationTLS(sc.clientPEM[0], sc.clientPEM[1])})
	if err := roundTrip(ctx, c, "persistent://public/default/tls", "s", "over tls"); err != nil {
		t.Fatalf("tls client: %v", err)
	}
	// TLS without credentials: no anonymous role, refused.
	anon := newClient(t, pulsar.ClientOptions{URL: sc.tlsURL, TLSTrustCertsFilePath: sc.ca.File})
	if _, err := anon.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/tls"}); err == nil {
		t.Fatal("anonymous TLS client created a producer")
	}
	// Plain text and garbage on the TLS port.
	host := strings.TrimPrefix(sc.tlsURL, "pulsar+ssl://")
	plain := newClient(t, pulsar.ClientOptions{URL: "pulsar://" + host, Authentication: pulsar.NewAuthenticationToken(sc.token(t, "admin", time.Hour))})
	if _, err := plain.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/tls"}); err == nil {
		t.Fatal("plain-text client on the TLS port created a producer")
	}
	nc, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte("GET / HTTP/1.0\r\n\r\n\x16\x03\x01garbage"))
	nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	io.ReadAll(nc) // the broker closes it
	nc.Close()
	if err := roundTrip(ctx, c, "persistent://public/default/tls", "s", "after garbage"); err != nil {
		t.Fatalf("tls client after garbage: %v", err)
	}

	// HTTPS admin with the client certificate.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sc.ca.CertPEM)
	cert, err := tls.LoadX509KeyPair(sc.clientPEM[0], sc.clientPEM[1])
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	resp, err := hc.Get(sc.httpsURL + "/admin/v2/tenants")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "public") {
		t.Fatalf("https tenants: %d %s", resp.StatusCode, b)
	}
}

// TestSecurityCertRotation: a certificate replaced on disk is served to
// new handshakes without a restart.
func TestSecurityCertRotation(t *testing.T) {
	ca := authtest.NewCA(t)
	certFile, keyFile := ca.Issue(t, "one", "first", "127.0.0.1")
	r, err := auth.NewCertReloader(auth.TLSFiles{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	served := func() string {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "first" {
		t.Fatalf("served %q", cn)
	}
	c2, k2 := ca.Issue(t, "two", "second", "127.0.0.1")
	for _, p := range [][2]string{{c2, certFile}, {k2, keyFile}} {
		b, _ := os.ReadFile(p[0])
		tmp := filepath.Join(filepath.Dir(p[1]), "tmp")
		os.WriteFile(tmp, b, 0o600)
		os.Rename(tmp, p[1])
	}
	deadline := time.Now().Add(10 * time.Second)
	for served() != "second" {
		if time.Now().After(deadline) {
			t.Fatal("rotated certificate not served after 10 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSecurityTokenRefresh: a connection whose token expires is challenged;
// a client whose supplier hands out fresh tokens keeps producing on the
// same connection past the first token's expiry.
func TestSecurityTokenRefresh(t *testing.T) {
	sc := startSecured(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var minted atomic.Int32
	supplier := func() (string, error) {
		minted.Add(1)
		return auth.Mint(sc.secret, auth.MintOptions{Subject: "admin", Expiry: 2 * time.Second})
	}
	c := newClient(t, pulsar.ClientOptions{URL: sc.s.ServiceURL(), Authentication: pulsar.NewAuthenticationTokenFromSupplier(supplier)})
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/refresh"})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	first := minted.Load()
	end := time.Now().Add(5 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("send %d after %d tokens: %v", i, minted.Load(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if minted.Load() <= first {
		t.Fatalf("the client was never challenged: %d tokens minted", minted.Load())
	}
}

// TestSecurityInternalBrokerCredential: a call signed by a broker of the
// cluster (broker.SignInternal) is a superuser's; a garbage credential, or
// a token signed with another key, is refused with 401.
func TestSecurityInternalBrokerCredential(t *testing.T) {
	sc := startSecured(t)
	call := func(sign func(*http.Request)) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, sc.s.WebServiceURL()+"/admin/v2/tenants", nil)
		sign(req)
		return do(t, req)
	}
	if code, body := call(func(r *http.Request) {
		if err := sc.s.Broker().SignInternal(r); err != nil {
			t.Fatal(err)
		}
	}); code != http.StatusOK {
		t.Fatalf("internal call: %d %s", code, body)
	}
	forged, _ := auth.Mint(sc.secret, auth.MintOptions{Subject: "broker", Audience: "magnetar-broker-internal", Expiry: time.Minute})
	for name, tok := range map[string]string{"garbage": "not-a-jwt", "signed with the clients' key": forged} {
		code, body := call(func(r *http.Request) { r.Header.Set(broker.InternalTokenHeader, tok) })
		if code != http.StatusUnauthorized || !strings.Contains(body, "invalid internal broker credential") {
			t.Errorf("%s: %d %s, want 401", name, code, body)
		}
	}
}
