package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Default option values.
const (
	DefaultHistorySize  = 10000
	DefaultTickInterval = 100 * time.Millisecond
)

// Sentinel errors of this package (the metadata sentinels cover the rest).
var (
	ErrUnknownSession = errors.New("memstore: unknown session")
	ErrFutureRevision = errors.New("memstore: revision is in the future")
	ErrBadOptions     = errors.New("memstore: invalid options")
)

// Options configures a Store. The zero value is valid and means defaults.
type Options struct {
	// HistorySize is how many revisions of change events are kept for
	// Watch resumption; a watch starting (or falling) behind them fails with
	// metadata.ErrCompacted. Default DefaultHistorySize.
	HistorySize int
	// TickInterval is the period of the lease loop that refreshes open
	// sessions and expires the ones whose keepalive was suspended.
	// Default DefaultTickInterval.
	TickInterval time.Duration
}

// Validate reports whether the options are usable.
func (o Options) Validate() error {
	if o.HistorySize < 0 {
		return fmt.Errorf("%w: HistorySize %d < 0", ErrBadOptions, o.HistorySize)
	}
	if o.TickInterval < 0 {
		return fmt.Errorf("%w: TickInterval %v < 0", ErrBadOptions, o.TickInterval)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.HistorySize == 0 {
		o.HistorySize = DefaultHistorySize
	}
	if o.TickInterval == 0 {
		o.TickInterval = DefaultTickInterval
	}
	return o
}

type entry struct {
	value     []byte
	createRev int64
	modRev    int64
	lease     int64 // owning session id, 0 for persistent keys
}

// revision is the set of events one write produced.
type revision struct {
	rev    int64
	events []metadata.Event
}

// Store is an in-memory metadata.Store. Create it with New or
// NewWithOptions and release it with Close.
type Store struct {
	opts Options

	mu        sync.Mutex
	closed    bool
	rev       int64
	kvs       map[string]*entry
	keys      []string   // sorted keys of kvs
	history   []revision // ascending; the last opts.HistorySize revisions
	compacted int64      // highest revision no longer in history
	changed   chan struct{}
	seqs      map[string]int64
	sessions  map[int64]*session
	lastSess  int64
	leaders   map[string][]*leadership // leader key -> holders to notify on delete

	stop chan struct{}
	wg   sync.WaitGroup // lease loop and watchers
}

var _ metadata.Store = (*Store)(nil)

// New returns an empty store with default options.
func New() *Store {
	s, err := NewWithOptions(Options{})
	if err != nil {
		panic(err) // unreachable: zero Options are valid
	}
	return s
}

// NewWithOptions returns an empty store configured by opts.
func NewWithOptions(opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		opts:     opts.withDefaults(),
		kvs:      make(map[string]*entry),
		changed:  make(chan struct{}),
		seqs:     make(map[string]int64),
		sessions: make(map[int64]*session),
		leaders:  make(map[string][]*leadership),
		stop:     make(chan struct{}),
	}
	s.wg.Add(1)
	go s.leaseLoop()
	return s, nil
}

// Close ends all watches and sessions (without deleting ephemeral keys,
// which die with the store) and makes every later call fail with
// metadata.ErrClosed. It waits for the store's goroutines and is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	for _, sess := range s.sessions {
		sess.endLocked()
	}
	clear(s.sessions)
	for k, ls := range s.leaders {
		for _, l := range ls {
			l.markLost()
		}
		delete(s.leaders, k)
	}
	s.notifyLocked()
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// leaseLoop refreshes the deadline of every session whose keepalive runs and
// expires the sessions whose deadline passed.
func (s *Store) leaseLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			for _, sess := range s.sessions {
				switch {
				case !sess.suspended:
					sess.deadline = now.Add(sess.ttl)
				case now.After(sess.deadline):
					s.endSessionLocked(sess)
				}
			}
			s.mu.Unlock()
		}
	}
}

