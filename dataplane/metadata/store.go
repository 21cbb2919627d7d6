package metadata

import (
	"context"
	"errors"
	"time"
)

// Version is the modification version of a key. Backends use the store-wide
// revision at which the key was last written (etcd's ModRevision), so versions
// of one key strictly increase and never repeat, even across delete/re-create.
type Version int64

const (
	// AnyVersion as the expected version makes Put and Delete unconditional.
	AnyVersion Version = -1
	// NotExists as the expected version makes Put succeed only if the key is absent.
	NotExists Version = 0
)

// Sentinel errors. Backends wrap them with %w; callers test with errors.Is.
var (
	ErrNotFound    = errors.New("metadata: key not found")
	ErrExists      = errors.New("metadata: key already exists")
	ErrBadVersion  = errors.New("metadata: version mismatch")
	ErrCompacted   = errors.New("metadata: watch revision compacted")
	ErrSessionLost = errors.New("metadata: session lost")
	ErrClosed      = errors.New("metadata: store closed")
	ErrInvalidKey  = errors.New("metadata: invalid key")
)

// KV is one stored key.
type KV struct {
	Key     string
	Value   []byte
	Version Version
	// Ephemeral is true when the key is bound to a session.
	Ephemeral bool
}

// EventType says what happened to a key.
type EventType int

const (
	EventPut EventType = iota + 1
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	}
	return "unknown"
}

// Event is one change seen by a watch. Revision is the store revision of the
// change; passing it back to Watch as fromRevision+1 resumes right after it.
// Several keys may change at one revision (a backend may commit concurrent
// writes together, as the etcd store does): resume after the last revision
// whose events were all handled.
type Event struct {
	Type     EventType
	Key      string
	Value    []byte // nil for deletes
	Revision int64
}

// Store is the metadata store every data-plane component uses. Keys are
// slash-separated paths ("/ledgers/available/b1"): they start with '/', do
// not end with '/', and have no empty segments. All methods are safe for
// concurrent use.
type Store interface {
	// Get returns the key, or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// Put writes value if the key's version equals expected (AnyVersion:
	// unconditional; NotExists: only if absent). A mismatch returns
	// ErrBadVersion (ErrExists when expected was NotExists). It returns the
	// new version.
	Put(ctx context.Context, key string, value []byte, expected Version) (Version, error)
	// Create is Put with NotExists: it fails with ErrExists if the key exists.
	Create(ctx context.Context, key string, value []byte) (Version, error)
	// CreateUnless is Create that also fails, atomically, when any key of
	// absent exists: ErrExists in both cases, naming the key found (a
	// partitioned topic's record guards the name of a non-partitioned
	// one).
	CreateUnless(ctx context.Context, key string, value []byte, absent ...string) (Version, error)
	// Delete removes the key if its version equals expected (or AnyVersion).
	// ErrNotFound if absent, ErrBadVersion on mismatch.
	Delete(ctx context.Context, key string, expected Version) error
	// Children lists the names (last path segment) of the direct children of
	// parent, sorted. A key "/a/b/c" makes "b" a child of "/a" even when "/a/b"
	// itself holds no value. An absent parent has no children (no error).
	Children(ctx context.Context, parent string) ([]string, error)
	// Watch streams changes to every key under prefix (a path; the key itself
	// and its descendants) in revision order, starting at fromRevision (0:
	// changes after the call). Resuming with the last seen Revision+1 misses
	// nothing and repeats nothing; a revision older than the backend keeps
	// fails with ErrCompacted (on the watch's Err). The watch ends when ctx is
	// done or the store closes.
	Watch(ctx context.Context, prefix string, fromRevision int64) (Watcher, error)
	// Revision returns the store's current revision (for starting a watch after
	// a snapshot read).
	Revision(ctx context.Context) (int64, error)
	// NewSession starts a session kept alive by the store client with the
	// given TTL. Ephemeral keys and leadership are bound to it.
	NewSession(ctx context.Context, ttl time.Duration) (Session, error)
	// NextID returns the next value of the named sequence: 1, 2, 3, ... unique
	// across all clients of the store, durable across restarts.
	NextID(ctx context.Context, sequence string) (int64, error)
	// Close releases the client (and, for embedded backends, the server).
	Close() error
}

// Watcher delivers events of one watch.
type Watcher interface {
	// Events is closed when the watch ends; Err then says why (nil after ctx
	// cancellation or Close).
	Events() <-chan Event
	Err() error
	Close()
}

// Session is a liveness lease. When the session is lost (the client could
// not refresh it within its TTL, or it was closed) its ephemeral keys are
// deleted by the store and Done is closed.
type Session interface {
	ID() int64
	// CreateEphemeral creates key bound to the session; ErrExists if present.
	CreateEphemeral(ctx context.Context, key string, value []byte) (Version, error)
	// PutEphemeral updates an ephemeral key this session owns (expected
	// version as in Store.Put).
	PutEphemeral(ctx context.Context, key string, value []byte, expected Version) (Version, error)
	// Elect campaigns for leadership of election with value; it blocks until
	// this session leads, ctx ends or the session is lost.
	Elect(ctx context.Context, election string, value []byte) (Leadership, error)
	// Leader returns the current leader's value for election, or ErrNotFound.
	Leader(ctx context.Context, election string) (KV, error)
	// Done is closed when the session is lost or closed.
	Done() <-chan struct{}
	// Close ends the session and deletes its ephemeral keys.
	Close() error
}

// Leadership is held until Resign or the session is lost.
type Leadership interface {
	// Key is the ephemeral key that proves leadership; fence writes with it
	// (compare its version) where a stale leader must not act.
	Key() string
	Version() Version
	// Lost is closed when leadership ends.
	Lost() <-chan struct{}
	Resign(ctx context.Context) error
}
