package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// AddCallback receives the outcome of one append: the entry id on success.
type AddCallback func(entryID int64, err error)

// AddHandler receives the outcome of one append (AppendTo). A caller that
// keeps a record per append anyway passes a pointer to it: no allocation
// per append for the callback.
type AddHandler interface {
	AddComplete(entryID int64, err error)
}

// AddComplete calls f.
func (f AddCallback) AddComplete(entryID int64, err error) { f(entryID, err) }

// pendingAdd is an entry sent but not yet acknowledged to the caller.
type pendingAdd struct {
	entryID  int64
	req      wire.AddRequest
	acked    []bool // by ensemble index
	ackCount int
	cb       AddHandler
	ackedBuf [8]bool // backs acked for ensembles of up to 8 bookies
	// sends are the records of the entry's first sends to bookies
	// (sendLocked); a send beyond them, after an ensemble change,
	// allocates its own.
	sends  [3]addSend
	nsends int
	// holds counts p's holders, all changed under the handle's mu: the
	// pending list until p is completed, and each of the records in sends
	// until its bookie answered. The last returns p to pendingAdds; an
	// entry dropped without answers is left to the collector.
	holds int
}

// pendingAdds recycles pendingAdds, one per entry appended.
var pendingAdds = sync.Pool{New: func() any { return new(pendingAdd) }}

// releaseLocked drops one hold on p; the handle's mu is held.
func (p *pendingAdd) releaseLocked() {
	if p.holds--; p.holds == 0 {
		*p = pendingAdd{}
		pendingAdds.Put(p)
	}
}

// addSend is one send of an entry to the bookie at ensemble index idx: the
// connection reports the bookie's reply to it. A record is never reused,
// so a late reply from a bookie replaced since still names the old address
// and is ignored.
type addSend struct {
	h       *WriteHandle
	idx     int
	addr    string
	gen     uint32 // the handle's gen[idx] when sent
	entryID int64
	p       *pendingAdd // the entry holding this record (one of its sends); nil for a record of its own
}

// AddDone implements wire.AddDone.
func (s *addSend) AddDone(err error) { s.h.onAddResult(s, err) }

type completion struct {
	cb      AddHandler
	entryID int64
	err     error
}

// WriteHandle is the single writer of an open ledger. Appends are pipelined:
// each entry is sent at once to the Qw bookies of its write set, and is
// acknowledged when Qa of them stored it and every earlier entry is
// acknowledged. Callbacks run in entry order on one goroutine owned by the
// handle; they must not block for long.
//
// When a bookie fails, the handle replaces it (a new fragment starting at
// the first unacknowledged entry, recorded by compare-and-set of the
// ledger's metadata) and re-sends the pending entries of its write sets. If
// no bookie outside the ensemble is available, writing continues as long as
// every write set keeps Qa live bookies, and the change is retried: the
// failed bookie itself is taken back once it is registered writable and
// answers again (a restart at the same address), as the bookie of a new
// fragment like any replacement. Pending adds fail with ErrNotEnoughBookies
// once none has been acknowledged for AddTimeout while a bookie is failed.
// If the ledger was fenced by a recovering reader, every pending and later
// append fails with ErrFenced: such an entry may or may not be in the
// ledger.
//
// Concurrency: mu guards all fields below it; callbacks from bookie
// connections take mu; user callbacks never run under mu.
type WriteHandle struct {
	c  *Client
	id int64

	mu       sync.Mutex
	meta     *LedgerMetadata
	ensemble []string
	conns    []BookieConn
	failed   []bool
	// gen counts the bookies admitted at each ensemble index (replaced or
	// taken back): replies to sends of an earlier admission are ignored,
	// since the entries pending then were sent again.
	gen       []uint32
	nextEntry int64
	lac       int64
	length    int64
	pending   []*pendingAdd
	err       error // terminal: every later append fails with it
	closing   bool
	changing  bool
	// stallSince is when the ensemble change first saw entries pending
	// since the last acknowledgement (zero again at the next one). Pending
	// adds fail when it is older than AddTimeout.
	stallSince time.Time
	// changeDone is closed when the running ensemble-change goroutine exits.
	changeDone chan struct{}
	closeCh    chan struct{} // closed by Close once pending appends drained
	closeOnce  sync.Once
	// casInFlight holds back acknowledgements while a new fragment, which
	// begins at LAC+1, is being recorded: the LAC must not move meanwhile.
	casInFlight bool
	drained     chan struct{} // closed and replaced when pending becomes empty

	// done are the callbacks to run, in order; a delivery goroutine runs
	// only while there are some (an idle handle owns no goroutine).
	done       []completion
	spare      []completion // the last delivery's batch, reused
	delivering bool         // a delivery goroutine runs
	stopped    bool
	wg         sync.WaitGroup
	stopCh     chan struct{}
}

