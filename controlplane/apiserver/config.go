package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/policy"
)

// DefaultListen is the default API address.
const DefaultListen = "127.0.0.1:7080"

// Authorizer decides every call; *policy.Engine implements it.
type Authorizer interface {
	Decide(context.Context, policy.Input) (policy.Decision, error)
}

var _ Authorizer = (*policy.Engine)(nil)

// Config configures a Server. Store and Authorizer are required.
type Config struct {
	// Listen is the TCP address for gRPC and REST; default DefaultListen.
	// Port 0 picks a free port (see Server.Addr).
	Listen string
	// Store holds all state. The server does not close it.
	Store store.Store
	// Authorizer decides authorization and admission.
	Authorizer Authorizer
	// Logger; default slog.Default().
	Logger *slog.Logger
	// BootstrapKeyFile receives the operator's API key (mode 0600) when the
	// store has no operator yet. Required only then.
	BootstrapKeyFile string
	// TracerProvider for the gRPC spans; default an SDK tracer provider
	// without exporter (spans are created and propagated, not exported).
	TracerProvider trace.TracerProvider
	// BillingGrace is how long after a month its invoice stays a draft
	// (late usage still changes it); default DefaultBillingGrace.
	BillingGrace time.Duration
	// Now is the clock of billing (periods, finalization); default
	// time.Now.
	Now func() time.Time

	// IssuerURL is the OAuth2 / OpenID Connect issuer identifier of the
	// access tokens this server issues (their "iss"; clients and brokers
	// find {IssuerURL}/.well-known/openid-configuration). Default
	// "http://" + the bound listen address (127.0.0.1 for an unspecified
	// host). Set it to the URL clients reach this server at.
	IssuerURL string
	// AccessTokenTTL is the lifetime of access tokens; default
	// issuer.DefaultTokenTTL (an hour: revocations reach brokers through
	// the revocation list, not through expiry).
	AccessTokenTTL time.Duration
	// SigningAlg of new token signing keys: "ES256" (default) or "RS256".
	SigningAlg string
	// SigningKeyRotation is the signing key's age when a new one replaces
	// it (default issuer.DefaultRotation); SigningKeyGrace is how long a
	// replaced key stays in the JWKS (default issuer.DefaultGrace).
	SigningKeyRotation, SigningKeyGrace time.Duration
	// TokenAudiences are audiences, besides this control plane and the
	// clusters' (issuer.ClusterAudience), that the token endpoint issues
	// tokens for: brokers the control plane does not manage.
	TokenAudiences []string
	// Discovery, when set, is the Consul catalog watch (discovery.go):
	// regions show their Consul health and replication groups take it as
	// a health input of automatic failover. Nil: static configuration.
	// The server does not start or stop it.
	Discovery Discovery
}

// DefaultBillingGrace is the default Config.BillingGrace.
const DefaultBillingGrace = 48 * time.Hour

// Validate fills defaults and checks required fields.
func (c *Config) Validate() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Store == nil {
		return errors.New("apiserver: config: Store is required")
	}
	if c.Authorizer == nil {
		return errors.New("apiserver: config: Authorizer is required")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.BillingGrace <= 0 {
		c.BillingGrace = DefaultBillingGrace
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}
