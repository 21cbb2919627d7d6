package ledger

import (
	"context"
	"errors"
)

// trim deletes consumed ledgers outside retention: oldest first, closed,
// never the last one, entirely at or below the slowest durable cursor's
// stored mark-delete position and every open non-durable cursor's
// mark-delete position (or LastConfirmed without cursors).
// The record is updated by compare-and-set first, then the ledgers are
// deleted, so a crash in between leaks ledgers but never loses a listed
// one.
func (ml *ManagedLedger) trim() {
	ml.mu.Lock()
	if ml.state == stateFenced || ml.state == stateClosed || len(ml.ledgers) < 2 {
		// The current ledger is never trimmed.
		ml.mu.Unlock()
		return
	}
	slowest := ml.lastConfirmed
	curs := make([]*Cursor, 0, len(ml.cursors))
	for _, c := range ml.cursors {
		curs = append(curs, c)
	}
	for c := range ml.nonDurable {
		curs = append(curs, c)
	}
	ml.mu.Unlock()
	for _, c := range curs {
		c.mu.Lock()
		md := c.persistedMD
		if !c.durable {
			md = c.markDelete
		}
		if !c.deleted && md.Less(slowest) {
			slowest = md
		}
		c.mu.Unlock()
	}

	ctx, cancel := context.WithTimeout(context.Background(), ml.conf().OperationTimeout)
	defer cancel()
	ml.infoMu.Lock()
	defer ml.infoMu.Unlock()
	ml.mu.Lock()
	var total int64
	for _, l := range ml.ledgers {
		total += l.Size
	}
	now := nowMillis()
	var del []LedgerInfo
	var deleted int64
	for _, l := range ml.ledgers[:max(len(ml.ledgers)-1, 0)] {
		if !l.closed() || slowest.Less(Position{l.ID, l.Entries - 1}) {
			break
		}
		overSize := ml.conf().RetentionSize >= 0 && total-deleted > ml.conf().RetentionSize
		expired := ml.conf().RetentionTime >= 0 && now-l.Timestamp >= ml.conf().RetentionTime.Milliseconds()
		if !overSize && !expired {
			break
		}
		del = append(del, l)
		deleted += l.Size
	}
	if len(del) == 0 {
		ml.mu.Unlock()
		return
	}
	rec := ml.recordLocked()
	rec.Ledgers = rec.Ledgers[len(del):]
	ml.mu.Unlock()
	if err := ml.putRecord(ctx, rec); err != nil {
		ml.mu.Lock()
		if errors.Is(err, ErrFenced) {
			ml.fenceLocked(err)
		} else {
			ml.logger().Warn("trimming: record update failed", "err", err)
		}
		ml.mu.Unlock()
		return
	}
	ml.mu.Lock()
	ml.ledgers = ml.ledgers[len(del):]
	ml.mu.Unlock()
	for _, l := range del {
		ml.forgetReader(l.ID)
		ml.f.cache.dropLedger(ml, l.ID)
		ml.deleteStored(ctx, l)
	}
	ml.logger().Debug("trimmed ledgers", "count", len(del), "slowest", slowest.String())
}
