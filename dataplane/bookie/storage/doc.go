// Package storage is a bookie's durable ledger storage: the journal (write-ahead
// log with group commit), sorted append-only entry logs with an index for random
// reads, a write cache, read-ahead, crash recovery and garbage collection.
package storage
