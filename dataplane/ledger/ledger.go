package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

type mlState int

const (
	stateOpen mlState = iota
	stateTerminated
	stateFenced
	stateClosed
)

// writer is a bookie ledger this managed ledger writes (or wrote and has
// not closed yet).
type writer struct {
	wh         *client.WriteHandle
	id         int64
	created    time.Time
	sent       int64 // entries handed to wh
	sentBytes  int64
	ackedBytes int64
	failed     error // first non-fencing write failure
	// retry: the writer failed while current, so its failed adds are
	// re-sent to the next ledger once it is closed at its LAC.
	retry       bool
	closeTried  bool
	sealed      bool
	readableLAC int64   // entries up to here are readable through the bookies' LAC
	tail        []Entry // confirmed entries above readableLAC, in order
}

// addOp is one AddEntry call, queued in call order until its callback ran.
type addOp struct {
	data    []byte
	cb      AddCallback
	w       *writer // ledger it was sent to; nil while unsent
	retryOf *writer // ledger whose failure put it back to unsent
	lacSent int64
	pos     Position
	done    bool
	err     error
}

// ManagedLedger is one topic's log: an ordered list of bookie ledgers with
// a single writer (this process) and durable cursors. See the package
// documentation for semantics and the concurrency contract.
type ManagedLedger struct {
	f     *Factory
	name  string
	cfg   Config
	log   *slog.Logger
	cache *entryCache

	// infoMu serializes changes to the stored record (held across the
	// metadata write). Lock order: Cursor.mu, infoMu, sendMu, mu; the
	// cache's and rhMu are leaves.
	infoMu      sync.Mutex
	infoVersion metadata.Version

	// sendMu orders the hand-over of adds to bookie ledgers, so entry ids
	// follow the call order. It is held while calling AppendAsync, never
	// while mu is held.
	sendMu sync.Mutex

	mu            sync.Mutex
	state         mlState
	stateErr      error
	ledgers       []LedgerInfo // sorted by id (ids grow)
	terminated    *Position
	props         map[string]string
	cur           *writer
	writers       map[int64]*writer
	queue         []*addOp
	lastConfirmed Position
	waitCh        chan struct{} // closed when lastConfirmed moves; nil if nobody waits
	idleCh        chan struct{} // closed when queue empties; nil if nobody waits
	cursors       map[string]*Cursor
	nonDurable    map[*Cursor]struct{}
	dirty         map[*Cursor]struct{}
	deliverCond   *sync.Cond
	deliverStop   bool
	deliverGone   bool
	needLedger    bool
	trimWanted    bool
	rollAfter     time.Time // earliest retry of a failed rollover

	rhMu    sync.Mutex
	readers map[int64]*client.ReadHandle // closed ledgers only

	kick      chan struct{}
	stopCh    chan struct{}
	workerWG  sync.WaitGroup // run
	bgWG      sync.WaitGroup // closers started by run
	deliverWG sync.WaitGroup
	closeMu   sync.Mutex // serializes Close
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func openManagedLedger(ctx context.Context, f *Factory, name string, cfg Config) (*ManagedLedger, error) {
	ml := &ManagedLedger{
		f: f, name: name, cfg: cfg, cache: f.cache,
		log:        f.log.With("managedLedger", name),
		writers:    map[int64]*writer{},
		cursors:    map[string]*Cursor{},
		nonDurable: map[*Cursor]struct{}{},
		dirty:      map[*Cursor]struct{}{},
		readers:    map[int64]*client.ReadHandle{},
		kick:       make(chan struct{}, 1),
		stopCh:     make(chan struct{}),
	}
	ml.deliverCond = sync.NewCond(&ml.mu)
	if err := ml.init(ctx); err != nil {
		return nil, err
	}
	ml.deliverWG.Add(1)
	go ml.deliver()
	ml.workerWG.Add(1)
	go ml.run()
	ml.signal(func() { ml.trimWanted = true })
	return ml, nil
}

// init reads (or creates) the record, recovers ledgers left open (fencing
// any previous owner), drops empty ones, creates the ledger to write and
// claims the record by compare-and-set, then loads the cursors.
func (ml *ManagedLedger) init(ctx context.Context) error {
	md, key := ml.f.md, infoKey(ml.name)
	var rec mlInfo
	var ver metadata.Version
	for {
		kv, err := md.Get(ctx, key)
		if errors.Is(err, metadata.ErrNotFound) {
			b, _ := json.Marshal(mlInfo{Ledgers: []LedgerInfo{}})
			ver, err = md.Create(ctx, key, b)
			if errors.Is(err, metadata.ErrExists) {
				continue
			}
			if err != nil {
				return fmt.Errorf("ledger: create record of %q: %w", ml.name, err)
			}
			break
		}
		if err != nil {
			return fmt.Errorf("ledger: read record of %q: %w", ml.name, err)
		}
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return fmt.Errorf("ledger: managed ledger %q: corrupt record: %w", ml.name, err)
		}
		ver = kv.Version
		break
	}

	var keep []LedgerInfo
	var drop []int64
	for _, l := range rec.Ledgers {
		if !l.closed() {
			rh, err := ml.f.client.OpenLedger(ctx, l.ID, true)
			switch {
			case errors.Is(err, client.ErrNoSuchLedger):
				ml.log.Warn("ledger of managed ledger is gone", "ledger", l.ID)
				continue
			case err != nil:
				return fmt.Errorf("ledger: recover ledger %d of %q: %w", l.ID, ml.name, err)
			}
			m := rh.Metadata()
			l.Entries = m.LastEntry + 1
			// The ledger client knows only the recovered tail's length;
			// keep what the previous owner recorded if that is larger.
			l.Size = max(l.Size, m.Length)
			l.Timestamp = nowMillis()
		}
		if l.Entries == 0 {
			drop = append(drop, l.ID)
			continue
		}
		keep = append(keep, l)
	}
	rec.Ledgers = keep

	var w *writer
	if rec.TerminatedPosition == nil {
		wh, err := ml.createLedger(ctx)
		if err != nil {
			return err
		}
		w = &writer{wh: wh, id: wh.ID(), created: time.Now(), readableLAC: -1}
		rec.Ledgers = append(rec.Ledgers, LedgerInfo{ID: w.id})
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	nv, err := md.Put(ctx, key, b, ver)
	if err != nil {
		if w != nil {
			ml.abandon(ctx, w)
		}
		if errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: %q was opened concurrently: %w", ErrFenced, ml.name, err)
		}
		return fmt.Errorf("ledger: write record of %q: %w", ml.name, err)
	}
	ml.infoVersion = nv
	for _, id := range drop {
		if err := ml.f.client.DeleteLedger(ctx, id); err != nil && !errors.Is(err, client.ErrNoSuchLedger) {
			ml.log.Warn("delete empty ledger failed", "ledger", id, "err", err)
		}
	}

	ml.ledgers = rec.Ledgers
	ml.props = rec.Properties
	if ml.props == nil {
		ml.props = map[string]string{}
	}
	ml.terminated = rec.TerminatedPosition
	ml.lastConfirmed = Position{LedgerID: -1, EntryID: -1}
	if len(ml.ledgers) > 0 {
		ml.lastConfirmed = Position{ml.ledgers[0].ID, -1}
	}
	for i := len(ml.ledgers) - 1; i >= 0; i-- {
		if l := ml.ledgers[i]; l.Entries > 0 {
			ml.lastConfirmed = Position{l.ID, l.Entries - 1}
			break
		}
	}
	if ml.terminated != nil {
		ml.state = stateTerminated
		ml.lastConfirmed = *ml.terminated
	}
	if w != nil {
		ml.cur = w
		ml.writers[w.id] = w
	}
	if err := ml.loadCursors(ctx); err != nil {
		ml.mu.Lock()
		ml.state = stateClosed
		ml.mu.Unlock()
		if w != nil {
			_ = w.wh.Close(ctx)
		}
		return err
	}
	return nil
}