// ExpireSession ends session id as if its lease had expired: its ephemeral
// keys are deleted, its leaderships and Done channel close. It is a test hook.
func (s *Store) ExpireSession(id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[id]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownSession, id)
	}
	s.endSessionLocked(sess)
	return nil
}

// SuspendKeepAlive stops refreshing session id, as if its client had
// stalled; the session then expires once its TTL passes. It is a test hook.
func (s *Store) SuspendKeepAlive(id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[id]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownSession, id)
	}
	if !sess.suspended {
		sess.suspended = true
		sess.deadline = time.Now().Add(sess.ttl)
	}
	return nil
}

// Compact drops the change history below rev: a later Watch from a revision
// below rev fails with metadata.ErrCompacted, as do running watches still
// behind it.
func (s *Store) Compact(rev int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return metadata.ErrClosed
	}
	if rev > s.rev+1 {
		return fmt.Errorf("%w: %d > %d", ErrFutureRevision, rev, s.rev+1)
	}
	if rev-1 <= s.compacted {
		return nil
	}
	i, _ := slices.BinarySearchFunc(s.history, rev, func(r revision, rev int64) int { return cmpInt(r.rev, rev) })
	s.history = slices.Clone(s.history[i:])
	s.compacted = rev - 1
	s.notifyLocked()
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// notifyLocked wakes every goroutine waiting for a change.
func (s *Store) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// commitLocked records events as one new revision and wakes waiters.
func (s *Store) commitLocked(events []metadata.Event) {
	s.history = append(s.history, revision{rev: s.rev, events: events})
	if over := len(s.history) - s.opts.HistorySize; over > 0 {
		s.compacted = s.history[over-1].rev
		s.history = s.history[over:]
	}
	s.notifyLocked()
}

func (s *Store) putLocked(key string, value []byte, lease int64) metadata.Version {
	s.rev++
	v := slices.Clone(value)
	e, ok := s.kvs[key]
	if !ok {
		e = &entry{createRev: s.rev}
		s.kvs[key] = e
		i, _ := slices.BinarySearch(s.keys, key)
		s.keys = slices.Insert(s.keys, i, key)
	}
	if e.lease != lease {
		if old := s.sessions[e.lease]; old != nil {
			delete(old.keys, key)
		}
		if sess := s.sessions[lease]; sess != nil {
			sess.keys[key] = struct{}{}
		}
	}
	e.value, e.modRev, e.lease = v, s.rev, lease
	s.commitLocked([]metadata.Event{{Type: metadata.EventPut, Key: key, Value: v, Revision: s.rev}})
	return metadata.Version(s.rev)
}

// removeLocked deletes key from the maps without recording an event.
func (s *Store) removeLocked(key string) {
	e := s.kvs[key]
	if e == nil {
		return
	}
	delete(s.kvs, key)
	if i, ok := slices.BinarySearch(s.keys, key); ok {
		s.keys = slices.Delete(s.keys, i, i+1)
	}
	if sess := s.sessions[e.lease]; sess != nil {
		delete(sess.keys, key)
	}
	for _, l := range s.leaders[key] {
		l.markLost()
	}
	delete(s.leaders, key)
}

func (s *Store) deleteLocked(keys ...string) {
	s.rev++
	events := make([]metadata.Event, 0, len(keys))
	for _, k := range keys {
		s.removeLocked(k)
		events = append(events, metadata.Event{Type: metadata.EventDelete, Key: k, Revision: s.rev})
	}
	s.commitLocked(events)
}

// checkLocked compares the key's current version with expected.
func (s *Store) checkLocked(key string, expected metadata.Version) error {
	e := s.kvs[key]
	switch {
	case expected == metadata.AnyVersion:
		return nil
	case expected == metadata.NotExists:
		if e != nil {
			return fmt.Errorf("%w: %s", metadata.ErrExists, key)
		}
		return nil
	case e == nil:
		return fmt.Errorf("%w: %s absent, expected version %d", metadata.ErrBadVersion, key, expected)
	case metadata.Version(e.modRev) != expected:
		return fmt.Errorf("%w: %s at %d, expected %d", metadata.ErrBadVersion, key, e.modRev, expected)
	}
	return nil
}

