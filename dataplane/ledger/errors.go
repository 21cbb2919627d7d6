package ledger

import "errors"

// Errors returned by the managed ledger. Failures of the ledger client or
// the metadata store are wrapped with %w, so callers may also test for
// those packages' sentinels.
var (
	// ErrFenced: another owner opened the managed ledger (it fenced our
	// bookie ledger or changed the metadata record). Pending and later
	// adds fail with it; an add that failed with it may or may not be
	// stored. The broker must drop its ownership of the topic.
	ErrFenced = errors.New("ledger: managed ledger fenced by another owner")
	// ErrTerminated: the managed ledger was terminated; no more adds.
	ErrTerminated = errors.New("ledger: managed ledger terminated")
	// ErrClosed: the managed ledger, cursor or factory was closed.
	ErrClosed = errors.New("ledger: managed ledger closed")
	// ErrNotFound: no managed ledger or cursor of that name.
	ErrNotFound = errors.New("ledger: not found")
	// ErrExists: Factory.Create of a managed ledger that exists.
	ErrExists = errors.New("ledger: already exists")
	// ErrWriteFailed: the add could not be stored and was not retried
	// (see the package documentation on failures). It wraps the cause.
	ErrWriteFailed = errors.New("ledger: add failed")
	// ErrInvalidPosition: a position that does not name an entry of the
	// managed ledger where one is required.
	ErrInvalidPosition = errors.New("ledger: invalid position")
	// ErrInvalidArgument: other bad input (empty name, bad count).
	ErrInvalidArgument = errors.New("ledger: invalid argument")
	// ErrConfig: a configuration that fails Validate.
	ErrConfig = errors.New("ledger: invalid config")
)
