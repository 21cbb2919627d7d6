package ledger

import (
	"context"
	"time"
)

// The size of a ledger is known from its writer, which adds up the payloads
// it wrote and stores the total when it closes the ledger. A ledger whose
// writer died is closed by recovery, which reads only the entries after the
// last-add-confirmed the bookies report; the sizes of the entries before
// it are stored nowhere but in the entries. So a recovered ledger is
// marked SizeUnknown, and the managed ledger that recovered it (or the
// next one to open it, if this one stops first) counts its entries' bytes
// in the background and stores the exact size: opening the managed ledger
// does not wait for a read of the whole ledger.
const (
	// sizeCountBatch is how many entries one read of the count asks for.
	sizeCountBatch = 32
	// sizeCountTimeout bounds the count of one ledger.
	sizeCountTimeout = 5 * time.Minute
)

// countRecoveredSizes starts the count of every ledger marked SizeUnknown.
func (ml *ManagedLedger) countRecoveredSizes() {
	ml.mu.Lock()
	var ids []int64
	for _, l := range ml.ledgers {
		if l.SizeUnknown && l.Offload == nil {
			ids = append(ids, l.ID)
		}
	}
	ml.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ml.bgWG.Add(1)
	go func() {
		defer ml.bgWG.Done()
		for _, id := range ids {
			ml.countSize(id)
		}
	}()
}

// stopping reports whether the managed ledger is closed or fenced.
func (ml *ManagedLedger) stopping() bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.state == stateClosed || ml.state == stateFenced
}

// countSize reads ledger id's entries, adds up their payload bytes and
// stores the total as the ledger's size. It gives up quietly when the
// managed ledger stops or the ledger is trimmed meanwhile.
func (ml *ManagedLedger) countSize(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), sizeCountTimeout)
	defer cancel()
	start := time.Now()
	ml.mu.Lock()
	i := ml.ledgerIndexLocked(id)
	var entries int64
	if i >= 0 {
		entries = ml.ledgers[i].Entries
	}
	ml.mu.Unlock()
	var size int64
	for first := int64(0); first < entries; first += sizeCountBatch {
		if ml.stopping() {
			return
		}
		ents, err := ml.readBookies(ctx, id, first, min(first+sizeCountBatch, entries)-1, false)
		if err != nil {
			ml.mu.Lock()
			gone := ml.ledgerIndexLocked(id) < 0
			ml.mu.Unlock()
			if !gone && !ml.stopping() {
				ml.logger().Warn("counting the size of a recovered ledger failed", "ledger", id, "err", err)
			}
			return
		}
		for _, e := range ents {
			size += int64(len(e.Data))
		}
	}
	ml.infoMu.Lock()
	defer ml.infoMu.Unlock()
	ml.mu.Lock()
	defer ml.mu.Unlock()
	i = ml.ledgerIndexLocked(id)
	if i < 0 || ml.state == stateClosed || ml.state == stateFenced {
		return
	}
	prev := ml.ledgers[i].Size
	ml.ledgers[i].Size, ml.ledgers[i].SizeUnknown = size, false
	if err := ml.writeRecordLocked(ctx, ml.recordLocked()); err != nil {
		// The size stays right in memory; the next open counts again.
		ml.logger().Warn("storing the size of a recovered ledger failed", "ledger", id, "err", err)
		return
	}
	ml.logger().Info("recovered ledger's size counted", "ledger", id, "entries", entries, "size", size,
		"recoveredTail", prev, "countMs", time.Since(start).Milliseconds())
}
