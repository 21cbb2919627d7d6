package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// testIssuer is an OpenID Connect issuer serving discovery and a JWKS
// whose keys a test changes, and which it can take down.
type testIssuer struct {
	srv       *httptest.Server
	mu        sync.Mutex
	keys      []jose.JSONWebKey // public keys served
	down      atomic.Bool
	jwksGets  atomic.Int32
	discoIss  string   // issuer named by discovery; default the URL
	revoked   []string // the revocation list's client ids
	signers   map[string]any
	signerKid string
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	is := &testIssuer{signers: map[string]any{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		if is.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		iss := is.discoIss
		if iss == "" {
			iss = is.srv.URL
		}
		json.NewEncoder(w).Encode(map[string]string{"issuer": iss, "jwks_uri": is.srv.URL + "/keys",
			"magnetar_revoked_clients_uri": is.srv.URL + "/revoked"})
	})
	mux.HandleFunc("GET /revoked", func(w http.ResponseWriter, r *http.Request) {
		if is.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		is.mu.Lock()
		defer is.mu.Unlock()
		json.NewEncoder(w).Encode(map[string][]string{"client_ids": is.revoked})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		if is.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		is.jwksGets.Add(1)
		is.mu.Lock()
		defer is.mu.Unlock()
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: is.keys})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

// addKey makes a key (ES256 or RS256), publishes it and signs with it.
func (is *testIssuer) addKey(t *testing.T, kid, alg string) {
	t.Helper()
	var priv, pub any
	switch alg {
	case "ES256":
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		priv, pub = k, &k.PublicKey
	case "RS256":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		priv, pub = k, &k.PublicKey
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = append(is.keys, jose.JSONWebKey{Key: pub, KeyID: kid, Algorithm: alg, Use: "sig"})
	is.signers[kid] = priv
	is.signerKid = kid
}

// dropKey stops publishing kid.
func (is *testIssuer) dropKey(kid string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	for i, k := range is.keys {
		if k.KeyID == kid {
			is.keys = append(is.keys[:i], is.keys[i+1:]...)
			return
		}
	}
}

type tokOpt func(*MintOptions)

func withAud(a string) tokOpt           { return func(o *MintOptions) { o.Audience = a } }
func withIss(i string) tokOpt           { return func(o *MintOptions) { o.Issuer = i } }
func withKid(k string) tokOpt           { return func(o *MintOptions) { o.Headers = map[string]any{"kid": k} } }
func withExpiry(d time.Duration) tokOpt { return func(o *MintOptions) { o.Expiry = d } }
func withClaim(k string, v any) tokOpt {
	return func(o *MintOptions) { o.Claims = map[string]any{k: v} }
}
func withNow(now func() time.Time) tokOpt { return func(o *MintOptions) { o.Now = now() } }

// token signs a token for sub with the current key (or the one withKid
// names; an unknown kid signs with the current key).
func (is *testIssuer) token(t *testing.T, sub string, opts ...tokOpt) string {
	t.Helper()
	o := MintOptions{Subject: sub, Audience: "urn:test:cluster", Issuer: is.srv.URL, Expiry: time.Minute}
	for _, f := range opts {
		f(&o)
	}
	is.mu.Lock()
	kid := is.signerKid
	if o.Headers == nil {
		o.Headers = map[string]any{"kid": kid}
	} else if k, _ := o.Headers["kid"].(string); is.signers[k] != nil {
		kid = k
	}
	key := is.signers[kid]
	is.mu.Unlock()
	tok, err := Mint(key, o)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newOIDC(t *testing.T, cfg OIDCConfig) *OIDCProvider {
	t.Helper()
	if cfg.Audiences == nil {
		cfg.Audiences = []string{"urn:test:cluster"}
	}
	cfg.Logger = quiet()
	p, err := NewOIDCProvider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func authOK(t *testing.T, p Provider, tok string) Identity {
	t.Helper()
	id, err := p.Authenticate(context.Background(), Credentials{Method: MethodToken, Data: []byte(tok)})
	if err != nil {
		t.Fatalf("authenticate: %v", err)
	}
	return id
}

func authFails(t *testing.T, p Provider, tok, reason string) {
	t.Helper()
	_, err := p.Authenticate(context.Background(), Credentials{Method: MethodToken, Data: []byte(tok)})
	if err == nil {
		t.Fatalf("token accepted, want a failure containing %q", reason)
	}
	if !strings.Contains(err.Error(), reason) {
		t.Fatalf("error %q does not contain %q", err, reason)
	}
}

func TestOIDCAcceptsIssuerTokens(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "ec1", "ES256")
	is.addKey(t, "rsa1", "RS256")
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL + "/"}}})
	for _, kid := range []string{"ec1", "rsa1"} {
		id := authOK(t, p, is.token(t, "svc-"+kid, withKid(kid)))
		if id.Role != "svc-"+kid || id.Method != MethodToken || id.Expires.IsZero() {
			t.Fatalf("%s: identity %+v", kid, id)
		}
	}
	custom := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL, JWKSURL: is.srv.URL + "/keys"}}, RoleClaim: "client_id", Audiences: []string{"other", "urn:test:cluster"}})
	if id := authOK(t, custom, is.token(t, "ignored", withClaim("client_id", "app7"))); id.Role != "app7" {
		t.Fatalf("role %q, want app7 from client_id", id.Role)
	}
	authFails(t, custom, is.token(t, "x"), `no "client_id" claim`)
}

