package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// InitialPosition is where a new durable cursor starts.
type InitialPosition int

const (
	// InitialLatest starts after the last confirmed entry.
	InitialLatest InitialPosition = iota
	// InitialEarliest starts at the first stored entry.
	InitialEarliest
)

// Cursor is a subscription's position in a managed ledger: the mark-delete
// position (everything up to it is acknowledged), the entries acknowledged
// individually above it (kept as runs), partly acknowledged batches, and
// the read position of the next ReadEntries. A durable cursor is stored in
// the metadata store (at most CursorPersistInterval after a change, and on
// Close) and holds back trimming; a non-durable one lives in memory only
// and holds back trimming until its Close. Safe for concurrent use.
type Cursor struct {
	ml      *ManagedLedger
	name    string
	durable bool

	// persistMu serializes writes of the cursor's record; taken before mu.
	persistMu sync.Mutex
	version   metadata.Version

	mu          sync.Mutex
	markDelete  Position
	persistedMD Position // mark-delete position last stored (trimming uses it)
	readPos     Position
	readGen     uint64 // bumped when readPos is moved by the user
	acks        ackSet
	batches     map[Position]*batchAck
	props       map[string]string
	lastActive  time.Time
	deleted     bool
}

// Name returns the cursor's name ("" for a non-durable cursor).
func (c *Cursor) Name() string { return c.name }

// IsDurable reports whether the cursor is stored.
func (c *Cursor) IsDurable() bool { return c.durable }

func newCursor(ml *ManagedLedger, name string, durable bool, md Position) *Cursor {
	c := &Cursor{ml: ml, name: name, durable: durable, markDelete: md, persistedMD: md,
		batches: map[Position]*batchAck{}, props: map[string]string{}, lastActive: time.Now()}
	c.readPos = ml.Next(md)
	return c
}

// ---- managed-ledger side: open, load, delete, persist ----

// OpenCursor returns the durable cursor name, creating it at initial if it
// does not exist (its state is otherwise restored from the metadata
// store).
func (ml *ManagedLedger) OpenCursor(ctx context.Context, name string, initial InitialPosition) (*Cursor, error) {
	if err := checkName("cursor", name); err != nil {
		return nil, err
	}
	ml.mu.Lock()
	if ml.state == stateClosed || ml.state == stateFenced {
		err := ml.addErrLocked()
		ml.mu.Unlock()
		return nil, err
	}
	if c := ml.cursors[name]; c != nil {
		ml.mu.Unlock()
		return c, nil
	}
	md := ml.firstPositionLocked()
	if initial == InitialLatest {
		md = ml.lastConfirmed
	}
	ml.mu.Unlock()

	c := newCursor(ml, name, true, md)
	b, err := json.Marshal(c.info())
	if err != nil {
		return nil, err
	}
	v, err := ml.f.md.Create(ctx, cursorKey(ml.name, name), b)
	if errors.Is(err, metadata.ErrExists) {
		// Created concurrently here, or by another owner.
		ml.mu.Lock()
		existing := ml.cursors[name]
		ml.mu.Unlock()
		if existing != nil {
			return existing, nil
		}
		return nil, fmt.Errorf("%w: cursor %q of %q appeared in the metadata store", ErrFenced, name, ml.name)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: create cursor %q of %q: %w", name, ml.name, err)
	}
	c.version = v
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if existing := ml.cursors[name]; existing != nil {
		return existing, nil
	}
	if ml.state == stateClosed || ml.state == stateFenced {
		return nil, ml.addErrLocked()
	}
	setKey(&ml.cursors, name, c)
	return c, nil
}

