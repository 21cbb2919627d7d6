package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// recover closes a ledger whose writer may still be alive or may have died
// (BookKeeper's recovery):
//  1. CAS the state to IN_RECOVERY;
//  2. fence the last fragment's bookies until every write set has Qw-Qa+1
//     fenced bookies: the old writer can no longer complete an add;
//  3. from the highest LAC they report, read forward with fencing reads; an
//     entry found on any replica is re-added to its whole write set with the
//     recovery flag (Qa acknowledgements needed); recovery stops at the first
//     entry that Qw-Qa+1 replicas say they do not have;
//  4. CAS the state to CLOSED with the last recovered entry.
//
// Concurrent recoverers converge: each step is idempotent and the final CAS
// makes the first closer win; a loser adopts the closed metadata.
func (c *Client) recover(ctx context.Context, m *LedgerMetadata) (*LedgerMetadata, error) {
	for m.State == StateOpen {
		mm := m.clone()
		mm.State = StateInRecovery
		err := c.meta.cas(ctx, mm)
		if err == nil {
			m = mm
			break
		}
		if !errors.Is(err, metadata.ErrBadVersion) {
			return nil, err
		}
		if m, err = c.meta.read(ctx, m.ID); err != nil {
			return nil, err
		}
	}
	if m.State == StateClosed {
		return m, nil
	}

	lac, err := c.fence(ctx, m)
	if err != nil {
		return nil, err
	}
	last := lac
	var length int64
	for e := lac + 1; ; e++ {
		ent, found, err := c.recoveryRead(ctx, m, e)
		if err != nil {
			return nil, err
		}
		if !found {
			break
		}
		if err := c.recoveryAdd(ctx, m, ent); err != nil {
			return nil, err
		}
		last = e
		length += int64(len(ent.Payload))
	}

	for {
		mm := m.clone()
		mm.State, mm.LastEntry = StateClosed, last
		// Length counts only the recovered tail: the payload sizes of
		// entries below the LAC are not kept anywhere but in the entries.
		mm.Length = length
		err := c.meta.cas(ctx, mm)
		if err == nil {
			c.log.Info("ledger recovered", "ledger", m.ID, "lastEntry", last)
			return mm, nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) {
			return nil, err
		}
		cur, rerr := c.meta.read(ctx, m.ID)
		if rerr != nil {
			return nil, rerr
		}
		if cur.State == StateClosed {
			return cur, nil // another recoverer finished first
		}
		m.version = cur.Version()
	}
}

// fence fences the last fragment's bookies and returns the highest LAC they
// report (never below the fragment's first entry - 1, which was acknowledged
// before the fragment was created).
func (c *Client) fence(ctx context.Context, m *LedgerMetadata) (int64, error) {
	frag := m.Fragments[len(m.Fragments)-1]
	type reply struct {
		idx int
		lac int64
		err error
	}
	ch := make(chan reply, len(frag.Bookies))
	for i, addr := range frag.Bookies {
		go func() {
			conn, err := c.cfg.Dialer.Get(ctx, addr)
			if err != nil {
				ch <- reply{i, 0, err}
				return
			}
			lac, err := conn.Fence(ctx, m.ID)
			ch <- reply{i, lac, err}
		}()
	}
	cov := newCoverage(m.Ensemble, m.WriteQuorum, m.AckQuorum)
	lac := frag.FirstEntry - 1
	var lastErr error
	for range frag.Bookies {
		var rp reply
		select {
		case rp = <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if rp.err != nil {
			cov.failure(rp.idx)
			lastErr = rp.err
		} else {
			cov.success(rp.idx)
			lac = max(lac, rp.lac)
		}
		if cov.impossible() {
			return 0, fmt.Errorf("%w: fence ledger %d: %v", ErrNoQuorum, m.ID, lastErr)
		}
		if cov.covered() {
			// No writer can complete an add any more. Entries beyond the LAC
			// seen so far are found by the recovery reads.
			return lac, nil
		}
	}
	return lac, nil
}

// recoveryRead asks every replica of entryID for it with a fencing read and
// classifies the entry.
func (c *Client) recoveryRead(ctx context.Context, m *LedgerMetadata, entryID int64) (wire.Entry, bool, error) {
	frag := m.Fragments[m.fragmentFor(entryID)]
	ws := writeSet(nil, entryID, m.Ensemble, m.WriteQuorum)
	type reply struct {
		ent wire.Entry
		err error
	}
	ch := make(chan reply, len(ws))
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	for _, idx := range ws {
		addr := frag.Bookies[idx]
		go func() {
			conn, err := c.cfg.Dialer.Get(rctx, addr)
			if err != nil {
				ch <- reply{err: err}
				return
			}
			ent, err := conn.Read(rctx, m.ID, entryID, wire.ReadFenceLedger)
			ch <- reply{ent, err}
		}()
	}
	found, missing := 0, 0
	var lastErr error
	for range ws {
		rp := <-ch
		switch {
		case rp.err == nil && rp.ent.LedgerID == m.ID && rp.ent.EntryID == entryID:
			found++
		case errors.Is(rp.err, wire.ErrNoSuchEntry), errors.Is(rp.err, wire.ErrNoSuchLedger):
			missing++
		default:
			lastErr = rp.err
		}
		switch classifyEntry(found, missing, m.WriteQuorum, m.AckQuorum) {
		case outcomeRecoverable:
			return rp.ent, true, nil
		case outcomeUnrecoverable:
			return wire.Entry{}, false, nil
		}
	}
	return wire.Entry{}, false, fmt.Errorf("%w: ledger %d entry %d (%d missing, last error: %v)",
		ErrRecoveryIncomplete, m.ID, entryID, missing, lastErr)
}

// recoveryAdd writes a recovered entry, unchanged, to its whole write set
// and waits for Qa acknowledgements.
func (c *Client) recoveryAdd(ctx context.Context, m *LedgerMetadata, ent wire.Entry) error {
	frag := m.Fragments[m.fragmentFor(ent.EntryID)]
	ws := writeSet(nil, ent.EntryID, m.Ensemble, m.WriteQuorum)
	req := &wire.AddRequest{
		LedgerID: ent.LedgerID, EntryID: ent.EntryID, LAC: ent.LAC,
		Payload: ent.Payload, Checksum: ent.Checksum, Recovery: true,
	}
	ch := make(chan error, len(ws))
	for _, idx := range ws {
		conn, err := c.cfg.Dialer.Get(ctx, frag.Bookies[idx])
		if err != nil {
			ch <- err
			continue
		}
		conn.Add(req, wire.AddFunc(func(err error) { ch <- err }))
	}
	ok := 0
	var lastErr error
	for range ws {
		select {
		case err := <-ch:
			if err == nil {
				ok++
			} else {
				lastErr = err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		if ok >= m.AckQuorum {
			return nil
		}
	}
	return fmt.Errorf("%w: re-replicate ledger %d entry %d: %v", ErrNoQuorum, m.ID, ent.EntryID, lastErr)
}
