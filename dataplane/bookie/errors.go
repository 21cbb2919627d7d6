package bookie

import (
	"errors"
	"fmt"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// Errors of the server.
var (
	ErrConfig  = errors.New("bookie: invalid config")
	ErrCookie  = errors.New("bookie: instance cookie mismatch")
	ErrStarted = errors.New("bookie: server already started")
	ErrStopped = errors.New("bookie: server stopped")
)

// storageErrors is the one mapping from storage errors to wire errors.
// Anything else is an I/O error.
var storageErrors = []struct{ from, to error }{
	{storage.ErrNoSuchEntry, wire.ErrNoSuchEntry},
	{storage.ErrNoSuchLedger, wire.ErrNoSuchLedger},
	{storage.ErrFenced, wire.ErrFenced},
	{storage.ErrReadOnly, wire.ErrReadOnly},
	{storage.ErrClosed, wire.ErrIO},
}

// wireError maps a storage error to the wire sentinel sent to clients.
func wireError(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range storageErrors {
		if errors.Is(err, m.from) {
			return m.to
		}
	}
	return wire.ErrIO
}

// mapStorageErr wraps a storage error in its wire sentinel, keeping the
// storage's text for the response message.
func mapStorageErr(err error) error {
	return fmt.Errorf("%w: %w", wireError(err), err)
}
