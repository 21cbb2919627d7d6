package ledger

import (
	"context"
	"fmt"
	"sort"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
)

// readChunk bounds one bookie read.
const readChunk = 64

// resolveLocked returns the first stored entry at or after pos that is
// confirmed, and the last confirmed entry id of its ledger; ok is false
// when there is none.
func (ml *ManagedLedger) resolveLocked(pos Position) (p Position, last int64, ok bool) {
	if len(ml.ledgers) == 0 {
		return Position{}, 0, false
	}
	if pos.LedgerID < 0 {
		pos = Position{ml.ledgers[0].ID, 0}
	}
	pos.EntryID = max(pos.EntryID, 0)
	lc := ml.lastConfirmed
	for {
		if pos.Compare(lc) > 0 {
			return Position{}, 0, false
		}
		i := sort.Search(len(ml.ledgers), func(i int) bool { return ml.ledgers[i].ID >= pos.LedgerID })
		if i == len(ml.ledgers) {
			return Position{}, 0, false
		}
		l := ml.ledgers[i]
		if l.ID > pos.LedgerID {
			pos = Position{l.ID, 0}
			continue
		}
		last := l.Entries - 1
		if l.ID == lc.LedgerID {
			last = lc.EntryID
		}
		if pos.EntryID > last {
			if i+1 == len(ml.ledgers) {
				return Position{}, 0, false
			}
			pos = Position{ml.ledgers[i+1].ID, 0}
			continue
		}
		return pos, last, true
	}
}

// lookupLocked finds a confirmed entry in memory: the cache, or the tail of
// a ledger still being written. behind is how many payload bytes were
// added to ml after it (0 for the writer's tail, the newest entries).
func (ml *ManagedLedger) lookupLocked(p Position) (data []byte, behind int64, ok bool) {
	if d, at, ok := ml.f.cache.get(ml, p); ok {
		return d, ml.addedBytes - at, true
	}
	if w := ml.writers[p.LedgerID]; w != nil && len(w.tail) > 0 {
		first := w.tail[0].Pos.EntryID
		if p.EntryID >= first && p.EntryID-first < int64(len(w.tail)) {
			return w.tail[p.EntryID-first].Data, 0, true
		}
	}
	return nil, 0, false
}

// catchupLag is how far (in payload bytes added after it) an entry lies
// behind the newest of its managed ledger when reading it is a catch-up
// read: paced (FactoryConfig.BacklogReadRate) even when the cache still
// holds it. Without this a backlog smaller than the cache was read from
// memory at full speed whatever the pace (W6 with a 48 MiB backlog and the
// 64 MiB cache), taking the CPU from the producers the pace protects. A
// tailing reader stays well within it; Pulsar's similar notion is a
// "backlogged" cursor (managedLedgerCursorBackloggedThreshold, in entries).
const catchupLag = 1 << 20