func (ml *ManagedLedger) createLedger(ctx context.Context) (*client.WriteHandle, error) {
	wh, err := ml.f.client.CreateLedger(ctx, client.CreateOptions{
		Ensemble: ml.cfg.Ensemble, WriteQuorum: ml.cfg.WriteQuorum, AckQuorum: ml.cfg.AckQuorum,
		Custom: map[string]string{"managedLedger": ml.name},
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: create bookie ledger for %q: %w", ml.name, err)
	}
	return wh, nil
}

// abandon closes and deletes a ledger that never made it into the record.
func (ml *ManagedLedger) abandon(ctx context.Context, w *writer) {
	_ = w.wh.Close(ctx)
	if err := ml.f.client.DeleteLedger(ctx, w.id); err != nil {
		ml.log.Warn("delete unused ledger failed", "ledger", w.id, "err", err)
	}
}

// Name returns the managed ledger's name.
func (ml *ManagedLedger) Name() string { return ml.name }

// Config returns the managed ledger's effective configuration.
func (ml *ManagedLedger) Config() Config { return ml.cfg }

// signal runs fn under mu and wakes the background worker.
func (ml *ManagedLedger) signal(fn func()) {
	ml.mu.Lock()
	fn()
	ml.mu.Unlock()
	select {
	case ml.kick <- struct{}{}:
	default:
	}
}

func (ml *ManagedLedger) kickLocked() {
	select {
	case ml.kick <- struct{}{}:
	default:
	}
}

// ---- adds ----

// addErrLocked returns why adds are refused now, or nil.
func (ml *ManagedLedger) addErrLocked() error {
	switch ml.state {
	case stateTerminated:
		return fmt.Errorf("%w: %q", ErrTerminated, ml.name)
	case stateFenced:
		return ml.stateErr
	case stateClosed:
		return fmt.Errorf("%w: %q", ErrClosed, ml.name)
	}
	return nil
}

// AddEntry appends data. cb is called exactly once, with the entry's
// position or an error; callbacks run in call order on one goroutine owned
// by the managed ledger and must not block for long (they may call any
// method of the managed ledger or its cursors, except Close). AddEntry
// copies data, so the caller may reuse it once AddEntry returns.
func (ml *ManagedLedger) AddEntry(data []byte, cb func(Position, error)) {
	ml.addEntry(slices.Clone(data), addFunc(cb))
}

// AddCallback receives the outcome of one AddEntryOwned: AddComplete is
// called exactly once, from the managed ledger's delivery goroutine (or, when
// the ledger is already gone, from the caller's), in the order of the adds.
type AddCallback interface {
	AddComplete(pos Position, err error)
}

// addFunc adapts AddEntry's callback.
type addFunc func(Position, error)

func (f addFunc) AddComplete(pos Position, err error) { f(pos, err) }

// AddEntryOwned is AddEntry without the copy, for a hot path that hands over
// a buffer it allocated for the entry (the broker's SEND payload): the
// managed ledger keeps data (cache, tail, bookie writes) and the caller must
// never modify it afterwards. A callback object instead of a closure lets
// the caller recycle it once AddComplete has run.
func (ml *ManagedLedger) AddEntryOwned(data []byte, cb AddCallback) {
	ml.addEntry(data, cb)
}

func (ml *ManagedLedger) addEntry(data []byte, cb AddCallback) {
	op := &addOp{data: data, cb: cb}
	if op.data == nil {
		op.data = []byte{}
	}
	ml.sendMu.Lock()
	ml.mu.Lock()
	if err := ml.addErrLocked(); err != nil {
		if ml.deliverGone {
			ml.mu.Unlock()
			ml.sendMu.Unlock()
			cb.AddComplete(Position{}, err)
			return
		}
		op.done, op.err = true, err
		ml.queue = append(ml.queue, op)
		ml.deliverCond.Signal()
		ml.mu.Unlock()
		ml.sendMu.Unlock()
		return
	}
	ml.queue = append(ml.queue, op)
	w := ml.cur
	switch {
	case w == nil:
		ml.needLedger = true
		ml.kickLocked()
	case ml.fullLocked(w):
		// Held until the next ledger is ready (a ledger overshoots its
		// limits only while younger than MinLedgerAge).
		w = nil
		ml.kickLocked()
	default:
		ml.assignLocked(op, w)
	}
	ml.mu.Unlock()
	if w != nil {
		ml.send(w, op)
	}
	ml.sendMu.Unlock()
}

// fullLocked reports whether w has reached its limits and may roll over.
func (ml *ManagedLedger) fullLocked(w *writer) bool {
	if w.sent < ml.cfg.MaxEntriesPerLedger && w.sentBytes < ml.cfg.MaxLedgerSize {
		return false
	}
	return ml.cfg.MinLedgerAge <= 0 || time.Since(w.created) >= ml.cfg.MinLedgerAge
}

// assignLocked records that op goes to w and asks for a rollover when w is
// full.
func (ml *ManagedLedger) assignLocked(op *addOp, w *writer) {
	op.w = w
	w.sent++
	w.sentBytes += int64(len(op.data))
	if w.sent == ml.cfg.MaxEntriesPerLedger || (w.sentBytes >= ml.cfg.MaxLedgerSize && w.sentBytes-int64(len(op.data)) < ml.cfg.MaxLedgerSize) {
		ml.kickLocked()
	}
}

// send hands op to w's ledger; sendMu is held, mu is not.
func (ml *ManagedLedger) send(w *writer, op *addOp) {
	op.lacSent = w.wh.LastAddConfirmed()
	w.wh.AppendAsync(op.data, func(id int64, err error) { ml.onAddDone(op, w, id, err) })
}

// AddEntrySync appends data and waits for its position.
func (ml *ManagedLedger) AddEntrySync(ctx context.Context, data []byte) (Position, error) {
	type res struct {
		pos Position
		err error
	}
	ch := make(chan res, 1)
	ml.AddEntry(data, func(p Position, err error) { ch <- res{p, err} })
	select {
	case r := <-ch:
		return r.pos, r.err
	case <-ctx.Done():
		return Position{}, ctx.Err()
	}
}

// onAddDone is the ledger client's callback for op.
func (ml *ManagedLedger) onAddDone(op *addOp, w *writer, id int64, err error) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if op.done || op.w != w {
		return
	}
	switch {
	case err == nil:
		op.pos, op.done = Position{w.id, id}, true
		w.ackedBytes += int64(len(op.data))
	case errors.Is(err, client.ErrFenced):
		ml.fenceLocked(err)
		op.done, op.err = true, ml.stateErr
	default:
		if w.failed == nil {
			w.failed = err
			w.retry = w == ml.cur && ml.state == stateOpen
			ml.log.Warn("bookie ledger write failed", "ledger", w.id, "entry", id, "err", err, "retry", w.retry)
			if w == ml.cur {
				ml.cur = nil
				ml.needLedger = true
				ml.kickLocked()
			}
		}
		if w.retry {
			op.w, op.retryOf = nil, w
			return
		}
		op.done, op.err = true, fmt.Errorf("%w: ledger %d of %q: %w", ErrWriteFailed, w.id, ml.name, err)
	}
	ml.deliverCond.Signal()
}

