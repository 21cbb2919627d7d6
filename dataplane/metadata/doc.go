// Package metadata is the data plane's metadata store: versioned keys with
// compare-and-set, ordered and resumable prefix watches, sessions with
// ephemeral keys, leader election and sequential id generators.
//
// Store is the one interface; backends are an in-memory store (tests), etcd
// embedded in the process (the default) and an external etcd cluster. Every
// backend passes the conformance suite in package metadatatest.
package metadata
