package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-dev/magnetar/internal/atomicfile"
	"github.com/magnetar-dev/magnetar/internal/httpjson"
)

// OIDC defaults.
const (
	// DefaultJWKSRefresh is how often an issuer's keys are fetched again.
	DefaultJWKSRefresh = 5 * time.Minute
	// DefaultJWKSMinRefresh is the shortest time between two fetches of one
	// issuer's keys made because a token named a key id not in the set.
	DefaultJWKSMinRefresh = 5 * time.Second
	// maxMetadataBytes bounds a discovery document or key set.
	maxMetadataBytes = 1 << 20
	// fetchTimeout bounds one discovery + key set fetch.
	fetchTimeout = 10 * time.Second
	// DefaultRevokedRefresh is how often an issuer's revocation list is
	// fetched.
	DefaultRevokedRefresh = 5 * time.Second
)

// OIDCIssuer is one trusted issuer.
type OIDCIssuer struct {
	// URL is the issuer identifier: tokens carry it as "iss" (a trailing
	// "/" is ignored when comparing), and its keys are found through
	// {URL}/.well-known/openid-configuration's jwks_uri.
	URL string
	// JWKSURL, when set, is the issuer's key set, fetched without discovery.
	JWKSURL string
}

// OIDCConfig configures an OIDCProvider.
type OIDCConfig struct {
	// Issuers are the trusted issuers; at least one.
	Issuers []OIDCIssuer
	// Audiences: a token's "aud" must include one of them. Required, so a
	// token an issuer minted for another service is never accepted here.
	Audiences []string
	// RoleClaim is the claim holding the role; default "sub".
	RoleClaim string
	// Refresh is how often each issuer's keys are fetched in the
	// background; default DefaultJWKSRefresh. A failed fetch is retried
	// sooner (1 s, doubling up to Refresh); until one succeeds the last
	// keys fetched keep working.
	Refresh time.Duration
	// MinRefresh rate-limits the fetches made because a token names an
	// unknown key id; default DefaultJWKSMinRefresh.
	MinRefresh time.Duration
	// RevokedRefresh is how often the revocation list of an issuer whose
	// discovery document names one (issuer.DiscoveryRevokedKey) is
	// fetched; default DefaultRevokedRefresh. Tokens whose client_id is
	// on it are refused, and Revoked reports the connections they opened.
	// A failed fetch keeps the last list.
	RevokedRefresh time.Duration
	// HTTPClient fetches discovery documents and key sets; default a
	// client with a 10 s timeout trusting the system roots (plus TrustFile).
	HTTPClient *http.Client
	// TrustFile, when set and HTTPClient is nil, adds these PEM CA
	// certificates to the roots trusted for https issuers.
	TrustFile string
	// CacheDir, when set, keeps each issuer's last key set in a file there
	// (written after every fetch that changed it) and loads it at start:
	// a broker restarted while an issuer is unreachable accepts the
	// tokens that issuer signed before, as a running one does. The files
	// hold public keys only.
	CacheDir string
	// Fallback authenticates tokens whose "iss" is none of Issuers (a
	// TokenProvider with a static key); nil: such tokens are refused.
	Fallback Provider
	// MaxTokenSize is the longest token accepted; default DefaultMaxTokenSize.
	MaxTokenSize int
	// Leeway tolerates clock skew on exp and nbf; default 0.
	Leeway time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// OIDCProvider authenticates JWTs ("token") signed by OpenID Connect
// issuers, with keys fetched from each issuer's JWKS and kept fresh by a
// goroutine that Close stops.
type OIDCProvider struct {
	cfg     OIDCConfig
	parser  *jwt.Parser
	issuers map[string]*issuerKeys // by normalized issuer URL
	ctx     context.Context        // of the background refresh; Close cancels it
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	cacheMu sync.Mutex // serializes storeCached
}

var _ Provider = (*OIDCProvider)(nil)

// issuerKeys is one issuer's key set. mu guards every field but url and
// jwksURL, which never change.
type issuerKeys struct {
	url     string // as configured (the discovery base)
	jwksURL string // configured; "" means discover

	mu          sync.Mutex
	revokedURL  string                     // from discovery; "" when the issuer has none
	revoked     map[string]struct{}        // client ids on the last revocation list fetched
	revokedTag  string                     // its ETag
	keys        map[string]jose.JSONWebKey // by kid
	fetched     time.Time                  // last successful fetch; zero: never
	lastAttempt time.Time                  // last fetch started
	inflight    chan struct{}              // closed when the running fetch ends; nil: none
	lastErr     error
}

// NewOIDCProvider checks cfg, starts the background refresh (which fetches
// every issuer's keys at once) and returns the provider. An issuer that is
// unreachable at start does not fail it: its tokens are refused until its
// keys arrive.
func NewOIDCProvider(cfg OIDCConfig) (*OIDCProvider, error) {
	if len(cfg.Issuers) == 0 {
		return nil, errors.New("auth: OIDC needs at least one issuer")
	}
	if len(cfg.Audiences) == 0 {
		return nil, errors.New("auth: OIDC needs an audience (the aud this broker accepts)")
	}
	if cfg.RoleClaim == "" {
		cfg.RoleClaim = "sub"
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultJWKSRefresh
	}
	if cfg.MinRefresh <= 0 {
		cfg.MinRefresh = DefaultJWKSMinRefresh
	}
	if cfg.RevokedRefresh <= 0 {
		cfg.RevokedRefresh = DefaultRevokedRefresh
	}
	if cfg.MaxTokenSize <= 0 {
		cfg.MaxTokenSize = DefaultMaxTokenSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		c, err := newOIDCHTTPClient(cfg.TrustFile)
		if err != nil {
			return nil, err
		}
		cfg.HTTPClient = c
	}
	p := &OIDCProvider{cfg: cfg, issuers: map[string]*issuerKeys{}}
	for _, is := range cfg.Issuers {
		if !strings.HasPrefix(is.URL, "https://") && !strings.HasPrefix(is.URL, "http://") {
			return nil, fmt.Errorf("auth: OIDC issuer %q is not an http(s) URL", is.URL)
		}
		n := normIssuer(is.URL)
		if _, dup := p.issuers[n]; dup {
			return nil, fmt.Errorf("auth: OIDC issuer %q given twice", is.URL)
		}
		ik := &issuerKeys{url: n, jwksURL: is.JWKSURL}
		p.loadCached(ik)
		p.issuers[n] = ik
	}
	p.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}),
		jwt.WithTimeFunc(cfg.Now),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithPaddingAllowed(),
	)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for _, ik := range p.issuers {
		p.wg.Add(2)
		go p.refreshLoop(ik)
		go p.revokedLoop(ik)
	}
	return p, nil
}

