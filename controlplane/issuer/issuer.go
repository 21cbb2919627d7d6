package issuer

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
)

// Defaults of Config.
const (
	// DefaultTokenTTL is an access token's lifetime: how long a client
	// holding one rides out a control-plane outage (its token source
	// renews at half life and keeps the token while renewal fails). A
	// revocation does not wait for it: brokers fetch the revocation list
	// (RevokedPath) every few seconds and close the revoked key's
	// connections.
	DefaultTokenTTL = time.Hour
	// DefaultRotation is a signing key's age when a new one replaces it.
	DefaultRotation = 30 * 24 * time.Hour
	// DefaultGrace is how long a replaced key stays published.
	DefaultGrace = 24 * time.Hour
	// DefaultAlg is the signing algorithm of new keys.
	DefaultAlg = "ES256"
)

// Collection is the store kind of signing keys.
const Collection = "signingKeys"

// Paths of the endpoints the API server serves, relative to the issuer URL.
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	// MetadataPath serves the same document (RFC 8414 clients look here).
	MetadataPath = "/.well-known/oauth-authorization-server"
	JWKSPath     = "/.well-known/jwks.json"
	TokenPath    = "/oauth2/token"
	// RevokedPath serves the revocation list: {"client_ids": [...]}, the
	// API keys whose unexpired tokens must be refused. The discovery
	// document names it as DiscoveryRevokedKey.
	RevokedPath = "/oauth2/revoked"
	// DiscoveryRevokedKey is the discovery document's field holding the
	// revocation list's URL (a Magnetar extension; other issuers have
	// none, and brokers then rely on token expiry alone).
	DiscoveryRevokedKey = "magnetar_revoked_clients_uri"
)

// ErrInvalidToken wraps every Verify failure.
var ErrInvalidToken = errors.New("issuer: invalid access token")

