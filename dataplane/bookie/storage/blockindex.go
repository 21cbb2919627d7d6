package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/entrylog"
)

// The index maps entries to their records in blocks: one Pebble key per run
// of up to blockMaxEntries entries of a ledger, written by one flush, instead
// of one key per entry. A flush of a busy ledger then puts a few hundred keys
// into Pebble instead of a hundred thousand, and Pebble's memtable inserts,
// flushes and compactions (a tenth of an E=1 bookie's CPU with a key per
// entry, and the CPU bursts that delayed the journal) shrink with it.
//
// Invariant: the blocks of a ledger cover disjoint entry ranges (from the
// first entry, the key, to the last, in the value). An entry is found in the
// block with the greatest first entry not above it. A flush whose entries of
// a ledger all lie above that ledger's highest indexed entry (the common
// case: entries arrive in order) only adds blocks; otherwise (re-added
// entries, as ledger recovery writes them, or entries that arrived out of
// order across flushes) it rewrites the blocks its entries overlap, merged
// with them, the new locations winning.

// blockMaxEntries is the most entries one index block holds: a lookup
// decodes up to this many varint-coded locations.
const blockMaxEntries = 128

// indexed is one entry's location in the index.
type indexed struct {
	entry int64
	loc   entrylog.Location
}

// errCorruptBlock reports an index block that does not decode.
var errCorruptBlock = errors.New("storage: corrupt index block")

func blockKey(dst []byte, ledger, first int64) []byte {
	dst = append(dst[:0], prefixBlock)
	dst = binary.BigEndian.AppendUint64(dst, ord(ledger))
	return binary.BigEndian.AppendUint64(dst, ord(first))
}

func decodeBlockKey(k []byte) (ledger, first int64, ok bool) {
	if len(k) != 17 || k[0] != prefixBlock {
		return 0, 0, false
	}
	return unord(binary.BigEndian.Uint64(k[1:9])), unord(binary.BigEndian.Uint64(k[9:17])), true
}

// ledgerBlockBounds returns [lo, hi) covering every block key of ledger.
func ledgerBlockBounds(ledger int64) (lo, hi []byte) {
	lo = blockKey(nil, ledger, math.MinInt64)
	if ledger == math.MaxInt64 {
		return lo, []byte{prefixBlock + 1}
	}
	return lo, blockKey(nil, ledger+1, math.MinInt64)
}

// Block value: count uvarint, then per entry
//
//	entry delta uvarint (from the previous entry; absent for the first,
//	                     which is the key's)
//	tag uvarint         0: same file as the previous entry, followed by the
//	                       offset's distance from the previous record's end
//	                       (zigzag varint); 1: followed by the file (uvarint,
//	                       journal bit included) and offset (uvarint)
//	length uvarint      data length
//
// Consecutive entries of a ledger mostly sit in one file a short way apart,
// so an entry takes ~5 bytes instead of a 17-byte key and 20-byte value.

// appendBlock appends the encoding of items (entries ascending; the first
// is the block's key) to dst.
func appendBlock(dst []byte, items []indexed) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(items)))
	var prev indexed
	for i, it := range items {
		if i > 0 {
			dst = binary.AppendUvarint(dst, uint64(it.entry-prev.entry))
		}
		if i > 0 && it.loc.Log == prev.loc.Log {
			dst = append(dst, 0)
			dst = binary.AppendVarint(dst, int64(it.loc.Offset-recordEnd(prev.loc)))
		} else {
			dst = append(dst, 1)
			dst = binary.AppendUvarint(dst, it.loc.Log)
			dst = binary.AppendUvarint(dst, it.loc.Offset)
		}
		dst = binary.AppendUvarint(dst, uint64(it.loc.Length))
		prev = it
	}
	return dst
}

