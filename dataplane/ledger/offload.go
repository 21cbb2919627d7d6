package ledger

// Tiered storage: closed ledgers copied to an object store through an
// Offloader, and read back from it once their bookie copy is deleted. See
// "Tiered storage" in doc.go for the protocol and its crash safety.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
)

// Offloader copies closed ledgers to an object store and reads them back.
// Package offload implements it over S3. Implementations are safe for
// concurrent use.
type Offloader interface {
	// Location returns the driver metadata naming where copies for target
	// go (driver, bucket, ...): it is stored in the record before a copy
	// starts, so that a copy left half-done by a crash can be found.
	Location(target OffloadTarget) (map[string]string, error)
	// Offload copies every entry of src to the place loc names, under the
	// identity uid, and returns the driver metadata of the finished copy
	// (loc plus what a read needs). A failed Offload may leave a partial
	// copy: DeleteOffloaded removes it.
	Offload(ctx context.Context, src OffloadSource, uid string, loc map[string]string) (map[string]string, error)
	// ReadOffloaded returns entries first..last (inclusive) of the copy.
	ReadOffloaded(ctx context.Context, ledgerID int64, uid string, meta map[string]string, first, last int64) ([]Entry, error)
	// DeleteOffloaded removes a copy, finished or not (partial uploads
	// included). Deleting what does not exist succeeds.
	DeleteOffloaded(ctx context.Context, ledgerID int64, uid string, meta map[string]string) error
}

// OffloadSource is a closed ledger being copied.
type OffloadSource interface {
	// LedgerID is the bookie ledger's id.
	LedgerID() int64
	// Entries is the ledger's entry count: entries 0..Entries-1 exist.
	Entries() int64
	// Size is the payload bytes of the ledger.
	Size() int64
	// Read returns entries first..last (inclusive) from the bookies.
	Read(ctx context.Context, first, last int64) ([]Entry, error)
	// Metadata describes the ledger (stored with the copy).
	Metadata() map[string]string
}

// OffloadTarget overrides where a managed ledger's copies go; empty fields
// take the Offloader's own settings.
type OffloadTarget struct {
	Bucket, Region, Endpoint string
}

// OffloadPolicy says when a managed ledger's closed ledgers are offloaded
// and when their bookie copies are deleted. The zero value takes the
// factory's defaults (FactoryConfig.Defaults.Offload).
type OffloadPolicy struct {
	// Enabled turns automatic offload on; without it only OffloadPrefix
	// offloads.
	Enabled bool
	// Threshold is how many payload bytes may stay on the bookies: closed
	// ledgers beyond it are offloaded, oldest first (0: every closed
	// ledger). Pulsar's offload threshold.
	Threshold int64
	// ThresholdAge, when positive, also offloads closed ledgers closed at
	// least this long ago.
	ThresholdAge time.Duration
	// DeletionLag is how long after its copy completed a ledger's bookie
	// copy is deleted. Zero takes the default (4 h, as Pulsar); negative
	// deletes it at once.
	DeletionLag time.Duration
	// Target overrides where copies go.
	Target OffloadTarget
	// TieredFirst reads offloaded ledgers from their copy even while the
	// bookie copy exists (Pulsar's tiered-storage-first read priority);
	// false: from the bookies until their copy is deleted
	// (bookkeeper-first, the default).
	TieredFirst bool
}

// offloadRetryDelay is the pause of automatic offload after a failure.
const offloadRetryDelay = 30 * time.Second

// DefaultOffloadDeletionLag is Pulsar's default deletion lag.
const DefaultOffloadDeletionLag = 4 * time.Hour

func (p OffloadPolicy) deletionLag() time.Duration {
	switch {
	case p.DeletionLag == 0:
		return DefaultOffloadDeletionLag
	case p.DeletionLag < 0:
		return 0
	}
	return p.DeletionLag
}