// loadCursors restores every durable cursor at open and claims each record
// by rewriting it (bumping its version), so that a previous owner's later
// cursor writes fail.
func (ml *ManagedLedger) loadCursors(ctx context.Context) error {
	names, err := ml.f.md.Children(ctx, cursorsParent(ml.name))
	if err != nil {
		return fmt.Errorf("ledger: list cursors of %q: %w", ml.name, err)
	}
	for _, esc := range names {
		name, err := unescapeName(esc)
		if err != nil {
			continue
		}
		key := cursorKey(ml.name, name)
		kv, err := ml.f.md.Get(ctx, key)
		if errors.Is(err, metadata.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("ledger: read cursor %q of %q: %w", name, ml.name, err)
		}
		var info cursorInfo
		if err := json.Unmarshal(kv.Value, &info); err != nil {
			return fmt.Errorf("ledger: cursor %q of %q: corrupt record: %w", name, ml.name, err)
		}
		v, err := ml.f.md.Put(ctx, key, kv.Value, kv.Version)
		if errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: cursor %q of %q changed while opening: %w", ErrFenced, name, ml.name, err)
		}
		if err != nil {
			return fmt.Errorf("ledger: claim cursor %q of %q: %w", name, ml.name, err)
		}
		c := newCursor(ml, name, true, info.MarkDelete)
		c.version = v
		for _, r := range info.IndividuallyDeleted {
			for e := r.From; e <= r.To; e++ {
				if p := (Position{r.LedgerID, e}); c.markDelete.Less(p) {
					c.acks.add(p)
				}
			}
		}
		for _, b := range info.BatchAcks {
			if c.markDelete.Less(b.Pos) && b.Size > 0 && len(b.Acked) == bitsetWords(b.Size) {
				ba := b
				c.batches[b.Pos] = &ba
			}
		}
		if info.Properties != nil {
			c.props = info.Properties
		}
		if info.LastActive > 0 {
			c.lastActive = time.UnixMilli(info.LastActive)
		}
		c.advance()
		setKey(&ml.cursors, name, c)
	}
	return nil
}

// DeleteCursor removes a durable cursor and its record, then the side
// ledgers its properties name; the data it held back may then be trimmed.
func (ml *ManagedLedger) DeleteCursor(ctx context.Context, name string) error {
	ml.mu.Lock()
	c := ml.cursors[name]
	if c == nil {
		ml.mu.Unlock()
		return fmt.Errorf("%w: cursor %q of %q", ErrNotFound, name, ml.name)
	}
	delete(ml.cursors, name)
	delete(ml.dirty, c)
	ml.mu.Unlock()
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	c.deleted = true
	side := sideLedgers(c.props)
	c.mu.Unlock()
	err := ml.f.md.Delete(ctx, cursorKey(ml.name, name), metadata.AnyVersion)
	if err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("ledger: delete cursor %q of %q: %w", name, ml.name, err)
	}
	for _, id := range side {
		if err := deleteSideLedger(ctx, ml.f.client, id); err != nil {
			ml.logger().Warn("delete side ledger of deleted cursor failed", "cursor", name, "ledger", id, "err", err)
		}
	}
	ml.signal(func() { ml.trimWanted = true })
	return nil
}

// Cursors returns the durable cursors, sorted by name.
func (ml *ManagedLedger) Cursors() []*Cursor {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	out := slices.Collect(maps.Values(ml.cursors))
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// NewNonDurableCursor returns an in-memory cursor (a reader). It starts at
// start (Earliest, Latest or a position): with inclusive the first entry
// read is start itself, otherwise the one after it. Until Close it holds
// back trimming at its mark-delete position, as Pulsar's readers do; it is
// not stored and does not survive a reopen.
func (ml *ManagedLedger) NewNonDurableCursor(start Position, inclusive bool) (*Cursor, error) {
	ml.mu.Lock()
	if ml.state == stateClosed {
		ml.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrClosed, ml.name)
	}
	var md Position
	switch {
	case start == Earliest:
		md = ml.firstPositionLocked()
	case start == Latest && inclusive:
		md = ml.lastConfirmed
		if md.EntryID >= 0 {
			md.EntryID--
		}
	case start == Latest:
		md = ml.lastConfirmed
	case inclusive:
		md = Position{start.LedgerID, start.EntryID - 1}
	default:
		md = start
	}
	ml.mu.Unlock()
	c := newCursor(ml, "", false, md)
	ml.mu.Lock()
	setKey(&ml.nonDurable, c, struct{}{})
	ml.mu.Unlock()
	return c, nil
}

