package store

import (
	"context"
	"errors"
	"time"
)

// Errors returned by every Store implementation. Callers test them with
// errors.Is; the API layer maps them to gRPC codes in one table.
var (
	ErrNotFound      = errors.New("store: not found")
	ErrAlreadyExists = errors.New("store: already exists")
	// ErrEtagMismatch: an update or delete named an etag that is not the
	// object's current one (AIP-154; the API answers ABORTED / HTTP 409).
	ErrEtagMismatch = errors.New("store: etag mismatch")
	// ErrInvalidPageToken: a page token that this store did not issue, or one
	// issued for a different query.
	ErrInvalidPageToken = errors.New("store: invalid page token")
	ErrClosed           = errors.New("store: closed")
	// ErrInvalidArgument: a request the store cannot serve as asked, such as
	// a negative page size or an object without a kind or name (the API
	// answers INVALID_ARGUMENT / HTTP 400).
	ErrInvalidArgument = errors.New("store: invalid argument")
)

// Object is one stored control-plane resource. The store does not interpret
// Data: the API layer keeps each resource there (protojson of its message).
// Fields marked "set by the store" are ignored on input.
type Object struct {
	// Kind is the resource's collection id ("organizations", "clusters",
	// "operations", "apiKeys", ...). (Kind, Name) is unique.
	Kind string
	// Name is the full resource name: "organizations/acme/clusters/prod".
	Name string
	// Parent is the parent resource's name; "" for top-level collections.
	Parent string
	// Org is the owning organization's resource name ("organizations/acme");
	// "" for global objects such as regions. Lists can be filtered by it.
	Org string
	// UID is an optional secondary unique key across all kinds (for example
	// an API key's public id, used to find the key at authentication). An
	// empty UID is given a random one by the store.
	UID string
	// Data is the opaque payload.
	Data []byte

	Etag       string    // set by the store; a new value on every write
	Seq        int64     // set by the store at create: unique, increasing; list order
	Revision   int64     // set by the store on every write: global, increasing
	CreateTime time.Time // set by the store
	UpdateTime time.Time // set by the store
}

// ListQuery selects objects of one kind. Parent and Org, when not empty,
// must match exactly. Results come in Seq order (creation order), so a
// paginated walk visits every object that exists for the whole walk exactly
// once, even while others are created or deleted.
type ListQuery struct {
	Kind   string
	Parent string
	Org    string
	// PageSize: 0 means the store's default (50); values above 1000 are
	// lowered to 1000; negative is an error (ErrInvalidArgument).
	PageSize  int
	PageToken string
}

// Change is one entry of the change log: every Create, Update and Delete
// appends one, in Revision order. Region agents follow it to learn desired
// state (long-poll with a resource version).
type Change struct {
	Revision int64
	Kind     string
	Name     string
	Deleted  bool
	// Object is the object after the change; for a delete, as it was just
	// before (with Revision set to the delete's revision).
	Object Object
}

// AuditEvent records one change or decision for an organization's audit log.
type AuditEvent struct {
	Seq       int64     // set by the store
	Time      time.Time // set by the store when zero
	Org       string    // organization the event belongs to ("" for operator-level)
	Principal string    // who acted: resource name of the user, service account or operator
	Method    string    // API method, e.g. "CreateCluster"
	Resource  string    // resource name acted on
	RequestID string
	Outcome   string // "ok", "denied", or an error code
	Detail    []byte // JSON, optional
}

// AuditQuery lists audit events of one organization in Seq order.
type AuditQuery struct {
	Org       string
	PageSize  int
	PageToken string
}

// Reader is the read half, usable inside and outside transactions.
type Reader interface {
	Get(ctx context.Context, kind, name string) (Object, error)
	// GetByUID finds an object by its UID, whatever its kind.
	GetByUID(ctx context.Context, uid string) (Object, error)
	// List returns one page and the token of the next ("" after the last).
	List(ctx context.Context, q ListQuery) ([]Object, string, error)
	// Count returns how many objects of q.Kind match q.Parent and q.Org.
	Count(ctx context.Context, q ListQuery) (int, error)
	// Changes returns up to limit changes with Revision > after, oldest
	// first, restricted to kinds when any are given.
	Changes(ctx context.Context, after int64, limit int, kinds ...string) ([]Change, error)
	// Revision is the newest revision written (0 for an empty store).
	Revision(ctx context.Context) (int64, error)
	ListAudit(ctx context.Context, q AuditQuery) ([]AuditEvent, string, error)
}

// Writer is a Reader that can also change objects.
type Writer interface {
	Reader
	// Create stores a new object. If requestID is not empty and an earlier
	// Create with the same requestID and Kind succeeded, Create returns the
	// object that Create made (as it is now; ErrNotFound if since deleted)
	// and writes nothing (AIP-155). ErrAlreadyExists if the name is taken.
	Create(ctx context.Context, obj Object, requestID string) (Object, error)
	// Update replaces Data (and Org/Parent/UID stay as created). With a
	// non-empty etag that is not current, ErrEtagMismatch.
	Update(ctx context.Context, obj Object, etag string) (Object, error)
	// Delete removes the object; etag as for Update.
	Delete(ctx context.Context, kind, name, etag string) error
	AppendAudit(ctx context.Context, ev AuditEvent) error
}

// Store is the control plane's durable state. Each Writer method called on
// the Store directly is its own transaction; Tx runs fn in one serializable
// transaction (retried on serialization conflicts, so fn must have no
// effects outside the Writer) and commits when fn returns nil.
type Store interface {
	Writer
	Tx(ctx context.Context, fn func(w Writer) error) error
	Close() error
}
