package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// AuditorConfig configures an Auditor.
type AuditorConfig struct {
	// ID names this auditor candidate in the election. Required.
	ID string
	// Interval between full checks while leading. Default 60s. A change in
	// the set of available bookies also triggers a check at once.
	Interval time.Duration
	// SessionTTL of the leadership session. Default 10s.
	SessionTTL time.Duration
	// CopyWindow is how many entries of one fragment are copied concurrently
	// (each a read from a surviving replica, then an add to the target).
	// Default 64.
	CopyWindow int
	// Parallelism is how many ledgers are examined (and repaired)
	// concurrently in a check. Default 8.
	Parallelism int
}

// Auditor restores the write quorum of closed ledgers (BookKeeper's
// auto-recovery, auditor and worker in one). One auditor leads at a time,
// elected through the metadata store. Each check scans every CLOSED
// ledger's fragments: a fragment whose bookie is no longer registered is
// copied, entry by entry from the surviving replicas, to a bookie chosen by
// the placement policy, and the fragment's ensemble is updated by CAS; a
// registered bookie that lacks the last entry it should hold in a fragment
// (it missed writes while the writer ran degraded) gets the fragment's
// entries again. Open ledgers are left to their writer or to recovery.
type Auditor struct {
	c   *Client
	cfg AuditorConfig
	log *slog.Logger
}

// AuditReport summarizes one check.
type AuditReport struct {
	Ledgers            int // closed ledgers examined
	FragmentsRepaired  int
	EntriesCopied      int
	UnderReplicatedNow int // fragments still missing a replica after the check
}