func newWriteHandle(ctx context.Context, c *Client, m *LedgerMetadata) (*WriteHandle, error) {
	last := m.Fragments[len(m.Fragments)-1]
	h := &WriteHandle{
		c: c, id: m.ID, meta: m,
		ensemble: append([]string(nil), last.Bookies...),
		conns:    make([]BookieConn, m.Ensemble),
		failed:   make([]bool, m.Ensemble),
		gen:      make([]uint32, m.Ensemble),
		lac:      -1,
		drained:  make(chan struct{}),
		stopCh:   make(chan struct{}),
		closeCh:  make(chan struct{}),
	}
	var dialErr bool
	for i, addr := range h.ensemble {
		conn, err := c.cfg.Dialer.Get(ctx, addr)
		if err != nil {
			c.log.Warn("ledger bookie unreachable at open", "ledger", h.id, "bookie", addr, "err", err)
			h.failed[i] = true
			dialErr = true
			continue
		}
		h.conns[i] = conn
	}
	if dialErr {
		h.mu.Lock()
		h.startEnsembleChangeLocked()
		h.mu.Unlock()
	}
	return h, nil
}

// ID returns the ledger id.
func (h *WriteHandle) ID() int64 { return h.id }

// LastAddConfirmed returns the highest acknowledged entry id (-1: none).
func (h *WriteHandle) LastAddConfirmed() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lac
}

// Metadata returns a copy of the ledger's metadata as the writer knows it.
func (h *WriteHandle) Metadata() LedgerMetadata {
	h.mu.Lock()
	defer h.mu.Unlock()
	return *h.meta.clone()
}