func newOIDCHTTPClient(trustFile string) (*http.Client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if trustFile != "" {
		pem, err := os.ReadFile(trustFile)
		if err != nil {
			return nil, fmt.Errorf("auth: OIDC trust file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("auth: OIDC trust file %s holds no PEM certificate", trustFile)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: t, Timeout: fetchTimeout}, nil
}

func normIssuer(u string) string { return strings.TrimRight(u, "/") }

// Close stops the background refresh and waits for it.
func (p *OIDCProvider) Close() error {
	p.cancel()
	p.wg.Wait()
	return nil
}

// Method returns "token": OAuth2 clients send their access token as a token.
func (p *OIDCProvider) Method() string { return MethodToken }

// refreshLoop fetches ik's keys now and every Refresh, sooner after a
// failure, until Close.
func (p *OIDCProvider) refreshLoop(ik *issuerKeys) {
	defer p.wg.Done()
	backoff := time.Second
	for {
		err := p.refresh(p.ctx, ik, false)
		wait := p.cfg.Refresh
		if err != nil {
			wait = min(backoff, p.cfg.Refresh)
			backoff *= 2
		} else {
			backoff = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-p.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// revokedLoop fetches ik's revocation list every RevokedRefresh, once
// discovery named one, until Close.
func (p *OIDCProvider) revokedLoop(ik *issuerKeys) {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.RevokedRefresh)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		if err := p.fetchRevoked(p.ctx, ik); err != nil {
			p.cfg.Logger.Warn("auth: OIDC revocation list not refreshed, keeping the last one", "issuer", ik.url, "err", err)
		}
	}
}

// fetchRevoked reads ik's revocation list (unless unchanged: If-None-Match).
func (p *OIDCProvider) fetchRevoked(ctx context.Context, ik *issuerKeys) error {
	ik.mu.Lock()
	u, tag := ik.revokedURL, ik.revokedTag
	ik.mu.Unlock()
	if u == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	var doc struct {
		ClientIDs []string `json:"client_ids"`
	}
	tag, changed, err := httpjson.GetIfChanged(ctx, p.cfg.HTTPClient, u, tag, maxMetadataBytes, &doc)
	if err != nil || !changed {
		return err
	}
	set := make(map[string]struct{}, len(doc.ClientIDs))
	for _, id := range doc.ClientIDs {
		set[id] = struct{}{}
	}
	ik.mu.Lock()
	changed = !maps.Equal(ik.revoked, set)
	ik.revoked, ik.revokedTag = set, tag
	ik.mu.Unlock()
	if changed {
		p.storeCached(ik)
	}
	return nil
}

// Revoked reports whether id's token was issued to a client (an API key)
// its issuer has since revoked: the broker closes such connections.
func (p *OIDCProvider) Revoked(id Identity) bool {
	if id.ClientID == "" {
		return false
	}
	ik := p.issuers[normIssuer(id.Issuer)]
	if ik == nil {
		return false
	}
	ik.mu.Lock()
	defer ik.mu.Unlock()
	_, ok := ik.revoked[id.ClientID]
	return ok
}

// errRateLimited: an on-demand fetch was skipped because one ran less than
// MinRefresh ago.
var errRateLimited = errors.New("auth: key set fetched moments ago")

// refresh fetches ik's keys, or waits for the fetch already running. An
// on-demand refresh (onDemand) is skipped when the last one started less
// than MinRefresh ago.
func (p *OIDCProvider) refresh(ctx context.Context, ik *issuerKeys, onDemand bool) error {
	ik.mu.Lock()
	if ch := ik.inflight; ch != nil {
		ik.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		ik.mu.Lock()
		defer ik.mu.Unlock()
		return ik.lastErr
	}
	if onDemand && !ik.lastAttempt.IsZero() && p.cfg.Now().Sub(ik.lastAttempt) < p.cfg.MinRefresh {
		ik.mu.Unlock()
		return errRateLimited
	}
	ch := make(chan struct{})
	ik.inflight, ik.lastAttempt = ch, p.cfg.Now()
	ik.mu.Unlock()

	keys, err := p.fetch(ctx, ik)

	ik.mu.Lock()
	ik.inflight, ik.lastErr = nil, err
	close(ch)
	if err != nil {
		if ik.fetched.IsZero() {
			p.cfg.Logger.Warn("auth: OIDC issuer keys unavailable", "issuer", ik.url, "err", err)
		} else {
			p.cfg.Logger.Warn("auth: OIDC issuer keys not refreshed, keeping the last ones", "issuer", ik.url, "keys", len(ik.keys), "err", err)
		}
		ik.mu.Unlock()
		return err
	}
	changed := !sameKeys(ik.keys, keys)
	ik.keys, ik.fetched = keys, p.cfg.Now()
	ik.mu.Unlock()
	if changed {
		p.storeCached(ik)
	}
	return nil
}

// fetch reads the issuer's discovery document (unless the JWKS URL is
// configured) and its key set, keeping the signature keys it can use.
func (p *OIDCProvider) fetch(ctx context.Context, ik *issuerKeys) (map[string]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	jwksURL := ik.jwksURL
	if jwksURL == "" {
		var meta struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
			// RevokedURI is controlplane/issuer.DiscoveryRevokedKey.
			RevokedURI string `json:"magnetar_revoked_clients_uri"`
		}
		if err := httpjson.Get(ctx, p.cfg.HTTPClient, ik.url+"/.well-known/openid-configuration", maxMetadataBytes, &meta); err != nil {
			return nil, err
		}
		ik.mu.Lock()
		ik.revokedURL = meta.RevokedURI
		ik.mu.Unlock()
		if normIssuer(meta.Issuer) != ik.url {
			return nil, fmt.Errorf("discovery document names issuer %q, not %q", meta.Issuer, ik.url)
		}
		if meta.JWKSURI == "" {
			return nil, errors.New("discovery document has no jwks_uri")
		}
		jwksURL = meta.JWKSURI
	}
	var set keySet
	if err := httpjson.Get(ctx, p.cfg.HTTPClient, jwksURL, maxMetadataBytes, &set); err != nil {
		return nil, err
	}
	keys := p.usableKeys(ik.url, set)
	if len(keys) == 0 {
		return nil, fmt.Errorf("key set %s has no RSA or EC signature key", jwksURL)
	}
	return keys, nil
}

// keySet is a JWKS document (RFC 7517 §5).
type keySet struct {
	Keys []json.RawMessage `json:"keys"`
}

// usableKeys returns the signature keys of set the provider can verify
// with, by kid.
func (p *OIDCProvider) usableKeys(issuer string, set keySet) map[string]jose.JSONWebKey {
	keys := map[string]jose.JSONWebKey{}
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			p.cfg.Logger.Warn("auth: OIDC issuer key skipped", "issuer", issuer, "err", err)
			continue
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey:
			keys[k.KeyID] = k
		default:
			p.cfg.Logger.Warn("auth: OIDC issuer key skipped: not an RSA or EC public key", "issuer", issuer, "kid", k.KeyID)
		}
	}
	return keys
}

// sameKeys reports whether a and b hold the same key ids.
func sameKeys(a, b map[string]jose.JSONWebKey) bool {
	if len(a) != len(b) {
		return false
	}
	for kid := range a {
		if _, ok := b[kid]; !ok {
			return false
		}
	}
	return true
}

// cacheFile is where CacheDir keeps issuer's key set.
func (p *OIDCProvider) cacheFile(issuer string) string {
	sum := sha256.Sum256([]byte(issuer))
	return filepath.Join(p.cfg.CacheDir, "oidc-"+hex.EncodeToString(sum[:8])+".jwks.json")
}

// cachedKeySet is a cache file: the issuer it belongs to, its keys and
// its revocation list.
type cachedKeySet struct {
	Issuer string `json:"issuer"`
	keySet
	RevokedURL string   `json:"revoked_url,omitempty"`
	Revoked    []string `json:"revoked,omitempty"`
}

// loadCached fills ik with the key set CacheDir holds for it, if any.
func (p *OIDCProvider) loadCached(ik *issuerKeys) {
	if p.cfg.CacheDir == "" {
		return
	}
	f := p.cacheFile(ik.url)
	raw, err := os.ReadFile(f)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.cfg.Logger.Warn("auth: OIDC key cache unreadable", "file", f, "err", err)
		}
		return
	}
	var c cachedKeySet
	if err := json.Unmarshal(raw, &c); err != nil || c.Issuer != ik.url {
		p.cfg.Logger.Warn("auth: OIDC key cache ignored: not this issuer's key set", "file", f, "issuer", ik.url, "err", err)
		return
	}
	if c.RevokedURL != "" {
		ik.revokedURL, ik.revoked = c.RevokedURL, map[string]struct{}{}
		for _, id := range c.Revoked {
			ik.revoked[id] = struct{}{}
		}
	}
	if keys := p.usableKeys(ik.url, c.keySet); len(keys) > 0 {
		ik.keys, ik.fetched = keys, p.cfg.Now()
		p.cfg.Logger.Info("auth: OIDC issuer keys loaded from the cache until the issuer answers", "issuer", ik.url, "keys", len(keys))
	}
}