// NewAuditor returns an auditor using c's metadata store and bookies.
func (c *Client) NewAuditor(cfg AuditorConfig) (*Auditor, error) {
	if cfg.ID == "" {
		return nil, errors.New("ledger: AuditorConfig.ID is required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 60 * time.Second
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.CopyWindow == 0 {
		cfg.CopyWindow = 64
	}
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 8
	}
	return &Auditor{c: c, cfg: cfg, log: c.log.With("auditor", cfg.ID)}, nil
}

// Run campaigns for leadership and, while leading, checks all ledgers every
// Interval and whenever bookie availability changes. It returns when ctx
// ends.
func (a *Auditor) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := a.lead(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("auditor leadership ended", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

func (a *Auditor) lead(ctx context.Context) error {
	md := a.c.cfg.Metadata
	sess, err := md.NewSession(ctx, a.cfg.SessionTTL)
	if err != nil {
		return err
	}
	defer sess.Close()
	l, err := sess.Elect(ctx, auditorPath, []byte(a.cfg.ID))
	if err != nil {
		return err
	}
	a.log.Info("auditor elected")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := md.Watch(wctx, bookie.AvailablePrefix, 0)
	if err != nil {
		return err
	}
	defer w.Close()
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		rep, err := a.CheckOnce(ctx)
		if err != nil {
			a.log.Warn("audit failed", "err", err)
		} else if rep.FragmentsRepaired > 0 || rep.UnderReplicatedNow > 0 {
			a.log.Info("audit done", "ledgers", rep.Ledgers, "repaired", rep.FragmentsRepaired,
				"entries", rep.EntriesCopied, "underReplicated", rep.UnderReplicatedNow)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.Lost():
			return errors.New("leadership lost")
		case <-tick.C:
		case _, ok := <-w.Events():
			if !ok {
				return fmt.Errorf("bookie watch ended: %v", w.Err())
			}
		}
	}
}

// CheckOnce examines every closed ledger once and repairs what it can.
func (a *Auditor) CheckOnce(ctx context.Context) (AuditReport, error) {
	var rep AuditReport
	ids, err := a.c.meta.list(ctx)
	if err != nil {
		return rep, err
	}
	avail, err := availableBookies(ctx, a.c.cfg.Metadata)
	if err != nil {
		return rep, err
	}
	live := map[string]bool{}
	for _, b := range avail {
		live[b.Addr] = true
	}
	// Ledgers are examined by Parallelism workers: each check costs a
	// metadata read and, for every live replica, a read of the last entry
	// it should hold, so a serial pass over many ledgers is bound by round
	// trips rather than by any resource.
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	next := make(chan int64)
	for range min(a.cfg.Parallelism, max(len(ids), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				var r AuditReport
				m, err := a.c.meta.read(ctx, id)
				if errors.Is(err, ErrNoSuchLedger) {
					continue // deleted meanwhile
				}
				if err == nil && (m.State != StateClosed || m.LastEntry < 0) {
					continue
				}
				if err == nil {
					r.Ledgers++
					if cerr := a.checkLedger(ctx, m, live, avail, &r); cerr != nil {
						a.log.Warn("ledger audit failed", "ledger", id, "err", cerr)
					}
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				rep.Ledgers += r.Ledgers
				rep.FragmentsRepaired += r.FragmentsRepaired
				rep.EntriesCopied += r.EntriesCopied
				rep.UnderReplicatedNow += r.UnderReplicatedNow
				mu.Unlock()
			}
		}()
	}
feed:
	for _, id := range ids {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		select {
		case next <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return rep, firstErr
}

// lastHeldBy returns the last entry in [first, end] that ensemble index idx
// stores, or -1 if none.
func lastHeldBy(m *LedgerMetadata, idx int, first, end int64) int64 {
	for e := end; e >= first && e > end-int64(m.Ensemble); e-- {
		if inWriteSet(idx, e, m.Ensemble, m.WriteQuorum) {
			return e
		}
	}
	return -1
}

func (a *Auditor) checkLedger(ctx context.Context, m *LedgerMetadata, live map[string]bool, avail []bookie.Registration, rep *AuditReport) error {
	for fi := range m.Fragments {
		first, end := m.Fragments[fi].FirstEntry, m.fragmentEnd(fi, m.LastEntry)
		if end < first {
			continue
		}
		for idx, addr := range m.Fragments[fi].Bookies {
			last := lastHeldBy(m, idx, first, end)
			if last < 0 {
				continue
			}
			target := addr
			if !live[addr] {
				a.c.rndMu.Lock()
				t, err := chooseReplacement(a.c.rnd, avail, m.Fragments[fi].Bookies, idx)
				a.c.rndMu.Unlock()
				if err != nil {
					rep.UnderReplicatedNow++
					continue
				}
				target = t
			} else if a.holds(ctx, addr, m.ID, last) {
				continue
			}
			n, err := a.copyFragment(ctx, m, fi, idx, target)
			if err != nil {
				rep.UnderReplicatedNow++
				a.log.Warn("fragment copy failed", "ledger", m.ID, "fragment", first, "index", idx, "target", target, "err", err)
				continue
			}
			if target != addr {
				mm := m.clone()
				mm.Fragments[fi].Bookies[idx] = target
				if err := a.c.meta.cas(ctx, mm); err != nil {
					if errors.Is(err, metadata.ErrBadVersion) {
						return nil // changed meanwhile; the next check looks again
					}
					return err
				}
				*m = *mm
				a.log.Info("fragment re-replicated", "ledger", m.ID, "fragment", first, "from", addr, "to", target, "entries", n)
			}
			rep.FragmentsRepaired++
			rep.EntriesCopied += n
		}
	}
	return nil
}

// holds reports whether the bookie at addr has entry entryID of the ledger.
// Only an explicit "no such entry" counts as missing: an unreachable bookie
// is not judged.
func (a *Auditor) holds(ctx context.Context, addr string, ledgerID, entryID int64) bool {
	conn, err := a.c.cfg.Dialer.Get(ctx, addr)
	if err != nil {
		return true
	}
	_, err = conn.Read(ctx, ledgerID, entryID, 0)
	return !(errors.Is(err, wire.ErrNoSuchEntry) || errors.Is(err, wire.ErrNoSuchLedger))
}

// copyFragment copies every entry of fragment fi that ensemble index idx
// stores to target, reading each from the other replicas. CopyWindow
// workers each read an entry and then add it to the target, so reads (which
// used to be one at a time) and adds are both pipelined. The bookie accepts
// recovery adds in any order.
func (a *Auditor) copyFragment(ctx context.Context, m *LedgerMetadata, fi, idx int, target string) (int, error) {
	conn, err := a.c.cfg.Dialer.Get(ctx, target)
	if err != nil {
		return 0, err
	}
	first, end := m.Fragments[fi].FirstEntry, m.fragmentEnd(fi, m.LastEntry)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		copied   int
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	entries := make(chan int64)
	for range a.cfg.CopyWindow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range entries {
				ent, err := a.c.readEntry(ctx, m, e, 0)
				if err != nil {
					fail(err)
					continue
				}
				done := make(chan error, 1)
				conn.Add(&wire.AddRequest{
					LedgerID: ent.LedgerID, EntryID: ent.EntryID, LAC: ent.LAC,
					Payload: ent.Payload, Checksum: ent.Checksum, Recovery: true,
				}, wire.AddFunc(func(err error) { done <- err }))
				select {
				case err = <-done:
				case <-ctx.Done():
					err = ctx.Err()
				}
				if err != nil {
					fail(err)
					continue
				}
				mu.Lock()
				copied++
				mu.Unlock()
			}
		}()
	}
feed:
	for e := first; e <= end; e++ {
		if !inWriteSet(idx, e, m.Ensemble, m.WriteQuorum) {
			continue
		}
		select {
		case entries <- e:
		case <-ctx.Done():
			break feed
		}
	}
	close(entries)
	wg.Wait()
	return copied, firstErr
}
