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
	"sync/atomic"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

type mlState uint8

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
	first   addSend // the record of the first send (see send); in use once first.ml is set
	// holds counts the op's holders: the queue until its callback ran, and
	// each send until the bookie client answered it. The last returns it
	// to addOps; an op a path drops without answering is left to the
	// collector.
	holds atomic.Int32
}

// addOps recycles addOps, one per entry added.
var addOps = sync.Pool{New: func() any { return new(addOp) }}

// release drops one hold on op.
func (op *addOp) release() {
	if op.holds.Add(-1) == 0 {
		*op = addOp{}
		addOps.Put(op)
	}
}

// addSend is one send of an addOp to one ledger: the bookie client reports
// the outcome to it. The first send uses the op's own record; a retry to
// another ledger allocates one, so a late outcome of the earlier send still
// names its ledger (onAddDone ignores it).
type addSend struct {
	ml *ManagedLedger
	op *addOp
	w  *writer
}

// AddComplete implements client.AddHandler.
func (s *addSend) AddComplete(id int64, err error) {
	op := s.op
	s.ml.onAddDone(op, s.w, id, err)
	op.release()
}

// ManagedLedger is one topic's log: an ordered list of bookie ledgers with
// a single writer (this process) and durable cursors. See the package
// documentation for semantics and the concurrency contract.
type ManagedLedger struct {
	f    *Factory
	name string
	// cfg is shared with every managed ledger of the same effective
	// configuration (Factory.intern) and never changed in place:
	// Reconfigure replaces it (under mu, so two Reconfigures do not lose
	// one). Read it with conf(), with or without mu: workers read it
	// outside the lock.
	cfg     atomic.Pointer[Config]
	created int64 // Unix ms the record was created; 0 for records older than the field

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
	stateErr      error
	ledgers       []LedgerInfo // sorted by id (ids grow)
	terminated    *Position
	props         map[string]string
	cur           *writer
	writers       map[int64]*writer
	queue         []*addOp
	lastConfirmed Position
	addedBytes    int64         // payload bytes confirmed since open: how far behind a cached entry is (read.go)
	waitCh        chan struct{} // closed when lastConfirmed moves; nil if nobody waits
	idleCh        chan struct{} // closed when queue empties; nil if nobody waits
	cursors       map[string]*Cursor
	nonDurable    map[*Cursor]struct{}
	dirty         map[*Cursor]struct{}
	trimAt        Position // when LedgerID > 0: trim once LastConfirmed reaches it (see sealRecord)
	rollAfter     int64    // earliest retry of a failed rollover, Unix ns

	// The delivery goroutine and the worker run only while they have
	// something to do (see "Concurrency" in doc.go), so an idle managed
	// ledger owns no goroutine: at most three stopped timers. (The state
	// and the flags are kept together, and rollAfter is not a time.Time:
	// a managed ledger per topic makes its size count, 384 bytes now.)
	state       mlState
	needLedger  bool
	trimWanted  bool
	delivering  bool        // a delivery goroutine runs
	deliverGone bool        // Close or crash: no delivery goroutine is started any more
	working     bool        // a worker goroutine runs
	kicked      bool        // work was asked for since the worker last looked
	workerDone  bool        // Close or crash: no worker is started any more
	flushDue    bool        // the cursor flush timer fired
	flushArmed  bool        // flushTimer is set to fire
	trimArmed   bool        // trimTimer is set to fire
	deliverBuf  []*addOp    // the delivery goroutine's batch, kept for the next one
	rollTimer   *time.Timer // wakes the worker when the current ledger may roll over by age; nil until needed
	flushTimer  *time.Timer // CursorPersistInterval after a cursor changed; nil until needed
	trimTimer   *time.Timer // every TrimCheckInterval while there is a ledger to trim; nil until needed

	rhMu    sync.Mutex
	readers map[int64]*client.ReadHandle // closed ledgers only

	off *offloadState // tiered storage (offload.go); nil until used, under mu

	workerWG  sync.WaitGroup // the worker
	bgWG      sync.WaitGroup // closers started by the worker, the size count of recovered ledgers
	deliverWG sync.WaitGroup // the delivery goroutine
	closeMu   sync.Mutex     // serializes Close
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func openManagedLedger(ctx context.Context, f *Factory, name string, cfg *Config, mode openMode, absent []string) (*ManagedLedger, error) {
	ml := &ManagedLedger{
		f: f, name: name,
		// Its maps stay nil until used (setKey): most topics never need
		// several of them.
	}
	ml.cfg.Store(cfg)
	if err := ml.init(ctx, mode, absent); err != nil {
		return nil, err
	}
	ml.mu.Lock()
	ml.armTimersLocked()
	if len(ml.ledgers) > 1 || ml.offloadTimerWantedLocked() {
		// Consumed ledgers of the previous owner may be due for deletion,
		// offloaded ones for their bookie copy's deletion, a copy it left
		// unfinished for its clean-up.
		ml.trimWanted = true
		ml.kickLocked()
	}
	ml.mu.Unlock()
	ml.countRecoveredSizes()
	return ml, nil
}

// init reads (or creates) the record, recovers ledgers left open (fencing
// any previous owner), drops empty ones and claims the record by
// compare-and-set, then loads the cursors. It creates no bookie ledger: the
// first add asks the worker for one (see "Ledger creation" in doc.go).
// init loads (or creates) the record; absent are keys that must not exist
// when the record is created (Factory.CreateUnless).
func (ml *ManagedLedger) init(ctx context.Context, mode openMode, absent []string) error {
	md, key := ml.f.md, infoKey(ml.name)
	var rec mlInfo
	var ver metadata.Version
	created := false
	for {
		var kv metadata.KV
		err := metadata.ErrNotFound
		if mode != createNew {
			kv, err = md.Get(ctx, key)
		}
		if errors.Is(err, metadata.ErrNotFound) {
			if mode == openExisting {
				return fmt.Errorf("%w: managed ledger %q", ErrNotFound, ml.name)
			}
			rec = mlInfo{Ledgers: []LedgerInfo{}, Created: nowMillis()}
			b, _ := json.Marshal(rec)
			ver, err = md.CreateUnless(ctx, key, b, absent...) // Create when absent is empty
			if errors.Is(err, metadata.ErrExists) {
				if mode == createNew {
					return fmt.Errorf("%w: managed ledger %q (%w)", ErrExists, ml.name, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("ledger: create record of %q: %w", ml.name, err)
			}
			created = true // creating it claimed it: nothing to recover
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
			start := time.Now()
			rh, err := ml.f.client.OpenLedger(ctx, l.ID, true)
			switch {
			case errors.Is(err, client.ErrNoSuchLedger):
				ml.logger().Warn("ledger of managed ledger is gone", "ledger", l.ID)
				continue
			case err != nil:
				return fmt.Errorf("ledger: recover ledger %d of %q: %w", l.ID, ml.name, err)
			}
			m := rh.Metadata()
			l.Entries = m.LastEntry + 1
			// The ledger client knows only the recovered tail's length;
			// keep what the previous owner recorded if that is larger.
			l.Size = max(l.Size, m.Length)
			l.SizeUnknown = l.Entries > 0
			l.Timestamp = nowMillis()
			ml.logger().Info("ledger left open recovered", "ledger", l.ID, "entries", l.Entries,
				"recoveryMs", time.Since(start).Milliseconds())
		}
		if l.Entries == 0 {
			drop = append(drop, l.ID)
			continue
		}
		keep = append(keep, l)
	}
	rec.Ledgers = keep
	if rec.Ledgers == nil {
		rec.Ledgers = []LedgerInfo{}
	}

	if !created {
		// Rewriting the record, even unchanged, bumps its version: a
		// previous owner's next record update fails, so it cannot add a
		// ledger behind our back.
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		nv, err := md.Put(ctx, key, b, ver)
		if err != nil {
			if errors.Is(err, metadata.ErrBadVersion) {
				return fmt.Errorf("%w: %q was opened concurrently: %w", ErrFenced, ml.name, err)
			}
			return fmt.Errorf("ledger: write record of %q: %w", ml.name, err)
		}
		ver = nv
	}
	ml.infoVersion = ver
	for _, id := range drop {
		if err := ml.f.client.DeleteLedger(ctx, id); err != nil && !errors.Is(err, client.ErrNoSuchLedger) {
			ml.logger().Warn("delete empty ledger failed", "ledger", id, "err", err)
		}
	}

	ml.ledgers = rec.Ledgers
	ml.props = rec.Properties
	ml.created = rec.Created
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
	if created {
		// A new record has no cursors: Delete removes the cursors of a
		// managed ledger before its record.
		return nil
	}
	if err := ml.loadCursors(ctx); err != nil {
		ml.mu.Lock()
		ml.state = stateClosed
		ml.mu.Unlock()
		return err
	}
	return nil
}

func (ml *ManagedLedger) createLedger(ctx context.Context) (*client.WriteHandle, error) {
	// Reconfigure may change the replication meanwhile: read it under mu.
	ml.mu.Lock()
	e, qw, qa := ml.conf().Ensemble, ml.conf().WriteQuorum, ml.conf().AckQuorum
	var after int64 // ledger ids grow along the list (positions compare by them)
	if n := len(ml.ledgers); n > 0 {
		after = ml.ledgers[n-1].ID
	}
	ml.mu.Unlock()
	wh, err := ml.f.client.CreateLedger(ctx, client.CreateOptions{
		Ensemble: e, WriteQuorum: qw, AckQuorum: qa, After: after,
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
		ml.logger().Warn("delete unused ledger failed", "ledger", w.id, "err", err)
	}
}

// Name returns the managed ledger's name.
func (ml *ManagedLedger) Name() string { return ml.name }

// logger returns the factory's logger with the managed ledger's name. It is
// made when something is logged rather than kept, which would cost every
// open managed ledger a few hundred bytes.
func (ml *ManagedLedger) logger() *slog.Logger { return ml.f.log.With("managedLedger", ml.name) }

// Config returns the managed ledger's effective configuration.
func (ml *ManagedLedger) Config() Config { return *ml.conf() }

// conf returns the current configuration; it never changes in place.
func (ml *ManagedLedger) conf() *Config { return ml.cfg.Load() }

// Created returns when the managed ledger's record was created, in Unix
// milliseconds, or 0 when the record was written by a version that did not
// keep it.
func (ml *ManagedLedger) Created() int64 { return ml.created }

// Reconfigure changes the retention and the replication (ensemble, write
// and ack quorums) of an open managed ledger to those of cfg, completed
// from the factory's defaults as Open does (nil: the defaults). Retention
// applies at once (consumed ledgers are checked again); replication applies
// to the ledgers created from now on, never to ones already written. The
// other fields keep the values Open gave them. The broker calls it when a
// namespace's policies change while its topics are loaded.
func (ml *ManagedLedger) Reconfigure(cfg *Config) error {
	c := ml.f.defs
	if cfg != nil {
		c = mergeConfig(*cfg, ml.f.defs)
	}
	if err := c.Validate(); err != nil {
		return err
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	next := *ml.conf()
	next.RetentionTime, next.RetentionSize = c.RetentionTime, c.RetentionSize
	next.Ensemble, next.WriteQuorum, next.AckQuorum = c.Ensemble, c.WriteQuorum, c.AckQuorum
	next.Offload = c.Offload
	if next == *ml.conf() {
		return nil // unchanged: no trim pass
	}
	ml.cfg.Store(ml.f.intern(next))
	ml.trimWanted = true
	ml.kickLocked()
	return nil
}

// setKey sets (*m)[k] = v, making the map on first use.
func setKey[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = make(map[K]V)
	}
	(*m)[k] = v
}

// signal runs fn under mu and wakes the background worker.
func (ml *ManagedLedger) signal(fn func()) {
	ml.mu.Lock()
	fn()
	ml.kickLocked()
	ml.mu.Unlock()
}

// kickLocked asks the worker to look at the state again, starting it if it
// is not running.
func (ml *ManagedLedger) kickLocked() {
	ml.kicked = true
	if ml.working || ml.workerDone {
		return
	}
	ml.working = true
	ml.workerWG.Add(1)
	go ml.work()
}

// deliverLocked starts the delivery goroutine when the oldest add has its
// outcome and none runs (a running one picks the add up).
func (ml *ManagedLedger) deliverLocked() {
	if ml.delivering || ml.deliverGone || len(ml.queue) == 0 || !ml.queue[0].done {
		return
	}
	ml.delivering = true
	ml.deliverWG.Add(1)
	go ml.deliver()
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
	if data == nil {
		data = []byte{}
	}
	op := addOps.Get().(*addOp)
	op.data, op.cb = data, cb
	op.holds.Store(1)
	ml.sendMu.Lock()
	ml.mu.Lock()
	if err := ml.addErrLocked(); err != nil {
		if ml.deliverGone && !ml.delivering {
			ml.mu.Unlock()
			ml.sendMu.Unlock()
			op.release()
			cb.AddComplete(Position{}, err)
			return
		}
		// Queued behind the adds whose callbacks have not run yet.
		op.done, op.err = true, err
		ml.queue = append(ml.queue, op)
		ml.deliverLocked()
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
	if w.sent < ml.conf().MaxEntriesPerLedger && w.sentBytes < ml.conf().MaxLedgerSize {
		return false
	}
	return ml.conf().MinLedgerAge <= 0 || time.Since(w.created) >= ml.conf().MinLedgerAge
}

// assignLocked records that op goes to w and asks for a rollover when w is
// full.
func (ml *ManagedLedger) assignLocked(op *addOp, w *writer) {
	op.w = w
	w.sent++
	w.sentBytes += int64(len(op.data))
	if w.sent == 1 && w == ml.cur {
		// From now on the ledger may roll over by age alone.
		ml.armRollLocked(time.Now())
	}
	if w.sent == ml.conf().MaxEntriesPerLedger || (w.sentBytes >= ml.conf().MaxLedgerSize && w.sentBytes-int64(len(op.data)) < ml.conf().MaxLedgerSize) {
		ml.kickLocked()
	}
}

// send hands op to w's ledger; sendMu is held, mu is not.
func (ml *ManagedLedger) send(w *writer, op *addOp) {
	op.lacSent = w.wh.LastAddConfirmed()
	s := &op.first
	if s.ml != nil {
		s = new(addSend) // a retry: the first send's record may still be answered
	}
	*s = addSend{ml: ml, op: op, w: w}
	op.holds.Add(1) // released by s.AddComplete
	w.wh.AppendTo(op.data, s)
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
			ml.logger().Warn("bookie ledger write failed", "ledger", w.id, "entry", id, "err", err, "retry", w.retry)
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
	ml.deliverLocked()
}

// fenceLocked makes the managed ledger unwritable after another owner took
// over: unsent adds fail at once, sent ones with their ledger's outcome.
func (ml *ManagedLedger) fenceLocked(cause error) {
	if ml.state == stateFenced || ml.state == stateClosed {
		return
	}
	ml.logger().Warn("managed ledger fenced", "err", cause)
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
	ml.deliverLocked()
}

func (ml *ManagedLedger) wakeWaitersLocked() {
	if ml.waitCh != nil {
		close(ml.waitCh)
		ml.waitCh = nil
	}
}

// deliver runs add callbacks in call order and publishes confirmed
// entries to readers, until the oldest add has no outcome yet. One runs at
// a time (started by deliverLocked), so it is the only goroutine that moves
// lastConfirmed.
func (ml *ManagedLedger) deliver() {
	defer ml.deliverWG.Done()
	ml.mu.Lock()
	batch := ml.deliverBuf
	ml.deliverBuf = nil
	for {
		if !(len(ml.queue) > 0 && ml.queue[0].done) {
			ml.delivering = false
			ml.deliverBuf = batch
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
			op.release()
		}
		batch = batch[:0]
		ml.mu.Lock()
	}
}

// confirmLocked makes a stored entry visible: it becomes the last
// confirmed entry, enters the cache and the writer's tail.
func (ml *ManagedLedger) confirmLocked(op *addOp) {
	pos := op.pos
	ml.lastConfirmed = pos
	if ml.trimAt.LedgerID > 0 && !pos.Less(ml.trimAt) {
		ml.trimAt = Position{}
		ml.trimWanted = true
		ml.kickLocked()
	}
	if i := ml.ledgerIndexLocked(pos.LedgerID); i >= 0 && !ml.ledgers[i].closed() {
		ml.ledgers[i].Entries = pos.EntryID + 1
		ml.ledgers[i].Size += int64(len(op.data))
	}
	ml.addedBytes += int64(len(op.data))
	if ml.f.cache.enabled() {
		ml.f.cache.put(ml, pos, op.data, ml.addedBytes)
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

// work is the worker. It creates the ledger to write when adds need one,
// rolls the current ledger over, stores changed cursors and trims consumed
// ledgers, each when asked (kickLocked) or when its timer fires, and exits
// once nothing was asked since its last pass. Its timers are armed only
// while their work can become due by time alone (armTimersLocked), so an
// idle managed ledger has no goroutine.
func (ml *ManagedLedger) work() {
	defer ml.workerWG.Done()
	for {
		ml.mu.Lock()
		if !ml.kicked || ml.workerDone {
			ml.working = false
			ml.mu.Unlock()
			return
		}
		ml.kicked = false
		flush := ml.flushDue
		ml.flushDue = false
		ml.mu.Unlock()
		trim := false
		if flush {
			ml.flushCursors()
			trim = true
		}
		ml.mu.Lock()
		open := ml.state == stateOpen
		need := open && ml.cur == nil && ml.needLedger
		ml.needLedger = false
		roll, _ := ml.rollDueLocked(time.Now())
		trim = trim || ml.trimWanted
		ml.trimWanted = false
		ml.mu.Unlock()
		if need || roll {
			ml.switchLedger(need)
		}
		ml.mu.Lock()
		ml.armTimersLocked()
		ml.mu.Unlock()
		if trim {
			ml.trim()
			ml.offloadPass()
		}
	}
}

// armTimersLocked sets the worker's timers for what can become due by time
// alone, and stops the ones that cannot: the rollover of a current ledger
// holding entries, the store of changed cursors, and the periodic trim
// while there is a ledger besides the current one (the current ledger is
// never trimmed).
func (ml *ManagedLedger) armTimersLocked() {
	if ml.workerDone {
		return
	}
	ml.armRollLocked(time.Now())
	if len(ml.dirty) > 0 {
		ml.armFlushLocked()
	}
	trimmable := (len(ml.ledgers) > 1 || ml.offloadTimerWantedLocked()) && (ml.state == stateOpen || ml.state == stateTerminated)
	switch {
	case trimmable && !ml.trimArmed:
		ml.trimArmed = true
		if ml.trimTimer == nil {
			ml.trimTimer = time.AfterFunc(ml.conf().TrimCheckInterval, ml.onTrimTimer)
		} else {
			ml.trimTimer.Reset(ml.conf().TrimCheckInterval)
		}
	case !trimmable && ml.trimArmed:
		if ml.trimTimer.Stop() {
			ml.trimArmed = false
		} // else it fires now and clears trimArmed itself
	}
}

// armRollLocked sets the rollover timer while the current ledger holds
// entries (an empty ledger never rolls over), and stops it otherwise.
func (ml *ManagedLedger) armRollLocked(now time.Time) {
	if w := ml.cur; w == nil || w.sent == 0 || ml.state != stateOpen || ml.workerDone {
		if ml.rollTimer != nil {
			ml.rollTimer.Stop()
		}
		return
	}
	_, wait := ml.rollDueLocked(now) // 0 when due: the timer fires at once
	if ml.rollTimer == nil {
		ml.rollTimer = time.AfterFunc(wait, ml.onRollTimer)
	} else {
		ml.rollTimer.Reset(wait)
	}
}

// armFlushLocked makes changed cursors be stored CursorPersistInterval
// from now, unless that is already planned.
func (ml *ManagedLedger) armFlushLocked() {
	if ml.flushArmed || ml.workerDone {
		return
	}
	ml.flushArmed = true
	if ml.flushTimer == nil {
		ml.flushTimer = time.AfterFunc(ml.conf().CursorPersistInterval, ml.onFlushTimer)
	} else {
		ml.flushTimer.Reset(ml.conf().CursorPersistInterval)
	}
}

// The timers' functions only hand the work to the worker.
func (ml *ManagedLedger) onRollTimer() {
	ml.mu.Lock()
	ml.kickLocked()
	ml.mu.Unlock()
}

func (ml *ManagedLedger) onFlushTimer() {
	ml.mu.Lock()
	ml.flushArmed, ml.flushDue = false, true
	ml.kickLocked()
	ml.mu.Unlock()
}

func (ml *ManagedLedger) onTrimTimer() {
	ml.mu.Lock()
	ml.trimArmed, ml.trimWanted = false, true
	ml.kickLocked()
	ml.mu.Unlock()
}

// stopWorkerLocked keeps the worker from being started again and stops
// its timers; the caller then waits for a running worker (workerWG).
func (ml *ManagedLedger) stopWorkerLocked() {
	ml.workerDone = true
	for _, t := range []*time.Timer{ml.rollTimer, ml.flushTimer, ml.trimTimer} {
		if t != nil {
			t.Stop()
		}
	}
}

// rollDueLocked reports whether the current ledger should roll over now,
// and otherwise how long until it may.
func (ml *ManagedLedger) rollDueLocked(now time.Time) (bool, time.Duration) {
	w := ml.cur
	if w == nil || ml.state != stateOpen {
		return false, ml.conf().MaxLedgerAge
	}
	age := now.Sub(w.created)
	minAge := max(ml.conf().MinLedgerAge, 0)
	full := w.sent >= ml.conf().MaxEntriesPerLedger || w.sentBytes >= ml.conf().MaxLedgerSize
	var wait time.Duration
	switch {
	case full && age >= minAge, w.sent > 0 && age >= ml.conf().MaxLedgerAge:
		if retry := time.Unix(0, ml.rollAfter); now.Before(retry) {
			return false, retry.Sub(now)
		}
		return true, 0
	case full:
		wait = minAge - age
	case age >= ml.conf().MaxLedgerAge:
		wait = ml.conf().MaxLedgerAge
	default:
		wait = ml.conf().MaxLedgerAge - age
	}
	return false, max(wait, time.Millisecond)
}

// switchLedger creates the next ledger, appends it to the record and makes
// it current, then closes the previous one in the background. With
// forFailure, writers that failed while current are closed first and their
// failed adds re-sent to the new ledger.
func (ml *ManagedLedger) switchLedger(forFailure bool) {
	ctx, cancel := context.WithTimeout(context.Background(), ml.conf().OperationTimeout)
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
		ml.logger().Warn("ledger creation failed", "err", err)
		ml.mu.Lock()
		if ml.cur == nil {
			ml.failUnsentLocked(fmt.Errorf("%w: %w", ErrWriteFailed, err))
		} else {
			ml.rollAfter = time.Now().Add(time.Second).UnixNano()
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
			ml.rollAfter = time.Now().Add(time.Second).UnixNano()
		}
		ml.mu.Unlock()
		return
	}
	ml.mu.Lock()
	ml.ledgers = append(ml.ledgers, LedgerInfo{ID: nw.id})
	setKey(&ml.writers, nw.id, nw)
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
	ml.logger().Debug("managed ledger switched ledger", "ledger", nw.id, "failure", forFailure)

	if old != nil {
		ml.mu.Lock()
		old.closeTried = true
		ml.mu.Unlock()
		ml.bgWG.Add(1)
		go func() {
			defer ml.bgWG.Done()
			ctx, cancel := context.WithTimeout(context.Background(), ml.conf().OperationTimeout)
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
			ml.logger().Warn("closing bookie ledger failed", "ledger", w.id, "err", err)
		}
		// Adds that failed on w can be retried only when w is closed at
		// its LAC: otherwise a later recovery could still find them.
		for _, op := range ml.queue {
			if !op.done && op.w == nil && op.retryOf == w {
				op.done, op.err = true, fmt.Errorf("%w: ledger %d of %q: %w (close: %v)", ErrWriteFailed, w.id, ml.name, w.failed, err)
			}
		}
		ml.deliverLocked()
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
			ml.logger().Warn("recording closed ledger failed", "ledger", w.id, "err", err)
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
	if last := (Position{w.id, lac}); lac >= 0 && ml.lastConfirmed.Less(last) {
		// The bookies acknowledged the ledger's last adds but their
		// callbacks have not run yet: without cursors, trimming is bounded
		// by LastConfirmed, so look again once they have.
		if ml.trimAt.LedgerID <= 0 || ml.trimAt.Less(last) {
			ml.trimAt = last
		}
	}
	return slices.Collect(maps.Values(ml.cursors)), nil
}

// recordLocked returns the record to store, from the in-memory state.
func (ml *ManagedLedger) recordLocked() mlInfo {
	rec := mlInfo{Ledgers: slices.Clone(ml.ledgers), Properties: maps.Clone(ml.props), Created: ml.created}
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

// Properties returns a copy of the managed ledger's properties (never nil).
func (ml *ManagedLedger) Properties() map[string]string {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if len(ml.props) == 0 {
		return map[string]string{}
	}
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
	if next == nil {
		next = map[string]string{}
	}
	for k, v := range props {
		if v == "" {
			delete(next, k)
		} else {
			next[k] = v
		}
	}
	rec := ml.recordLocked()
	rec.Properties = next
	defer ml.mu.Unlock()
	if err := ml.writeRecordLocked(ctx, rec); err != nil {
		return err
	}
	ml.props = next
	return nil
}

// writeRecordLocked stores rec by compare-and-set, releasing mu across the
// write (infoMu is held); a version conflict fences the managed ledger.
func (ml *ManagedLedger) writeRecordLocked(ctx context.Context, rec mlInfo) error {
	ml.mu.Unlock()
	err := ml.putRecord(ctx, rec)
	ml.mu.Lock()
	if errors.Is(err, ErrFenced) {
		ml.fenceLocked(err)
	}
	return err
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
	ml.mu.Lock()
	ml.stopWorkerLocked()
	ml.mu.Unlock()
	ml.workerWG.Wait()
	ml.bgWG.Wait()
	ml.stopOffload()

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
	ml.f.cache.dropLedger(ml, -1)
	ml.f.forget(ml)
	if fenced {
		return nil
	}
	return errors.Join(errs...)
}

// stopDeliver keeps the delivery goroutine from being started again and
// waits for a running one, which first runs the callbacks of the adds that
// have their outcome. Callbacks of later adds run in the caller of AddEntry.
func (ml *ManagedLedger) stopDeliver() {
	ml.mu.Lock()
	ml.deliverGone = true
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
	ml.stopWorkerLocked()
	ml.mu.Unlock()
	ml.sendMu.Unlock()
	ml.workerWG.Wait()
	ml.bgWG.Wait()
	ml.stopOffload()
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	for _, w := range ws {
		_ = w.wh.Close(dead) // stops the handle; the ledger stays OPEN
	}
	ml.mu.Lock()
	ml.queue = nil
	ml.mu.Unlock()
	ml.stopDeliver()
	ml.f.cache.dropLedger(ml, -1)
	ml.f.forget(ml)
}