// storeCached writes ik's keys and revocation list to its cache file; a
// failure is logged.
func (p *OIDCProvider) storeCached(ik *issuerKeys) {
	if p.cfg.CacheDir == "" {
		return
	}
	p.cacheMu.Lock() // the last file written holds the newest state
	defer p.cacheMu.Unlock()
	ik.mu.Lock()
	c := cachedKeySet{Issuer: ik.url, RevokedURL: ik.revokedURL, Revoked: slices.Sorted(maps.Keys(ik.revoked))}
	keys := maps.Clone(ik.keys)
	ik.mu.Unlock()
	for _, kid := range slices.Sorted(maps.Keys(keys)) {
		raw, err := keys[kid].MarshalJSON()
		if err != nil {
			p.cfg.Logger.Warn("auth: OIDC key not cached", "issuer", ik.url, "kid", kid, "err", err)
			return
		}
		c.Keys = append(c.Keys, raw)
	}
	raw, err := json.Marshal(c)
	if err == nil {
		err = atomicfile.WriteFile(p.cacheFile(ik.url), raw)
	}
	if err != nil {
		p.cfg.Logger.Warn("auth: OIDC key cache not written", "issuer", ik.url, "err", err)
	}
}

// key finds the key for a token header: by kid, or the only key of the set
// when the token names none. It refreshes the set (rate-limited) when the
// kid is unknown or no keys were fetched yet.
func (p *OIDCProvider) key(ctx context.Context, ik *issuerKeys, kid string) (jose.JSONWebKey, error) {
	lookup := func() (jose.JSONWebKey, bool, bool) {
		ik.mu.Lock()
		defer ik.mu.Unlock()
		if kid == "" && len(ik.keys) == 1 {
			for _, k := range ik.keys {
				return k, true, true
			}
		}
		k, ok := ik.keys[kid]
		return k, ok, !ik.fetched.IsZero()
	}
	if k, ok, _ := lookup(); ok {
		return k, nil
	}
	err := p.refresh(ctx, ik, true)
	k, ok, have := lookup()
	switch {
	case ok:
		return k, nil
	case !have:
		return k, fmt.Errorf("the keys of issuer %s are not available (%v)", ik.url, err)
	case kid == "":
		return k, errors.New("token names no key id (kid) and its issuer has several keys")
	}
	return k, fmt.Errorf("token key id %q is not one of issuer %s's keys", kid, ik.url)
}

