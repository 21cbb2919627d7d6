package journal

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/internal/crc32c"
)

// RecordType identifies what a journal record describes.
type RecordType uint8

// Record types. Zero is never valid, so zero-filled (preallocated or lost)
// blocks never decode as records.
const (
	// RecordEntry carries an added entry: ledger, entry, lac and data.
	RecordEntry RecordType = 1
	// RecordFence marks a ledger fenced.
	RecordFence RecordType = 2
	// RecordDelete marks a ledger deleted.
	RecordDelete RecordType = 3
)

const (
	// recordHeaderLen is crc(4) + payload length(4) + type(1).
	recordHeaderLen = 9
	// entryPayloadFixed is ledger(8) + entry(8) + lac(8).
	entryPayloadFixed = 24
	// ledgerPayloadLen is the payload of fence and delete records.
	ledgerPayloadLen = 8
	// MaxRecordData bounds the data of one entry record; longer lengths are
	// treated as corruption by the decoder.
	MaxRecordData = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record is one decoded journal record. Data aliases the decoded buffer.
type Record struct {
	Type   RecordType
	Ledger int64
	Entry  int64 // RecordEntry only
	LAC    int64 // RecordEntry only
	Data   []byte
}

// EncodedLen returns the encoded size of an entry record with n data bytes.
func EncodedLen(n int) int { return recordHeaderLen + entryPayloadFixed + n }

// appendEntryRecord appends the encoding of an entry record to dst. crc is
// the precomputed checksum from entryCRC.
func appendEntryRecord(dst []byte, ledger, entry, lac int64, data []byte, crc uint32) []byte {
	var h [recordHeaderLen + entryPayloadFixed]byte
	fillEntryHeader(&h, ledger, entry, lac, len(data))
	binary.LittleEndian.PutUint32(h[0:4], crc)
	dst = append(dst, h[:]...)
	return append(dst, data...)
}

func fillEntryHeader(h *[recordHeaderLen + entryPayloadFixed]byte, ledger, entry, lac int64, n int) {
	binary.LittleEndian.PutUint32(h[4:8], uint32(entryPayloadFixed+n))
	h[8] = byte(RecordEntry)
	binary.LittleEndian.PutUint64(h[9:17], uint64(ledger))
	binary.LittleEndian.PutUint64(h[17:25], uint64(entry))
	binary.LittleEndian.PutUint64(h[25:33], uint64(lac))
}

// entryCRC computes the checksum of an entry record without encoding it, so
// callers can checksum outside the journal lock.
func entryCRC(ledger, entry, lac int64, data []byte) uint32 {
	var h [recordHeaderLen + entryPayloadFixed]byte
	fillEntryHeader(&h, ledger, entry, lac, len(data))
	return crc32c.Update(crc32c.Small(0, h[4:]), data)
}

// appendLedgerRecord appends a fence or delete record.
func appendLedgerRecord(dst []byte, t RecordType, ledger int64) []byte {
	var h [recordHeaderLen + ledgerPayloadLen]byte
	binary.LittleEndian.PutUint32(h[4:8], ledgerPayloadLen)
	h[8] = byte(t)
	binary.LittleEndian.PutUint64(h[9:17], uint64(ledger))
	binary.LittleEndian.PutUint32(h[0:4], crc32.Checksum(h[4:], castagnoli))
	return append(dst, h[:]...)
}

// saltRecords XORs salt into the checksum of every record in buf, which
// holds whole records only (a group).
func saltRecords(buf []byte, salt uint32) {
	for off := 0; off+recordHeaderLen <= len(buf); {
		c := binary.LittleEndian.Uint32(buf[off:])
		binary.LittleEndian.PutUint32(buf[off:], c^salt)
		off += recordHeaderLen + int(binary.LittleEndian.Uint32(buf[off+4:]))
	}
}

// DecodeRecord decodes the record at the start of b and returns it with its
// encoded length. It returns ErrTruncated if b ends inside the record and
// ErrCorrupt if the record is malformed or fails its checksum. It never
// panics, whatever b holds. The checksum is checked unsalted (format MGJ1).
func DecodeRecord(b []byte) (Record, int, error) { return decodeRecord(b, 0) }

// decodeRecord is DecodeRecord for a record of a file whose checksums are
// salted with salt.
func decodeRecord(b []byte, salt uint32) (Record, int, error) {
	if len(b) < recordHeaderLen {
		return Record{}, 0, ErrTruncated
	}
	n := binary.LittleEndian.Uint32(b[4:8])
	t := RecordType(b[8])
	switch t {
	case RecordEntry:
		if n < entryPayloadFixed || n > entryPayloadFixed+MaxRecordData {
			return Record{}, 0, ErrCorrupt
		}
	case RecordFence, RecordDelete:
		if n != ledgerPayloadLen {
			return Record{}, 0, ErrCorrupt
		}
	default:
		return Record{}, 0, ErrCorrupt
	}
	total := recordHeaderLen + int(n)
	if len(b) < total {
		return Record{}, 0, ErrTruncated
	}
	if crc32.Checksum(b[4:total], castagnoli) != binary.LittleEndian.Uint32(b[0:4])^salt {
		return Record{}, 0, ErrCorrupt
	}
	p := b[recordHeaderLen:total]
	r := Record{Type: t, Ledger: int64(binary.LittleEndian.Uint64(p[0:8]))}
	if t == RecordEntry {
		r.Entry = int64(binary.LittleEndian.Uint64(p[8:16]))
		r.LAC = int64(binary.LittleEndian.Uint64(p[16:24]))
		r.Data = p[24:]
	}
	return r, total, nil
}

// peekRecordLen returns the total encoded length announced by a record
// header, or -1 if the header cannot start a valid record.
func peekRecordLen(h []byte) int {
	n := binary.LittleEndian.Uint32(h[4:8])
	switch RecordType(h[8]) {
	case RecordEntry:
		if n < entryPayloadFixed || n > entryPayloadFixed+MaxRecordData {
			return -1
		}
	case RecordFence, RecordDelete:
		if n != ledgerPayloadLen {
			return -1
		}
	default:
		return -1
	}
	return recordHeaderLen + int(n)
}