// fenceLocked makes the managed ledger unwritable after another owner took
// over: unsent adds fail at once, sent ones with their ledger's outcome.
func (ml *ManagedLedger) fenceLocked(cause error) {
	if ml.state == stateFenced || ml.state == stateClosed {
		return
	}
	ml.log.Warn("managed ledger fenced", "err", cause)
	ml.state = stateFenced
	ml.stateErr = fmt.Errorf("%w: %q: %w", ErrFenced, ml.name, cause)
	ml.failUnsentLocked(ml.stateErr)
	ml.cur = nil
	ml.wakeWaitersLocked()
}

// failUnsentLocked fails every add not sent to a ledger.
func (ml *ManagedLedger) failUnsentLocked(err error) {
	for _, op := range ml.queue {
		if !op.done && op.w == nil {
			op.done, op.err = true, err
		}
	}
	ml.deliverCond.Signal()
}

func (ml *ManagedLedger) wakeWaitersLocked() {
	if ml.waitCh != nil {
		close(ml.waitCh)
		ml.waitCh = nil
	}
}

// deliver runs add callbacks in call order and publishes confirmed
// entries to readers. It is the only goroutine that moves lastConfirmed.
func (ml *ManagedLedger) deliver() {
	defer ml.deliverWG.Done()
	var batch []*addOp
	for {
		ml.mu.Lock()
		for !(len(ml.queue) > 0 && ml.queue[0].done) && !ml.deliverStop {
			ml.deliverCond.Wait()
		}
		if ml.deliverStop && !(len(ml.queue) > 0 && ml.queue[0].done) {
			ml.deliverGone = true
			ml.mu.Unlock()
			return
		}
		n, moved := 0, false
		for n < len(ml.queue) && ml.queue[n].done {
			op := ml.queue[n]
			if op.err == nil {
				ml.confirmLocked(op)
				moved = true
			}
			batch = append(batch, op)
			ml.queue[n] = nil
			n++
		}
		ml.queue = ml.queue[n:]
		if len(ml.queue) == 0 {
			ml.queue = nil
			if ml.idleCh != nil {
				close(ml.idleCh)
				ml.idleCh = nil
			}
		}
		if moved {
			ml.wakeWaitersLocked()
		}
		ml.mu.Unlock()
		for i, op := range batch {
			op.cb.AddComplete(op.pos, op.err)
			batch[i] = nil
		}
		batch = batch[:0]
	}
}