func TestOIDCRefusals(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	other := newTestIssuer(t)
	other.addKey(t, "k1", "ES256")
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}})
	authOK(t, p, is.token(t, "ok"))

	authFails(t, p, is.token(t, "x", withAud("urn:test:other-cluster")), "not for this service")
	authFails(t, p, is.token(t, "x", withAud("")), "not for this service")
	authFails(t, p, other.token(t, "x"), "is not trusted")
	// A token naming the trusted issuer but signed by another's key.
	authFails(t, p, other.token(t, "x", withIss(is.srv.URL)), "signature is invalid")
	authFails(t, p, is.token(t, "x", withNow(func() time.Time { return time.Now().Add(-time.Hour) })), "expired")
	authFails(t, p, is.token(t, "x", withExpiry(0)), "invalid token")
}

func TestOIDCRefusesAlgNoneAndMismatchedAlg(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}})
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "x", "iss": is.srv.URL, "aud": "urn:test:cluster", "exp": time.Now().Add(time.Minute).Unix()})
	none.Header["kid"] = "k1"
	s, err := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	authFails(t, p, s, "token signature is invalid")
	// An HS256 token keyed with the published key's bytes (the classic
	// algorithm-confusion attack) is refused by algorithm.
	hs, _ := Mint([]byte(strings.Repeat("k", 32)), MintOptions{Subject: "x", Issuer: is.srv.URL, Audience: "urn:test:cluster", Expiry: time.Minute, Headers: map[string]any{"kid": "k1"}})
	authFails(t, p, hs, "token signature is invalid")
}

func TestOIDCKeyRotation(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}, MinRefresh: time.Nanosecond})
	old := is.token(t, "a")
	authOK(t, p, old)
	before := is.jwksGets.Load()
	// The issuer rotates: k2 signs, k1 is still published.
	is.addKey(t, "k2", "RS256")
	authOK(t, p, is.token(t, "a"))
	if is.jwksGets.Load() == before {
		t.Fatal("an unknown kid did not fetch the key set again")
	}
	authOK(t, p, old)
	// k1 retired: once the set is fetched again its tokens are refused.
	is.dropKey("k1")
	authFails(t, p, is.token(t, "a", withKid("k-unknown")), "not one of issuer")
	authFails(t, p, old, "not one of issuer")
}

func TestOIDCUnknownKidRefreshIsRateLimited(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	var clock atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(clock.Load())) }
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}, MinRefresh: time.Minute, Now: now})
	authOK(t, p, is.token(t, "a"))
	before := is.jwksGets.Load()
	for i := 0; i < 20; i++ {
		authFails(t, p, is.token(t, "a", withKid("bogus")), "not one of issuer")
	}
	if got := is.jwksGets.Load() - before; got != 0 {
		// The initial fetch was less than MinRefresh ago.
		t.Fatalf("%d key set fetches for unknown kids within MinRefresh, want 0", got)
	}
	clock.Add(int64(2 * time.Minute))
	for i := 0; i < 20; i++ {
		authFails(t, p, is.token(t, "a", withKid("bogus"), withNow(now)), "not one of issuer")
	}
	if got := is.jwksGets.Load() - before; got != 1 {
		t.Fatalf("%d key set fetches for 20 unknown kids after MinRefresh, want 1", got)
	}
}

func TestOIDCIssuerDownKeepsLastKeys(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}, Refresh: 20 * time.Millisecond, MinRefresh: time.Nanosecond})
	authOK(t, p, is.token(t, "a"))
	is.down.Store(true)
	// Let the background refresh fail a few times.
	ik := p.issuers[is.srv.URL]
	deadline := time.Now().Add(10 * time.Second)
	for {
		ik.mu.Lock()
		failed := ik.lastErr != nil
		ik.mu.Unlock()
		if failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background refresh never failed against a down issuer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	authOK(t, p, is.token(t, "a"))
	authFails(t, p, is.token(t, "a", withKid("new")), "not one of issuer")
	is.down.Store(false)
	is.addKey(t, "k2", "ES256")
	authOK(t, p, is.token(t, "a"))
}

func TestOIDCIssuerDownAtStart(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	is.down.Store(true)
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}, Refresh: time.Hour, MinRefresh: time.Nanosecond})
	authFails(t, p, is.token(t, "a"), "not available")
	is.down.Store(false)
	authOK(t, p, is.token(t, "a"))
}

