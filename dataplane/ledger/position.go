package ledger

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Position addresses one entry of a managed ledger: the bookie ledger that
// holds it and the entry's id inside that ledger. Positions order by ledger
// id, then entry id; ledger ids grow with creation time, so this is the
// order in which entries were appended.
//
// EntryID -1 names the (virtual) position just before the first entry of
// LedgerID; it is used as a mark-delete position ("nothing of this ledger
// acknowledged yet") and as LastConfirmed of an empty managed ledger.
type Position struct {
	LedgerID int64 `json:"ledgerId"`
	EntryID  int64 `json:"entryId"`
}

var (
	// Earliest, given as a start position, means the first entry still
	// stored.
	Earliest = Position{LedgerID: -1, EntryID: -1}
	// Latest, given as a start position, means the last confirmed entry.
	Latest = Position{LedgerID: math.MaxInt64, EntryID: math.MaxInt64}
)

// Compare returns -1, 0 or +1 as p is before, equal to or after o.
func (p Position) Compare(o Position) int {
	if c := cmp.Compare(p.LedgerID, o.LedgerID); c != 0 {
		return c
	}
	return cmp.Compare(p.EntryID, o.EntryID)
}

// Less reports whether p is before o.
func (p Position) Less(o Position) bool { return p.Compare(o) < 0 }

// String formats p as "ledger:entry".
func (p Position) String() string {
	switch p {
	case Earliest:
		return "earliest"
	case Latest:
		return "latest"
	}
	return fmt.Sprintf("%d:%d", p.LedgerID, p.EntryID)
}

func maxPos(a, b Position) Position {
	if a.Less(b) {
		return b
	}
	return a
}

// Entry is one stored message batch.
type Entry struct {
	Pos Position
	// Data is shared with the ledger's cache: callers must not modify it.
	Data []byte
}

// LedgerInfo describes one bookie ledger of a managed ledger, as stored in
// the managed ledger's metadata record.
type LedgerInfo struct {
	ID int64 `json:"id"`
	// Entries and Size (payload bytes) are final once the ledger is closed
	// (Timestamp != 0). For the ledger being written they count the
	// entries confirmed so far (in memory; the stored record may lag).
	Entries int64 `json:"entries"`
	Size    int64 `json:"size"`
	// Timestamp is when the ledger was closed, in Unix milliseconds; 0
	// while it is open (being written, or left open by a crashed owner).
	Timestamp int64 `json:"timestamp"`
	// SizeUnknown marks a ledger recovered after its writer died: Size is
	// then only what recovery saw (its unconfirmed tail) until the managed
	// ledger has counted the ledger's entries (recoveredsize.go).
	SizeUnknown bool `json:"sizeUnknown,omitempty"`
	// Offload is the ledger's copy in tiered storage, nil without one
	// (offload.go).
	Offload *OffloadInfo `json:"offload,omitempty"`
}

// closed reports whether the ledger was closed and its counts are final.
func (l LedgerInfo) closed() bool { return l.Timestamp != 0 }

// ParsePosition reads a position written as "ledger:entry" (String's form).
func ParsePosition(s string) (Position, bool) {
	l, e, ok := strings.Cut(s, ":")
	if !ok {
		return Position{}, false
	}
	li, err1 := strconv.ParseInt(l, 10, 64)
	ei, err2 := strconv.ParseInt(e, 10, 64)
	return Position{LedgerID: li, EntryID: ei}, err1 == nil && err2 == nil
}