// confirmLocked makes a stored entry visible: it becomes the last
// confirmed entry, enters the cache and the writer's tail.
func (ml *ManagedLedger) confirmLocked(op *addOp) {
	pos := op.pos
	ml.lastConfirmed = pos
	if i := ml.ledgerIndexLocked(pos.LedgerID); i >= 0 && !ml.ledgers[i].closed() {
		ml.ledgers[i].Entries = pos.EntryID + 1
		ml.ledgers[i].Size += int64(len(op.data))
	}
	if ml.cache.enabled() {
		ml.cache.put(ml, pos, op.data)
	}
	if w := ml.writers[pos.LedgerID]; w != nil && !w.sealed {
		w.readableLAC = max(w.readableLAC, op.lacSent)
		w.tail = append(w.tail, Entry{Pos: pos, Data: op.data})
		k := 0
		for k < len(w.tail) && w.tail[k].Pos.EntryID <= w.readableLAC {
			w.tail[k] = Entry{}
			k++
		}
		if k > 0 {
			w.tail = append(w.tail[:0], w.tail[k:]...)
		}
	}
}

// ledgerIndexLocked returns the index of ledger id in the list, or -1.
func (ml *ManagedLedger) ledgerIndexLocked(id int64) int {
	i := sort.Search(len(ml.ledgers), func(i int) bool { return ml.ledgers[i].ID >= id })
	if i < len(ml.ledgers) && ml.ledgers[i].ID == id {
		return i
	}
	return -1
}

