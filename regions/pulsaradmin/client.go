package pulsaradmin

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Sentinels matched by *Error through errors.Is.
var (
	// ErrNotFound: the data plane answered 404.
	ErrNotFound = errors.New("pulsaradmin: not found")
	// ErrConflict: the data plane answered 409.
	ErrConflict = errors.New("pulsaradmin: conflict")
	// ErrPartitions: the desired partitions cannot be reached from the
	// topic's current shape (fewer partitions, or partitioned versus
	// non-partitioned).
	ErrPartitions = errors.New("pulsaradmin: partitions cannot change that way")
)

// Error is a non-2xx answer of the admin API.
type Error struct {
	Method string
	Path   string
	// Status is the HTTP status code.
	Status int
	// Reason is Pulsar's {"reason": ...}, or the body's text.
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("pulsaradmin: %s %s: %d %s", e.Method, e.Path, e.Status, e.Reason)
}

// Is matches ErrNotFound for 404 and ErrConflict for 409.
func (e *Error) Is(target error) bool {
	return (target == ErrNotFound && e.Status == http.StatusNotFound) ||
		(target == ErrConflict && e.Status == http.StatusConflict)
}

// Client talks to one data plane's admin API. Create it with New.
type Client struct {
	base        string // scheme://host[:port], no trailing slash
	hc          *http.Client
	token       string
	tokenSource func(context.Context) (string, error)
	keepAdmin   func(role string) bool
	cluster     string
	replCluster func(string) (string, error)
}

// Option configures a Client.
type Option func(*Client)

// DefaultTimeout bounds each HTTP request unless WithTimeout or
// WithHTTPClient says otherwise.
const DefaultTimeout = 30 * time.Second

// WithHTTPClient uses hc (its Timeout bounds each request). Default: an
// http.Client with DefaultTimeout over a clone of http.DefaultTransport.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTimeout bounds each request to d (default DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		hc := *c.hc
		hc.Timeout = d
		c.hc = &hc
	}
}

// WithRootCAs trusts the certificates of pool, and only them, for an
// https:// admin URL (a cluster's own CA). It changes the transport of the
// HTTP client set so far (the default, or WithHTTPClient's when that comes
// first, if it is an *http.Transport). Default: the system's roots.
func WithRootCAs(pool *x509.CertPool) Option {
	return func(c *Client) {
		base, ok := c.hc.Transport.(*http.Transport)
		if !ok {
			base = http.DefaultTransport.(*http.Transport)
		}
		tr := base.Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc := *c.hc
		hc.Transport = tr
		c.hc = &hc
	}
}

// WithToken sends "Authorization: Bearer <token>" (Pulsar token
// authentication). Default: no authentication.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithTokenSource calls fn for the token of every request, instead of a
// fixed one (short-lived tokens the caller renews); an error of fn fails
// the request.
func WithTokenSource(fn func(context.Context) (string, error)) Option {
	return func(c *Client) { c.tokenSource = fn }
}

// WithKeptAdminRoles makes Apply keep a tenant's admin roles for which
// keep is true, besides the desired ones: roles another owner manages
// (the region agent's, from role bindings). Default: Apply sets exactly
// the desired admin roles.
func WithKeptAdminRoles(keep func(role string) bool) Option {
	return func(c *Client) { c.keepAdmin = keep }
}

// WithClusterName names the data plane's Pulsar cluster, which Apply gives
// tenants as their allowed cluster. Default: the one cluster that
// GET /admin/v2/clusters lists.
func WithClusterName(name string) Option { return func(c *Client) { c.cluster = name } }

// WithReplicationClusterMapper maps the control plane's replication
// cluster names ("organizations/{org}/clusters/{cluster}") to Pulsar
// cluster names for Apply. Default: the name's last segment.
func WithReplicationClusterMapper(fn func(string) (string, error)) Option {
	return func(c *Client) { c.replCluster = fn }
}

