// Package memstore is the in-memory metadata.Store: the backend of unit
// tests and of tools that need no durability. Components under test get one
// with New(); it passes the conformance suite in package metadatatest.
//
// # Model
//
// One mutex guards the whole store. Every write (a put, a delete, or the
// deletion of all ephemeral keys of an ending session) takes the next value
// of a global revision counter, and a key's Version is the revision of its
// last write, as in etcd. The events of the last Options.HistorySize
// revisions are kept so that Watch(fromRevision) can replay them; a watch
// from an older revision, or one that falls that far behind, fails with
// metadata.ErrCompacted. Compact drops history on demand.
//
// Sessions are leases with a TTL. A lease loop ticking every
// Options.TickInterval refreshes every open session (the keepalive is
// automatic while the session is open) and expires sessions whose deadline
// passed. Tests make sessions die with ExpireSession (at once) or
// SuspendKeepAlive (by the clock, after the TTL). Elections follow etcd's
// recipe: each candidate creates the ephemeral key election/<session id in
// hex>, and the candidate whose key was created first leads.
//
// Sequences (NextID) live as long as the Store.
//
// # Concurrency
//
// All methods are safe for concurrent use. The store owns two kinds of
// goroutines: the lease loop, and one per watch that copies history under the
// lock and sends outside it, so a slow reader never blocks writers. Close
// stops and waits for all of them; Watcher.Close stops one.
package memstore