// Authenticate verifies the token in c.Data against its issuer's keys.
func (p *OIDCProvider) Authenticate(ctx context.Context, c Credentials) (Identity, error) {
	tok, err := tokenText(c, p.cfg.MaxTokenSize)
	if err != nil {
		return Identity{}, err
	}
	unverified := jwt.MapClaims{}
	if _, _, err := p.parser.ParseUnverified(tok, unverified); err != nil {
		return Identity{}, failf("malformed token")
	}
	iss, _ := unverified["iss"].(string)
	ik := p.issuers[normIssuer(iss)]
	if ik == nil || iss == "" {
		if p.cfg.Fallback != nil {
			return p.cfg.Fallback.Authenticate(ctx, c)
		}
		return Identity{}, failf("token issuer %q is not trusted", iss)
	}
	var keyErr error
	claims := jwt.MapClaims{}
	_, err = p.parser.ParseWithClaims(tok, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		k, err := p.key(ctx, ik, kid)
		if err != nil {
			keyErr = err
			return nil, err
		}
		alg := t.Method.Alg()
		if k.Algorithm != "" && k.Algorithm != alg {
			keyErr = fmt.Errorf("token algorithm %s does not match its key's %s", alg, k.Algorithm)
			return nil, keyErr
		}
		if !algFitsKey(alg, k.Key) {
			keyErr = fmt.Errorf("token algorithm %s does not fit its key", alg)
			return nil, keyErr
		}
		return k.Key, nil
	})
	if keyErr != nil {
		return Identity{}, failf("%s", keyErr)
	}
	if err != nil {
		return Identity{}, failf("%s", tokenReason(err))
	}
	if got, _ := claims["iss"].(string); normIssuer(got) != ik.url {
		return Identity{}, failf("token issuer %q is not trusted", got)
	}
	if !anyAudience(claims["aud"], p.cfg.Audiences) {
		return Identity{}, failf("token is not for this service (audience %s)", strings.Join(p.cfg.Audiences, " or "))
	}
	role, _ := claims[p.cfg.RoleClaim].(string)
	if role == "" {
		return Identity{}, failf("token has no %q claim", p.cfg.RoleClaim)
	}
	id := Identity{Role: role, Method: MethodToken, Issuer: ik.url}
	id.ClientID, _ = claims["client_id"].(string)
	if p.Revoked(id) {
		return Identity{}, failf("the token's client %s was revoked by its issuer", id.ClientID)
	}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		id.Expires = exp.Time
	}
	return id, nil
}

func anyAudience(v any, want []string) bool {
	for _, w := range want {
		if hasAudience(v, w) {
			return true
		}
	}
	return false
}

// algFitsKey says whether a JWS algorithm verifies with key: RS*/PS* with
// RSA, ESn with the matching curve.
func algFitsKey(alg string, key any) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		bits := k.Curve.Params().BitSize
		return (alg == "ES256" && bits == 256) || (alg == "ES384" && bits == 384) || (alg == "ES512" && bits == 521)
	}
	return false
}
