// Package provisioner defines the seam between the region agent and the
// machinery that runs a cluster's data plane: the Provisioner interface, the
// ClusterSpec the agent asks for and the ClusterStatus it reads back, and an
// in-memory implementation (Memory) for tests of the agent's logic.
//
// Implementations: Memory (this package) and the process provisioner
// (regions/provisioner/process), which runs metadata, bookie and broker
// processes on loopback ports. Both pass the conformance suite in
// regions/provisioner/provisionertest.
//
// Callers: the region agent (regions/agent) and `magnetar up`.
//
// Concurrency: every Provisioner method is safe for concurrent use; calls on
// one cluster are serialized by the implementation.
package provisioner
