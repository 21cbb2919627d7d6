// Package issuer makes the control plane an OAuth2 / OpenID Connect token
// issuer: it keeps the signing keys, signs short-lived access tokens (JWTs)
// for the principals the API server authenticated, publishes the public
// keys as a JWKS, and verifies its own tokens.
//
// Called by controlplane/apiserver, which serves the discovery document,
// the JWKS and the OAuth2 token endpoint (client_credentials with a service
// account's API key) and accepts the tokens as API credentials. Brokers
// verify the tokens with dataplane/auth's OIDCProvider against the JWKS.
//
// # Tokens
//
// An access token (RFC 9068 shape, header typ "at+jwt") carries iss (the
// issuer URL), sub (the principal's data-plane role, Role), aud (one
// audience), client_id (the API key's uid), iat, exp (iat + TokenTTL) and
// jti. A cluster's audience is ClusterAudience of its resource name; an
// organization's, accepted by all of its managed clusters, is
// OrganizationAudience of its resource name.
//
// # Keys
//
// Signing keys (ES256 P-256 by default, or RS256 2048-bit) live in the
// control-plane store, kind "signingKeys", name "signingKeys/{kid}", so
// every replica of the control plane signs and publishes the same keys. An
// object's Data is JSON: {"alg", "private_key" (base64 PKCS#8 DER),
// "created" (RFC 3339)}. The newest key signs. When it is older than
// Rotation, the next signing call creates a new one (in a serializable
// store transaction, so concurrent replicas agree on one). A key that a
// newer one replaced stays in the JWKS for Grace after the replacement (so
// tokens it signed, and brokers' cached key sets, stay valid), then is
// deleted. The private keys are as secret as the store itself.
//
// # Concurrency
//
// An Issuer is safe for concurrent use and starts no goroutine; every call
// reads the keys from the store (a handful of rows), caching only the
// parsed private keys by kid.
package issuer
