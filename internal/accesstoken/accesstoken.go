package accesstoken

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/internal/httpjson"
)

// ErrAPIKey: the API key is not of the form mgk_<uid>_<secret>.
var ErrAPIKey = errors.New("accesstoken: the API key is not of the form mgk_<uid>_<secret>")

// RefusedError is the token endpoint's refusal (RFC 6749 §5.2).
type RefusedError struct {
	Audience string
	// Status is the HTTP status code.
	Status int
	// Code is the OAuth2 error code ("invalid_target", "invalid_client"),
	// "" when the answer was not an OAuth2 error.
	Code        string
	Description string
}

func (e *RefusedError) Error() string {
	code := e.Code
	if code == "" {
		code = fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	}
	if e.Description == "" {
		return fmt.Sprintf("the control plane refused a token for %s: %s", e.Audience, code)
	}
	return fmt.Sprintf("the control plane refused a token for %s: %s: %s", e.Audience, code, e.Description)
}

// Source gets and caches access tokens, one per audience. Create it with
// New.
type Source struct {
	controlPlane string // http(s)://host:port
	apiKey       string
	hc           *http.Client
	fixed        string // token endpoint set by WithTokenEndpoint

	mu       sync.Mutex
	issuer   string // from the discovery document
	endpoint string // token endpoint
	subject  string // sub of the first token
	byAud    map[string]cached
}

type cached struct {
	token   string
	renewAt time.Time
	expires time.Time
	life    time.Duration
}

// expiryMargin is how long before its expiry a cached token is no longer
// handed out when its renewal fails: a token must not expire on its way
// to the broker.
const expiryMargin = 5 * time.Second

// Option configures a Source.
type Option func(*Source)

// WithHTTPClient sends the requests with hc. Default: an http.Client with
// a 10 s timeout over http.DefaultTransport.
func WithHTTPClient(hc *http.Client) Option { return func(s *Source) { s.hc = hc } }

// WithTokenEndpoint posts the token requests to endpoint instead of the
// one the control plane's discovery document names (Issuer still reads
// the document).
func WithTokenEndpoint(endpoint string) Option { return func(s *Source) { s.fixed = endpoint } }

// New returns a Source exchanging apiKey at the control plane at
// controlPlane ("http(s)://host:port": its issuer URL, where
// issuer.DiscoveryPath is served).
func New(controlPlane, apiKey string, opts ...Option) *Source {
	s := &Source{controlPlane: strings.TrimRight(controlPlane, "/"), apiKey: apiKey,
		hc: &http.Client{Timeout: 10 * time.Second}, byAud: map[string]cached{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Issuer returns the issuer URL from the control plane's discovery
// document, read once.
func (s *Source) Issuer(ctx context.Context) (string, error) {
	iss, _, err := s.discover(ctx)
	return iss, err
}

func (s *Source) discover(ctx context.Context) (issuerURL, endpoint string, err error) {
	s.mu.Lock()
	issuerURL, endpoint = s.issuer, s.endpoint
	s.mu.Unlock()
	if issuerURL != "" {
		return issuerURL, endpoint, nil
	}
	var doc struct {
		Issuer        string `json:"issuer"`
		TokenEndpoint string `json:"token_endpoint"`
	}
	if err := httpjson.Get(ctx, s.hc, s.controlPlane+issuer.DiscoveryPath, 1<<20, &doc); err != nil {
		return "", "", fmt.Errorf("accesstoken: issuer discovery: %w", err)
	}
	if doc.Issuer == "" || doc.TokenEndpoint == "" {
		return "", "", errors.New("accesstoken: issuer discovery: no issuer or token endpoint")
	}
	s.mu.Lock()
	s.issuer, s.endpoint = doc.Issuer, doc.TokenEndpoint
	s.mu.Unlock()
	return doc.Issuer, doc.TokenEndpoint, nil
}

// Token returns a valid access token for aud, asking the token endpoint
// when the cached one is due for renewal (at half its life). When the
// renewal fails (the control plane is unreachable, or refuses) the cached
// token is returned while it has more than expiryMargin left: the
// caller's data-plane connections outlive a control-plane outage by the
// rest of the token's life. A refusal that outlives the token is then
// the caller's error.
func (s *Source) Token(ctx context.Context, aud string) (string, error) {
	s.mu.Lock()
	c, ok := s.byAud[aud]
	s.mu.Unlock()
	now := time.Now()
	if ok && now.Before(c.renewAt) {
		return c.token, nil
	}
	tok, err := s.fetch(ctx, aud)
	if err != nil && ok && time.Now().Add(expiryMargin).Before(c.expires) {
		return c.token, nil
	}
	return tok, err
}

// fetch asks the token endpoint for a token for aud and caches it.
func (s *Source) fetch(ctx context.Context, aud string) (string, error) {
	requested := time.Now()
	endpoint := s.fixed
	if endpoint == "" {
		var err error
		if _, endpoint, err = s.discover(ctx); err != nil {
			return "", err
		}
	}
	uid, ok := APIKeyUID(s.apiKey)
	if !ok {
		return "", ErrAPIKey
	}
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {uid}, "client_secret": {s.apiKey}, "audience": {aud}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := s.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("accesstoken: token for %s: %w", aud, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var tr struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.Unmarshal(body, &tr); err != nil || resp.StatusCode != http.StatusOK || tr.AccessToken == "" {
		return "", &RefusedError{Audience: aud, Status: resp.StatusCode, Code: tr.Error, Description: tr.Description}
	}
	life := time.Duration(tr.ExpiresIn) * time.Second
	s.mu.Lock()
	s.byAud[aud] = cached{token: tr.AccessToken, renewAt: requested.Add(life / 2), expires: requested.Add(life), life: life}
	if s.subject == "" {
		s.subject = SubjectOf(tr.AccessToken)
	}
	s.mu.Unlock()
	return tr.AccessToken, nil
}

// Subject is the sub of the tokens (the role brokers see), fetching a
// first token for aud if none was fetched yet.
func (s *Source) Subject(ctx context.Context, aud string) (string, error) {
	s.mu.Lock()
	sub := s.subject
	s.mu.Unlock()
	if sub != "" {
		return sub, nil
	}
	if _, err := s.Token(ctx, aud); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subject == "" {
		return "", errors.New("accesstoken: the control plane's token has no sub")
	}
	return s.subject, nil
}

// ShortestLife is the shortest lifetime of the tokens cached (0 before
// the first).
func (s *Source) ShortestLife() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, c := range s.byAud {
		if d == 0 || c.life < d {
			d = c.life
		}
	}
	return d
}

// APIKeyUID is the uid of an API key "mgk_<uid>_<secret>", its OAuth2
// client id.
func APIKeyUID(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "mgk_")
	uid, _, ok2 := strings.Cut(rest, "_")
	return uid, ok && ok2 && uid != ""
}

// SubjectOf reads the sub claim of a JWT without verifying it (a token just
// received from the issuer over a connection the caller trusts).
func SubjectOf(jwt string) string {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(raw, &claims) != nil {
		return ""
	}
	return claims.Sub
}
