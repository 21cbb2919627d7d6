package auth

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Method names, as Pulsar clients send them in CONNECT's auth_method_name.
const (
	MethodToken = "token"
	MethodTLS   = "tls"
	MethodBasic = "basic"
	// MethodAnonymous names identities given to clients without credentials.
	MethodAnonymous = "anonymous"
)

// ErrUnauthenticated is wrapped by every authentication failure. Its message
// is safe to show the client: it never names another tenant's resources.
var ErrUnauthenticated = errors.New("authentication failed")

// Error is an authentication failure with the reason the client is told.
type Error struct{ Reason string }

func (e *Error) Error() string { return "authentication failed: " + e.Reason }

// Unwrap makes errors.Is(err, ErrUnauthenticated) hold.
func (e *Error) Unwrap() error { return ErrUnauthenticated }

func failf(format string, args ...any) error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// Identity is an authenticated client.
type Identity struct {
	// Role is the principal's name, the subject of authorization.
	Role string
	// Method is the provider that authenticated it.
	Method string
	// Expires is when the credentials stop being valid; zero: never.
	Expires time.Time
	// Issuer and ClientID name, for a token of an OAuth2 issuer, that
	// issuer and the client it issued the token to (its client_id claim):
	// what a revocation names.
	Issuer, ClientID string
}

// Credentials are what a client presents.
type Credentials struct {
	// Method is CONNECT's auth_method_name ("" when none was sent).
	Method string
	// Data is CONNECT's auth_data (a token, "user:password", nothing for tls).
	Data []byte
	// PeerCertificates are the client's verified TLS certificates, leaf
	// first; nil on a plain-text connection or without a client certificate.
	PeerCertificates []*x509.Certificate
}

// Provider authenticates one method.
type Provider interface {
	Method() string
	Authenticate(ctx context.Context, c Credentials) (Identity, error)
}

// Authenticator dispatches credentials to the provider of their method.
type Authenticator struct {
	providers map[string]Provider
	anonymous string
}

// NewAuthenticator returns an Authenticator over providers. anonymousRole,
// when set, is the role of clients that present no credentials (Pulsar's
// anonymousUserRole); when empty, such clients are refused.
func NewAuthenticator(anonymousRole string, providers ...Provider) (*Authenticator, error) {
	a := &Authenticator{providers: map[string]Provider{}, anonymous: anonymousRole}
	for _, p := range providers {
		if _, dup := a.providers[p.Method()]; dup {
			return nil, fmt.Errorf("auth: two providers for method %q", p.Method())
		}
		a.providers[p.Method()] = p
	}
	if len(a.providers) == 0 {
		return nil, errors.New("auth: no authentication provider configured")
	}
	return a, nil
}

// Methods lists the enabled methods, sorted.
func (a *Authenticator) Methods() []string {
	out := make([]string, 0, len(a.providers))
	for m := range a.providers {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Revoked reports whether the credentials id was authenticated with have
// been revoked since (an OAuth2 issuer's revocation list names its client).
func (a *Authenticator) Revoked(id Identity) bool {
	p, ok := a.providers[id.Method].(interface{ Revoked(Identity) bool })
	return ok && p.Revoked(id)
}

// Authenticate checks c. A client that names no method is anonymous (when
// an anonymous role is configured); one that names "tls" without a client
// certificate, or a method that is not enabled, is refused.
func (a *Authenticator) Authenticate(ctx context.Context, c Credentials) (Identity, error) {
	if c.Method == "" || (c.Method == "none" && len(c.Data) == 0) {
		// A client with a certificate but no method name (the C++ client
		// with only tlsCertificateFilePath set) is still a tls client.
		if len(c.PeerCertificates) > 0 {
			if p, ok := a.providers[MethodTLS]; ok {
				return p.Authenticate(ctx, c)
			}
		}
		if a.anonymous != "" {
			return Identity{Role: a.anonymous, Method: MethodAnonymous}, nil
		}
		return Identity{}, failf("no credentials presented and anonymous access is off")
	}
	p, ok := a.providers[c.Method]
	if !ok {
		return Identity{}, failf("authentication method %q is not enabled (enabled: %s)", c.Method, strings.Join(a.Methods(), ", "))
	}
	return p.Authenticate(ctx, c)
}

// AuthenticateHTTP authenticates an admin REST request: "Authorization:
// Bearer <token>" (token provider), "Authorization: Basic" (basic), else
// the verified client certificate (tls), else the anonymous role.
func (a *Authenticator) AuthenticateHTTP(r *http.Request) (Identity, error) {
	var certs []*x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		certs = r.TLS.VerifiedChains[0]
	}
	h := r.Header.Get("Authorization")
	scheme, value, _ := strings.Cut(h, " ")
	value = strings.TrimSpace(value)
	switch {
	case h == "":
		return a.Authenticate(r.Context(), Credentials{PeerCertificates: certs})
	case strings.EqualFold(scheme, "Bearer"):
		return a.Authenticate(r.Context(), Credentials{Method: MethodToken, Data: []byte(value), PeerCertificates: certs})
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return Identity{}, failf("malformed Basic credentials")
		}
		return a.Authenticate(r.Context(), Credentials{Method: MethodBasic, Data: raw, PeerCertificates: certs})
	}
	return Identity{}, failf("unsupported Authorization scheme %q", scheme)
}