// Append adds payload and waits for its acknowledgement.
func (h *WriteHandle) Append(ctx context.Context, payload []byte) (int64, error) {
	type result struct {
		id  int64
		err error
	}
	ch := make(chan result, 1)
	h.AppendAsync(payload, func(id int64, err error) { ch <- result{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// AppendAsync adds payload without waiting; cb is called exactly once. The
// handle keeps payload until the entry is acknowledged: the caller must not
// modify it.
func (h *WriteHandle) AppendAsync(payload []byte, cb AddCallback) { h.AppendTo(payload, cb) }

// AppendTo is AppendAsync reporting to cb's AddComplete.
func (h *WriteHandle) AppendTo(payload []byte, cb AddHandler) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil || h.closing {
		err := h.err
		if err == nil {
			err = ErrLedgerClosed
		}
		if h.stopped && !h.delivering {
			// No delivery goroutine any more, and nothing left to order after.
			h.mu.Unlock()
			cb.AddComplete(-1, err)
			h.mu.Lock()
			return
		}
		h.completeLocked(cb, -1, err)
		return
	}
	id := h.nextEntry
	h.nextEntry++
	p := pendingAdds.Get().(*pendingAdd)
	p.entryID = id
	p.req = wire.AddRequest{
		LedgerID: h.id, EntryID: id, LAC: h.lac, Payload: payload,
		Checksum: wire.Checksum(h.id, id, h.lac, payload),
	}
	p.cb = cb
	p.holds = 1 // the pending list's
	if n := h.meta.Ensemble; n <= len(p.ackedBuf) {
		p.acked = p.ackedBuf[:n]
	} else {
		p.acked = make([]bool, n)
	}
	h.length += int64(len(payload))
	h.pending = append(h.pending, p)
	var ws [16]int
	for _, idx := range writeSet(ws[:0], id, h.meta.Ensemble, h.meta.WriteQuorum) {
		if !h.failed[idx] {
			h.sendLocked(p, idx)
		}
	}
	if !h.changing && slices.Contains(h.failed, true) {
		// A change that stopped while nothing was written (see
		// ensembleChange) runs again for this entry.
		h.startEnsembleChangeLocked()
	}
}

// sendLocked sends p to the bookie at ensemble index idx.
func (h *WriteHandle) sendLocked(p *pendingAdd, idx int) {
	var s *addSend
	var holder *pendingAdd
	if p.nsends < len(p.sends) {
		s = &p.sends[p.nsends]
		p.nsends++
		holder = p
		p.holds++ // released by onAddResult
	} else {
		s = new(addSend)
	}
	*s = addSend{h: h, idx: idx, addr: h.ensemble[idx], gen: h.gen[idx], entryID: p.entryID, p: holder}
	h.conns[idx].Add(&p.req, s)
}

// onAddResult handles one bookie's reply to an add.
func (h *WriteHandle) onAddResult(s *addSend, err error) {
	idx, addr, entryID := s.idx, s.addr, s.entryID
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.p != nil {
		// s lives in s.p: done with it once this returns. Deferred calls
		// run last in first out, so before mu is unlocked.
		defer s.p.releaseLocked()
	}
	if h.ensemble[idx] != addr || h.gen[idx] != s.gen {
		return // reply from a bookie replaced or taken back since
	}
	if err != nil {
		if errors.Is(err, wire.ErrFenced) {
			h.failLocked(fmt.Errorf("%w: ledger %d", ErrFenced, h.id))
			return
		}
		if !h.failed[idx] {
			h.c.log.Warn("ledger bookie write failed", "ledger", h.id, "bookie", addr, "entry", entryID, "err", err)
			h.failed[idx] = true
			h.startEnsembleChangeLocked()
		}
		h.checkQuorumPossibleLocked()
		return
	}
	first := h.lac + 1
	if entryID < first || entryID >= first+int64(len(h.pending)) {
		return // already completed or failed
	}
	p := h.pending[entryID-first]
	if !p.acked[idx] {
		p.acked[idx] = true
		p.ackCount++
	}
	h.drainLocked()
}

// drainLocked acknowledges, in order, every head entry that has its quorum.
func (h *WriteHandle) drainLocked() {
	if h.casInFlight {
		return
	}
	n := 0
	for n < len(h.pending) && h.pending[n].ackCount >= h.meta.AckQuorum {
		p := h.pending[n]
		h.lac = p.entryID
		h.completeLocked(p.cb, p.entryID, nil)
		h.pending[n] = nil
		p.releaseLocked()
		n++
	}
	if n > 0 {
		h.stallSince = time.Time{}
		h.pending = h.pending[n:]
		if len(h.pending) == 0 {
			h.pending = nil
			close(h.drained)
			h.drained = make(chan struct{})
		}
	}
}

// checkQuorumPossibleLocked fails the handle if some pending entry can no
// longer reach its ack quorum and no ensemble change is under way. With no
// failed bookie every write set has Qw >= Qa live members, so the scan of
// the pending entries (which AppendAsync would otherwise pay on every call)
// is skipped.
func (h *WriteHandle) checkQuorumPossibleLocked() {
	if h.changing || h.err != nil || len(h.pending) == 0 || !slices.Contains(h.failed, true) {
		return
	}
	var ws [16]int
	for _, p := range h.pending {
		live := 0
		for _, idx := range writeSet(ws[:0], p.entryID, h.meta.Ensemble, h.meta.WriteQuorum) {
			if !h.failed[idx] || p.acked[idx] {
				live++
			}
		}
		if live < h.meta.AckQuorum {
			h.failLocked(fmt.Errorf("%w: entry %d of ledger %d cannot reach its ack quorum", ErrNotEnoughBookies, p.entryID, h.id))
			return
		}
	}
}

// failLocked makes err terminal and fails every pending entry.
func (h *WriteHandle) failLocked(err error) {
	if h.err == nil {
		h.err = err
	}
	for i, p := range h.pending {
		h.completeLocked(p.cb, p.entryID, h.err)
		h.pending[i] = nil
		p.releaseLocked()
	}
	if len(h.pending) > 0 {
		h.pending = nil
		close(h.drained)
		h.drained = make(chan struct{})
	}
}

// completeLocked queues a user callback and starts the delivery goroutine
// unless it runs (it then picks the callback up) or the handle stopped.
func (h *WriteHandle) completeLocked(cb AddHandler, id int64, err error) {
	h.done = append(h.done, completion{cb, id, err})
	if h.delivering || h.stopped {
		return
	}
	h.delivering = true
	h.wg.Add(1)
	go h.deliver()
}

// deliver runs user callbacks in order, outside mu, until none is left.
func (h *WriteHandle) deliver() {
	defer h.wg.Done()
	h.mu.Lock()
	batch := h.spare
	h.spare = nil
	for len(h.done) > 0 {
		batch, h.done = h.done, batch[:0]
		h.mu.Unlock()
		for i, c := range batch {
			c.cb.AddComplete(c.entryID, c.err)
			batch[i] = completion{}
		}
		h.mu.Lock()
	}
	h.delivering = false
	h.spare = batch[:0]
	h.mu.Unlock()
}

// startEnsembleChangeLocked starts the goroutine replacing failed bookies
// unless it already runs.
func (h *WriteHandle) startEnsembleChangeLocked() {
	if h.changing || h.err != nil {
		return
	}
	h.changing = true
	h.changeDone = make(chan struct{})
	h.wg.Add(1)
	go h.ensembleChange(h.changeDone)
}

// ensembleRetryInterval is the pause between two rounds of an ensemble
// change that left a bookie failed.
const ensembleRetryInterval = 250 * time.Millisecond

// ensembleChange replaces failed bookies until none is left, the handle
// fails or closes. While one is left it retries every
// ensembleRetryInterval, the handle writing in degraded mode meanwhile. It
// fails the pending adds once none has been acknowledged for AddTimeout,
// and stops when nothing has been pending for AddTimeout (the next append
// starts it again).
func (h *WriteHandle) ensembleChange(done chan struct{}) {
	defer h.wg.Done()
	defer close(done)
	var idleSince time.Time
	for round := 0; ; round++ {
		if round > 0 {
			select {
			case <-h.stopCh:
				h.mu.Lock()
				h.changing = false
				h.mu.Unlock()
				return
			case <-h.closeCh:
				h.mu.Lock()
				h.changing = false
				h.mu.Unlock()
				return
			case <-time.After(ensembleRetryInterval):
			}
		}
		// The first round reads the registered bookies afresh (one just
		// failed); the retries share the client's cached list.
		err := h.replaceFailed(round == 0)
		h.mu.Lock()
		if err != nil && h.err == nil {
			if errors.Is(err, ErrFenced) {
				h.failLocked(err)
			} else {
				h.c.log.Warn("ledger ensemble change failed", "ledger", h.id, "err", err)
			}
		}
		if !slices.Contains(h.failed, true) || h.err != nil || (h.closing && len(h.pending) == 0) {
			h.changing = false
			h.checkQuorumPossibleLocked()
			h.mu.Unlock()
			return
		}
		now := time.Now()
		if len(h.pending) == 0 {
			if idleSince.IsZero() {
				idleSince = now
			}
			if now.Sub(idleSince) > h.c.cfg.AddTimeout {
				h.changing = false
				h.mu.Unlock()
				return
			}
			h.mu.Unlock()
			continue
		}
		idleSince = time.Time{}
		if h.stallSince.IsZero() {
			h.stallSince = now
		}
		if now.Sub(h.stallSince) > h.c.cfg.AddTimeout {
			h.changing = false
			h.stallSince = time.Time{}
			h.failLocked(fmt.Errorf("%w: ledger %d: no entry acknowledged for %v while bookies %v failed", ErrNotEnoughBookies,
				h.id, h.c.cfg.AddTimeout, h.failedAddrsLocked()))
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// failedAddrsLocked lists the failed bookies' addresses.
func (h *WriteHandle) failedAddrsLocked() []string {
	var out []string
	for i, f := range h.failed {
		if f {
			out = append(out, h.ensemble[i])
		}
	}
	return out
}

// replaceFailed runs one round of ensemble change: pick a bookie for each
// failed one, record the new fragment by CAS, then switch the handle to it
// and re-send pending entries. A bookie outside the ensemble is preferred;
// without one, the failed bookie itself is taken back once it is
// registered writable and answers a request. That is safe: what it
// acknowledged before it failed was on its disk (its journal), every
// pending entry of its write sets is sent to it again (a bookie stores a
// re-sent entry over the old copy), and like a replacement it starts a new
// fragment at the first unacknowledged entry, so the entries acknowledged
// without it stay in the fragment before, where the auditor finds what it
// lacks. With fresh, the registered bookies are read afresh.
func (h *WriteHandle) replaceFailed(fresh bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return nil
	}
	newEns := append([]string(nil), h.ensemble...)
	var idxs []int
	for i, f := range h.failed {
		if f {
			idxs = append(idxs, i)
		}
	}
	h.mu.Unlock()

	var avail []bookie.Registration
	var err error
	if fresh {
		avail, err = availableBookies(ctx, h.c.cfg.Metadata)
	} else {
		avail, err = h.c.bookies.get(ctx)
	}
	if err != nil {
		return nil // the next round tries again
	}
	newConns := map[int]BookieConn{}
	for _, idx := range idxs {
		if addr, conn, ok := h.c.pickReplacement(ctx, avail, newEns, idx); ok {
			newEns[idx] = addr
			newConns[idx] = conn
		} else if conn, ok := h.c.takeBack(ctx, avail, newEns[idx], h.id); ok {
			newConns[idx] = conn
		}
	}
	if len(newConns) == 0 {
		return nil
	}

	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return nil
	}
	h.casInFlight = true
	m := h.meta.clone()
	first := h.lac + 1
	unchanged := false
	if last := &m.Fragments[len(m.Fragments)-1]; last.FirstEntry >= first {
		// Nothing acknowledged in it yet: replace in place (nothing to
		// record when only failed bookies were taken back).
		unchanged = slices.Equal(last.Bookies, newEns)
		last.Bookies = newEns
	} else {
		m.Fragments = append(m.Fragments, Fragment{FirstEntry: first, Bookies: newEns})
	}
	h.mu.Unlock()

	// Only this writer changes an OPEN ledger's metadata; acknowledgements
	// wait (casInFlight) so the new fragment's first entry stays LAC+1.
	if !unchanged {
		if err := h.casFragment(ctx, m); err != nil {
			h.mu.Lock()
			h.casInFlight = false
			h.drainLocked()
			h.mu.Unlock()
			return err
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	h.casInFlight = false
	defer h.drainLocked()
	h.meta = m
	for idx, conn := range newConns {
		if h.ensemble[idx] == newEns[idx] {
			h.c.log.Info("ledger bookie taken back", "ledger", h.id, "index", idx, "bookie", newEns[idx], "fromEntry", first)
		} else {
			h.c.log.Info("ledger ensemble changed", "ledger", h.id, "index", idx, "old", h.ensemble[idx], "new", newEns[idx])
		}
		h.ensemble[idx] = newEns[idx]
		h.conns[idx] = conn
		h.failed[idx] = false
		h.gen[idx]++
		for _, p := range h.pending {
			if !inWriteSet(idx, p.entryID, m.Ensemble, m.WriteQuorum) {
				continue
			}
			if p.acked[idx] {
				p.acked[idx] = false
				p.ackCount--
			}
			h.sendLocked(p, idx)
		}
	}
	return nil
}

// casFragment records m, retrying over version races as long as the ledger
// is still OPEN.
func (h *WriteHandle) casFragment(ctx context.Context, m *LedgerMetadata) error {
	for {
		err := h.c.meta.cas(ctx, m)
		if !errors.Is(err, metadata.ErrBadVersion) {
			return err
		}
		cur, rerr := h.c.meta.read(ctx, h.id)
		if rerr != nil {
			return rerr
		}
		if cur.State != StateOpen {
			return fmt.Errorf("%w: ledger %d is %s", ErrFenced, h.id, cur.State)
		}
		m.version = cur.Version()
	}
}

// Close waits for pending appends, then records the ledger CLOSED with its
// last acknowledged entry. Appends after Close fail with ErrLedgerClosed.
func (h *WriteHandle) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	for len(h.pending) > 0 && h.err == nil {
		ch := h.drained
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			h.mu.Lock()
			h.failLocked(ErrLedgerClosed)
			h.mu.Unlock()
			h.stop()
			return ctx.Err()
		}
		h.mu.Lock()
	}
	// Let a running ensemble change finish its round: the close record
	// must carry every fragment it recorded.
	h.closeOnce.Do(func() { close(h.closeCh) })
	changeDone := h.changeDone
	h.mu.Unlock()
	if changeDone != nil {
		<-changeDone
	}
	h.mu.Lock()
	herr, lac, length := h.err, h.lac, h.length
	m := h.meta.clone()
	h.mu.Unlock()
	defer h.stop()
	if errors.Is(herr, ErrFenced) {
		return herr
	}

	m.State, m.LastEntry, m.Length = StateClosed, lac, length
	for {
		err := h.c.meta.cas(ctx, m)
		if err == nil {
			return nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) {
			return err
		}
		cur, rerr := h.c.meta.read(ctx, h.id)
		if rerr != nil {
			return rerr
		}
		switch {
		case cur.State == StateClosed && cur.LastEntry == lac:
			return nil
		case cur.State != StateOpen:
			return fmt.Errorf("%w: ledger %d is %s (last entry %d, ours %d)", ErrFenced, h.id, cur.State, cur.LastEntry, lac)
		}
		m = cur.clone()
		m.State, m.LastEntry, m.Length = StateClosed, lac, length
	}
}

// stop ends the handle's goroutines after the last callback was delivered.
func (h *WriteHandle) stop() {
	h.mu.Lock()
	if h.err == nil {
		h.err = ErrLedgerClosed
	}
	if !h.stopped {
		h.stopped = true
		close(h.stopCh)
	}
	h.mu.Unlock()
	h.wg.Wait()
}
