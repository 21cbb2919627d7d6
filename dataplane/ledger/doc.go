// Package ledger is the managed ledger: the per-topic log the broker stores
// messages in, built on the replicated bookie ledgers of package
// bookie/client (Apache Pulsar's ManagedLedger). The broker opens one
// ManagedLedger per topic (partition) through a Factory, appends entries
// with AddEntry, and serves subscriptions through Cursors.
//
// # Model
//
// A managed ledger is an ordered list of bookie ledgers. Exactly one
// process writes it: Open recovers (fences) every ledger the previous owner
// left open and claims the record by compare-and-set (rewriting it, so the
// version moves even when nothing changed), so a previous owner's adds
// then fail with ErrFenced and its record updates are refused.
//
// Entries are addressed by Position (ledger id, entry id). When the current
// ledger is full (MaxEntriesPerLedger or MaxLedgerSize, once MinLedgerAge
// has passed) or old (MaxLedgerAge), it is rolled over: the next ledger is
// created and appended to the record by CAS, adds switch to it, and only
// then is the previous ledger closed; adds keep flowing meanwhile and
// callbacks stay in call order across the switch.
//
// # Ledger creation
//
// Open creates no bookie ledger: the first AddEntry asks the worker for one
// (created, appended to the record by compare-and-set, then written to),
// as after a write failure. Apache Pulsar creates the ledger when the
// managed ledger opens. We differ so that an idle topic costs nothing on
// the bookies and in the ledger client (no open ledger, no ledger metadata
// key), and creating or reloading a topic is one metadata write (the
// record; Factory.Create needs no read either) instead of several plus a
// ledger id allocation; the first add pays for the ledger instead.
// Visible difference: a managed ledger that never had an entry reports
// LastConfirmed (-1,-1) where Pulsar reports (its fresh ledger's id, -1);
// entry -1 means "no message" to Pulsar clients either way. A reopened
// managed ledger reports the last entry of its last ledger, with or without
// an open ledger after it. Recovery is unchanged: an OPEN ledger found in
// the record is fenced and closed at the next Open, and the record's
// version change fences a previous owner that has no open ledger.
//
// # Metadata layout
//
// Names may contain any byte, '/' included. Each name becomes a single key
// segment by escaping: bytes [A-Za-z0-9._-] are kept and every other byte
// is written %XX (upper-case hex), so the mapping is injective and a
// topic "a/b" never collides with a cursor of topic "a".
//
//	/managed-ledgers/<esc(name)>                          record (JSON below)
//	/managed-ledger-cursors/<esc(name)>/<esc(cursor)>     one durable cursor
//
// Cursors live under a sibling root so that the children of
// /managed-ledgers are exactly the stored managed ledgers (List).
//
// The managed-ledger record, changed only by compare-and-set on its
// version (a mismatch means another owner: ErrFenced):
//
//	{"ledgers":[{"id":12,"entries":50000,"size":51200000,"timestamp":1767225600000},
//	            {"id":15,"entries":0,"size":0,"timestamp":0}],
//	 "terminatedPosition":{"ledgerId":12,"entryId":49999},   // only once terminated
//	 "properties":{"k":"v"},
//	 "createdMs":1767225000000}
//
// createdMs is when the record was created (ManagedLedger.Created; the
// topic's creation time in its stats); records written before the field
// existed lack it.
//
// timestamp is the close time in Unix milliseconds; 0 marks a ledger still
// open (being written, or left open by a crash), whose entries and size are
// not final and are recomputed by recovery at the next Open. The ledger
// client knows only the length of the tail it recovered, so a recovered
// ledger is stored with "sizeUnknown":true and that tail's size; the managed
// ledger then counts the ledger's entries' bytes in the background and
// stores the exact size (the next owner counts again if it finds the flag).
// Ledgers found empty at Open are dropped from the list and deleted.
//
// A cursor record, written by compare-and-set on its version:
//
//	{"markDelete":{"ledgerId":12,"entryId":99},
//	 "individuallyDeleted":[{"ledgerId":12,"from":101,"to":120}],
//	 "batchAcks":[{"pos":{"ledgerId":12,"entryId":100},"size":10,"acked":[5]}],
//	 "properties":{"k":"v"},
//	 "lastActive":1767225600000}
//
// individuallyDeleted are runs of acknowledged entries above markDelete
// (inclusive, per ledger; at most MaxPersistedAckRanges, lowest first).
// batchAcks are partly acknowledged batch entries: bit i of acked (word
// i/64) set means index i is acknowledged; an entry whose indexes are all
// acknowledged moves to the runs. At Open every cursor record is rewritten
// unchanged, bumping its version, so a previous owner's cursor writes fail.
//
// # Durability
//
//   - An add's callback reports success only once its entry is stored on
//     AckQuorum bookies and its ledger is in the record: every acknowledged
//     entry survives a crash and is found by the next Open.
//   - Cursor changes are stored at most CursorPersistInterval after they
//     happen, and on Close. After a crash, acknowledgements of the last
//     interval may be lost, so those entries are delivered again
//     (at-least-once, as in Pulsar).
//   - Trimming deletes a ledger only once every durable cursor has stored a
//     mark-delete position at or past its last entry (or, without durable
//     cursors, once it is below LastConfirmed) and retention allows; the
//     record is updated first, then the ledger deleted. The ledger being
//     written is never deleted. Open non-durable cursors (readers) also
//     hold back trimming, until their Close; reads from a position in a
//     trimmed ledger skip forward to the first stored entry.
//
// # Failures of the current ledger
//
//   - ErrFenced from the ledger client (another owner recovered our
//     ledger) or a record CAS conflict fences the managed ledger: adds not
//     yet sent fail at once, sent ones with their ledger's outcome, and
//     every later add fails with ErrFenced. Close then writes nothing.
//   - Any other write failure (not enough bookies, quorum lost) ends that
//     bookie ledger. If it was the current ledger, its failed adds are
//     held, the ledger is closed at its last acknowledged entry, and only
//     if that close succeeds are the held adds re-sent, in order, to a new
//     ledger (safe: the close record proves they are not in the old one).
//     If the close fails they fail with ErrWriteFailed. Adds failing on a
//     ledger that was already rolled over are not retried (later adds were
//     already given positions in the next ledger) and fail with
//     ErrWriteFailed. If no new ledger can be created, held and new adds
//     fail with ErrWriteFailed; the next AddEntry tries again.
//
// # Reads
//
// Read serves entries up to LastConfirmed across ledgers: from the
// factory's entry cache (recent adds, bounded by CacheSize, oldest evicted
// first), from a small per-ledger tail of confirmed entries the bookies
// cannot serve yet (their last-add-confirmed lags the writer's), or from
// the bookies (closed ledgers through read handles cached by id). Returned
// entry data is shared and must not be modified.
//
// # Side ledgers
//
// The owner may write bookie ledgers of its own beside the topic's list
// (CreateSideLedger, OpenSideLedger, DeleteSideLedger; the broker's
// compacted ledgers). They are not in the record, never trimmed or
// offloaded. A durable cursor names the side ledgers it owns in properties
// whose keys start with SideLedgerProp ("sideLedger.", value the ledger id):
// DeleteCursor and Factory.Delete delete those ledgers with the cursor.
// Cursor.MarkDeleteWithProperties changes the mark-delete position and
// properties in one stored update, so the two are found together after a
// crash.
//
// # Tiered storage
//
// With an Offloader (FactoryConfig.Offloader; package offload implements
// it over S3), closed ledgers are copied to an object store, by policy
// (Config.Offload: Threshold bytes kept on the bookies, ThresholdAge) or by
// OffloadPrefix, and their bookie copies deleted DeletionLag after. A
// ledger's entry in the record then carries its copy:
//
//	{"id":12,"entries":50000,"size":51200000,"timestamp":1767225600000,
//	 "offload":{"uid":"5f0c...","driverMetadata":{"driver":"aws-s3","bucket":"b",...},
//	            "startedMs":1767225700000,"complete":true,"completedMs":1767225760000,
//	            "bookieDeleted":true}}
//
// Every step is a compare-and-set of the record, so a crash between steps
// loses nothing:
//
//  1. the uid and where the copy goes are recorded (complete false);
//  2. the Offloader copies the entries from the bookies;
//  3. the record marks the copy complete (reads still go to the bookies);
//  4. after the deletion lag the bookie ledger is deleted, then the record
//     marks its copy deleted; from then on the ledger's reads go to the
//     Offloader (a read that finds the bookie ledger gone, or the bookies
//     failing, already does).
//
// A copy found incomplete (a failure, or a crash of a previous owner: it
// is found at Open) is removed through the Offloader (partial uploads
// aborted) and its uid cleared; by policy the ledger is then copied again
// under a new uid. A failed automatic offload waits 30 s before the next
// try. Trimming deletes a ledger's copy with it. The ledger being written
// is never offloaded. The policy is checked by the worker after each
// trimming pass (ledger closed, policy change, the periodic check).
//
// # Concurrency
//
// Factory, ManagedLedger and Cursor are safe for concurrent use. Each
// ManagedLedger owns three kinds of goroutines, all stopped by Close: the
// delivery goroutine (runs add callbacks in order and publishes
// LastConfirmed), the worker (ledger switches, rollover, cursor
// persistence, trimming), short-lived closers of rolled-over ledgers
// started by the worker, and the offload goroutine (one at a time, started
// by the worker or OffloadPrefix; Close cancels the copy under way, which
// the next Open cleans up). The delivery goroutine and the worker run only
// while they have work: the first is started when the oldest pending add
// has its outcome and ends when it has run every callback it can; the
// second is started by a request (kickLocked) or by one of its timers
// (rollover by age, cursor persistence, the periodic trim check) and ends
// when nothing more was asked. At most one of each runs at a time, under
// ManagedLedger.mu flags. So an idle managed ledger owns no goroutine, only
// timers, and only while their work can become due. Lock order:
// Cursor.persistMu, Cursor.mu,
// ManagedLedger.infoMu, ManagedLedger.sendMu, ManagedLedger.mu; the entry
// cache's mutex and the read-handle mutex are leaves. No callback runs
// under a lock. Add callbacks must not call Close of their own managed
// ledger (Close waits for them).
package ledger
