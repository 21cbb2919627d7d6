package wire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/internal/crc32c"
)

// Sentinel errors carried by response status codes. The client returns them
// (wrapped) so callers use errors.Is.
var (
	ErrNoSuchEntry  = errors.New("bookie: no such entry")
	ErrNoSuchLedger = errors.New("bookie: no such ledger")
	ErrFenced       = errors.New("bookie: ledger fenced")
	ErrReadOnly     = errors.New("bookie: read-only")
	ErrBadRequest   = errors.New("bookie: malformed request")
	ErrChecksum     = errors.New("bookie: checksum mismatch")
	ErrTooLarge     = errors.New("bookie: frame too large")
	ErrIO           = errors.New("bookie: i/o error")
	ErrTimeout      = errors.New("bookie: request timed out")
	ErrConnClosed   = errors.New("bookie: connection closed")
	ErrUnsupported  = errors.New("bookie: unsupported operation or version")
)

// AddRequest asks a bookie to store one entry durably.
type AddRequest struct {
	LedgerID int64
	EntryID  int64
	// LAC is the writer's last-add-confirmed at the time of the add.
	LAC      int64
	Payload  []byte
	Checksum uint32 // Checksum(LedgerID, EntryID, LAC, Payload)
	// Recovery marks an add made by a recovering reader: it is accepted even
	// when the ledger is fenced.
	Recovery bool
}

// Entry is one stored entry as read back.
type Entry struct {
	LedgerID int64
	EntryID  int64
	LAC      int64
	Payload  []byte
	Checksum uint32
}

// Verify checks the entry's checksum.
func (e *Entry) Verify() error {
	if Checksum(e.LedgerID, e.EntryID, e.LAC, e.Payload) != e.Checksum {
		return ErrChecksum
	}
	return nil
}

// ReadFlags modify a read.
type ReadFlags uint8

const (
	// ReadFenceLedger makes the read a recovery read: the bookie durably
	// fences the ledger before answering.
	ReadFenceLedger ReadFlags = 1 << iota
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC32C digest of an entry: it covers the ledger id, entry id
// and LAC (big-endian, 8 bytes each) followed by the payload, so an entry
// cannot be replayed under another id.
func Checksum(ledgerID, entryID, lac int64, payload []byte) uint32 {
	var hdr [24]byte
	binary.BigEndian.PutUint64(hdr[0:], uint64(ledgerID))
	binary.BigEndian.PutUint64(hdr[8:], uint64(entryID))
	binary.BigEndian.PutUint64(hdr[16:], uint64(lac))
	return crc32c.Update(crc32c.Small(0, hdr[:]), payload)
}