// OffloadInfo is a ledger's copy in tiered storage, kept in the record.
// Values are never changed in place (the record's ledger list is copied
// shallowly): a change stores a new one.
type OffloadInfo struct {
	// UID names this copy; it is written before the copy starts.
	UID string `json:"uid"`
	// Driver metadata: where the copy is (Offloader.Location, then what
	// Offload returned).
	Metadata  map[string]string `json:"driverMetadata,omitempty"`
	StartedMs int64             `json:"startedMs"`
	// Complete: the copy is whole and readable.
	Complete    bool  `json:"complete,omitempty"`
	CompletedMs int64 `json:"completedMs,omitempty"`
	// BookieDeleted: the bookie copy is deleted (reads go to the copy).
	BookieDeleted bool `json:"bookieDeleted,omitempty"`
}

// Offloaded reports whether the ledger has a complete copy in tiered
// storage.
func (l LedgerInfo) Offloaded() bool { return l.Offload != nil && l.Offload.Complete }

// OffloadState is the state of a managed ledger's offload process, as
// Pulsar's OffloadProcessStatus reports it.
type OffloadState string

// Offload states.
const (
	OffloadNotRun  OffloadState = "NOT_RUN"
	OffloadRunning OffloadState = "RUNNING"
	OffloadSuccess OffloadState = "SUCCESS"
	OffloadError   OffloadState = "ERROR"
)

// OffloadStatus reports the last manual or automatic offload.
type OffloadStatus struct {
	State     OffloadState
	LastError string
	// FirstUnoffloaded is the first entry not offloaded (of the ledgers
	// the last run considered).
	FirstUnoffloaded Position
	// LastLedger is the last ledger offloaded, LastSuccess and
	// LastFailure when an offload last succeeded and failed (Unix ms, 0:
	// never).
	LastLedger               int64
	LastSuccess, LastFailure int64
}

// ErrOffloadBusy: a manual offload was asked for while one runs.
var ErrOffloadBusy = errors.New("ledger: offload already running")

// ErrNoOffloader: offload asked of a factory without an Offloader.
var ErrNoOffloader = errors.New("ledger: no offloader configured")

// offloadState is a managed ledger's offload process, allocated on first
// use (most topics never offload). Its fields are under ManagedLedger.mu.
type offloadState struct {
	running bool
	upTo    int64 // a manual request: offload closed ledgers with id below it
	status  OffloadStatus
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	gone    bool // Close or crash: no more offload goroutines
}

func (ml *ManagedLedger) offLocked() *offloadState {
	if ml.off == nil {
		ml.off = &offloadState{status: OffloadStatus{State: OffloadNotRun, FirstUnoffloaded: Earliest}}
		ml.off.ctx, ml.off.cancel = context.WithCancel(context.Background())
	}
	return ml.off
}

// OffloadStatus returns the state of the managed ledger's offload process.
func (ml *ManagedLedger) OffloadStatus() OffloadStatus {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ml.off == nil {
		return OffloadStatus{State: OffloadNotRun, FirstUnoffloaded: Earliest}
	}
	return ml.off.status
}

// OffloadedSize returns the payload bytes of the ledgers with a complete
// copy in tiered storage.
func (ml *ManagedLedger) OffloadedSize() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for _, l := range ml.ledgers {
		if l.Offloaded() {
			n += l.Size
		}
	}
	return n
}