// Config configures an Issuer.
type Config struct {
	// Store keeps the signing keys. Required.
	Store store.Store
	// URL is the issuer identifier ("iss"), an http(s) URL without a
	// trailing "/"; clients find DiscoveryPath under it. Required.
	URL string
	// Alg of new signing keys: "ES256" (default) or "RS256".
	Alg string
	// TokenTTL is the access tokens' lifetime; default DefaultTokenTTL.
	TokenTTL time.Duration
	// Rotation and Grace: see the package doc. Grace must exceed TokenTTL.
	Rotation, Grace time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Validate fills defaults and checks cfg.
func (c *Config) Validate() error {
	if c.Store == nil {
		return errors.New("issuer: config: Store is required")
	}
	c.URL = strings.TrimRight(c.URL, "/")
	if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		return fmt.Errorf("issuer: config: URL %q is not an http(s) URL", c.URL)
	}
	if c.Alg == "" {
		c.Alg = DefaultAlg
	}
	if c.Alg != "ES256" && c.Alg != "RS256" {
		return fmt.Errorf("issuer: config: Alg %q: ES256 or RS256", c.Alg)
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.Rotation <= 0 {
		c.Rotation = DefaultRotation
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.Grace <= c.TokenTTL {
		return fmt.Errorf("issuer: config: Grace %v must exceed TokenTTL %v", c.Grace, c.TokenTTL)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Issuer signs and verifies access tokens. See the package doc.
type Issuer struct {
	cfg    Config
	parser *jwt.Parser

	mu     sync.Mutex
	parsed map[string]crypto.Signer // private keys by kid
}

// New validates cfg and returns the issuer. Keys are made on first use.
func New(cfg Config) (*Issuer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Issuer{
		cfg:    cfg,
		parsed: map[string]crypto.Signer{},
		parser: jwt.NewParser(jwt.WithValidMethods([]string{"ES256", "RS256"}), jwt.WithTimeFunc(cfg.Now),
			jwt.WithIssuer(cfg.URL), jwt.WithExpirationRequired()),
	}, nil
}

// URL is the issuer identifier.
func (i *Issuer) URL() string { return i.cfg.URL }

// TokenTTL is the access tokens' lifetime.
func (i *Issuer) TokenTTL() time.Duration { return i.cfg.TokenTTL }

// Role is the data-plane role of a control-plane principal: its resource
// name with "/" replaced by ":" ("organizations/acme/serviceAccounts/ci"
// is "organizations:acme:serviceAccounts:ci"), so the role fits one path
// segment of Pulsar's admin API. Resource ids never contain ":".
func Role(principal string) string { return strings.ReplaceAll(principal, "/", ":") }

// Principal inverts Role.
func Principal(role string) string { return strings.ReplaceAll(role, ":", "/") }

// ClusterAudiencePrefix starts every cluster audience.
const ClusterAudiencePrefix = "urn:magnetar:cluster:"

// ClusterAudience is the audience of tokens for a cluster's data plane:
// "organizations/acme/clusters/prod" is "urn:magnetar:cluster:acme/prod".
func ClusterAudience(cluster string) string {
	return ClusterAudiencePrefix + strings.TrimPrefix(strings.Replace(cluster, "/clusters/", "/", 1), "organizations/")
}

// ClusterOfAudience inverts ClusterAudience; ok is false for other audiences.
func ClusterOfAudience(aud string) (cluster string, ok bool) {
	rest, ok := strings.CutPrefix(aud, ClusterAudiencePrefix)
	org, c, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || org == "" || c == "" || strings.Contains(c, "/") {
		return "", false
	}
	return "organizations/" + org + "/clusters/" + c, true
}

// OrganizationAudiencePrefix starts every organization audience.
const OrganizationAudiencePrefix = "urn:magnetar:organization:"

// OrganizationAudience is the audience of tokens for every cluster of an
// organization's data plane: "organizations/acme" is
// "urn:magnetar:organization:acme". Brokers of a managed cluster accept it
// beside their ClusterAudience, so one token follows a replication group's
// clients from member to member.
func OrganizationAudience(org string) string {
	return OrganizationAudiencePrefix + strings.TrimPrefix(org, "organizations/")
}

// OrganizationOfAudience inverts OrganizationAudience; ok is false for
// other audiences.
func OrganizationOfAudience(aud string) (org string, ok bool) {
	id, ok := strings.CutPrefix(aud, OrganizationAudiencePrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return "organizations/" + id, true
}

// Discovery is the OpenID Connect discovery document (also served as RFC
// 8414 authorization server metadata).
func (i *Issuer) Discovery() map[string]any {
	return map[string]any{
		"issuer":                                i.cfg.URL,
		"jwks_uri":                              i.cfg.URL + JWKSPath,
		DiscoveryRevokedKey:                     i.cfg.URL + RevokedPath,
		"token_endpoint":                        i.cfg.URL + TokenPath,
		"grant_types_supported":                 []string{"client_credentials"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"response_types_supported":              []string{"token"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"ES256", "RS256"},
		"scopes_supported":                      []string{},
	}
}

// keyRecord is a signing key's Data.
type keyRecord struct {
	Alg        string    `json:"alg"`
	PrivateKey []byte    `json:"private_key"` // PKCS#8 DER (base64 in JSON)
	Created    time.Time `json:"created"`
}

type storedKey struct {
	kid string
	rec keyRecord
}

// Claims are an access token's claims that callers use.
type Claims struct {
	Subject  string // the role
	Audience string
	ClientID string // the API key's uid
	Expires  time.Time
}

// Issue signs an access token for sub and aud, naming the API key clientID.
func (i *Issuer) Issue(ctx context.Context, sub, aud, clientID string) (string, error) {
	kid, key, err := i.signingKey(ctx)
	if err != nil {
		return "", err
	}
	now := i.cfg.Now()
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	return auth.Mint(key, auth.MintOptions{
		Subject: sub, Audience: aud, Issuer: i.cfg.URL, Expiry: i.cfg.TokenTTL, Now: now,
		Claims: map[string]any{
			"client_id": clientID, "iat": now.Unix(),
			"jti": strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(jti)),
		},
		Headers: map[string]any{"kid": kid, "typ": "at+jwt"},
	})
}

// Verify checks a token this issuer signed (signature by a published key,
// iss, exp) and returns its claims. The audience is not checked.
func (i *Issuer) Verify(ctx context.Context, token string) (Claims, error) {
	keys, err := i.keys(ctx)
	if err != nil {
		return Claims{}, err
	}
	mc := jwt.MapClaims{}
	_, err = i.parser.ParseWithClaims(token, mc, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		for _, k := range keys {
			if k.kid == kid && k.rec.Alg == t.Method.Alg() {
				s, err := i.signer(k)
				if err != nil {
					return nil, err
				}
				return s.Public(), nil
			}
		}
		return nil, fmt.Errorf("unknown key id %q", kid)
	})
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	c := Claims{}
	c.Subject, _ = mc["sub"].(string)
	c.ClientID, _ = mc["client_id"].(string)
	c.Audience, _ = mc["aud"].(string)
	if exp, err := mc.GetExpirationTime(); err == nil && exp != nil {
		c.Expires = exp.Time
	}
	if c.Subject == "" || c.ClientID == "" {
		return Claims{}, fmt.Errorf("%w: no sub or client_id", ErrInvalidToken)
	}
	return c, nil
}

// JWKS is the published key set: the signing key and the replaced keys
// still in their grace period.
// It makes the signing key first when there is none or it is due for
// rotation, so the set always holds the key the next token is signed with.
func (i *Issuer) JWKS(ctx context.Context) (jose.JSONWebKeySet, error) {
	if _, _, err := i.signingKey(ctx); err != nil {
		return jose.JSONWebKeySet{}, err
	}
	keys, err := i.keys(ctx)
	if err != nil {
		return jose.JSONWebKeySet{}, err
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, k := range keys {
		s, err := i.signer(k)
		if err != nil {
			return set, err
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: s.Public(), KeyID: k.kid, Algorithm: k.rec.Alg, Use: "sig"})
	}
	return set, nil
}

// Rotate makes a new signing key now; the current one stays published for
// Grace.
func (i *Issuer) Rotate(ctx context.Context) error {
	return i.cfg.Store.Tx(ctx, func(w store.Writer) error {
		_, err := i.createKey(ctx, w)
		return err
	})
}

// signingKey returns the newest key, making one when there is none or the
// newest is older than Rotation.
func (i *Issuer) signingKey(ctx context.Context) (string, crypto.Signer, error) {
	keys, err := i.keys(ctx)
	if err != nil {
		return "", nil, err
	}
	if n := len(keys); n == 0 || i.cfg.Now().Sub(keys[n-1].rec.Created) >= i.cfg.Rotation {
		err := i.cfg.Store.Tx(ctx, func(w store.Writer) error {
			cur, err := listKeys(ctx, w)
			if err != nil {
				return err
			}
			if n := len(cur); n > 0 && i.cfg.Now().Sub(cur[n-1].rec.Created) < i.cfg.Rotation {
				return nil // another replica rotated meanwhile
			}
			_, err = i.createKey(ctx, w)
			return err
		})
		if err != nil {
			return "", nil, fmt.Errorf("issuer: new signing key: %w", err)
		}
		if keys, err = i.keys(ctx); err != nil {
			return "", nil, err
		}
	}
	k := keys[len(keys)-1]
	s, err := i.signer(k)
	return k.kid, s, err
}

// createKey stores a new key of cfg.Alg.
func (i *Issuer) createKey(ctx context.Context, w store.Writer) (storedKey, error) {
	priv, _, err := auth.NewKeyPair(i.cfg.Alg)
	if err != nil {
		return storedKey{}, err
	}
	id := make([]byte, 10)
	if _, err := rand.Read(id); err != nil {
		return storedKey{}, err
	}
	k := storedKey{kid: strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(id)),
		rec: keyRecord{Alg: i.cfg.Alg, PrivateKey: priv, Created: i.cfg.Now().UTC()}}
	data, err := json.Marshal(k.rec)
	if err != nil {
		return storedKey{}, err
	}
	_, err = w.Create(ctx, store.Object{Kind: Collection, Name: Collection + "/" + k.kid, Data: data}, "")
	return k, err
}

// keys lists the published keys, oldest first, deleting those past their
// grace period.
func (i *Issuer) keys(ctx context.Context) ([]storedKey, error) {
	all, err := listKeys(ctx, i.cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("issuer: signing keys: %w", err)
	}
	now := i.cfg.Now()
	var live []storedKey
	for j, k := range all {
		if j+1 < len(all) && now.Sub(all[j+1].rec.Created) >= i.cfg.Grace {
			err := i.cfg.Store.Delete(ctx, Collection, Collection+"/"+k.kid, "")
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("issuer: retire signing key: %w", err)
			}
			i.mu.Lock()
			delete(i.parsed, k.kid)
			i.mu.Unlock()
			continue
		}
		live = append(live, k)
	}
	return live, nil
}

func listKeys(ctx context.Context, r store.Reader) ([]storedKey, error) {
	var out []storedKey
	q := store.ListQuery{Kind: Collection, PageSize: 1000}
	for {
		objs, next, err := r.List(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			var rec keyRecord
			if err := json.Unmarshal(o.Data, &rec); err != nil {
				return nil, fmt.Errorf("decode %s: %w", o.Name, err)
			}
			out = append(out, storedKey{kid: strings.TrimPrefix(o.Name, Collection+"/"), rec: rec})
		}
		if next == "" {
			break
		}
		q.PageToken = next
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].rec.Created.Before(out[b].rec.Created) })
	return out, nil
}

func (i *Issuer) signer(k storedKey) (crypto.Signer, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if s, ok := i.parsed[k.kid]; ok {
		return s, nil
	}
	pk, err := x509.ParsePKCS8PrivateKey(k.rec.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("issuer: signing key %s: %w", k.kid, err)
	}
	s, ok := pk.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("issuer: signing key %s is a %T", k.kid, pk)
	}
	i.parsed[k.kid] = s
	return s, nil
}
