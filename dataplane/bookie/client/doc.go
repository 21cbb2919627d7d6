// Package client is the ledger client: it creates, writes, closes, recovers,
// reads and deletes replicated ledgers on bookies, with Apache BookKeeper's
// guarantees. The broker's managed ledger is its main caller; the auditor in
// this package restores replication after a bookie is lost.
//
// # Ledgers
//
// A ledger is a single-writer, append-only sequence of entries stored on an
// ensemble of E bookies. Entry e is written to its write set: the Qw
// consecutive ensemble positions starting at e mod E. An add is
// acknowledged to the writer when Qa bookies of its write set stored it
// (after their journal fsync) and every earlier entry is acknowledged. The
// writer's last-add-confirmed (LAC) rides on every entry, so readers of an
// open ledger can read up to it.
//
// # Metadata
//
// Each ledger's record (LedgerMetadata, JSON) lives at
// /ledgers/meta/<id, 19 digits> in the metadata store: E, Qw, Qa, state
// (OPEN, IN_RECOVERY, CLOSED), fragments (first entry -> ensemble of bookie
// addresses), last entry and length once closed. The record is created
// only if absent and changes only by compare-and-set on its version.
//
// Ids: each client reserves blocks of 1000 ids by compare-and-set of
// /ledgers/idblock (the highest id reserved, decimal) and hands them out in
// order, so a ledger creation writes its record only. The first block of a
// store starts above the metadata store's "ledger-id" sequence, which gave
// out ids one at a time before blocks; an id whose record already exists
// (created by a client still using that sequence) is skipped. A fresh
// block starts above every id handed out before it, which is how a managed
// ledger gets a ledger id above its last one (CreateOptions.After) from a
// client whose own block lies lower.
//
// Bookies are picked from the registrations under /bookies/available
// (package bookie), spread over (region, rack) groups. The list is reused
// for Config.BookieListTTL by new ledgers; an ensemble change reads it
// afresh.
//
// # Failures
//
//   - A bookie that fails during writes is replaced: a new fragment starts
//     at the first unacknowledged entry (acknowledgements are held while the
//     fragment is recorded, so the boundary is exact), and pending entries
//     are re-sent to the replacement. With no spare bookie, writing goes on
//     while every write set keeps Qa live bookies; the change is retried
//     every 250 ms, and the failed bookie itself is taken back, in a new
//     fragment from the first unacknowledged entry, once it is registered
//     writable and answers again (restarted at the same address with its
//     disk: what it acknowledged is on its journal, and every pending entry
//     of its write sets is sent to it again). Pending adds fail with
//     ErrNotEnoughBookies when none was acknowledged for AddTimeout.
//   - Recovery (OpenLedger with recover): IN_RECOVERY by CAS, fence the
//     last fragment until every write set has Qw-Qa+1 fenced bookies, read
//     forward from the highest LAC with fencing reads, re-add each
//     recoverable entry to its write set, close at the first entry that
//     Qw-Qa+1 replicas lack. The old writer sees ErrFenced.
//   - Reads go to one replica at a time and speculatively to the next after
//     SpeculativeReadTimeout or at once on an error.
//   - The Auditor (one elected leader) copies fragments of closed ledgers
//     whose bookie is gone to a replacement, and refills a live bookie that
//     missed entries while a writer ran degraded.
//
// # Concurrency
//
// Client, WriteHandle and ReadHandle are safe for concurrent use. A
// WriteHandle's mutex guards its state and is taken by bookie-connection
// callbacks; user callbacks run in entry order on the handle's delivery
// goroutine, never under the mutex. That goroutine runs only while
// callbacks are waiting, so an idle handle (a topic nobody writes to) costs
// no goroutine. Close stops the handle's goroutines.
package client
