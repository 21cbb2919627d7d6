package offload

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
)

// Byte format of the data and index objects (doc.go).
const (
	blockMagic      = 0x4D474F42 // "MGOB"
	indexMagic      = 0x4D474F49 // "MGOI"
	formatVersion   = 1
	blockHeaderLen  = 32
	entryHeaderLen  = 16 // len u32, entry id i64, crc u32
	indexHeaderLen  = 44
	indexBlockLen   = 24 // first entry i64, part u32, offset i64, length u32
	maxIndexEntries = 1 << 28
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt: an object does not decode (bad magic, checksum, bounds).
var ErrCorrupt = errors.New("offload: corrupt object")

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// blockBuilder accumulates the entries of one block (one multipart part).
type blockBuilder struct {
	buf     []byte
	first   int64
	entries int
	offsets []int64 // entry offsets within the block
}

func (b *blockBuilder) reset(first int64) {
	if cap(b.buf) == 0 {
		b.buf = make([]byte, blockHeaderLen, 1<<20)
	}
	b.buf = b.buf[:blockHeaderLen]
	clear(b.buf)
	b.first, b.entries, b.offsets = first, 0, b.offsets[:0]
}

func (b *blockBuilder) add(id int64, data []byte) {
	b.offsets = append(b.offsets, int64(len(b.buf)))
	var h [entryHeaderLen]byte
	binary.BigEndian.PutUint32(h[0:], uint32(len(data)))
	binary.BigEndian.PutUint64(h[4:], uint64(id))
	binary.BigEndian.PutUint32(h[12:], crc32.Checksum(data, castagnoli))
	b.buf = append(b.buf, h[:]...)
	b.buf = append(b.buf, data...)
	b.entries++
}

// finish writes the header and returns the block's bytes.
func (b *blockBuilder) finish() []byte {
	h := b.buf[:blockHeaderLen]
	binary.BigEndian.PutUint32(h[0:], blockMagic)
	binary.BigEndian.PutUint16(h[4:], formatVersion)
	binary.BigEndian.PutUint16(h[6:], blockHeaderLen)
	binary.BigEndian.PutUint32(h[8:], uint32(len(b.buf)))
	binary.BigEndian.PutUint32(h[12:], uint32(b.entries))
	binary.BigEndian.PutUint64(h[16:], uint64(b.first))
	binary.BigEndian.PutUint32(h[28:], crc32.Checksum(h[:28], castagnoli))
	return b.buf
}

// parseBlockHeader decodes a block header.
func parseBlockHeader(h []byte) (blockLen, entries int, first int64, err error) {
	if len(h) < blockHeaderLen {
		return 0, 0, 0, corruptf("block header of %d bytes", len(h))
	}
	if binary.BigEndian.Uint32(h[0:]) != blockMagic {
		return 0, 0, 0, corruptf("bad block magic")
	}
	if crc32.Checksum(h[:28], castagnoli) != binary.BigEndian.Uint32(h[28:]) {
		return 0, 0, 0, corruptf("block header checksum mismatch")
	}
	return int(binary.BigEndian.Uint32(h[8:])), int(binary.BigEndian.Uint32(h[12:])), int64(binary.BigEndian.Uint64(h[16:])), nil
}

// blockRef locates one block in the data object.
type blockRef struct {
	First  int64 // first entry id
	Part   int32 // multipart part number (1-based)
	Offset int64 // in the data object
	Length int64
}

// index is the decoded index object of one offloaded ledger.
type index struct {
	LedgerID  int64
	Entries   int64
	DataLen   int64
	BlockSize int64
	Metadata  map[string]string
	Blocks    []blockRef
	Offsets   []int64 // of each entry record in the data object
}

// encode returns the index object's bytes.
func (x *index) encode() ([]byte, error) {
	meta, err := json.Marshal(x.Metadata)
	if err != nil {
		return nil, err
	}
	n := indexHeaderLen + len(meta) + len(x.Blocks)*indexBlockLen + len(x.Offsets)*8 + 4
	b := make([]byte, 0, n)
	b = binary.BigEndian.AppendUint32(b, indexMagic)
	b = binary.BigEndian.AppendUint16(b, formatVersion)
	b = binary.BigEndian.AppendUint16(b, indexHeaderLen)
	b = binary.BigEndian.AppendUint64(b, uint64(x.LedgerID))
	b = binary.BigEndian.AppendUint64(b, uint64(x.Entries))
	b = binary.BigEndian.AppendUint64(b, uint64(x.DataLen))
	b = binary.BigEndian.AppendUint32(b, uint32(x.BlockSize))
	b = binary.BigEndian.AppendUint32(b, uint32(len(x.Blocks)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(meta)))
	b = append(b, meta...)
	for _, bl := range x.Blocks {
		b = binary.BigEndian.AppendUint64(b, uint64(bl.First))
		b = binary.BigEndian.AppendUint32(b, uint32(bl.Part))
		b = binary.BigEndian.AppendUint64(b, uint64(bl.Offset))
		b = binary.BigEndian.AppendUint32(b, uint32(bl.Length))
	}
	for _, o := range x.Offsets {
		b = binary.BigEndian.AppendUint64(b, uint64(o))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// decodeIndex parses and checks an index object.
func decodeIndex(b []byte) (*index, error) {
	if len(b) < indexHeaderLen+4 {
		return nil, corruptf("index of %d bytes", len(b))
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, corruptf("index checksum mismatch")
	}
	if binary.BigEndian.Uint32(body[0:]) != indexMagic {
		return nil, corruptf("bad index magic")
	}
	if v := binary.BigEndian.Uint16(body[4:]); v != formatVersion {
		return nil, corruptf("index version %d", v)
	}
	if h := binary.BigEndian.Uint16(body[6:]); h != indexHeaderLen {
		return nil, corruptf("index header length %d", h)
	}
	x := &index{
		LedgerID:  int64(binary.BigEndian.Uint64(body[8:])),
		Entries:   int64(binary.BigEndian.Uint64(body[16:])),
		DataLen:   int64(binary.BigEndian.Uint64(body[24:])),
		BlockSize: int64(binary.BigEndian.Uint32(body[32:])),
	}
	nBlocks := int64(binary.BigEndian.Uint32(body[36:]))
	metaLen := int64(binary.BigEndian.Uint32(body[40:]))
	if x.Entries < 0 || x.Entries > maxIndexEntries || x.DataLen < 0 {
		return nil, corruptf("index counts out of range")
	}
	rest := body[indexHeaderLen:]
	if int64(len(rest)) != metaLen+nBlocks*indexBlockLen+x.Entries*8 {
		return nil, corruptf("index length %d does not match its counts", len(b))
	}
	if metaLen > 0 {
		if err := json.Unmarshal(rest[:metaLen], &x.Metadata); err != nil {
			return nil, corruptf("index metadata: %v", err)
		}
	}
	rest = rest[metaLen:]
	x.Blocks = make([]blockRef, nBlocks)
	var end int64
	var next int64
	for i := range x.Blocks {
		r := rest[i*indexBlockLen:]
		bl := blockRef{
			First:  int64(binary.BigEndian.Uint64(r[0:])),
			Part:   int32(binary.BigEndian.Uint32(r[8:])),
			Offset: int64(binary.BigEndian.Uint64(r[12:])),
			Length: int64(binary.BigEndian.Uint32(r[20:])),
		}
		if bl.Offset != end || bl.Length < blockHeaderLen || bl.First != next && i > 0 || i == 0 && bl.First != 0 {
			return nil, corruptf("block %d out of order", i)
		}
		end = bl.Offset + bl.Length
		if i+1 < len(x.Blocks) {
			next = int64(binary.BigEndian.Uint64(rest[(i+1)*indexBlockLen:]))
			if next <= bl.First {
				return nil, corruptf("block %d out of order", i+1)
			}
		}
		x.Blocks[i] = bl
	}
	if end != x.DataLen {
		return nil, corruptf("blocks cover %d of %d bytes", end, x.DataLen)
	}
	if nBlocks > 0 && x.Blocks[nBlocks-1].First >= x.Entries && x.Entries > 0 {
		return nil, corruptf("last block starts past the last entry")
	}
	rest = rest[nBlocks*indexBlockLen:]
	x.Offsets = make([]int64, x.Entries)
	for i := range x.Offsets {
		o := int64(binary.BigEndian.Uint64(rest[i*8:]))
		if o < 0 || o+entryHeaderLen > x.DataLen || i > 0 && o <= x.Offsets[i-1] {
			return nil, corruptf("entry %d offset out of range", i)
		}
		x.Offsets[i] = o
	}
	if x.Entries > 0 && nBlocks == 0 {
		return nil, corruptf("entries without blocks")
	}
	return x, nil
}

// blockOf returns the index of the block holding entry id.
func (x *index) blockOf(id int64) int {
	return sort.Search(len(x.Blocks), func(i int) bool { return x.Blocks[i].First > id }) - 1
}

// span returns the byte range [from, to) of entries first..last in the
// data object.
func (x *index) span(first, last int64) (from, to int64, err error) {
	if first < 0 || last < first || last >= x.Entries {
		return 0, 0, fmt.Errorf("offload: entries %d..%d of ledger %d with %d entries", first, last, x.LedgerID, x.Entries)
	}
	from = x.Offsets[first]
	b := x.Blocks[x.blockOf(last)]
	to = b.Offset + b.Length
	if last+1 < x.Entries && x.Offsets[last+1] < to {
		to = x.Offsets[last+1]
	}
	return from, to, nil
}

// parseEntries decodes entries first..last from data, the bytes of the
// data object starting at offset base, using x's offsets; every entry's id
// and checksum are checked.
func (x *index) parseEntries(data []byte, base, first, last int64) ([]entryRec, error) {
	out := make([]entryRec, 0, last-first+1)
	for id := first; id <= last; id++ {
		o := x.Offsets[id] - base
		if o < 0 || o+entryHeaderLen > int64(len(data)) {
			return nil, corruptf("entry %d outside the range read", id)
		}
		h := data[o : o+entryHeaderLen]
		n := int64(binary.BigEndian.Uint32(h[0:]))
		eid := int64(binary.BigEndian.Uint64(h[4:]))
		sum := binary.BigEndian.Uint32(h[12:])
		if eid != id || o+entryHeaderLen+n > int64(len(data)) {
			return nil, corruptf("entry %d: header names entry %d of %d bytes", id, eid, n)
		}
		d := data[o+entryHeaderLen : o+entryHeaderLen+n]
		if crc32.Checksum(d, castagnoli) != sum {
			return nil, corruptf("entry %d checksum mismatch", id)
		}
		out = append(out, entryRec{id: id, data: d})
	}
	return out, nil
}

type entryRec struct {
	id   int64
	data []byte
}
