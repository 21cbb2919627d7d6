// Package accesstoken gets access tokens from the control plane's OAuth2
// token endpoint (controlplane/apiserver, package issuer) with an API key:
// the client-credentials grant, client_id the key's uid (APIKeyUID),
// client_secret the whole key, audience the data plane the token is for
// (issuer.ClusterAudience or issuer.OrganizationAudience).
//
// Called by regions/agent (its tokens for the data planes it runs, found
// through the issuer's discovery document) and controlplane/cli (the
// data-plane commands on authenticated clusters, at the address the CLI
// dials: WithTokenEndpoint).
//
// A Source caches one token per audience and asks for a new one at half
// its life; while the renewal fails it keeps handing out the cached token
// until 5 s before it expires, so a control-plane outage costs nothing for
// half a token's life. A refusal of the token endpoint is a *RefusedError carrying
// the RFC 6749 error code.
//
// # Concurrency
//
// A Source is safe for concurrent use and starts no goroutine; concurrent
// calls for an expired token may each ask the endpoint.
package accesstoken
