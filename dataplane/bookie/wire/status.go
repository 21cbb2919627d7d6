package wire

import (
	"errors"
	"fmt"
)

// Status is a response's result code. Every status except StatusOK maps 1:1
// to a sentinel error of this package through statusTable.
type Status uint16

// Status codes. Never renumber: they are on the wire.
const (
	StatusOK           Status = 0
	StatusNoSuchEntry  Status = 1
	StatusNoSuchLedger Status = 2
	StatusFenced       Status = 3
	StatusReadOnly     Status = 4
	StatusBadRequest   Status = 5
	StatusChecksum     Status = 6
	StatusTooLarge     Status = 7
	StatusIO           Status = 8
	StatusTimeout      Status = 9
	StatusConnClosed   Status = 10
	StatusUnsupported  Status = 11
	StatusMalformed    Status = 12
)

// statusTable is the one mapping between status codes and sentinel errors.
var statusTable = []struct {
	status Status
	err    error
}{
	{StatusNoSuchEntry, ErrNoSuchEntry},
	{StatusNoSuchLedger, ErrNoSuchLedger},
	{StatusFenced, ErrFenced},
	{StatusReadOnly, ErrReadOnly},
	{StatusBadRequest, ErrBadRequest},
	{StatusChecksum, ErrChecksum},
	{StatusTooLarge, ErrTooLarge},
	{StatusIO, ErrIO},
	{StatusTimeout, ErrTimeout},
	{StatusConnClosed, ErrConnClosed},
	{StatusUnsupported, ErrUnsupported},
	{StatusMalformed, ErrMalformed},
}

// Err returns the sentinel error for s: nil for StatusOK, ErrUnsupported
// (wrapped) for a code this version does not know.
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	for _, e := range statusTable {
		if e.status == s {
			return e.err
		}
	}
	return fmt.Errorf("%w: unknown status %d", ErrUnsupported, uint16(s))
}

// StatusOf returns the status for err: StatusOK for nil, the table's code for
// an error wrapping one of the sentinels, StatusIO for anything else.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	for _, e := range statusTable {
		if errors.Is(err, e.err) {
			return e.status
		}
	}
	return StatusIO
}

func (s Status) String() string {
	if s == StatusOK {
		return "OK"
	}
	return s.Err().Error()
}