// OffloadPrefix starts offloading (in the background) every closed ledger
// before the one holding upTo, as Pulsar's offload trigger does, and
// returns at once; OffloadStatus follows it. ErrOffloadBusy if an offload
// runs.
func (ml *ManagedLedger) OffloadPrefix(upTo Position) error {
	if ml.f.offloader == nil {
		return ErrNoOffloader
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ml.state == stateClosed || ml.state == stateFenced {
		return ml.addErrLocked()
	}
	o := ml.offLocked()
	if o.running {
		return ErrOffloadBusy
	}
	o.upTo = upTo.LedgerID
	o.status = OffloadStatus{State: OffloadRunning, LastLedger: o.status.LastLedger,
		LastSuccess: o.status.LastSuccess, LastFailure: o.status.LastFailure}
	ml.startOffloadLocked()
	return nil
}

// offloadPass is the worker's look at tiered storage, after trimming: it
// starts the offload goroutine when a ledger is due for offload (policy)
// or has a copy left unfinished, and deletes bookie copies past the
// deletion lag.
func (ml *ManagedLedger) offloadPass() {
	if ml.f.offloader == nil {
		return
	}
	ml.mu.Lock()
	if ml.state == stateFenced || ml.state == stateClosed {
		ml.mu.Unlock()
		return
	}
	due := ml.nextOffloadLocked() >= 0
	if o := ml.off; o != nil && o.status.State == OffloadError &&
		time.Since(time.UnixMilli(o.status.LastFailure)) < max(offloadRetryDelay, ml.conf().TrimCheckInterval) {
		due = false // the store failed: automatic offload waits before trying again
	}
	if due && (ml.off == nil || !ml.off.running) {
		o := ml.offLocked()
		o.status.State = OffloadRunning
		ml.startOffloadLocked()
	}
	ml.mu.Unlock()
	ml.deleteOffloadedBookieCopies()
}

// startOffloadLocked starts the offload goroutine.
func (ml *ManagedLedger) startOffloadLocked() {
	o := ml.off
	if o.running || o.gone {
		return
	}
	o.running = true
	o.wg.Add(1)
	go ml.offloadLoop(o)
}

// nextOffloadLocked returns the index of the next ledger to work on: one
// with an unfinished copy (always, to clean it up), else, by policy or the
// manual request, the oldest closed ledger without a copy. -1: none. The
// ledger being written is never offloaded.
func (ml *ManagedLedger) nextOffloadLocked() int {
	for i, l := range ml.ledgers {
		if l.Offload != nil && !l.Offload.Complete {
			return i
		}
	}
	upTo := int64(0)
	if ml.off != nil {
		upTo = ml.off.upTo
	}
	pol := ml.conf().Offload
	var onBookies int64
	for _, l := range ml.ledgers {
		if l.Offload == nil {
			onBookies += l.Size // not copied yet
		}
	}
	now := nowMillis()
	for i, l := range ml.ledgers {
		if !l.closed() || ml.writers[l.ID] != nil {
			break // being written (or closing): never offloaded
		}
		if l.Offload != nil || l.Entries == 0 {
			continue
		}
		if upTo > 0 && l.ID < upTo {
			return i
		}
		if !pol.Enabled {
			continue
		}
		if onBookies > pol.Threshold {
			return i
		}
		onBookies -= l.Size
		if pol.ThresholdAge > 0 && now-l.Timestamp >= pol.ThresholdAge.Milliseconds() {
			return i
		}
	}
	return -1
}

// offloadTimerWantedLocked reports whether the periodic check must run for
// tiered storage alone: offload is on by policy, or a ledger's copy waits
// for its deletion lag or its clean-up.
func (ml *ManagedLedger) offloadTimerWantedLocked() bool {
	if ml.f.offloader == nil {
		return false
	}
	if ml.conf().Offload.Enabled {
		return len(ml.ledgers) > 0
	}
	for _, l := range ml.ledgers {
		if l.Offload != nil && !l.Offload.BookieDeleted {
			return true
		}
	}
	return false
}

// offloadLoop offloads (or cleans up) one ledger at a time until none is
// due, then ends.
func (ml *ManagedLedger) offloadLoop(o *offloadState) {
	defer o.wg.Done()
	var failed error
	for {
		ml.mu.Lock()
		i := -1
		if failed == nil && !o.gone && ml.state != stateFenced && ml.state != stateClosed {
			i = ml.nextOffloadLocked()
		}
		if i < 0 {
			o.running = false
			if failed == nil && !o.gone && ml.closingBelowLocked(o.upTo) {
				// A ledger the request covers is still being closed:
				// the request stays, and the pass after its close (the
				// seal asks for one) starts the offload again.
				ml.mu.Unlock()
				return
			}
			o.upTo = 0
			if failed != nil {
				o.status.State, o.status.LastError = OffloadError, failed.Error()
				o.status.LastFailure = nowMillis()
			} else if o.status.State == OffloadRunning {
				o.status.State, o.status.LastError = OffloadSuccess, ""
			}
			o.status.FirstUnoffloaded = ml.firstUnoffloadedLocked()
			ml.mu.Unlock()
			return
		}
		l := ml.ledgers[i]
		ml.mu.Unlock()
		var err error
		if l.Offload != nil {
			err = ml.abandonOffload(o.ctx, l)
		} else {
			err = ml.offloadLedger(o.ctx, l)
		}
		if err != nil {
			if o.ctx.Err() == nil {
				ml.logger().Warn("offload failed", "ledger", l.ID, "err", err)
			}
			failed = err
		}
	}
}

// closingBelowLocked reports whether a ledger with id below upTo is not
// closed yet, other than the one being written.
func (ml *ManagedLedger) closingBelowLocked(upTo int64) bool {
	for _, l := range ml.ledgers {
		if l.ID >= upTo {
			break
		}
		if w := ml.writers[l.ID]; (!l.closed() || w != nil) && w != ml.cur {
			return true
		}
	}
	return false
}

// firstUnoffloadedLocked returns the first entry of the oldest ledger
// without a complete copy.
func (ml *ManagedLedger) firstUnoffloadedLocked() Position {
	for _, l := range ml.ledgers {
		if !l.Offloaded() {
			return Position{l.ID, 0}
		}
	}
	return ml.nextLocked(ml.lastConfirmed)
}

// offloadLedger copies one closed ledger: the copy's identity is recorded
// first (compare-and-set), then the copy is made, then the record marks it
// complete. A failure removes the partial copy and the identity.
func (ml *ManagedLedger) offloadLedger(ctx context.Context, l LedgerInfo) error {
	off := ml.f.offloader
	loc, err := off.Location(ml.conf().Offload.Target)
	if err != nil {
		return err
	}
	b := make([]byte, 16)
	rand.Read(b)
	info := &OffloadInfo{UID: hex.EncodeToString(b), Metadata: loc, StartedMs: nowMillis()}
	if err := ml.updateLedger(ctx, l.ID, func(cur *LedgerInfo) bool {
		if cur.Offload != nil {
			return false
		}
		cur.Offload = info
		return true
	}); err != nil {
		return fmt.Errorf("ledger: record offload start of ledger %d: %w", l.ID, err)
	}
	src := &ledgerSource{ml: ml, info: l}
	meta, err := off.Offload(ctx, src, info.UID, loc)
	if err == nil {
		done := *info
		done.Metadata = meta
		done.Complete, done.CompletedMs = true, nowMillis()
		err = ml.updateLedger(ctx, l.ID, func(cur *LedgerInfo) bool {
			if cur.Offload == nil || cur.Offload.UID != info.UID {
				return false
			}
			cur.Offload = &done
			return true
		})
		if err == nil {
			ml.mu.Lock()
			if o := ml.off; o != nil {
				o.status.LastLedger, o.status.LastSuccess = l.ID, done.CompletedMs
			}
			ml.trimWanted = true // the deletion lag may be zero
			ml.kickLocked()
			ml.mu.Unlock()
			ml.logger().Info("ledger offloaded", "ledger", l.ID, "entries", l.Entries, "bytes", l.Size)
			return nil
		}
		if errors.Is(err, ErrNotFound) {
			// Trimmed while being copied: the copy is not needed.
			dctx, cancel := context.WithTimeout(context.Background(), ml.conf().OperationTimeout)
			defer cancel()
			_ = off.DeleteOffloaded(dctx, l.ID, info.UID, meta)
			return nil
		}
		return err
	}
	// Remove the partial copy and forget it, so that a later pass starts
	// again (with a context of its own: ctx may be what ended).
	dctx, cancel := context.WithTimeout(context.Background(), ml.conf().OperationTimeout)
	defer cancel()
	if ctx.Err() == nil {
		cur := *info
		cur.Metadata = maps.Clone(loc)
		_ = ml.abandonOffload(dctx, LedgerInfo{ID: l.ID, Offload: &cur})
	}
	return fmt.Errorf("ledger: offload ledger %d of %q: %w", l.ID, ml.name, err)
}

// abandonOffload removes an unfinished copy (left by a failure or by a
// crashed owner) and its identity from the record.
func (ml *ManagedLedger) abandonOffload(ctx context.Context, l LedgerInfo) error {
	info := l.Offload
	if err := ml.f.offloader.DeleteOffloaded(ctx, l.ID, info.UID, info.Metadata); err != nil {
		return fmt.Errorf("ledger: remove partial offload of ledger %d: %w", l.ID, err)
	}
	err := ml.updateLedger(ctx, l.ID, func(cur *LedgerInfo) bool {
		if cur.Offload == nil || cur.Offload.UID != info.UID || cur.Offload.Complete {
			return false
		}
		cur.Offload = nil
		return true
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err == nil {
		ml.logger().Info("partial offload removed", "ledger", l.ID, "uid", info.UID)
	}
	return err
}

// deleteOffloadedBookieCopies deletes the bookie copies of offloaded
// ledgers whose deletion lag has passed: the bookie ledger first, then the
// record marks it deleted. A crash in between loses nothing (a read that
// finds the bookie ledger gone goes to the copy) and leaks nothing (the
// next pass deletes again, finds nothing, and records it).
func (ml *ManagedLedger) deleteOffloadedBookieCopies() {
	lag := ml.conf().Offload.deletionLag().Milliseconds()
	now := nowMillis()
	ml.mu.Lock()
	var due []int64
	for _, l := range ml.ledgers {
		if l.Offloaded() && !l.Offload.BookieDeleted && now-l.Offload.CompletedMs >= lag {
			due = append(due, l.ID)
		}
	}
	ml.mu.Unlock()
	if len(due) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ml.conf().OperationTimeout)
	defer cancel()
	for _, id := range due {
		ml.forgetReader(id)
		if err := ml.f.client.DeleteLedger(ctx, id); err != nil && !errors.Is(err, client.ErrNoSuchLedger) {
			ml.logger().Warn("offload: delete bookie copy failed", "ledger", id, "err", err)
			continue
		}
		err := ml.updateLedger(ctx, id, func(cur *LedgerInfo) bool {
			if !cur.Offloaded() || cur.Offload.BookieDeleted {
				return false
			}
			next := *cur.Offload
			next.BookieDeleted = true
			cur.Offload = &next
			return true
		})
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				ml.logger().Warn("offload: record bookie deletion failed", "ledger", id, "err", err)
			}
			continue
		}
		ml.logger().Info("bookie copy of offloaded ledger deleted", "ledger", id)
	}
}

