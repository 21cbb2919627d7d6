// Package auth authenticates Pulsar clients and authorizes what they do, for
// the broker's binary protocol and its admin REST API alike.
//
// # Authentication
//
// A Provider turns the credentials a client presents into an Identity (a
// role). The providers use Pulsar's method names, so every client's existing
// options work unchanged:
//
//   - "token" (TokenProvider): a JWT signed with a secret key (HS256/384/512)
//     or verified with a public key (RS*, PS*, ES*); the role is the "sub"
//     claim (configurable); "aud" is checked when an audience is set; "exp"
//     and "nbf" are honoured; "alg: none" and tokens over MaxTokenSize are
//     refused. OAuth2 clients present their access token the same way.
//   - "token" (OIDCProvider): a JWT signed by an OAuth2 / OpenID Connect
//     issuer (RS*, PS*, ES*), verified with the key its "kid" names in the
//     issuer's JWKS (found through {issuer}/.well-known/openid-configuration
//     or configured). Several issuers may be trusted; "iss" picks one, "aud"
//     must name one of the configured audiences, "exp" is required. Tokens of
//     other issuers go to a fallback provider (a static-key TokenProvider)
//     when one is set. The Pulsar clients' "oauth2" plugin sends its access
//     token this way.
//   - "tls" (TLSProvider): the verified client certificate's common name.
//   - "basic" (BasicProvider): "user:password" checked against an htpasswd
//     file (apr1-MD5, bcrypt or {SHA} entries).
//
// An Authenticator holds the enabled providers and the anonymous role (the
// role of a client that presents no credentials; empty: such clients are
// refused). Authenticate is called once at CONNECT and again on each
// AUTH_RESPONSE; AuthenticateHTTP reads an http.Request's Authorization
// header or its client certificate.
//
// # Authorization
//
// Authorizer answers "may role R do action A on resource X" by evaluating
// the Rego policy data.magnetar.pulsar (package policy, rego/pulsar.rego)
// with the facts the caller collects from the metadata store: the tenant's
// admin roles, the namespace's and topic's grants, the subscription's roles
// and the namespace's subscription auth mode. Superusers are part of the
// Authorizer's configuration. Callers cache decisions (the broker caches per
// connection and resource, dropping the cache when a policy record changes),
// so Rego is never evaluated per message.
//
// # TLS
//
// CertReloader serves a certificate and key pair (and a trust bundle for
// client certificates) read from files, re-reading them when they change
// on disk, so certificates rotate without a restart. A client's
// CertReloader (NewClientCertReloader) holds a trust bundle and, for
// mutual TLS, a client certificate: the ledger client and the metadata
// store client use one for the links to bookies and etcd.
//
// # Issuer keys
//
// OIDCProvider keeps each issuer's key set in memory. One goroutine per
// issuer fetches it at start and every Refresh (sooner, with backoff, after
// a failure); a token naming an unknown kid fetches it at once, at most
// every MinRefresh per issuer, with concurrent callers sharing one fetch. A
// failed fetch never drops keys: the last set fetched keeps working while
// the issuer is down. Close stops the goroutines and waits for them.
//
// # Concurrency
//
// Providers, Authenticator, Authorizer and CertReloader are safe for
// concurrent use. Only OIDCProvider starts goroutines (see Issuer keys); its
// creator owns them and calls Close.
package auth