// authorize sets req's Authorization header from the token or the token
// source.
func (c *Client) authorize(ctx context.Context, req *http.Request) error {
	tok := c.token
	if c.tokenSource != nil {
		var err error
		if tok, err = c.tokenSource(ctx); err != nil {
			return fmt.Errorf("token: %w", err)
		}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return nil
}

// New returns a client of the admin API at adminURL ("http://host:8080").
func New(adminURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(adminURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("pulsaradmin: admin URL %q: want http(s)://host[:port]", adminURL)
	}
	c := &Client{
		base: strings.TrimSuffix(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
		hc:   &http.Client{Timeout: DefaultTimeout, Transport: http.DefaultTransport.(*http.Transport).Clone()},
		replCluster: func(name string) (string, error) {
			return name[strings.LastIndex(name, "/")+1:], nil
		},
	}
	for _, o := range opts {
		o(c)
	}
	hc := *c.hc // the caller's client may be shared: redirect on a copy
	hc.CheckRedirect = followRedirect
	c.hc = &hc
	return c, nil
}

// followRedirect follows a broker's redirect (an admin call on a topic or
// bundle another broker owns is sent there with 307) with the request's
// credentials: net/http drops Authorization when the redirect names
// another host, as the owner usually is, but not when it leaves https://
// for http://, which would send the token in the clear.
func followRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	first := via[0]
	auth := first.Header.Get("Authorization")
	if auth == "" || req.Header.Get("Authorization") != "" {
		return nil
	}
	if first.URL.Scheme == "https" && req.URL.Scheme != "https" {
		return nil // the answer is then 401, not a leaked token
	}
	req.Header.Set("Authorization", auth)
	return nil
}

// path joins escaped segments under /admin/v2.
func path(segs ...string) string {
	var b strings.Builder
	b.WriteString("/admin/v2")
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// do sends one request. body is JSON-encoded unless it is nil; out, if
// not nil, receives the decoded JSON answer.
func (c *Client) do(ctx context.Context, method, p string, body, out any) error {
	_, raw, err := c.send(ctx, method, p, body)
	if err != nil {
		return err
	}
	if out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("pulsaradmin: %s %s: decode answer: %w", method, p, err)
		}
	}
	return nil
}