// decodeBlock calls fn with each entry of the block with first entry first
// and value v, in order, until fn returns false.
func decodeBlock(first int64, v []byte, fn func(indexed) bool) error {
	// Every entry takes at least two bytes (tag and length), which bounds
	// the count without tying old blocks to today's blockMaxEntries.
	n, k := binary.Uvarint(v)
	if k <= 0 || n == 0 || n > uint64(len(v)) {
		return errCorruptBlock
	}
	v = v[k:]
	uv := func() uint64 {
		x, k := binary.Uvarint(v)
		if k <= 0 {
			v = nil
			return 0
		}
		v = v[k:]
		return x
	}
	var prev indexed
	for i := uint64(0); i < n; i++ {
		if len(v) == 0 {
			return errCorruptBlock
		}
		cur := indexed{entry: first}
		if i > 0 {
			d := uv()
			if d == 0 || d > math.MaxInt64-uint64(prev.entry) {
				return errCorruptBlock
			}
			cur.entry = prev.entry + int64(d)
		}
		if len(v) == 0 {
			return errCorruptBlock
		}
		tag := v[0]
		v = v[1:]
		switch {
		case tag == 0 && i > 0:
			d, k := binary.Varint(v)
			if k <= 0 {
				return errCorruptBlock
			}
			v = v[k:]
			cur.loc.Log = prev.loc.Log
			cur.loc.Offset = recordEnd(prev.loc) + uint64(d)
		case tag == 1:
			cur.loc.Log = uv()
			cur.loc.Offset = uv()
		default:
			return errCorruptBlock
		}
		if v == nil {
			return errCorruptBlock
		}
		l := uv()
		if v == nil || l > math.MaxUint32 {
			return errCorruptBlock
		}
		cur.loc.Length = uint32(l)
		if !fn(cur) {
			return nil
		}
		prev = cur
	}
	if len(v) != 0 {
		return errCorruptBlock
	}
	return nil
}

// decodeBlockItems appends the entries of a block to dst.
func decodeBlockItems(dst []indexed, first int64, v []byte) ([]indexed, error) {
	err := decodeBlock(first, v, func(it indexed) bool {
		dst = append(dst, it)
		return true
	})
	return dst, err
}

// setBlocks adds to b the blocks holding items (one ledger, entries
// ascending).
func setBlocks(b *pebble.Batch, ledger int64, items []indexed, kbuf, vbuf []byte) ([]byte, []byte, error) {
	for len(items) > 0 {
		n := min(len(items), blockMaxEntries)
		kbuf = blockKey(kbuf, ledger, items[0].entry)
		vbuf = appendBlock(vbuf[:0], items[:n])
		if err := b.Set(kbuf, vbuf, nil); err != nil {
			return kbuf, vbuf, err
		}
		items = items[n:]
	}
	return kbuf, vbuf, nil
}

// ledgerBlocks returns an iterator over the blocks of ledger.
func (s *DiskStorage) ledgerBlocks(ledger int64) (*pebble.Iterator, error) {
	lo, hi := ledgerBlockBounds(ledger)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("storage: index: %w", err)
	}
	return it, nil
}

// closeIter closes it, keeping *err if set, else reporting its error.
func closeIter(it *pebble.Iterator, err *error) {
	if cerr := it.Close(); *err == nil && cerr != nil {
		*err = fmt.Errorf("storage: index: %w", cerr)
	}
}

// seekBlock positions it, an iterator over ledger's blocks, at the block
// whose range may hold entry: the last one starting at or before it, else
// the first.
func seekBlock(it *pebble.Iterator, ledger, entry int64) bool {
	if entry == math.MaxInt64 {
		return it.Last()
	}
	var kbuf [17]byte
	return it.SeekLT(blockKey(kbuf[:0], ledger, entry+1)) || it.First()
}

// decodeCurrent calls fn with the entries of the block it is at, in order,
// until fn returns false, and returns the block's first entry.
func decodeCurrent(it *pebble.Iterator, fn func(indexed) bool) (first int64, err error) {
	ledger, first, ok := decodeBlockKey(it.Key())
	if !ok {
		return 0, errCorruptBlock
	}
	if err := decodeBlock(first, it.Value(), fn); err != nil {
		return first, fmt.Errorf("%w: ledger %d block %d", err, ledger, first)
	}
	return first, nil
}

// scanIndex calls fn with the indexed entries of ledger from entry from on,
// in order, until fn returns false.
func (s *DiskStorage) scanIndex(ledger, from int64, fn func(indexed) bool) (err error) {
	it, err := s.ledgerBlocks(ledger)
	if err != nil {
		return err
	}
	defer closeIter(it, &err)
	more := true
	for valid := seekBlock(it, ledger, from); valid && more; valid = it.Next() {
		if _, err := decodeCurrent(it, func(x indexed) bool {
			if x.entry < from {
				return true
			}
			more = fn(x)
			return more
		}); err != nil {
			return err
		}
	}
	return nil
}

// lastIndexed returns the highest indexed entry of ledger, NoEntry if none.
func (s *DiskStorage) lastIndexed(ledger int64) (last int64, err error) {
	it, err := s.ledgerBlocks(ledger)
	if err != nil {
		return 0, err
	}
	defer closeIter(it, &err)
	last = NoEntry
	if it.Last() {
		if _, err := decodeCurrent(it, func(x indexed) bool {
			last = x.entry
			return true
		}); err != nil {
			return 0, err
		}
	}
	return last, nil
}

