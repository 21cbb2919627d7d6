// Package replication copies topics between clusters: Pulsar's
// asynchronous geo-replication. The broker (dataplane/broker, replication.go)
// runs one Replicator per persistent topic or partition and per remote
// cluster of its replication clusters; the replicator belongs to the topic
// and moves with its bundle.
//
// # What travels
//
// The replicator reads the local topic through a durable cursor named
// pulsar.repl.<remote cluster> (opened at the earliest retained entry, so a
// cluster added later receives the retained history) and re-sends each
// entry, one SEND per entry, to the same topic in the remote cluster, with
// a producer named pulsar.repl.<local cluster>. The entry's payload is sent
// unchanged (a batch stays a batch, compressed as it was); its metadata
// gains replicated_from = <local cluster> and the message property
// __MSG_PROP_REPL_SOURCE_POSITION = "<ledger>:<entry>" (its position here).
// Entries that carry replicated_from (they came from another cluster) are
// never sent on, so a full mesh has no loops; entries whose replicate_to
// leaves the remote out are skipped (a client's DisableReplication sends
// replicate_to = ["__local__"]). A message with a schema version has its
// schema registered on the remote topic (GET_OR_CREATE_SCHEMA) and its
// schema_version rewritten to the remote's. A partition's partitioned topic
// is created on the remote, through its admin API, before the producer.
//
// # Exactly once, in order
//
// Each SEND's sequence id is SequenceOf(position): the ledger id in the high
// 39 bits and the entry id in the low 24, increasing along the topic. The
// remote broker deduplicates a replicator producer's SENDs by that id
// whether or not the namespace enables deduplication, and rebuilds that
// state after a restart from its ledger (the property above), so:
//
//   - the cursor moves only over entries the remote confirmed (in order:
//     a cumulative acknowledgement of the confirmed prefix);
//   - after any failure (link cut, remote or local broker killed, bundle
//     unload) the next session rewinds to the cursor, learns the remote's
//     last stored id from PRODUCER_SUCCESS, skips what is at or below it,
//     and re-sends the rest; anything re-sent anyway is dropped by the
//     remote's deduplication;
//   - one producer, one connection, and the remote's in-order receipts keep
//     every source producer's order.
//
// Acknowledged messages are never lost by replication: an entry stays in
// the local backlog (bounded by the backlog quota, which counts the
// replicator's cursor like a subscription's) until the remote stored it.
//
// # Concurrency
//
// Run owns a replicator's session state and its producer; Wake and Stats
// may be called from any goroutine. A Pool shares connections among the
// replicators to one remote cluster (one per remote broker); Conn has one
// reading goroutine that routes each producer's frames to it, and its
// writes are serialized.
package replication