// waitIdle waits until every queued add has had its callback.
func (ml *ManagedLedger) waitIdle(ctx context.Context) error {
	for {
		ml.mu.Lock()
		if len(ml.queue) == 0 || ml.deliverGone {
			ml.mu.Unlock()
			return nil
		}
		if ml.idleCh == nil {
			ml.idleCh = make(chan struct{})
		}
		ch := ml.idleCh
		ml.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ---- background worker: ledger switches, cursor persistence, trimming ----

func (ml *ManagedLedger) run() {
	defer ml.workerWG.Done()
	rollTimer := time.NewTimer(time.Hour)
	flushTimer := time.NewTimer(time.Hour)
	flushTimer.Stop()
	flushArmed := false
	trimTicker := time.NewTicker(ml.cfg.TrimCheckInterval)
	defer rollTimer.Stop()
	defer flushTimer.Stop()
	defer trimTicker.Stop()
	for {
		trim := false
		select {
		case <-ml.stopCh:
			return
		case <-ml.kick:
		case <-rollTimer.C:
		case <-flushTimer.C:
			flushArmed = false
			ml.flushCursors()
			trim = true
		case <-trimTicker.C:
			trim = true
		}
		ml.mu.Lock()
		open := ml.state == stateOpen
		need := open && ml.cur == nil && ml.needLedger
		ml.needLedger = false
		roll, wait := ml.rollDueLocked(time.Now())
		dirty := len(ml.dirty) > 0
		trim = trim || ml.trimWanted
		ml.trimWanted = false
		ml.mu.Unlock()
		if need || roll {
			ml.switchLedger(need)
			ml.mu.Lock()
			_, wait = ml.rollDueLocked(time.Now())
			ml.mu.Unlock()
		}
		rollTimer.Reset(wait)
		if dirty && !flushArmed {
			flushTimer.Reset(ml.cfg.CursorPersistInterval)
			flushArmed = true
		}
		if trim {
			ml.trim()
		}
	}
}

// rollDueLocked reports whether the current ledger should roll over now,
// and otherwise how long until it may.
func (ml *ManagedLedger) rollDueLocked(now time.Time) (bool, time.Duration) {
	w := ml.cur
	if w == nil || ml.state != stateOpen {
		return false, ml.cfg.MaxLedgerAge
	}
	age := now.Sub(w.created)
	minAge := max(ml.cfg.MinLedgerAge, 0)
	full := w.sent >= ml.cfg.MaxEntriesPerLedger || w.sentBytes >= ml.cfg.MaxLedgerSize
	var wait time.Duration
	switch {
	case full && age >= minAge, w.sent > 0 && age >= ml.cfg.MaxLedgerAge:
		if now.Before(ml.rollAfter) {
			return false, ml.rollAfter.Sub(now)
		}
		return true, 0
	case full:
		wait = minAge - age
	case age >= ml.cfg.MaxLedgerAge:
		wait = ml.cfg.MaxLedgerAge
	default:
		wait = ml.cfg.MaxLedgerAge - age
	}
	return false, max(wait, time.Millisecond)
}

// switchLedger creates the next ledger, appends it to the record and makes
// it current, then closes the previous one in the background. With
// forFailure, writers that failed while current are closed first and their
// failed adds re-sent to the new ledger.
func (ml *ManagedLedger) switchLedger(forFailure bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ml.cfg.OperationTimeout)
	defer cancel()

	ml.mu.Lock()
	var failed []*writer
	for _, w := range ml.writers {
		if w.retry && !w.closeTried {
			w.closeTried = true
			failed = append(failed, w)
		}
	}
	ml.mu.Unlock()
	for _, w := range failed {
		ml.closeWriter(ctx, w)
	}

	wh, err := ml.createLedger(ctx)
	if err != nil {
		ml.log.Warn("ledger creation failed", "err", err)
		ml.mu.Lock()
		if ml.cur == nil {
			ml.failUnsentLocked(fmt.Errorf("%w: %w", ErrWriteFailed, err))
		} else {
			ml.rollAfter = time.Now().Add(time.Second)
		}
		ml.mu.Unlock()
		return
	}
	nw := &writer{wh: wh, id: wh.ID(), created: time.Now(), readableLAC: -1}

	ml.infoMu.Lock()
	ml.mu.Lock()
	if ml.state != stateOpen {
		ml.mu.Unlock()
		ml.infoMu.Unlock()
		ml.abandon(ctx, nw)
		return
	}
	rec := ml.recordLocked()
	rec.Ledgers = append(rec.Ledgers, LedgerInfo{ID: nw.id})
	ml.mu.Unlock()
	err = ml.putRecord(ctx, rec)
	if err != nil {
		ml.infoMu.Unlock()
		ml.abandon(ctx, nw)
		ml.mu.Lock()
		if errors.Is(err, ErrFenced) {
			ml.fenceLocked(err)
		} else if ml.cur == nil {
			ml.failUnsentLocked(fmt.Errorf("%w: %w", ErrWriteFailed, err))
		} else {
			ml.rollAfter = time.Now().Add(time.Second)
		}
		ml.mu.Unlock()
		return
	}
	ml.mu.Lock()
	ml.ledgers = append(ml.ledgers, LedgerInfo{ID: nw.id})
	ml.writers[nw.id] = nw
	ml.mu.Unlock()
	ml.infoMu.Unlock()

	ml.sendMu.Lock()
	ml.mu.Lock()
	old := ml.cur
	ml.cur = nw
	var unsent []*addOp
	if ml.state == stateOpen {
		for _, op := range ml.queue {
			if !op.done && op.w == nil {
				if ml.fullLocked(nw) {
					ml.kickLocked() // the rest waits for the next ledger
					break
				}
				ml.assignLocked(op, nw)
				unsent = append(unsent, op)
			}
		}
	}
	ml.mu.Unlock()
	for _, op := range unsent {
		ml.send(nw, op)
	}
	ml.sendMu.Unlock()
	ml.log.Debug("managed ledger switched ledger", "ledger", nw.id, "failure", forFailure)

	if old != nil {
		ml.mu.Lock()
		old.closeTried = true
		ml.mu.Unlock()
		ml.bgWG.Add(1)
		go func() {
			defer ml.bgWG.Done()
			ctx, cancel := context.WithTimeout(context.Background(), ml.cfg.OperationTimeout)
			defer cancel()
			ml.closeWriter(ctx, old)
		}()
	}
}

// closeWriter closes a ledger no longer written (waiting for its pending
// adds) and records its final entry count.
func (ml *ManagedLedger) closeWriter(ctx context.Context, w *writer) {
	err := w.wh.Close(ctx)
	lac := w.wh.LastAddConfirmed()
	if err != nil {
		ml.mu.Lock()
		if errors.Is(err, client.ErrFenced) {
			ml.fenceLocked(err)
		} else {
			ml.log.Warn("closing bookie ledger failed", "ledger", w.id, "err", err)
		}
		// Adds that failed on w can be retried only when w is closed at
		// its LAC: otherwise a later recovery could still find them.
		for _, op := range ml.queue {
			if !op.done && op.w == nil && op.retryOf == w {
				op.done, op.err = true, fmt.Errorf("%w: ledger %d of %q: %w (close: %v)", ErrWriteFailed, w.id, ml.name, w.failed, err)
			}
		}
		ml.deliverCond.Signal()
		ml.mu.Unlock()
		return
	}
	_ = ml.seal(ctx, w, lac)
}

// seal records a closed ledger's final counts.
func (ml *ManagedLedger) seal(ctx context.Context, w *writer, lac int64) error {
	curs, err := ml.sealRecord(ctx, w, lac)
	// Mark-delete positions may now cross into the next ledger.
	for _, c := range curs {
		c.advance()
	}
	return err
}

func (ml *ManagedLedger) sealRecord(ctx context.Context, w *writer, lac int64) ([]*Cursor, error) {
	ml.infoMu.Lock()
	defer ml.infoMu.Unlock()
	ml.mu.Lock()
	i := ml.ledgerIndexLocked(w.id)
	if i < 0 {
		ml.mu.Unlock()
		return nil, nil
	}
	info := LedgerInfo{ID: w.id, Entries: lac + 1, Size: w.ackedBytes, Timestamp: nowMillis()}
	rec := ml.recordLocked()
	rec.Ledgers[i] = info
	if ml.state == stateFenced {
		err := ml.stateErr
		ml.mu.Unlock()
		return nil, err
	}
	ml.mu.Unlock()
	err := ml.putRecord(ctx, rec)
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrFenced) {
			ml.fenceLocked(err)
		} else {
			ml.log.Warn("recording closed ledger failed", "ledger", w.id, "err", err)
		}
		return nil, err
	}
	if i = ml.ledgerIndexLocked(w.id); i >= 0 {
		ml.ledgers[i] = info
	}
	w.sealed = true
	w.tail = nil
	delete(ml.writers, w.id)
	ml.trimWanted = true
	ml.kickLocked()
	return slices.Collect(maps.Values(ml.cursors)), nil
}

