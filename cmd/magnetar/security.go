package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/policy"
)

// securityFlags are the TLS, authentication and authorization flags of the
// broker-serving commands (standalone, broker), named after Pulsar's
// broker.conf settings.
type securityFlags struct {
	tlsAddr, httpsAddr, advertisedTLS string
	tls                               tlsServerFlags
	tokenSecret, tokenPublic          string
	tokenClaim, tokenAudience         string
	htpasswd                          string
	tlsAuth, authorization            bool
	anonymousRole, superusers         string

	oidcIssuers, oidcAudiences []string
	oidcRoleClaim, oidcJWKSURL string
	oidcCacheDir               string
	oidcTrustFile              string
	oidcRefresh                time.Duration
	// oidc is the provider apply built; close stops its key refresh.
	oidc *auth.OIDCProvider
}

func (s *securityFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.tlsAddr, "tls-addr", "", "serve the Pulsar protocol over TLS here too (Pulsar's 6651), e.g. 127.0.0.1:6651")
	f.StringVar(&s.httpsAddr, "https-addr", "", "serve the admin REST API over TLS here too (Pulsar's 8443)")
	f.StringVar(&s.advertisedTLS, "advertised-tls-address", "", "host:port of pulsar+ssl:// URLs in lookups (default: the advertised host with the TLS port)")
	s.tls.register(f, "", "the TLS listeners", "")
	f.StringVar(&s.tokenSecret, "auth-token-secret-key", "", "enable token authentication with this HS256 secret key file")
	f.StringVar(&s.tokenPublic, "auth-token-public-key", "", "enable token authentication with this RSA or EC public key file (DER or PEM)")
	f.StringVar(&s.tokenClaim, "auth-token-claim", "sub", "token claim holding the role")
	f.StringVar(&s.tokenAudience, "auth-token-audience", "", "refuse tokens whose aud does not include this")
	f.StringArrayVar(&s.oidcIssuers, "auth-oidc-issuer", nil, "enable OAuth2/OIDC token authentication with this issuer's keys (its /.well-known/openid-configuration jwks_uri); repeat for several issuers")
	f.StringArrayVar(&s.oidcAudiences, "auth-oidc-audience", nil, "aud an OIDC token must carry (required with --auth-oidc-issuer; repeat to accept several)")
	f.StringVar(&s.oidcRoleClaim, "auth-oidc-role-claim", "sub", "OIDC token claim holding the role")
	f.StringVar(&s.oidcJWKSURL, "auth-oidc-jwks-url", "", "fetch the keys here instead of discovering them (only with a single --auth-oidc-issuer)")
	f.DurationVar(&s.oidcRefresh, "auth-oidc-jwks-refresh", auth.DefaultJWKSRefresh, "how often the issuers' keys are fetched again (an unknown key id fetches them at once, at most every 5s)")
	f.StringVar(&s.oidcTrustFile, "auth-oidc-trust-certs-file", "", "PEM CA certificates trusted for https issuers, besides the system roots")
	f.StringVar(&s.oidcCacheDir, "auth-oidc-cache-dir", "", "keep the issuers' last key sets in files here, loaded at start: a broker restarted while an issuer is unreachable still accepts its tokens (empty: in memory only)")
	f.StringVar(&s.htpasswd, "auth-basic-htpasswd", "", "enable basic authentication against this htpasswd file")
	f.BoolVar(&s.tlsAuth, "auth-tls", false, "enable TLS client-certificate authentication (the certificate's CN is the role)")
	f.StringVar(&s.anonymousRole, "anonymous-role", "", "role of clients that present no credentials (default: they are refused)")
	f.StringVar(&s.superusers, "superuser-roles", "", "comma-separated roles allowed everything (a role ending in * admits every role it prefixes, e.g. operators:*)")
	f.BoolVar(&s.authorization, "authorization", false, "authorize every lookup, producer, subscription and admin call (needs an authentication provider)")
}

// apply sets bc's TLS and auth fields. The caller calls close when the
// broker has shut down.
func (s *securityFlags) apply(bc *broker.Config) (err error) {
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if bc.TLSConfig, err = s.tls.serverConfig(); err != nil {
		return err
	}
	if (s.tlsAddr != "" || s.httpsAddr != "") && bc.TLSConfig == nil {
		return errors.New("--tls-addr and --https-addr need --tls-cert-file and --tls-key-file")
	}
	bc.TLSAddr, bc.AdvertisedTLSAddr = s.tlsAddr, s.advertisedTLS
	var providers []auth.Provider
	var static auth.Provider
	if s.tokenSecret != "" || s.tokenPublic != "" {
		tc := auth.TokenConfig{RoleClaim: s.tokenClaim, Audience: s.tokenAudience}
		var err error
		if s.tokenSecret != "" {
			tc.SecretKey, err = auth.ReadSecretKey(s.tokenSecret)
		} else {
			tc.PublicKey, err = auth.ReadPublicKey(s.tokenPublic)
		}
		if err != nil {
			return err
		}
		p, err := auth.NewTokenProvider(tc)
		if err != nil {
			return err
		}
		static = p
	}
	if len(s.oidcIssuers) > 0 {
		oc := auth.OIDCConfig{Audiences: s.oidcAudiences, RoleClaim: s.oidcRoleClaim, Refresh: s.oidcRefresh,
			TrustFile: s.oidcTrustFile, CacheDir: s.oidcCacheDir, Fallback: static}
		for _, u := range s.oidcIssuers {
			oc.Issuers = append(oc.Issuers, auth.OIDCIssuer{URL: u})
		}
		if s.oidcJWKSURL != "" {
			if len(oc.Issuers) != 1 {
				return errors.New("--auth-oidc-jwks-url needs exactly one --auth-oidc-issuer")
			}
			oc.Issuers[0].JWKSURL = s.oidcJWKSURL
		}
		p, err := auth.NewOIDCProvider(oc)
		if err != nil {
			return err
		}
		s.oidc = p
		providers = append(providers, p)
	} else if static != nil {
		providers = append(providers, static)
	}
	if s.htpasswd != "" {
		p, err := auth.ReadHtpasswd(s.htpasswd)
		if err != nil {
			return err
		}
		providers = append(providers, p)
	}
	if s.tlsAuth {
		if s.tls.trustFile == "" {
			return errors.New("--auth-tls needs --tls-trust-certs-file")
		}
		providers = append(providers, auth.TLSProvider{})
	}
	if len(providers) == 0 {
		if s.authorization {
			return errors.New("--authorization needs an authentication provider (--auth-token-secret-key, --auth-token-public-key, --auth-oidc-issuer, --auth-basic-htpasswd or --auth-tls)")
		}
		return nil
	}
	a, err := auth.NewAuthenticator(s.anonymousRole, providers...)
	if err != nil {
		return err
	}
	bc.Authenticator = a
	if s.authorization {
		eng, err := policy.New()
		if err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		var su []string
		for _, r := range strings.Split(s.superusers, ",") {
			if r = strings.TrimSpace(r); r != "" {
				su = append(su, r)
			}
		}
		bc.Authorizer = auth.NewAuthorizer(eng, su)
	}
	return nil
}

// close stops what apply started (the OIDC key refresh).
func (s *securityFlags) close() {
	if s.oidc != nil {
		s.oidc.Close()
	}
}