// send sends one request and returns the headers and body of a 2xx
// answer; any other answer is an *Error.
func (c *Client) send(ctx context.Context, method, p string, body any) (http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, fmt.Errorf("pulsaradmin: %s %s: encode body: %w", method, p, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+p, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("pulsaradmin: %s %s: %w", method, p, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := c.authorize(ctx, req); err != nil {
		return nil, nil, fmt.Errorf("pulsaradmin: %s %s: %w", method, p, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("pulsaradmin: %s %s: %w", method, p, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("pulsaradmin: %s %s: read answer: %w", method, p, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &Error{Method: method, Path: p, Status: resp.StatusCode}
		var r struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(raw, &r) == nil && r.Reason != "" {
			e.Reason = r.Reason
		} else {
			e.Reason = strings.TrimSpace(string(raw))
		}
		if e.Reason == "" {
			e.Reason = http.StatusText(resp.StatusCode)
		}
		return nil, nil, e
	}
	return resp.Header, raw, nil
}

// ignoreNotFound turns a 404 into success (idempotent deletes).
func ignoreNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// Clusters lists the Pulsar clusters the data plane knows.
func (c *Client) Clusters(ctx context.Context) ([]string, error) {
	var out []string
	err := c.do(ctx, http.MethodGet, path("clusters"), nil, &out)
	return out, err
}

// ClusterData is the part of Pulsar's cluster record a replication peer
// needs: where the data plane reaches it.
type ClusterData struct {
	ServiceURL       string `json:"serviceUrl,omitempty"`
	BrokerServiceURL string `json:"brokerServiceUrl,omitempty"`
	// The TLS URLs, and how this data plane's brokers reach them: over TLS
	// trusting BrokerClientTrustCertsFile, authenticated with an
	// authentication plugin and its parameters (Pulsar's names).
	ServiceURLTLS              string `json:"serviceUrlTls,omitempty"`
	BrokerServiceURLTLS        string `json:"brokerServiceUrlTls,omitempty"`
	BrokerClientTLSEnabled     bool   `json:"brokerClientTlsEnabled,omitempty"`
	BrokerClientTrustCertsFile string `json:"brokerClientTrustCertsFilePath,omitempty"`
	AuthenticationPlugin       string `json:"authenticationPlugin,omitempty"`
	AuthenticationParameters   string `json:"authenticationParameters,omitempty"`
}

// EnsureCluster registers a remote cluster (a replication peer) or
// updates its URLs. It returns what it did: "createCluster",
// "updateCluster", or nothing.
func (c *Client) EnsureCluster(ctx context.Context, name string, d ClusterData) ([]string, error) {
	var cur ClusterData
	err := c.do(ctx, http.MethodGet, path("clusters", name), nil, &cur)
	switch {
	case errors.Is(err, ErrNotFound):
		if err := c.do(ctx, http.MethodPut, path("clusters", name), d, nil); err != nil && !errors.Is(err, ErrConflict) {
			return nil, err
		}
		return []string{"createCluster"}, nil
	case err != nil:
		return nil, err
	case cur == d:
		return nil, nil
	}
	if err := c.do(ctx, http.MethodPost, path("clusters", name), d, nil); err != nil {
		return nil, err
	}
	return []string{"updateCluster"}, nil
}

// AllowClusters adds clusters to a tenant's allowed clusters (a namespace
// may replicate only to those). It returns "updateTenant" or nothing.
func (c *Client) AllowClusters(ctx context.Context, tenant string, clusters []string) ([]string, error) {
	cur, err := c.GetTenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	next := slices.Clone(cur.AllowedClusters)
	for _, cl := range clusters {
		if !slices.Contains(next, cl) {
			next = append(next, cl)
		}
	}
	if len(next) == len(cur.AllowedClusters) {
		return nil, nil
	}
	cur.AllowedClusters, cur.AdminRoles = next, nonNil(cur.AdminRoles)
	if err := c.do(ctx, http.MethodPost, path("tenants", tenant), cur, nil); err != nil {
		return nil, err
	}
	return []string{"updateTenant"}, nil
}

// localCluster is WithClusterName's name or the only cluster listed.
func (c *Client) localCluster(ctx context.Context) (string, error) {
	if c.cluster != "" {
		return c.cluster, nil
	}
	cs, err := c.Clusters(ctx)
	if err != nil {
		return "", err
	}
	if len(cs) != 1 {
		return "", fmt.Errorf("pulsaradmin: the data plane lists clusters %v; name the local one with WithClusterName", cs)
	}
	return cs[0], nil
}

// ---- Tenants ----

// TenantInfo is Pulsar's tenant record.
type TenantInfo struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

// GetTenant reads a tenant; ErrNotFound when it does not exist.
func (c *Client) GetTenant(ctx context.Context, tenant string) (TenantInfo, error) {
	var info TenantInfo
	err := c.do(ctx, http.MethodGet, path("tenants", tenant), nil, &info)
	return info, err
}

// sameSet says whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// EnsureTenant creates the tenant with info, or updates it when its admin
// roles or allowed clusters differ. It returns what it did: "createTenant",
// "updateTenant", or nothing.
func (c *Client) EnsureTenant(ctx context.Context, tenant string, info TenantInfo) ([]string, error) {
	info.AdminRoles = nonNil(info.AdminRoles)
	info.AllowedClusters = nonNil(info.AllowedClusters)
	cur, err := c.GetTenant(ctx, tenant)
	if errors.Is(err, ErrNotFound) {
		err = c.do(ctx, http.MethodPut, path("tenants", tenant), info, nil)
		if !errors.Is(err, ErrConflict) { // else created meanwhile: compare below
			if err != nil {
				return nil, err
			}
			return []string{"createTenant"}, nil
		}
		cur, err = c.GetTenant(ctx, tenant)
	}
	if err != nil {
		return nil, err
	}
	if sameSet(cur.AdminRoles, info.AdminRoles) && sameSet(cur.AllowedClusters, info.AllowedClusters) {
		return nil, nil
	}
	if err := c.do(ctx, http.MethodPost, path("tenants", tenant), info, nil); err != nil {
		return nil, err
	}
	return []string{"updateTenant"}, nil
}

// DeleteTenant deletes a tenant; a missing tenant is not an error. Pulsar
// refuses (409) while the tenant has namespaces.
func (c *Client) DeleteTenant(ctx context.Context, tenant string) error {
	return ignoreNotFound(c.do(ctx, http.MethodDelete, path("tenants", tenant), nil, nil))
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func ptr[T any](v T) *T { return &v }