// recordLocked returns the record to store, from the in-memory state.
func (ml *ManagedLedger) recordLocked() mlInfo {
	rec := mlInfo{Ledgers: slices.Clone(ml.ledgers), Properties: maps.Clone(ml.props)}
	if ml.terminated != nil {
		t := *ml.terminated
		rec.TerminatedPosition = &t
	}
	for i := range rec.Ledgers {
		if !rec.Ledgers[i].closed() {
			// Counts of open ledgers are informational; they are
			// recomputed by recovery.
			rec.Ledgers[i].Entries, rec.Ledgers[i].Size = 0, 0
		}
	}
	if rec.Ledgers == nil {
		rec.Ledgers = []LedgerInfo{}
	}
	return rec
}

// putRecord stores rec by compare-and-set; infoMu is held. A version
// mismatch means another owner: ErrFenced.
func (ml *ManagedLedger) putRecord(ctx context.Context, rec mlInfo) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	v, err := ml.f.md.Put(ctx, infoKey(ml.name), b, ml.infoVersion)
	if errors.Is(err, metadata.ErrBadVersion) || errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: record of %q changed: %w", ErrFenced, ml.name, err)
	}
	if err != nil {
		return fmt.Errorf("ledger: write record of %q: %w", ml.name, err)
	}
	ml.infoVersion = v
	return nil
}

