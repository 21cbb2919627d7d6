package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// session is a lease. Its mutable fields are guarded by Store.mu.
type session struct {
	s         *Store
	id        int64
	ttl       time.Duration
	deadline  time.Time
	suspended bool
	keys      map[string]struct{}
	ended     bool
	done      chan struct{}
}

var _ metadata.Session = (*session)(nil)

// NewSession implements metadata.Store. The keepalive is the store's lease
// loop, so an open session never expires unless its keepalive is suspended
// (SuspendKeepAlive) or it is force-expired (ExpireSession).
func (s *Store) NewSession(ctx context.Context, ttl time.Duration) (metadata.Session, error) {
	if ttl <= 0 {
		ttl = metadata.DefaultSessionTTL
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	s.lastSess++
	sess := &session{
		s:        s,
		id:       s.lastSess,
		ttl:      ttl,
		deadline: time.Now().Add(ttl),
		keys:     make(map[string]struct{}),
		done:     make(chan struct{}),
	}
	s.sessions[sess.id] = sess
	return sess, nil
}

// endLocked marks the session ended and closes Done.
func (sess *session) endLocked() {
	if !sess.ended {
		sess.ended = true
		close(sess.done)
	}
}

// endSessionLocked ends sess and deletes its ephemeral keys in one revision.
func (s *Store) endSessionLocked(sess *session) {
	if sess.ended {
		return
	}
	keys := make([]string, 0, len(sess.keys))
	for k := range sess.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > 0 {
		s.deleteLocked(keys...)
	}
	delete(s.sessions, sess.id)
	sess.endLocked()
	s.notifyLocked()
}

func (sess *session) ID() int64             { return sess.id }
func (sess *session) Done() <-chan struct{} { return sess.done }
func (sess *session) lostErr() error {
	return fmt.Errorf("%w: session %d", metadata.ErrSessionLost, sess.id)
}
func candidateKey(election string, id int64) string {
	return fmt.Sprintf("%s/%x", election, id)
}

// lock locks the store and checks that the session is alive.
func (sess *session) lock(ctx context.Context) error {
	if err := sess.s.lock(ctx); err != nil {
		return err
	}
	if sess.ended {
		sess.s.mu.Unlock()
		return sess.lostErr()
	}
	return nil
}

// Close implements metadata.Session.
func (sess *session) Close() error {
	s := sess.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endSessionLocked(sess)
	return nil
}

// CreateEphemeral implements metadata.Session.
func (sess *session) CreateEphemeral(ctx context.Context, key string, value []byte) (metadata.Version, error) {
	return sess.PutEphemeral(ctx, key, value, metadata.NotExists)
}

// PutEphemeral implements metadata.Session. A key held by another session or
// a persistent key fails with ErrBadVersion (ErrExists for NotExists).
func (sess *session) PutEphemeral(ctx context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	if err := metadata.ValidateKey(key); err != nil {
		return 0, err
	}
	if err := sess.lock(ctx); err != nil {
		return 0, err
	}
	s := sess.s
	defer s.mu.Unlock()
	if err := s.checkLocked(key, expected); err != nil {
		return 0, err
	}
	if e := s.kvs[key]; e != nil && e.lease != sess.id {
		return 0, fmt.Errorf("%w: %s is not owned by session %d", metadata.ErrBadVersion, key, sess.id)
	}
	return s.putLocked(key, value, sess.id), nil
}

// leaderLocked returns the candidate key of election created first.
func (s *Store) leaderLocked(election string) (string, *entry) {
	var (
		best string
		be   *entry
	)
	for _, k := range s.subtreeLocked(election) {
		if e := s.kvs[k]; be == nil || e.createRev < be.createRev {
			best, be = k, e
		}
	}
	return best, be
}

// Leader implements metadata.Session.
func (sess *session) Leader(ctx context.Context, election string) (metadata.KV, error) {
	if err := metadata.ValidateKey(election); err != nil {
		return metadata.KV{}, err
	}
	s := sess.s
	if err := s.lock(ctx); err != nil {
		return metadata.KV{}, err
	}
	defer s.mu.Unlock()
	k, e := s.leaderLocked(election)
	if e == nil {
		return metadata.KV{}, fmt.Errorf("%w: no leader of %s", metadata.ErrNotFound, election)
	}
	return s.kvLocked(k, e), nil
}

// Elect implements metadata.Session. The candidate key is
// election/<session id in hex>; candidates lead in creation order.
func (sess *session) Elect(ctx context.Context, election string, value []byte) (metadata.Leadership, error) {
	if err := metadata.ValidateKey(election); err != nil {
		return nil, err
	}
	if err := sess.lock(ctx); err != nil {
		return nil, err
	}
	s := sess.s
	key := candidateKey(election, sess.id)
	e := s.kvs[key]
	switch {
	case e == nil:
		s.putLocked(key, value, sess.id)
	case e.lease != sess.id:
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: candidate key %s is not owned by session %d", metadata.ErrExists, key, sess.id)
	case !slices.Equal(e.value, value):
		s.putLocked(key, value, sess.id)
	}
	createRev := s.kvs[key].createRev
	for {
		e := s.kvs[key]
		if e == nil || e.createRev != createRev {
			s.mu.Unlock()
			if sess.ended {
				return nil, sess.lostErr()
			}
			return nil, fmt.Errorf("%w: candidate key %s was deleted", metadata.ErrNotFound, key)
		}
		if lk, _ := s.leaderLocked(election); lk == key {
			l := &leadership{s: s, key: key, createRev: createRev, version: metadata.Version(e.modRev), lost: make(chan struct{})}
			s.leaders[key] = append(s.leaders[key], l)
			s.mu.Unlock()
			return l, nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			s.mu.Lock()
			if e := s.kvs[key]; e != nil && e.createRev == createRev && !s.closed {
				s.deleteLocked(key)
			}
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		if err := sess.lock(context.WithoutCancel(ctx)); err != nil {
			return nil, err
		}
	}
}

// leadership is held while its candidate key exists.
type leadership struct {
	s         *Store
	key       string
	createRev int64
	version   metadata.Version
	lost      chan struct{}
	once      sync.Once
}

var _ metadata.Leadership = (*leadership)(nil)

func (l *leadership) Key() string               { return l.key }
func (l *leadership) Version() metadata.Version { return l.version }
func (l *leadership) Lost() <-chan struct{}     { return l.lost }
func (l *leadership) markLost()                 { l.once.Do(func() { close(l.lost) }) }

// Resign implements metadata.Leadership: it deletes the candidate key if it
// is still the one this leadership created.
func (l *leadership) Resign(ctx context.Context) error {
	s := l.s
	if err := s.lock(ctx); err != nil {
		if err == metadata.ErrClosed {
			return nil
		}
		return err
	}
	defer s.mu.Unlock()
	if e := s.kvs[l.key]; e != nil && e.createRev == l.createRev {
		s.deleteLocked(l.key)
	}
	l.markLost()
	return nil
}
