package storage

import (
	"encoding/binary"
	"errors"
)

// Pebble key space (see doc.go):
//
//	'b' ledger(8) entry(8) -> index block: locations of entries from entry on (blockindex.go)
//	'e' ledger(8) entry(8) -> entry location (entrylog.Location, 20 bytes): indexes
//	                          written before blocks; rewritten as blocks at Open
//	'm' ledger(8)          -> ledger metadata (17 bytes)
//	'd' ledger(8)          -> tombstone of a deleted ledger: deletion time, unix s uint64 (empty before)
//	"c"                    -> checkpoint: journal log mark (8 bytes)
//
// Integers are big-endian with the sign bit flipped so that keys sort in
// numeric order.
const (
	prefixBlock = 'b'
	prefixEntry = 'e'
	prefixMeta  = 'm'
	prefixDead  = 'd'
	metaLen     = 17
)

var checkpointKey = []byte("c")

func ord(v int64) uint64   { return uint64(v) ^ (1 << 63) }
func unord(u uint64) int64 { return int64(u ^ (1 << 63)) }

func entryKey(dst []byte, ledger, entry int64) []byte {
	dst = append(dst[:0], prefixEntry)
	dst = binary.BigEndian.AppendUint64(dst, ord(ledger))
	return binary.BigEndian.AppendUint64(dst, ord(entry))
}

func decodeEntryKey(k []byte) (ledger, entry int64, ok bool) {
	if len(k) != 17 || k[0] != prefixEntry {
		return 0, 0, false
	}
	return unord(binary.BigEndian.Uint64(k[1:9])), unord(binary.BigEndian.Uint64(k[9:17])), true
}

func metaKey(ledger int64) []byte {
	k := []byte{prefixMeta}
	return binary.BigEndian.AppendUint64(k, ord(ledger))
}

func decodeMetaKey(k []byte) (int64, bool) {
	if len(k) != 9 || k[0] != prefixMeta {
		return 0, false
	}
	return unord(binary.BigEndian.Uint64(k[1:9])), true
}

// ledgerMeta is the per-ledger state kept in memory and persisted under 'm'.
type ledgerMeta struct {
	fenced bool
	last   int64 // highest entry id stored, NoEntry if none
	lac    int64 // highest LAC carried by an entry, NoEntry if none
	dirty  bool  // changed since the last flush
	// indexed is the highest entry in the index, NoEntry if none,
	// indexUnknown until a flush looked it up; guarded by flushMu.
	indexed int64
}

func newLedgerMeta() *ledgerMeta {
	return &ledgerMeta{last: NoEntry, lac: NoEntry, indexed: indexUnknown}
}

func (m *ledgerMeta) encode() []byte {
	b := make([]byte, 1, metaLen)
	if m.fenced {
		b[0] = 1
	}
	b = binary.BigEndian.AppendUint64(b, uint64(m.last))
	return binary.BigEndian.AppendUint64(b, uint64(m.lac))
}

func decodeLedgerMeta(b []byte) (*ledgerMeta, error) {
	if len(b) != metaLen || b[0] > 1 {
		return nil, errors.New("storage: corrupt ledger metadata")
	}
	return &ledgerMeta{
		fenced:  b[0] == 1,
		last:    int64(binary.BigEndian.Uint64(b[1:9])),
		lac:     int64(binary.BigEndian.Uint64(b[9:17])),
		indexed: indexUnknown,
	}, nil
}

// deadKey is the tombstone key of a deleted ledger.
func deadKey(ledger int64) []byte {
	k := []byte{prefixDead}
	return binary.BigEndian.AppendUint64(k, ord(ledger))
}

// deadValue is a tombstone's value: the deletion time, unix seconds, BE.
func deadValue(unix int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(unix)) }

// decodeDeadValue returns the deletion time of a tombstone; dated is false
// for the empty value of tombstones written before they carried one.
func decodeDeadValue(v []byte) (unix int64, dated bool) {
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

func decodeDeadKey(k []byte) (int64, bool) {
	if len(k) != 9 || k[0] != prefixDead {
		return 0, false
	}
	return unord(binary.BigEndian.Uint64(k[1:9])), true
}
