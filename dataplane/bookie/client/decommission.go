package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// ErrBookieRunning: a bookie must be stopped before it is decommissioned
// (as in BookKeeper), so nothing new is written to it meanwhile.
var ErrBookieRunning = errors.New("ledger: bookie is still registered as available; stop it first")

// DecommissionReport says what a decommission did.
type DecommissionReport struct {
	AuditReport
	// OpenLedgers still name the bookie: their writers replace it on the
	// next failed add, or recovery closes them and a later audit copies.
	OpenLedgers []int64
}

// Decommission drains a stopped bookie: it copies every fragment of every
// closed ledger that the bookie held to other bookies (the auditor's repair,
// run now and repeated until no closed ledger names the bookie or ctx ends)
// and then removes the bookie's cookie, so its id can be reused by a new
// disk. addr is the bookie's address as ledger metadata names it; id its
// registration id (often the same).
func (a *Auditor) Decommission(ctx context.Context, id, addr string) (DecommissionReport, error) {
	var rep DecommissionReport
	avail, err := availableBookies(ctx, a.c.cfg.Metadata)
	if err != nil {
		return rep, err
	}
	for _, b := range avail {
		if b.Addr == addr || b.ID == id {
			return rep, fmt.Errorf("%w: %s", ErrBookieRunning, id)
		}
	}
	for {
		r, err := a.CheckOnce(ctx)
		if err != nil {
			return rep, err
		}
		rep.Ledgers = r.Ledgers
		rep.FragmentsRepaired += r.FragmentsRepaired
		rep.EntriesCopied += r.EntriesCopied
		closed, open, err := a.ledgersNaming(ctx, addr)
		if err != nil {
			return rep, err
		}
		rep.OpenLedgers = open
		rep.UnderReplicatedNow = len(closed)
		if len(closed) == 0 {
			break
		}
		a.log.Info("decommission: ledgers still name the bookie", "bookie", addr, "closed", len(closed))
		select {
		case <-ctx.Done():
			return rep, fmt.Errorf("ledger: decommission of %s: %d closed ledgers still name it: %w", addr, len(closed), ctx.Err())
		case <-time.After(time.Second):
		}
	}
	if err := a.c.cfg.Metadata.Delete(ctx, bookie.CookieKey(id), -1); err != nil && !errors.Is(err, metadata.ErrNotFound) {
		return rep, fmt.Errorf("ledger: remove cookie of %s: %w", id, err)
	}
	return rep, nil
}

// ledgersNaming lists the ledgers whose ensembles include addr.
func (a *Auditor) ledgersNaming(ctx context.Context, addr string) (closed, open []int64, err error) {
	ids, err := a.c.meta.list(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		m, err := a.c.meta.read(ctx, id)
		if errors.Is(err, ErrNoSuchLedger) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if holdsEntries(m, addr) {
			if m.State == StateClosed {
				closed = append(closed, id)
			} else {
				open = append(open, id)
			}
		}
	}
	return closed, open, nil
}

// holdsEntries reports whether addr stores any entry of ledger m (an open
// ledger's last fragment counts: it may receive entries).
func holdsEntries(m *LedgerMetadata, addr string) bool {
	for fi, f := range m.Fragments {
		first, end := f.FirstEntry, m.fragmentEnd(fi, m.LastEntry)
		for idx, b := range f.Bookies {
			if b != addr {
				continue
			}
			if m.State != StateClosed && fi == len(m.Fragments)-1 {
				return true
			}
			if end >= first && lastHeldBy(m, idx, first, end) >= 0 {
				return true
			}
		}
	}
	return false
}
