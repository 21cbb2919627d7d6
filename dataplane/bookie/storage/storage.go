package storage

import "errors"

// Errors returned by a Storage.
var (
	ErrNoSuchEntry  = errors.New("storage: no such entry")
	ErrNoSuchLedger = errors.New("storage: no such ledger")
	ErrFenced       = errors.New("storage: ledger fenced")
	ErrReadOnly     = errors.New("storage: read-only")
	ErrClosed       = errors.New("storage: closed")
)

// NoEntry is the LAC of a ledger with no confirmed entry.
const NoEntry int64 = -1

// Storage is a bookie's durable ledger storage. All methods are safe for
// concurrent use. An entry is identified by (ledgerID, entryID); data is
// opaque to the storage.
type Storage interface {
	// AddEntry stores an entry. done is called exactly once, after the entry
	// is durable (journal fsync, unless syncing is disabled) or with an error;
	// done must not block. It fails with ErrFenced if the ledger is fenced and
	// recovery is false, and with ErrReadOnly once the storage is read-only.
	// Re-adding an existing (ledgerID, entryID) overwrites it (recovery
	// re-replication may re-send an entry). data is not retained after
	// AddEntry returns: implementations copy it, so the caller may reuse it.
	AddEntry(ledgerID, entryID, lac int64, data []byte, recovery bool, done func(error))
	// ReadEntry returns the entry's data (the caller must not modify it), or
	// ErrNoSuchEntry / ErrNoSuchLedger.
	ReadEntry(ledgerID, entryID int64) ([]byte, error)
	// LastEntry returns the highest entry id stored for the ledger and the
	// highest LAC any of its entries carried; ErrNoSuchLedger if unknown.
	LastEntry(ledgerID int64) (last, lac int64, err error)
	// Fence durably marks the ledger fenced (creating it if unknown); done is
	// called once the mark is durable.
	Fence(ledgerID int64, done func(error))
	// IsFenced reports whether the ledger is fenced.
	IsFenced(ledgerID int64) (bool, error)
	// DeleteLedger removes the ledger; its disk space is reclaimed by garbage
	// collection later. Deleting an unknown ledger is not an error. A deleted
	// ledger id stays dead: ledger ids are never reused, so any later add to
	// it (a writer fenced and deleted meanwhile) fails with ErrFenced instead
	// of re-creating a ledger nobody would read; Fence of it succeeds.
	DeleteLedger(ledgerID int64) error
	// ReadOnly returns a non-nil error describing why the storage turned
	// read-only (disk full, I/O error), or nil while writable.
	ReadOnly() error
	// Close flushes and releases everything.
	Close() error
}
