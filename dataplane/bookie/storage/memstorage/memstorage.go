package memstorage

import (
	"fmt"
	"sync"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
)

var _ storage.Storage = (*Storage)(nil)

// Storage keeps ledgers in maps. The zero value is not usable; call New.
type Storage struct {
	mu       sync.RWMutex
	ledgers  map[int64]*ledger
	deleted  map[int64]bool // ids of deleted ledgers: they stay dead
	readOnly error
	closed   bool
}

type ledger struct {
	entries map[int64][]byte
	fenced  bool
	last    int64 // highest entry id, storage.NoEntry if none
	lac     int64 // highest LAC carried, storage.NoEntry if none
}

// New returns an empty, writable storage.
func New() *Storage {
	return &Storage{ledgers: make(map[int64]*ledger)}
}

// SetReadOnly makes the storage read-only with reason err (nil: writable
// again), as a disk storage does when its disk fills.
func (s *Storage) SetReadOnly(err error) {
	s.mu.Lock()
	s.readOnly = err
	s.mu.Unlock()
}

func (s *Storage) ledgerLocked(id int64, create bool) *ledger {
	l := s.ledgers[id]
	if l == nil && create {
		l = &ledger{entries: make(map[int64][]byte), last: storage.NoEntry, lac: storage.NoEntry}
		s.ledgers[id] = l
	}
	return l
}

// AddEntry stores a copy of data.
func (s *Storage) AddEntry(ledgerID, entryID, lac int64, data []byte, recovery bool, done func(error)) {
	done(s.addEntry(ledgerID, entryID, lac, data, recovery))
}

func (s *Storage) addEntry(ledgerID, entryID, lac int64, data []byte, recovery bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return storage.ErrClosed
	case s.readOnly != nil:
		return fmt.Errorf("%w: %w", storage.ErrReadOnly, s.readOnly)
	}
	if s.deleted[ledgerID] {
		return storage.ErrFenced
	}
	l := s.ledgerLocked(ledgerID, true)
	if l.fenced && !recovery {
		return storage.ErrFenced
	}
	l.entries[entryID] = append([]byte(nil), data...)
	l.last = max(l.last, entryID)
	l.lac = max(l.lac, lac)
	return nil
}

// ReadEntry returns the stored copy; callers must not modify it.
func (s *Storage) ReadEntry(ledgerID, entryID int64) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, storage.ErrClosed
	}
	l := s.ledgerLocked(ledgerID, false)
	if l == nil {
		return nil, storage.ErrNoSuchLedger
	}
	d, ok := l.entries[entryID]
	if !ok {
		return nil, storage.ErrNoSuchEntry
	}
	return d, nil
}

// LastEntry returns the highest entry id and LAC of the ledger.
func (s *Storage) LastEntry(ledgerID int64) (last, lac int64, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, 0, storage.ErrClosed
	}
	l := s.ledgerLocked(ledgerID, false)
	if l == nil {
		return 0, 0, storage.ErrNoSuchLedger
	}
	return l.last, l.lac, nil
}

// Fence marks the ledger fenced, creating it if unknown. A read-only
// storage still accepts fences: fencing only ever restricts writes.
func (s *Storage) Fence(ledgerID int64, done func(error)) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		done(storage.ErrClosed)
		return
	}
	if !s.deleted[ledgerID] {
		s.ledgerLocked(ledgerID, true).fenced = true
	}
	s.mu.Unlock()
	done(nil)
}

// IsFenced reports whether the ledger is fenced; unknown ledgers are not.
func (s *Storage) IsFenced(ledgerID int64) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false, storage.ErrClosed
	}
	l := s.ledgerLocked(ledgerID, false)
	return l != nil && l.fenced, nil
}

// DeleteLedger forgets the ledger.
func (s *Storage) DeleteLedger(ledgerID int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return storage.ErrClosed
	}
	delete(s.ledgers, ledgerID)
	if s.deleted == nil {
		s.deleted = map[int64]bool{}
	}
	s.deleted[ledgerID] = true
	return nil
}

// ReadOnly returns the reason set by SetReadOnly.
func (s *Storage) ReadOnly() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.readOnly
}

// Close makes every later call fail with storage.ErrClosed.
func (s *Storage) Close() error {
	s.mu.Lock()
	s.closed = true
	s.ledgers = nil
	s.mu.Unlock()
	return nil
}