// updateLedger changes ledger id's entry of the record by compare-and-set:
// fn edits a copy and reports whether it changed anything (false: nothing
// is written, ErrInvalidArgument is returned). ErrNotFound when the ledger
// is no longer listed.
func (ml *ManagedLedger) updateLedger(ctx context.Context, id int64, fn func(*LedgerInfo) bool) error {
	ml.infoMu.Lock()
	defer ml.infoMu.Unlock()
	ml.mu.Lock()
	if ml.state == stateFenced || ml.state == stateClosed {
		err := ml.addErrLocked()
		ml.mu.Unlock()
		return err
	}
	i := ml.ledgerIndexLocked(id)
	if i < 0 {
		ml.mu.Unlock()
		return fmt.Errorf("%w: ledger %d of %q", ErrNotFound, id, ml.name)
	}
	next := ml.ledgers[i]
	if !fn(&next) {
		ml.mu.Unlock()
		return fmt.Errorf("%w: ledger %d of %q changed meanwhile", ErrInvalidArgument, id, ml.name)
	}
	rec := ml.recordLocked()
	rec.Ledgers[i] = next
	defer ml.mu.Unlock()
	if err := ml.writeRecordLocked(ctx, rec); err != nil {
		return err
	}
	if i = ml.ledgerIndexLocked(id); i >= 0 {
		ml.ledgers[i] = next
	}
	return nil
}