// Read returns up to maxEntries confirmed entries starting at from (or the
// first stored entry after it), crossing ledgers, stopping once maxBytes
// payload bytes are reached (maxBytes <= 0: no byte limit; at least one
// entry is returned when any is available). Recently added entries come
// from memory; others from the bookies. An empty result means from is
// beyond LastConfirmed.
func (ml *ManagedLedger) Read(ctx context.Context, from Position, maxEntries, maxBytes int) ([]Entry, error) {
	if maxEntries <= 0 {
		return nil, fmt.Errorf("%w: maxEntries %d", ErrInvalidArgument, maxEntries)
	}
	var out []Entry
	bytes := 0
	full := func() bool { return len(out) >= maxEntries || (maxBytes > 0 && bytes >= maxBytes) }
	pos := from
	// Catch-up entries, from the bookies or from memory, are charged to the
	// pacer as they are delivered (entries read and not returned are not:
	// the consumer never got them); the first of them waits for it once per
	// Read.
	paced, waited, charged := ml.f.pacer.enabled(), false, 0
	defer func() { ml.f.pacer.charge(charged) }()
	for !full() {
		ml.mu.Lock()
		if ml.state == stateClosed {
			ml.mu.Unlock()
			return nil, fmt.Errorf("%w: %q", ErrClosed, ml.name)
		}
		p, last, ok := ml.resolveLocked(pos)
		if !ok {
			ml.mu.Unlock()
			break
		}
		wait := false
		for p.EntryID <= last && !full() {
			d, lag, hit := ml.lookupLocked(p)
			if !hit {
				break
			}
			if paced && lag > catchupLag {
				if !waited {
					wait = true
					break
				}
				charged += len(d)
			}
			out = append(out, Entry{Pos: p, Data: d})
			bytes += len(d)
			p.EntryID++
		}
		if wait {
			ml.mu.Unlock()
			waited = true
			maxBytes = ml.f.pacer.capBytes(maxBytes)
			if err := ml.f.pacer.wait(ctx); err != nil {
				if len(out) > 0 {
					return out, nil
				}
				return nil, err
			}
			pos = p
			continue
		}
		if full() || p.EntryID > last {
			ml.mu.Unlock()
			pos = p
			continue
		}
		if paced {
			waited = true
			maxBytes = ml.f.pacer.capBytes(maxBytes)
		}
		n := min(maxEntries-len(out), readChunk)
		if maxBytes > 0 {
			// Read about as many entries as the byte limit will take, by
			// the ledger's mean entry size, so that a small limit (a paced
			// Read) does not read a whole chunk to return one entry.
			if avg := ml.meanEntrySizeLocked(p.LedgerID); avg > 0 {
				n = min(n, max(1, (maxBytes-bytes+avg-1)/avg))
			}
		}
		end := min(last, p.EntryID+int64(n)-1)
		_, writing := ml.writers[p.LedgerID]
		off := ml.offloadedCopyLocked(p.LedgerID)
		ml.mu.Unlock()

		if err := ml.f.pacer.wait(ctx); err != nil {
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		ents, err := ml.readStored(ctx, p.LedgerID, p.EntryID, end, writing, off)
		if err != nil {
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if full() {
				break
			}
			out = append(out, e)
			bytes += len(e.Data)
			if paced {
				charged += len(e.Data)
			}
			pos = Position{p.LedgerID, e.Pos.EntryID + 1}
		}
	}
	return out, nil
}

// readBookies reads entries first..last of a ledger from the bookies. A
// ledger still being written is read through a fresh handle up to the LAC
// the bookies know (later entries are in the writer's tail).
func (ml *ManagedLedger) readBookies(ctx context.Context, id, first, last int64, writing bool) ([]Entry, error) {
	var rh *client.ReadHandle
	var err error
	if writing {
		rh, err = ml.f.client.OpenLedger(ctx, id, false)
		if err == nil && !rh.IsClosed() {
			last = min(last, rh.LastAddConfirmed())
		}
	} else {
		rh, err = ml.readHandle(ctx, id)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: open ledger %d of %q: %w", id, ml.name, err)
	}
	if last < first {
		return nil, nil
	}
	ents, err := rh.Read(ctx, first, last)
	if err != nil {
		return nil, fmt.Errorf("ledger: read %d:%d..%d of %q: %w", id, first, last, ml.name, err)
	}
	out := make([]Entry, len(ents))
	for i, e := range ents {
		out[i] = Entry{Pos: Position{id, e.EntryID}, Data: e.Payload}
	}
	return out, nil
}

// meanEntrySizeLocked returns the mean payload size of ledger id's
// confirmed entries, 0 when unknown.
func (ml *ManagedLedger) meanEntrySizeLocked(id int64) int {
	i := ml.ledgerIndexLocked(id)
	if i < 0 || ml.ledgers[i].Entries <= 0 {
		return 0
	}
	return int(ml.ledgers[i].Size / ml.ledgers[i].Entries)
}

// readHandle returns the cached read handle of a closed ledger.
func (ml *ManagedLedger) readHandle(ctx context.Context, id int64) (*client.ReadHandle, error) {
	ml.rhMu.Lock()
	rh := ml.readers[id]
	ml.rhMu.Unlock()
	if rh != nil {
		return rh, nil
	}
	rh, err := ml.f.client.OpenLedger(ctx, id, false)
	if err != nil {
		return nil, err
	}
	if rh.IsClosed() {
		ml.rhMu.Lock()
		setKey(&ml.readers, id, rh)
		ml.rhMu.Unlock()
	}
	return rh, nil
}

func (ml *ManagedLedger) forgetReader(id int64) {
	ml.rhMu.Lock()
	delete(ml.readers, id)
	ml.rhMu.Unlock()
}

// Next returns the position following p: the next entry of p's ledger, or
// the first entry of the next ledger that has entries (or is being
// written). It does not check that the result is confirmed.
func (ml *ManagedLedger) Next(p Position) Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.nextLocked(p)
}