// indexUnknown marks ledgerMeta.indexed not yet looked up.
const indexUnknown = math.MinInt64

// indexLedger adds to b the locations of items (one ledger, entries
// ascending), and returns the scratch buffers. m is the ledger's metadata,
// whose indexed field (the highest indexed entry; guarded by flushMu) it
// reads and advances, or nil. flushMu must be held.
func (s *DiskStorage) indexLedger(b *pebble.Batch, ledger int64, items []indexed, m *ledgerMeta, kbuf, vbuf []byte) ([]byte, []byte, error) {
	top := int64(indexUnknown)
	if m != nil {
		top = m.indexed
	}
	if top == indexUnknown {
		var err error
		if top, err = s.lastIndexed(ledger); err != nil {
			return kbuf, vbuf, err
		}
	}
	newTop := max(top, items[len(items)-1].entry)
	if items[0].entry <= top {
		merged, err := s.mergeBlocks(b, ledger, items)
		if err != nil {
			return kbuf, vbuf, err
		}
		items = merged
	}
	kbuf, vbuf, err := setBlocks(b, ledger, items, kbuf, vbuf)
	if err == nil && m != nil {
		// Advanced before the batch commits: a failed commit makes the
		// storage read-only (setIOError), and nothing flushes again.
		m.indexed = newTop
	}
	return kbuf, vbuf, err
}

// mergeBlocks deletes (in b) the blocks of ledger that items overlap and
// returns their entries merged with items, an entry of items replacing an
// indexed one of the same id.
func (s *DiskStorage) mergeBlocks(b *pebble.Batch, ledger int64, items []indexed) (_ []indexed, err error) {
	it, err := s.ledgerBlocks(ledger)
	if err != nil {
		return nil, err
	}
	defer closeIter(it, &err)
	lastNew := items[len(items)-1].entry
	var old []indexed
	for valid := seekBlock(it, ledger, items[0].entry); valid; valid = it.Next() {
		if _, first, ok := decodeBlockKey(it.Key()); ok && first > lastNew {
			break
		}
		if _, err := decodeCurrent(it, func(x indexed) bool {
			old = append(old, x)
			return true
		}); err != nil {
			return nil, err
		}
		if err := b.Delete(it.Key(), nil); err != nil {
			return nil, err
		}
	}
	merged := make([]indexed, 0, len(old)+len(items))
	i, j := 0, 0
	for i < len(old) || j < len(items) {
		switch {
		case j == len(items) || i < len(old) && old[i].entry < items[j].entry:
			merged = append(merged, old[i])
			i++
		case i == len(old) || items[j].entry < old[i].entry:
			merged = append(merged, items[j])
			j++
		default: // the same entry: the new location wins
			merged = append(merged, items[j])
			i++
			j++
		}
	}
	return merged, nil
}

// migrateEntryKeys rewrites the per-entry index keys of an index written
// before blocks ('e' ledger entry -> 20-byte location) as blocks, in one
// synced batch.
func (s *DiskStorage) migrateEntryKeys() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEntry}, UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		return fmt.Errorf("storage: index: %w", err)
	}
	defer it.Close()
	if !it.First() {
		return it.Error()
	}
	b := s.db.NewBatch()
	defer b.Close()
	var (
		items      []indexed
		ledger     int64
		kbuf, vbuf []byte
		n          int
	)
	for ; it.Valid(); it.Next() {
		l, e, ok := decodeEntryKey(it.Key())
		if !ok {
			continue
		}
		loc, err := entrylog.DecodeLocation(it.Value())
		if err != nil {
			return err
		}
		if len(items) > 0 && l != ledger {
			if kbuf, vbuf, err = setBlocks(b, ledger, items, kbuf, vbuf); err != nil {
				return err
			}
			items = items[:0]
		}
		ledger = l
		items = append(items, indexed{e, loc})
		n++
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("storage: index: %w", err)
	}
	if len(items) > 0 {
		if _, _, err := setBlocks(b, ledger, items, kbuf, vbuf); err != nil {
			return err
		}
	}
	if err := b.DeleteRange([]byte{prefixEntry}, []byte{prefixEntry + 1}, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("storage: index: migrate %d entry keys to blocks: %w", n, err)
	}
	s.cfg.Logger.Info("bookie storage: index entry keys rewritten as blocks", "entries", n)
	return nil
}