// Close releases a non-durable cursor: it no longer holds back trimming.
// Closing a durable cursor does nothing (it is stored with its managed
// ledger's Close; DeleteCursor removes it).
func (c *Cursor) Close() {
	if c.durable {
		return
	}
	c.ml.mu.Lock()
	delete(c.ml.nonDurable, c)
	c.ml.mu.Unlock()
	c.ml.signal(func() { c.ml.trimWanted = true })
}

func (ml *ManagedLedger) markDirty(c *Cursor) {
	if !c.durable {
		return
	}
	ml.mu.Lock()
	if _, ok := ml.cursors[c.name]; ok && ml.cursors[c.name] == c {
		setKey(&ml.dirty, c, struct{}{})
		ml.armFlushLocked()
	}
	ml.mu.Unlock()
}

// flushCursors stores every changed durable cursor.
func (ml *ManagedLedger) flushCursors() error {
	ml.mu.Lock()
	if ml.state == stateFenced || len(ml.dirty) == 0 {
		// Nothing changed (a managed ledger's first pass after it is
		// opened): no timeout context to build.
		ml.mu.Unlock()
		return nil
	}
	dirty := slices.Collect(maps.Keys(ml.dirty))
	clear(ml.dirty)
	ml.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), ml.conf().OperationTimeout)
	defer cancel()
	var errs []error
	for _, c := range dirty {
		err := c.persist(ctx)
		if err == nil {
			continue
		}
		ml.mu.Lock()
		if errors.Is(err, ErrFenced) {
			ml.fenceLocked(err)
		} else {
			setKey(&ml.dirty, c, struct{}{})
			ml.logger().Warn("cursor persist failed", "cursor", c.name, "err", err)
		}
		ml.mu.Unlock()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// persist writes the cursor's record by compare-and-set.
func (c *Cursor) persist(ctx context.Context) error {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	if c.deleted {
		c.mu.Unlock()
		return nil
	}
	info := c.infoLocked()
	md := c.markDelete
	c.mu.Unlock()
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	v, err := c.ml.f.md.Put(ctx, cursorKey(c.ml.name, c.name), b, c.version)
	if errors.Is(err, metadata.ErrBadVersion) || errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: cursor %q of %q changed: %w", ErrFenced, c.name, c.ml.name, err)
	}
	if err != nil {
		return fmt.Errorf("ledger: store cursor %q of %q: %w", c.name, c.ml.name, err)
	}
	c.version = v
	c.mu.Lock()
	c.persistedMD = md
	c.mu.Unlock()
	return nil
}

func (c *Cursor) info() cursorInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.infoLocked()
}

func (c *Cursor) infoLocked() cursorInfo {
	info := cursorInfo{MarkDelete: c.markDelete, Properties: maps.Clone(c.props), LastActive: c.lastActive.UnixMilli()}
	n := min(len(c.acks.r), c.ml.conf().MaxPersistedAckRanges)
	info.IndividuallyDeleted = slices.Clone(c.acks.r[:n])
	for _, b := range c.batches {
		info.BatchAcks = append(info.BatchAcks, batchAck{Pos: b.Pos, Size: b.Size, Acked: slices.Clone(b.Acked)})
	}
	sort.Slice(info.BatchAcks, func(i, j int) bool { return info.BatchAcks[i].Pos.Less(info.BatchAcks[j].Pos) })
	return info
}

// ---- cursor operations ----

func (c *Cursor) errLocked() error {
	if c.deleted {
		return fmt.Errorf("%w: cursor %q deleted", ErrClosed, c.name)
	}
	c.ml.mu.Lock()
	defer c.ml.mu.Unlock()
	if c.ml.state == stateClosed {
		return fmt.Errorf("%w: %q", ErrClosed, c.ml.name)
	}
	return nil
}

// changedLocked notes a change to persist.
func (c *Cursor) changedLocked() {
	c.lastActive = time.Now()
	c.ml.markDirty(c)
}