// ---- state ----

// LastConfirmed returns the position of the last confirmed entry. With no
// entry it is (first ledger, -1).
func (ml *ManagedLedger) LastConfirmed() Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.lastConfirmed
}

// NumberOfEntries returns the number of stored entries (in ledgers not yet
// trimmed).
func (ml *ManagedLedger) NumberOfEntries() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for _, l := range ml.ledgers {
		n += l.Entries
	}
	return n
}

// TotalSize returns the payload bytes stored.
func (ml *ManagedLedger) TotalSize() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for _, l := range ml.ledgers {
		n += l.Size
	}
	return n
}

// Ledgers returns the bookie ledgers, oldest first.
func (ml *ManagedLedger) Ledgers() []LedgerInfo {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return slices.Clone(ml.ledgers)
}

// IsTerminated reports whether Terminate was called (here or by a previous
// owner).
func (ml *ManagedLedger) IsTerminated() bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.terminated != nil
}

// Properties returns a copy of the managed ledger's properties.
func (ml *ManagedLedger) Properties() map[string]string {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return maps.Clone(ml.props)
}

// SetProperties replaces the properties given (an empty value deletes the
// key) and stores the record.
func (ml *ManagedLedger) SetProperties(ctx context.Context, props map[string]string) error {
	ml.infoMu.Lock()
	defer ml.infoMu.Unlock()
	ml.mu.Lock()
	if ml.state == stateClosed || ml.state == stateFenced {
		err := ml.addErrLocked()
		ml.mu.Unlock()
		return err
	}
	next := maps.Clone(ml.props)
	for k, v := range props {
		if v == "" {
			delete(next, k)
		} else {
			next[k] = v
		}
	}
	rec := ml.recordLocked()
	rec.Properties = next
	ml.mu.Unlock()
	err := ml.putRecord(ctx, rec)
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrFenced) {
			ml.fenceLocked(err)
		}
		return err
	}
	ml.props = next
	return nil
}