func TestOIDCDiscoveryIssuerMismatch(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	is.discoIss = "https://impostor.example"
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}, Refresh: time.Hour, MinRefresh: time.Nanosecond})
	authFails(t, p, is.token(t, "a"), "names issuer")
}

func TestOIDCFallbackAndAuthenticator(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	secret, _ := NewSecretKey()
	static, err := NewTokenProvider(TokenConfig{SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	p := newOIDC(t, OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}, Fallback: static})
	a, err := NewAuthenticator("", p)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := Mint(secret, MintOptions{Subject: "admin"})
	for tok, want := range map[string]string{st: "admin", is.token(t, "svc"): "svc"} {
		req := httptest.NewRequest("GET", "/admin/v2/clusters", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		id, err := a.AuthenticateHTTP(req)
		if err != nil || id.Role != want {
			t.Fatalf("AuthenticateHTTP: %+v %v, want role %s", id, err, want)
		}
	}
	// A token of the OIDC issuer never falls back to the static key.
	authFails(t, p, is.token(t, "svc", withAud("elsewhere")), "not for this service")
}

func TestOIDCConfigChecks(t *testing.T) {
	for _, c := range []OIDCConfig{
		{},
		{Issuers: []OIDCIssuer{{URL: "https://a"}}},
		{Issuers: []OIDCIssuer{{URL: "a.example"}}, Audiences: []string{"x"}},
		{Issuers: []OIDCIssuer{{URL: "https://a"}, {URL: "https://a/"}}, Audiences: []string{"x"}},
	} {
		if p, err := NewOIDCProvider(c); err == nil {
			p.Close()
			t.Errorf("config %+v accepted", c)
		}
	}
}

// TestOIDCKeyCacheSurvivesRestartWhileIssuerDown: a provider with CacheDir
// stores the keys it fetched; a new provider on the same directory (a
// restarted broker) accepts the issuer's tokens while the issuer is down,
// one without the cache refuses them, and a cache file of another issuer
// is ignored.
func TestOIDCKeyCacheSurvivesRestartWhileIssuerDown(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	dir := t.TempDir()
	cfg := OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}, Refresh: time.Hour, MinRefresh: time.Nanosecond, CacheDir: dir}
	first := newOIDC(t, cfg)
	authOK(t, first, is.token(t, "a"))
	first.Close()

	is.down.Store(true)
	restarted := newOIDC(t, cfg)
	if id := authOK(t, restarted, is.token(t, "a")); id.Role != "a" {
		t.Fatalf("role %q", id.Role)
	}
	uncached := cfg
	uncached.CacheDir = ""
	authFails(t, newOIDC(t, uncached), is.token(t, "a"), "not available")

	// The cache is per issuer: another issuer's file under this issuer's
	// name is not trusted.
	other := newTestIssuer(t)
	ocfg := OIDCConfig{Issuers: []OIDCIssuer{{URL: other.srv.URL}}, Refresh: time.Hour, CacheDir: dir}
	raw, err := os.ReadFile(restarted.cacheFile(is.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(restarted.cacheFile(other.srv.URL), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	other.down.Store(true)
	authFails(t, newOIDC(t, ocfg), is.token(t, "a", withIss(other.srv.URL)), "not available")
}

// TestOIDCRevocationList: a token whose client_id is on the issuer's
// revocation list is refused and Revoked reports its identity, other
// clients' tokens are not; the list survives a restart while the issuer is
// down (CacheDir), and leaving the list readmits the client.
func TestOIDCRevocationList(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "k1", "ES256")
	dir := t.TempDir()
	cfg := OIDCConfig{Issuers: []OIDCIssuer{{URL: is.srv.URL}}, Refresh: time.Hour, MinRefresh: time.Nanosecond,
		RevokedRefresh: 10 * time.Millisecond, CacheDir: dir}
	p := newOIDC(t, cfg)
	bad, good := is.token(t, "a", withClaim("client_id", "c1")), is.token(t, "b", withClaim("client_id", "c2"))
	id := authOK(t, p, bad)
	if id.ClientID != "c1" || id.Issuer != is.srv.URL || p.Revoked(id) {
		t.Fatalf("identity %+v, revoked %v", id, p.Revoked(id))
	}
	is.mu.Lock()
	is.revoked = []string{"c1"}
	is.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !p.Revoked(id) {
		if time.Now().After(deadline) {
			t.Fatal("the revocation list was never applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
	authFails(t, p, bad, "revoked")
	authOK(t, p, good)
	p.Close()

	is.down.Store(true)
	restarted := newOIDC(t, cfg)
	authFails(t, restarted, bad, "revoked")
	authOK(t, restarted, good)
	restarted.Close()

	is.down.Store(false)
	is.mu.Lock()
	is.revoked = nil
	is.mu.Unlock()
	again := newOIDC(t, cfg)
	deadline = time.Now().Add(10 * time.Second)
	for again.Revoked(id) {
		if time.Now().After(deadline) {
			t.Fatal("the emptied revocation list was never applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
	authOK(t, again, bad)
}