// MarkDeletePosition returns the position up to which every entry is
// acknowledged.
func (c *Cursor) MarkDeletePosition() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.markDelete
}

// ReadPosition returns the position the next ReadEntries starts at.
func (c *Cursor) ReadPosition() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readPos
}

// LastActive returns when the cursor last changed.
func (c *Cursor) LastActive() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastActive
}

// skipAckedLocked moves p past individually acknowledged runs.
func (c *Cursor) skipAckedLocked(p Position) Position {
	for {
		r, ok := c.acks.runAt(p)
		if !ok {
			return p
		}
		p = c.ml.Next(Position{r.LedgerID, r.To})
	}
}

// ReadEntries returns up to max entries from the read position, skipping
// acknowledged ones, and moves the read position past them. An empty
// result means the cursor is caught up (see ManagedLedger.WaitForNew).
func (c *Cursor) ReadEntries(ctx context.Context, max int) ([]Entry, error) {
	if max <= 0 {
		return nil, fmt.Errorf("%w: max %d", ErrInvalidArgument, max)
	}
	var out []Entry
	for len(out) < max {
		c.mu.Lock()
		if err := c.errLocked(); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		pos := c.skipAckedLocked(c.readPos)
		gen := c.readGen
		c.mu.Unlock()

		want := max - len(out)
		ents, err := c.ml.Read(ctx, pos, want, 0)
		if err != nil {
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		if len(ents) == 0 {
			break
		}
		c.mu.Lock()
		if gen != c.readGen {
			// Moved by Rewind/Seek/Reset meanwhile: what was read is
			// still valid to deliver, but the new position stands.
			c.mu.Unlock()
			break
		}
		for _, e := range ents {
			if !c.isAckedLocked(e.Pos) {
				out = append(out, e)
			}
		}
		c.readPos = c.ml.Next(ents[len(ents)-1].Pos)
		c.lastActive = time.Now()
		c.mu.Unlock()
		if len(ents) < want {
			break
		}
	}
	return out, nil
}

// HasMoreEntries reports whether an unacknowledged entry exists at or after
// the read position.
func (c *Cursor) HasMoreEntries() bool {
	c.mu.Lock()
	pos := c.skipAckedLocked(c.readPos)
	c.mu.Unlock()
	c.ml.mu.Lock()
	defer c.ml.mu.Unlock()
	_, _, ok := c.ml.resolveLocked(pos)
	return ok
}

// validLocked reports whether p names a confirmed, stored entry. ml.mu is
// held.
func (ml *ManagedLedger) validLocked(p Position) bool {
	if p.EntryID < 0 || ml.lastConfirmed.Less(p) {
		return false
	}
	i := ml.ledgerIndexLocked(p.LedgerID)
	return i >= 0 && (p.EntryID < ml.ledgers[i].Entries || p.LedgerID == ml.lastConfirmed.LedgerID)
}

func (c *Cursor) checkPos(p Position) error {
	c.ml.mu.Lock()
	ok := c.ml.validLocked(p)
	c.ml.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %v is not a confirmed entry of %q", ErrInvalidPosition, p, c.ml.name)
	}
	return nil
}

// Ack acknowledges one entry. Acknowledging an acknowledged entry does
// nothing.
func (c *Cursor) Ack(p Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(); err != nil {
		return err
	}
	if c.isAckedLocked(p) {
		return nil
	}
	if err := c.checkPos(p); err != nil {
		return err
	}
	c.ackLocked(p)
	c.changedLocked()
	return nil
}

func (c *Cursor) ackLocked(p Position) {
	delete(c.batches, p)
	if c.ml.Next(c.markDelete) == p {
		c.markDelete = p
		c.advanceLocked()
	} else {
		c.acks.add(p)
	}
	c.fixReadPosLocked()
}

