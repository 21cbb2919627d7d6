// Package controlplane is the root of Magnetar's global control plane: the
// managed service's API over the data planes of every region. It holds no
// code itself; its packages are:
//
//   - apiserver: the gRPC + REST/JSON API (api/controlplane/v1) with API-key
//     authentication, OPA authorization and admission (policy/), long-running
//     operations, the region agents' long-poll and the audit log. Run by
//     `magnetar controlplane`.
//   - store: the durable state behind it (one Store interface; SQLite and
//     PostgreSQL in store/sqlstore; the conformance suite in store/storetest).
//
// Dependencies point inward: controlplane may use policy and billing; the
// data plane never imports controlplane. Region agents talk to it only
// through the API (the RegionAgent service).
package controlplane
