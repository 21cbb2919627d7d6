// Package etcdstore is the metadata.Store on etcd v3: a client for an
// external cluster (New), an etcd member run inside the process (StartServer,
// used by `magnetar metadata`), and the two together (StartEmbedded), the
// default store of a standalone process. All of them pass the conformance
// suite in package metadatatest.
//
// # Key layout
//
// A key K is stored as Config.Prefix+K, so stores with different prefixes
// share one etcd without seeing each other. Sequence counters live at
// Prefix+"\x00seq/"+name, outside the '/'-rooted key space, so they never
// show up in Children or Watch. Candidates of an election E are the
// ephemeral keys Prefix+E+"/"+<lease id in hex> (etcd's concurrency
// recipe).
//
// # Mapping to etcd
//
// A Version is the key's ModRevision; compare-and-set is a transaction
// comparing ModRevision (CreateRevision == 0 for NotExists). Children pages
// through keys-only range reads at one revision and skips the subtree of a
// child it has already named. Watch covers the range [P, P+"0") (P and
// P+"/..."), drops keys such as P+".x" that the range also holds, and
// re-creates the etcd watch when its channel closes while still wanted,
// resuming after the last delivered event, so a restart of the server
// causes neither gaps nor duplicates; etcd's compaction becomes
// metadata.ErrCompacted. A Session is a concurrency.Session: a lease with
// keepalive, to which ephemeral keys are bound, and whose Done closes when
// the lease is lost. Elections use concurrency.Election. NextID advances a
// counter key with a compare-and-swap loop.
//
// Concurrent writes of persistent keys (Put, Create, CreateUnless) are
// committed together as one transaction of nested transactions, without
// waiting for a timer (batch.go); writes that depend on each other never
// share a batch.
//
// # Concurrency
//
// All methods are safe for concurrent use. Goroutines are owned as follows:
// one per Watch (stopped by Watcher.Close, the watch context or
// Store.Close), one committing batched writes while any are queued (it
// ends when the queue is empty), one keepalive per Session
// (concurrency.Session) and one per held Leadership (stopped by Resign or
// the end of its session). Store.Close revokes the open sessions' leases,
// stops every goroutine and waits for them. A Server owns the etcd member;
// Server.Close stops it.
package etcdstore