// AckBatchIndexes acknowledges indexes of the batch entry at p, which holds
// batchSize messages. The entry counts as acknowledged once every index is.
func (c *Cursor) AckBatchIndexes(p Position, batchSize int, idx []int) error {
	if batchSize <= 0 {
		return fmt.Errorf("%w: batch size %d", ErrInvalidArgument, batchSize)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(); err != nil {
		return err
	}
	if c.isAckedLocked(p) {
		return nil
	}
	if err := c.checkPos(p); err != nil {
		return err
	}
	b := c.batches[p]
	if b == nil || b.Size != batchSize {
		b = &batchAck{Pos: p, Size: batchSize, Acked: make([]uint64, bitsetWords(batchSize))}
		c.batches[p] = b
	}
	for _, i := range idx {
		if i < 0 || i >= batchSize {
			return fmt.Errorf("%w: batch index %d of %d", ErrInvalidArgument, i, batchSize)
		}
		b.Acked[i/64] |= 1 << (i % 64)
	}
	if bitsetFull(b.Acked, batchSize) {
		c.ackLocked(p)
	}
	c.changedLocked()
	return nil
}

// BatchAckSet returns the acknowledged-index bitset (bit i of word i/64) of
// a partly acknowledged batch entry; ok is false when none of its indexes
// is individually acknowledged (or the whole entry is).
func (c *Cursor) BatchAckSet(p Position) (acked []uint64, batchSize int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.batches[p]
	if b == nil {
		return nil, 0, false
	}
	return slices.Clone(b.Acked), b.Size, true
}

// AckCumulative acknowledges every entry up to and including p.
func (c *Cursor) AckCumulative(p Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(); err != nil {
		return err
	}
	if !c.markDelete.Less(p) {
		return nil
	}
	if err := c.checkPos(p); err != nil {
		return err
	}
	c.ackCumulativeLocked(p)
	return nil
}

func (c *Cursor) ackCumulativeLocked(p Position) {
	if !c.markDelete.Less(p) {
		return
	}
	c.markDelete = p
	c.acks.removeThrough(p)
	for bp := range c.batches {
		if !p.Less(bp) {
			delete(c.batches, bp)
		}
	}
	c.advanceLocked()
	c.fixReadPosLocked()
	c.changedLocked()
}

// advanceLocked moves the mark-delete position over acknowledged runs that
// follow it.
func (c *Cursor) advanceLocked() bool {
	moved := false
	for len(c.acks.r) > 0 {
		r := c.acks.r[0]
		if c.ml.Next(c.markDelete) != rangeStart(r) {
			break
		}
		c.markDelete = Position{r.LedgerID, r.To}
		c.acks.removeThrough(c.markDelete)
		moved = true
	}
	return moved
}

// advance re-checks the mark-delete position after the ledger list changed.
func (c *Cursor) advance() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.advanceLocked() {
		c.fixReadPosLocked()
		c.changedLocked()
	}
}

func (c *Cursor) fixReadPosLocked() {
	if n := c.ml.Next(c.markDelete); c.readPos.Less(n) {
		c.readPos = n
	}
}

// IsAcked reports whether the entry at p is acknowledged.
func (c *Cursor) IsAcked(p Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.isAckedLocked(p)
}

func (c *Cursor) isAckedLocked(p Position) bool {
	return !c.markDelete.Less(p) || c.acks.contains(p)
}

// Rewind moves the read position back to the first entry after the
// mark-delete position, so every unacknowledged entry is read again.
func (c *Cursor) Rewind() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readPos = c.ml.Next(c.markDelete)
	c.readGen++
}

// Seek moves the read position only (not before the first unacknowledged
// entry); acknowledgements are kept.
func (c *Cursor) Seek(p Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readPos = maxPos(p, c.ml.Next(c.markDelete))
	c.readGen++
}

// ResetCursor moves the cursor so that p (Earliest, Latest or a position)
// is the next entry read: the mark-delete position becomes the one just
// before p, and every individual and batch acknowledgement is dropped.
// Moving back redelivers acknowledged entries; moving forward acknowledges
// the skipped ones.
func (c *Cursor) ResetCursor(p Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(); err != nil {
		return err
	}
	c.ml.mu.Lock()
	var md Position
	switch {
	case p == Earliest || p.LedgerID < 0:
		md = c.ml.firstPositionLocked()
	case p == Latest:
		md = c.ml.lastConfirmed
	default:
		md = Position{p.LedgerID, p.EntryID - 1}
		if c.ml.lastConfirmed.Less(md) {
			md = c.ml.lastConfirmed
		}
	}
	c.ml.mu.Unlock()
	c.markDelete = md
	c.acks.clear()
	clear(c.batches)
	c.readPos = c.ml.Next(md)
	c.readGen++
	c.changedLocked()
	return nil
}

