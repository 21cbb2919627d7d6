// Package terraform is the Magnetar Terraform provider
// (terraform-provider-magnetar), built on terraform-plugin-framework. It
// manages organizations, service accounts, API keys, role bindings,
// clusters and a cluster's Pulsar tenants, namespaces and topics through
// the public control-plane API (api/controlplane/v1, over gRPC, the way
// the magnetar CLI calls it); it never reads the control plane's store.
//
// Callers: cmd/terraform-provider-magnetar (providerserver.Serve of New)
// and the acceptance tests, which serve New in-process to a real Terraform
// (or OpenTofu) CLI.
//
// # Mapping onto the API
//
// Every resource's id is its full resource name (AIP-122), e.g.
// "organizations/acme/clusters/dev"; import accepts that name or its short
// path of ids ("acme/dev"). Parents are referenced by full name
// (organization = magnetar_organization.acme.id). Updates send the etag read
// last and a field mask of the attributes that changed; an ABORTED answer
// (stale etag) re-reads the resource and sends the update again with the
// fresh etag. Calls answered UNAVAILABLE or RESOURCE_EXHAUSTED (HTTP 503,
// 429) are retried with exponential backoff. Creates carry a request_id,
// so a retried create never makes a second resource.
//
// Cluster create, update and delete wait for their long-running operation
// (WaitOperation in a loop) within the resource's timeouts block. Pulsar
// tenants, namespaces and topics are applied to the data plane by the
// region agent after the API has recorded them; their create and update
// wait, within their timeouts block, until the resource's state is
// APPLIED.
//
// Drift: Read stores what the API answers, so a change made through the
// CLI or REST is planned back; a resource the API no longer has is removed
// from the state and planned for creation; an API key found REVOKED or
// EXPIRED is planned for replacement. A cluster with deletion_protection
// fails any plan that destroys or replaces it. Every resource type has a
// data source of the same schema (all computed) that reads one resource by
// name, and magnetar_regions lists the regions.
//
// Plan-time validation repeats the API's naming rules (policy/rego
// admission.rego, controlplane/apiserver) with the API's own messages, so
// an invalid name fails `terraform plan` instead of `apply`.
//
// # Concurrency
//
// Terraform calls a provider's resources concurrently. The Client built by
// Configure is shared by all of them; it holds only a gRPC connection and
// immutable settings, and is safe for concurrent use. No goroutine outlives
// the call that started it.
package terraform
