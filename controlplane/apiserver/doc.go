// Package apiserver serves Magnetar's control-plane API
// (api/controlplane/v1) over gRPC and REST/JSON on one TCP listener.
//
// It owns the API's behaviour: authentication by API key, authorization and
// admission through a policy Authorizer on every call, Google API rules
// (etags, request ids, field masks, pagination), long-running operations for
// clusters, the region agents' long-poll, the audit log, and the bootstrap
// operator key. State lives in a store.Store (controlplane/store); the
// server keeps none of its own besides a wake-up channel for long-polls.
//
// Service discovery (discovery.go): with Config.Discovery (a Consul catalog
// watch) each Region carries its Consul health (Region.consul, read at
// request time, never stored), and the replication monitor takes Consul's
// health of a member cluster as a second input of automatic failover.
//
// Called by cmd/magnetar (`magnetar controlplane`) and by tests: New(cfg)
// binds the listener and bootstraps the store, Serve(ctx) serves until ctx
// ends or Shutdown is called, Shutdown(ctx) stops gracefully.
//
// Transport. One listener speaks HTTP/1.1 and cleartext HTTP/2 (h2c, the
// standard library's unencrypted HTTP/2): requests whose content type is
// application/grpc go to the gRPC server, everything else to an HTTP mux
// with /openapi.json (Swagger 2.0), /v3/openapi.json (OpenAPI 3, generated
// by api/openapi3gen), /healthz, /metrics, the OAuth2 endpoints and the
// grpc-gateway mux. The mux
// is wrapped by the access log and the HTTP request metrics (accesslog.go):
// one slog line per request with the authenticated principal, which the
// gRPC interceptor hands back through a per-request token the gateway sends
// as metadata; at info level for changes and failures, at debug level for
// what only read (reads, and the agents' and brokers' polling). A client's gRPC calls get one line each from
// logInterceptor; calls over the gateway's in-process connection do not. The
// gateway does not call the service implementations directly: it is a gRPC
// client of the same grpc.Server over an in-process connection (bufconn), so
// REST calls pass through exactly the same interceptors (authentication,
// error mapping) and OpenTelemetry stats handler as gRPC calls. The gateway
// forwards the HTTP Authorization header as gRPC metadata "authorization".
//
// Authentication: "authorization: Bearer mgk_<uid>_<secret>". The uid finds
// the key (store.GetByUID); SHA-256 of the secret is compared in constant
// time with the stored hash (secrets are 256 random bits, so a slow hash
// adds nothing). Revoked and expired keys are refused with UNAUTHENTICATED.
// A bearer JWT is an access token of this server's issuer (package issuer):
// its signature, iss and exp are checked and the key its client_id names
// must still be active, so revoking a key stops its tokens here at once.
//
// OAuth2 (oauth.go; docs/security.md): the server is an OpenID Connect
// issuer at Config.IssuerURL. The mux serves discovery, the JWKS and the
// token endpoint (client_credentials; the client is an API key) outside the
// gateway; tokens carry the key's principal as data-plane role and an
// audience the server knows (itself, Config.TokenAudiences, or a cluster of
// the caller's organization).
//
// Request checks before the handler (auth.go's interceptor): free-text
// fields within controlplanev1.TextLimits (limits.go); a request with a
// request_id gets a fingerprint, stored with the resource or operation it
// creates, so a reused request_id with another request is refused
// (requestid.go, AIP-155).
//
// Authorization: every call builds a policy.Input (principal with its role
// bindings from the store, action "<collection>.<verb>", resource, the
// organization's facts) and asks the Authorizer. A denial on a resource of
// another organization answers NOT_FOUND, so existence does not leak; other
// denials answer PERMISSION_DENIED; admission failures answer the decision's
// code with its reasons. Operations (named "operations/{id}") are presented
// to the policy as "<org>/operations/{id}" of the organization they belong
// to. Denied calls are audited in the caller's organization log, so a
// tenant's probing never shows in another tenant's log.
//
// Pulsar tenants, namespaces and topics (svc_pulsar.go) live under a
// cluster ("organizations/{org}/clusters/{c}/tenants/{t}/namespaces/{n}/
// topics/{x}") and their standard methods are synchronous: a write records
// the desired state with state PENDING; WatchDesiredState hands it to the
// region agent of the cluster's region, which applies it
// (regions/pulsaradmin) and reports APPLIED or FAILED with
// ReportResourceStatus (a report that changes nothing writes nothing, so
// the agent's own reports settle). Parents with children cannot be deleted;
// when a cluster's data plane is reported DELETED its Pulsar resources are
// removed with it. Their ids are checked by the policy's Pulsar naming rule
// (admission), as Resource.Kind "tenants"/"namespaces"/"topics" and ID.
//
// Functions, sources and sinks (svc_functions.go) are namespace children
// like topics, with the same synchronous methods; the agent's reports also
// carry their instances' status. Creates and updates pass the resource's
// demand (instances, RAM) as admission attributes and the organization's
// other functions' totals as OrgFacts, so the policy enforces the
// organization's function limits.
//
// Billing (svc_billing.go, svc_budgets.go; docs/billing.md): region agents
// ingest hourly usage totals (operators only; idempotent through the store's
// UsageStore and billing.Ingest), organizations list their usage with
// aggregation, and read invoices: a draft is computed from the usage and
// the price books on every read; the first read after the month's grace
// period (Config.BillingGrace) finalizes it and stores it, after which it
// never changes (late usage becomes adjustments on the open month; credit
// notes correct it). Budgets are evaluated against the current draft after
// each ingestion and on read; an exceeded enforcing budget is an admission
// fact (policy.OrgFacts.BudgetExceeded) of cluster creation.
//
// Concurrency: all methods are safe for concurrent use. Every write and its
// audit event run in one store transaction. Goroutines: Serve owns the HTTP
// server, the in-process gRPC server and a watcher of ctx; Shutdown stops
// them and Serve waits for them before returning. Long-polls (WaitOperation,
// WatchDesiredState) wake on writes made by this process and poll the store
// once a second for writes made by other replicas; they end early when the
// server shuts down.
package apiserver