// SkipEntries acknowledges the next n unacknowledged entries after the
// mark-delete position (fewer if the ledger ends first).
func (c *Cursor) SkipEntries(n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: skip %d", ErrInvalidArgument, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	ml := c.ml
	ml.mu.Lock()
	ids, counts, total := ml.indexLocked()
	ml.mu.Unlock()
	// idx maps a position to the number of stored entries at or before it.
	idx := func(p Position) int64 {
		var k int64
		for i, id := range ids {
			switch {
			case id < p.LedgerID:
				k += counts[i]
			case id == p.LedgerID:
				k += min(max(p.EntryID+1, 0), counts[i])
			}
		}
		return k
	}
	cur := idx(c.markDelete) // entries at or before mark-delete
	remaining := n
	for _, r := range c.acks.r {
		gap := idx(Position{r.LedgerID, r.From}) - 1 - cur
		if remaining <= gap {
			break
		}
		remaining -= gap
		cur = idx(Position{r.LedgerID, r.To})
	}
	target := min(cur+remaining, total) // 1-based count of the last entry to acknowledge
	if target <= 0 {
		return nil
	}
	k := target - 1
	for i, cnt := range counts {
		if k < cnt {
			c.ackCumulativeLocked(Position{ids[i], k})
			return nil
		}
		k -= cnt
	}
	return nil
}

// ClearBacklog acknowledges every confirmed entry.
func (c *Cursor) ClearBacklog() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(); err != nil {
		return err
	}
	c.ml.mu.Lock()
	lc := c.ml.lastConfirmed
	c.ml.mu.Unlock()
	c.ackCumulativeLocked(lc)
	return nil
}

// Backlog returns the number of confirmed entries not acknowledged
// (partly acknowledged batches count as unacknowledged).
func (c *Cursor) Backlog() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ml.mu.Lock()
	lc := c.ml.lastConfirmed
	n := c.ml.entriesBetweenLocked(c.markDelete, lc)
	c.ml.mu.Unlock()
	return max(n-c.acks.countThrough(lc), 0)
}

// Properties returns a copy of the cursor's properties.
func (c *Cursor) Properties() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.props)
}

// SetProperty sets (or with an empty value deletes) a property; it is
// stored with the cursor's next persistence.
func (c *Cursor) SetProperty(key, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if value == "" {
		delete(c.props, key)
	} else {
		c.props[key] = value
	}
	c.changedLocked()
}

// Flush stores a durable cursor now (instead of waiting for the persist
// interval).
func (c *Cursor) Flush(ctx context.Context) error {
	if !c.durable {
		return nil
	}
	c.ml.mu.Lock()
	delete(c.ml.dirty, c)
	c.ml.mu.Unlock()
	err := c.persist(ctx)
	if errors.Is(err, ErrFenced) {
		c.ml.mu.Lock()
		c.ml.fenceLocked(err)
		c.ml.mu.Unlock()
	}
	if err == nil {
		c.ml.signal(func() { c.ml.trimWanted = true })
	}
	return err
}

// AckedRange is a run of individually acknowledged entries of one ledger,
// From through To, above the mark-delete position.
type AckedRange struct {
	LedgerID, From, To int64
}

// AckedRanges returns up to max runs of individually acknowledged entries
// above the mark-delete position, in order, and whether that is all of
// them.
func (c *Cursor) AckedRanges(max int) ([]AckedRange, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.acks.r), max)
	out := make([]AckedRange, n)
	for i, r := range c.acks.r[:n] {
		out[i] = AckedRange{LedgerID: r.LedgerID, From: r.From, To: r.To}
	}
	return out, n == len(c.acks.r)
}