func (ml *ManagedLedger) nextLocked(p Position) Position {
	n := len(ml.ledgers)
	if n == 0 {
		return Position{p.LedgerID, p.EntryID + 1}
	}
	if p.LedgerID < 0 {
		p = Position{ml.ledgers[0].ID, -1}
	}
	i := sort.Search(n, func(i int) bool { return ml.ledgers[i].ID >= p.LedgerID })
	if i == n {
		return Position{p.LedgerID, p.EntryID + 1}
	}
	if ml.ledgers[i].ID > p.LedgerID {
		p = Position{ml.ledgers[i].ID, -1}
	}
	l := ml.ledgers[i]
	if p.EntryID+1 < l.Entries || !l.closed() || i == n-1 {
		return Position{l.ID, p.EntryID + 1}
	}
	for j := i + 1; j < n; j++ {
		if ml.ledgers[j].Entries > 0 || !ml.ledgers[j].closed() || j == n-1 {
			return Position{ml.ledgers[j].ID, 0}
		}
	}
	return Position{l.ID, p.EntryID + 1}
}

// firstPositionLocked is the mark-delete position meaning "nothing
// acknowledged": just before the first stored entry.
func (ml *ManagedLedger) firstPositionLocked() Position {
	if len(ml.ledgers) == 0 {
		return ml.lastConfirmed
	}
	return Position{ml.ledgers[0].ID, -1}
}

// WaitForNew returns a channel closed once an entry after `after` is
// confirmed (at once if there is one already), or when the managed ledger
// is closed, fenced or terminated.
func (ml *ManagedLedger) WaitForNew(after Position) <-chan struct{} {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if after.Less(ml.lastConfirmed) || ml.state != stateOpen {
		return closedChan
	}
	if ml.waitCh == nil {
		ml.waitCh = make(chan struct{})
	}
	return ml.waitCh
}

// entriesBetweenLocked counts the stored entries in (after, upTo].
func (ml *ManagedLedger) entriesBetweenLocked(after, upTo Position) int64 {
	var n int64
	for _, l := range ml.ledgers {
		if l.ID < after.LedgerID || l.ID > upTo.LedgerID {
			continue
		}
		lo, hi := int64(0), l.Entries-1
		if l.ID == after.LedgerID {
			lo = max(lo, after.EntryID+1)
		}
		if l.ID == upTo.LedgerID {
			hi = min(hi, upTo.EntryID)
		}
		if hi >= lo {
			n += hi - lo + 1
		}
	}
	return n
}

// positionAtLocked returns the k-th (0-based) stored entry up to
// LastConfirmed, and the total count.
func (ml *ManagedLedger) indexLocked() (ids []int64, counts []int64, total int64) {
	lc := ml.lastConfirmed
	for _, l := range ml.ledgers {
		n := l.Entries
		if l.ID == lc.LedgerID {
			n = lc.EntryID + 1
		} else if l.ID > lc.LedgerID {
			n = 0
		}
		if n > 0 {
			ids = append(ids, l.ID)
			counts = append(counts, n)
			total += n
		}
	}
	return ids, counts, total
}

// Search returns the first entry for which pred is true, by binary search
// over the stored entries up to LastConfirmed: pred must be monotonic
// (false...false true...true), such as "publish time >= t". If pred holds
// for none, the result is the position after LastConfirmed.
func (ml *ManagedLedger) Search(ctx context.Context, pred func(Entry) bool) (Position, error) {
	ml.mu.Lock()
	ids, counts, total := ml.indexLocked()
	after := ml.nextLocked(ml.lastConfirmed)
	ml.mu.Unlock()
	at := func(k int64) Position {
		for i, c := range counts {
			if k < c {
				return Position{ids[i], k}
			}
			k -= c
		}
		return after
	}
	var searchErr error
	k := sort.Search(int(total), func(i int) bool {
		if searchErr != nil {
			return true
		}
		p := at(int64(i))
		ents, err := ml.Read(ctx, p, 1, 0)
		if err == nil && (len(ents) == 0 || ents[0].Pos != p) {
			err = fmt.Errorf("%w: entry %v is gone", ErrInvalidPosition, p)
		}
		if err != nil {
			searchErr = err
			return true
		}
		return pred(ents[0])
	})
	if searchErr != nil {
		return Position{}, searchErr
	}
	return at(int64(k)), nil
}
