// Package pulsaradmin is a small client of Pulsar's admin REST API v2
// (/admin/v2/...), as Apache Pulsar documents it and Magnetar's brokers
// serve it (dataplane/admin). It makes tenants, namespaces (with their
// policies) and topics match a desired state: every Ensure method reads
// what exists, creates it when absent and changes only what differs, so
// calling it again is a no-op; every Delete method treats "already gone"
// as success.
//
// Apply, Remove and ApplyChange map the control plane's Tenant, Namespace
// and Topic messages (api/controlplane/v1) to those calls, and its
// PulsarFunction, PulsarSource and PulsarSink to the function workers'
// admin REST API v3 (/admin/v3/functions, /sources, /sinks) through
// Apache's pulsaradmin client (functions.go; InstanceStatus reads their
// instances' status); the region agent
// (regions/agent) calls them for each PulsarResourceChange it receives from
// WatchDesiredState, then reports the result with ReportResourceStatus.
//
// Errors from the data plane are *Error values carrying the HTTP status and
// Pulsar's reason ({"reason": "..."}); errors.Is(err, ErrNotFound) and
// ErrConflict test the common ones.
//
// Concurrency: a Client is safe for concurrent use; it holds no state
// besides its configuration and an http.Client. Every call takes a context
// first; each HTTP request is also bounded by the client's timeout
// (WithTimeout, default 30s). The package starts no goroutines.
package pulsaradmin