// stopOffload ends the offload goroutine (cancelling a copy under way: it
// is cleaned up by the next owner or the next pass) and waits for it.
func (ml *ManagedLedger) stopOffload() {
	ml.mu.Lock()
	o := ml.off
	if o != nil {
		o.gone = true
		o.cancel()
	}
	ml.mu.Unlock()
	if o != nil {
		o.wg.Wait()
	}
}

// readOffloadedLocked reports whether entries of ledger id are read from
// its tiered copy: its bookie copy is deleted.
func (ml *ManagedLedger) offloadedCopyLocked(id int64) *OffloadInfo {
	if i := ml.ledgerIndexLocked(id); i >= 0 {
		if l := ml.ledgers[i]; l.Offloaded() {
			return l.Offload
		}
	}
	return nil
}

// readStored reads entries first..last of a ledger from where they are
// stored: the bookies, or the tiered copy once the bookie copy is deleted
// or with TieredFirst. A ledger with a complete copy whose bookie read
// fails (the bookie copy being deleted, bookies unreachable) is read from
// the copy.
func (ml *ManagedLedger) readStored(ctx context.Context, id, first, last int64, writing bool, off *OffloadInfo) ([]Entry, error) {
	if off != nil && (off.BookieDeleted || ml.conf().Offload.TieredFirst) && ml.f.offloader != nil {
		return ml.readOffloaded(ctx, id, off, first, last)
	}
	ents, err := ml.readBookies(ctx, id, first, last, writing)
	if err != nil && off != nil && ml.f.offloader != nil && ctx.Err() == nil {
		return ml.readOffloaded(ctx, id, off, first, last)
	}
	return ents, err
}