// Terminate refuses further adds (ErrTerminated), waits for pending ones
// and records the last entry as the terminated position, which it
// returns. Terminating again returns the same position.
func (ml *ManagedLedger) Terminate(ctx context.Context) (Position, error) {
	ml.sendMu.Lock()
	ml.mu.Lock()
	switch ml.state {
	case stateFenced, stateClosed:
		err := ml.addErrLocked()
		ml.mu.Unlock()
		ml.sendMu.Unlock()
		return Position{}, err
	case stateOpen:
		ml.state = stateTerminated
		ml.failUnsentLocked(fmt.Errorf("%w: %q", ErrTerminated, ml.name))
	}
	ml.mu.Unlock()
	ml.sendMu.Unlock()
	if err := ml.waitIdle(ctx); err != nil {
		return Position{}, err
	}
	ml.infoMu.Lock()
	defer ml.infoMu.Unlock()
	ml.mu.Lock()
	if ml.terminated != nil {
		p := *ml.terminated
		ml.mu.Unlock()
		return p, nil
	}
	lc := ml.lastConfirmed
	rec := ml.recordLocked()
	rec.TerminatedPosition = &lc
	ml.mu.Unlock()
	if err := ml.putRecord(ctx, rec); err != nil {
		if errors.Is(err, ErrFenced) {
			ml.mu.Lock()
			ml.fenceLocked(err)
			ml.mu.Unlock()
		}
		return Position{}, err
	}
	ml.mu.Lock()
	ml.terminated = &lc
	ml.wakeWaitersLocked()
	ml.mu.Unlock()
	return lc, nil
}

// Close waits (within ctx) for pending adds, closes the bookie ledger
// being written and records it, persists every durable cursor and releases
// the managed ledger. Adds after Close fail with ErrClosed. After fencing,
// Close releases resources without writing anything and returns nil.
func (ml *ManagedLedger) Close(ctx context.Context) error {
	ml.closeMu.Lock()
	defer ml.closeMu.Unlock()
	ml.sendMu.Lock()
	ml.mu.Lock()
	if ml.state == stateClosed {
		ml.mu.Unlock()
		ml.sendMu.Unlock()
		return nil
	}
	fenced := ml.state == stateFenced
	ml.state = stateClosed
	ml.failUnsentLocked(fmt.Errorf("%w: %q", ErrClosed, ml.name))
	ml.mu.Unlock()
	ml.sendMu.Unlock()

	idleErr := ml.waitIdle(ctx)
	close(ml.stopCh)
	ml.workerWG.Wait()
	ml.bgWG.Wait()

	ml.mu.Lock()
	ws := slices.Collect(maps.Values(ml.writers))
	ml.cur = nil
	ml.mu.Unlock()
	var errs []error
	if idleErr != nil {
		errs = append(errs, idleErr)
	}
	for _, w := range ws {
		if w.sealed {
			continue
		}
		err := w.wh.Close(ctx)
		if err != nil || fenced {
			if err != nil && !errors.Is(err, client.ErrFenced) && !fenced {
				errs = append(errs, fmt.Errorf("ledger: close bookie ledger %d: %w", w.id, err))
			}
			continue
		}
		if err := ml.seal(ctx, w, w.wh.LastAddConfirmed()); err != nil {
			if errors.Is(err, ErrFenced) {
				fenced = true
			} else {
				errs = append(errs, err)
			}
		}
	}
	if !fenced {
		if err := ml.flushCursors(); err != nil {
			errs = append(errs, err)
		}
	}
	ml.stopDeliver()
	ml.cache.dropLedger(ml, -1)
	ml.f.forget(ml)
	if fenced {
		return nil
	}
	return errors.Join(errs...)
}

func (ml *ManagedLedger) stopDeliver() {
	ml.mu.Lock()
	ml.deliverStop = true
	ml.deliverCond.Broadcast()
	ml.wakeWaitersLocked()
	if ml.idleCh != nil {
		close(ml.idleCh)
		ml.idleCh = nil
	}
	ml.mu.Unlock()
	ml.deliverWG.Wait()
}

// crash stops the goroutines without closing ledgers, flushing cursors or
// running pending callbacks (tests: simulates the process dying).
func (ml *ManagedLedger) crash() {
	ml.closeMu.Lock()
	defer ml.closeMu.Unlock()
	ml.sendMu.Lock()
	ml.mu.Lock()
	if ml.state == stateClosed {
		ml.mu.Unlock()
		ml.sendMu.Unlock()
		return
	}
	ml.state = stateClosed
	ml.queue = nil
	ws := slices.Collect(maps.Values(ml.writers))
	ml.mu.Unlock()
	ml.sendMu.Unlock()
	close(ml.stopCh)
	ml.workerWG.Wait()
	ml.bgWG.Wait()
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	for _, w := range ws {
		_ = w.wh.Close(dead) // stops the handle; the ledger stays OPEN
	}
	ml.mu.Lock()
	ml.queue = nil
	ml.mu.Unlock()
	ml.stopDeliver()
	ml.cache.dropLedger(ml, -1)
	ml.f.forget(ml)
}
