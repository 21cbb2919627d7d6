// Package store is the control plane's durable state: one Store interface
// (store.go) over SQL, with SQLite (pure Go, embedded, the default) and
// PostgreSQL (production) backends sharing one schema and one migration
// list, and one conformance suite (storetest) that every backend passes.
//
// The store keeps opaque objects (the API layer's resources) keyed by kind
// and resource name, plus a change log ordered by a global revision that
// region agents follow, request ids for idempotent creates, and the audit
// log. It does not know the API's message types. UsageStore (usage.go)
// adds hourly usage records for billing: per idempotency key the newest
// total and revision (a head) and the entries each billing period bills;
// the caller decides from the head what a record does (billing.Ingest),
// inside the store's transaction.
package store