func (ml *ManagedLedger) readOffloaded(ctx context.Context, id int64, off *OffloadInfo, first, last int64) ([]Entry, error) {
	ents, err := ml.f.offloader.ReadOffloaded(ctx, id, off.UID, off.Metadata, first, last)
	if err != nil {
		return nil, fmt.Errorf("ledger: read offloaded %d:%d..%d of %q: %w", id, first, last, ml.name, err)
	}
	return ents, nil
}

// deleteStored deletes a trimmed ledger's copies: the bookie ledger and
// any tiered copy (finished or not).
func (ml *ManagedLedger) deleteStored(ctx context.Context, l LedgerInfo) {
	if l.Offload != nil && ml.f.offloader != nil {
		if err := ml.f.offloader.DeleteOffloaded(ctx, l.ID, l.Offload.UID, l.Offload.Metadata); err != nil {
			ml.logger().Warn("trimming: delete offloaded copy failed", "ledger", l.ID, "err", err)
		}
	}
	if l.Offload != nil && l.Offload.BookieDeleted {
		return
	}
	if err := ml.f.client.DeleteLedger(ctx, l.ID); err != nil && !errors.Is(err, client.ErrNoSuchLedger) {
		ml.logger().Warn("trimming: delete ledger failed", "ledger", l.ID, "err", err)
	}
}

// ledgerSource is a closed ledger read from the bookies for Offload.
type ledgerSource struct {
	ml   *ManagedLedger
	info LedgerInfo
}

func (s *ledgerSource) LedgerID() int64 { return s.info.ID }
func (s *ledgerSource) Entries() int64  { return s.info.Entries }
func (s *ledgerSource) Size() int64     { return s.info.Size }

func (s *ledgerSource) Read(ctx context.Context, first, last int64) ([]Entry, error) {
	return s.ml.readBookies(ctx, s.info.ID, first, last, false)
}

func (s *ledgerSource) Metadata() map[string]string {
	return map[string]string{
		"managedLedger": s.ml.name,
		"entries":       fmt.Sprint(s.info.Entries),
		"size":          fmt.Sprint(s.info.Size),
		"closedMs":      fmt.Sprint(s.info.Timestamp),
	}
}
