package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// ReadHandle reads a ledger. For a closed ledger every entry up to
// LastEntry is readable; for an open one (opened without recovery) entries
// up to the last-add-confirmed, which ReadLAC refreshes.
type ReadHandle struct {
	c    *Client
	meta *LedgerMetadata

	mu  sync.Mutex
	lac int64
}

// OpenLedger opens a ledger for reading. With recover, a ledger that is not
// yet closed is fenced (its writer can no longer add), its recoverable tail
// is re-replicated and it is closed; without, an open ledger is read up to
// its last-add-confirmed.
func (c *Client) OpenLedger(ctx context.Context, id int64, recover bool) (*ReadHandle, error) {
	m, err := c.meta.read(ctx, id)
	if err != nil {
		return nil, err
	}
	if m.State != StateClosed && recover {
		if m, err = c.recover(ctx, m); err != nil {
			return nil, err
		}
	}
	r := &ReadHandle{c: c, meta: m, lac: m.LastEntry}
	if m.State != StateClosed {
		if _, err := r.ReadLAC(ctx); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ID returns the ledger id.
func (r *ReadHandle) ID() int64 { return r.meta.ID }

// Metadata returns the metadata the handle was opened with.
func (r *ReadHandle) Metadata() LedgerMetadata { return *r.meta.clone() }

// IsClosed reports whether the ledger was closed when opened.
func (r *ReadHandle) IsClosed() bool { return r.meta.State == StateClosed }

// LastAddConfirmed returns the last entry known readable (-1: none).
func (r *ReadHandle) LastAddConfirmed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lac
}

// ReadLAC asks the bookies of the last fragment for the highest LAC they
// have seen and returns the new last-add-confirmed. Any LAC a bookie
// reports was acknowledged, so the highest answer wins.
func (r *ReadHandle) ReadLAC(ctx context.Context) (int64, error) {
	if r.meta.State == StateClosed {
		return r.meta.LastEntry, nil
	}
	last := r.meta.Fragments[len(r.meta.Fragments)-1]
	type reply struct {
		lac int64
		err error
	}
	ch := make(chan reply, len(last.Bookies))
	for _, addr := range last.Bookies {
		go func() {
			conn, err := r.c.cfg.Dialer.Get(ctx, addr)
			if err != nil {
				ch <- reply{err: err}
				return
			}
			lac, _, err := conn.ReadLAC(ctx, r.meta.ID)
			ch <- reply{lac, err}
		}()
	}
	best, ok := last.FirstEntry-1, false
	var lastErr error
	for range last.Bookies {
		rp := <-ch
		switch {
		case rp.err == nil:
			ok = true
			best = max(best, rp.lac)
		case errors.Is(rp.err, wire.ErrNoSuchLedger):
			ok = true // nothing written there yet
		default:
			lastErr = rp.err
		}
	}
	if !ok {
		return -1, fmt.Errorf("%w: read LAC of ledger %d: %v", ErrNoQuorum, r.meta.ID, lastErr)
	}
	r.mu.Lock()
	r.lac = max(r.lac, best)
	best = r.lac
	r.mu.Unlock()
	return best, nil
}

// Read returns entries first..last (inclusive), which must not pass the
// last-add-confirmed. Entries are fetched in parallel, each from one replica
// of its write set at a time (see readEntry).
func (r *ReadHandle) Read(ctx context.Context, first, last int64) ([]wire.Entry, error) {
	if lac := r.LastAddConfirmed(); first < 0 || last < first || last > lac {
		return nil, fmt.Errorf("%w: ledger %d range [%d, %d], last readable %d", ErrNoSuchEntry, r.meta.ID, first, last, lac)
	}
	out := make([]wire.Entry, last-first+1)
	const window = 32
	sem := make(chan struct{}, window)
	errCh := make(chan error, 1)
	var wg sync.WaitGroup
	for e := first; e <= last; e++ {
		select {
		case sem <- struct{}{}:
		case err := <-errCh:
			wg.Wait()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ent, err := r.c.readEntry(ctx, r.meta, e, 0)
			if err != nil {
				select {
				case errCh <- err:
				default:
				}
				return
			}
			out[e-first] = ent
		}()
	}
	wg.Wait()
	select {
	case err := <-errCh:
		return nil, err
	default:
	}
	return out, nil
}

// readEntry reads one entry from its write set: it asks the first replica,
// and asks the next one when the current fails or stays silent for
// SpeculativeReadTimeout; the first valid answer wins. If every replica
// says it has no such entry the error is ErrNoSuchEntry.
func (c *Client) readEntry(ctx context.Context, m *LedgerMetadata, entryID int64, flags wire.ReadFlags) (wire.Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	frag := m.Fragments[m.fragmentFor(entryID)]
	ws := writeSet(nil, entryID, m.Ensemble, m.WriteQuorum)
	type reply struct {
		ent wire.Entry
		err error
	}
	ch := make(chan reply, len(ws))
	ask := func(addr string) {
		conn, err := c.cfg.Dialer.Get(ctx, addr)
		if err != nil {
			ch <- reply{err: err}
			return
		}
		ent, err := conn.Read(ctx, m.ID, entryID, flags)
		if err == nil && (ent.LedgerID != m.ID || ent.EntryID != entryID) {
			err = fmt.Errorf("%w: asked %d/%d, got %d/%d", wire.ErrChecksum, m.ID, entryID, ent.LedgerID, ent.EntryID)
		}
		ch <- reply{ent, err}
	}
	next, outstanding, missing := 0, 0, 0
	var lastErr error
	timer := time.NewTimer(c.cfg.SpeculativeReadTimeout)
	defer timer.Stop()
	for {
		if outstanding == 0 && next < len(ws) {
			go ask(frag.Bookies[ws[next]])
			next++
			outstanding++
			timer.Reset(c.cfg.SpeculativeReadTimeout)
		}
		if outstanding == 0 {
			if missing == len(ws) {
				return wire.Entry{}, fmt.Errorf("%w: ledger %d entry %d", ErrNoSuchEntry, m.ID, entryID)
			}
			return wire.Entry{}, fmt.Errorf("%w: read ledger %d entry %d: %v", ErrNoQuorum, m.ID, entryID, lastErr)
		}
		select {
		case rp := <-ch:
			outstanding--
			if rp.err == nil {
				return rp.ent, nil
			}
			if errors.Is(rp.err, wire.ErrNoSuchEntry) || errors.Is(rp.err, wire.ErrNoSuchLedger) {
				missing++
			}
			lastErr = rp.err
		case <-timer.C:
			if next < len(ws) {
				go ask(frag.Bookies[ws[next]])
				next++
				outstanding++
				timer.Reset(c.cfg.SpeculativeReadTimeout)
			}
		case <-ctx.Done():
			return wire.Entry{}, fmt.Errorf("%w: read ledger %d entry %d: %v", ErrNoQuorum, m.ID, entryID, ctx.Err())
		}
	}
}