func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return metadata.ErrClosed
	}
	return nil
}

// Get implements metadata.Store.
func (s *Store) Get(ctx context.Context, key string) (metadata.KV, error) {
	if err := metadata.ValidateKey(key); err != nil {
		return metadata.KV{}, err
	}
	if err := s.lock(ctx); err != nil {
		return metadata.KV{}, err
	}
	defer s.mu.Unlock()
	e := s.kvs[key]
	if e == nil {
		return metadata.KV{}, fmt.Errorf("%w: %s", metadata.ErrNotFound, key)
	}
	return s.kvLocked(key, e), nil
}

func (s *Store) kvLocked(key string, e *entry) metadata.KV {
	return metadata.KV{Key: key, Value: slices.Clone(e.value), Version: metadata.Version(e.modRev), Ephemeral: e.lease != 0}
}

// Put implements metadata.Store. Putting an ephemeral key through the store
// (not its session) makes it persistent, as in etcd.
func (s *Store) Put(ctx context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	if err := metadata.ValidateKey(key); err != nil {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := s.checkLocked(key, expected); err != nil {
		return 0, err
	}
	return s.putLocked(key, value, 0), nil
}

// Create implements metadata.Store.
func (s *Store) Create(ctx context.Context, key string, value []byte) (metadata.Version, error) {
	return s.Put(ctx, key, value, metadata.NotExists)
}

// CreateUnless implements metadata.Store.
func (s *Store) CreateUnless(ctx context.Context, key string, value []byte, absent ...string) (metadata.Version, error) {
	for _, k := range append([]string{key}, absent...) {
		if err := metadata.ValidateKey(k); err != nil {
			return 0, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	for _, k := range append([]string{key}, absent...) {
		if s.kvs[k] != nil {
			return 0, fmt.Errorf("%w: %s", metadata.ErrExists, k)
		}
	}
	return s.putLocked(key, value, 0), nil
}

// Delete implements metadata.Store.
func (s *Store) Delete(ctx context.Context, key string, expected metadata.Version) error {
	if err := metadata.ValidateKey(key); err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.kvs[key] == nil {
		return fmt.Errorf("%w: %s", metadata.ErrNotFound, key)
	}
	if err := s.checkLocked(key, expected); err != nil {
		if errors.Is(err, metadata.ErrExists) {
			err = fmt.Errorf("%w: %s exists", metadata.ErrBadVersion, key)
		}
		return err
	}
	s.deleteLocked(key)
	return nil
}

// subtreeLocked returns the sorted keys strictly below parent.
func (s *Store) subtreeLocked(parent string) []string {
	pfx := parent + "/"
	if parent == "/" {
		pfx = "/"
	}
	i, _ := slices.BinarySearch(s.keys, pfx)
	j := i
	for j < len(s.keys) && strings.HasPrefix(s.keys[j], pfx) {
		j++
	}
	return s.keys[i:j]
}

// Children implements metadata.Store.
func (s *Store) Children(ctx context.Context, parent string) ([]string, error) {
	if err := metadata.ValidatePath(parent); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var names []string
	for _, k := range s.subtreeLocked(parent) {
		names = append(names, metadata.ChildName(k, parent))
	}
	// Equal names need not be adjacent: "c.d" sorts between "c" and "c/x".
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Revision implements metadata.Store.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.rev, nil
}

// NextID implements metadata.Store.
func (s *Store) NextID(ctx context.Context, sequence string) (int64, error) {
	if err := metadata.ValidateName(sequence); err != nil {
		return 0, err
	}
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	s.seqs[sequence]++
	return s.seqs[sequence], nil
}
