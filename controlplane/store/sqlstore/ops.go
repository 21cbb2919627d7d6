package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const objectCols = "kind, name, parent, org, uid, data, etag, seq, revision, create_time, update_time"

// queries are the fixed statements, rebound once for the dialect.
type queries struct {
	d             *dialect
	get           string
	getByUID      string
	exists        string
	uidTaken      string
	nextCounter   string
	revision      string
	insertObject  string
	updateObject  string
	deleteObject  string
	insertChange  string
	getRequestID  string
	insertRequest string
	insertAudit   string
	listAudit     string
}

func newQueries(d *dialect) *queries {
	return &queries{
		d:             d,
		get:           d.rebind("SELECT " + objectCols + " FROM objects WHERE kind = ? AND name = ?"),
		getByUID:      d.rebind("SELECT " + objectCols + " FROM objects WHERE uid = ?"),
		exists:        d.rebind("SELECT 1 FROM objects WHERE kind = ? AND name = ?"),
		uidTaken:      d.rebind("SELECT 1 FROM objects WHERE uid = ?"),
		nextCounter:   d.rebind("UPDATE counters SET value = value + 1 WHERE name = ? RETURNING value"),
		revision:      d.rebind("SELECT value FROM counters WHERE name = 'revision'"),
		insertObject:  d.rebind("INSERT INTO objects (" + objectCols + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		updateObject:  d.rebind("UPDATE objects SET data = ?, etag = ?, revision = ?, update_time = ? WHERE kind = ? AND name = ?"),
		deleteObject:  d.rebind("DELETE FROM objects WHERE kind = ? AND name = ?"),
		insertChange:  d.rebind("INSERT INTO changes (revision, kind, name, deleted, parent, org, uid, data, etag, seq, create_time, update_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		getRequestID:  d.rebind("SELECT name, uid FROM request_ids WHERE kind = ? AND request_id = ?"),
		insertRequest: d.rebind("INSERT INTO request_ids (kind, request_id, name, uid, create_time) VALUES (?, ?, ?, ?, ?)"),
		insertAudit:   d.rebind("INSERT INTO audit (seq, time, org, principal, method, resource, request_id, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		listAudit:     d.rebind("SELECT seq, time, org, principal, method, resource, request_id, outcome, detail FROM audit WHERE org = ? AND seq > ? ORDER BY seq LIMIT ?"),
	}
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func etagFor(revision int64) string { return `"` + strconv.FormatInt(revision, 10) + `"` }

// newUID returns a random RFC 4122 version 4 UUID.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

type scanner interface{ Scan(dest ...any) error }

func scanObject(r scanner) (store.Object, error) {
	var o store.Object
	var ct, ut int64
	if err := r.Scan(&o.Kind, &o.Name, &o.Parent, &o.Org, &o.UID, &o.Data, &o.Etag, &o.Seq, &o.Revision, &ct, &ut); err != nil {
		return store.Object{}, err
	}
	o.CreateTime, o.UpdateTime = fromMicros(ct), fromMicros(ut)
	return o, nil
}

// reader implements store.Reader over a *sql.DB or a *sql.Tx.
type reader struct {
	s *Store
	q querier
	// done, inside a transaction, is set when the transaction has ended.
	done *bool
}

func (r *reader) ended() bool { return r.done != nil && *r.done }

func (r *reader) Get(ctx context.Context, kind, name string) (store.Object, error) {
	if r.ended() {
		return store.Object{}, errTxDone
	}
	o, err := scanObject(r.q.QueryRowContext(ctx, r.s.q.get, kind, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Object{}, fmt.Errorf("%w: %s %q", store.ErrNotFound, kind, name)
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("sqlstore: get: %w", err)
	}
	return o, nil
}

func (r *reader) GetByUID(ctx context.Context, uid string) (store.Object, error) {
	if r.ended() {
		return store.Object{}, errTxDone
	}
	o, err := scanObject(r.q.QueryRowContext(ctx, r.s.q.getByUID, uid))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Object{}, fmt.Errorf("%w: uid %q", store.ErrNotFound, uid)
	}
	if err != nil {
		return store.Object{}, fmt.Errorf("sqlstore: get by uid: %w", err)
	}
	return o, nil
}

// where builds the filter of a ListQuery.
func listWhere(q store.ListQuery) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, 5)
	b.WriteString(" WHERE kind = ?")
	args = append(args, q.Kind)
	if q.Parent != "" {
		b.WriteString(" AND parent = ?")
		args = append(args, q.Parent)
	}
	if q.Org != "" {
		b.WriteString(" AND org = ?")
		args = append(args, q.Org)
	}
	return b.String(), args
}

func (r *reader) List(ctx context.Context, q store.ListQuery) ([]store.Object, string, error) {
	if r.ended() {
		return nil, "", errTxDone
	}
	if q.Kind == "" {
		return nil, "", fmt.Errorf("%w: list without a kind", store.ErrInvalidArgument)
	}
	n, err := pageSize(q.PageSize)
	if err != nil {
		return nil, "", err
	}
	hash := queryHash("objects", q.Kind, q.Parent, q.Org)
	after, err := decodeToken(q.PageToken, hash)
	if err != nil {
		return nil, "", err
	}
	where, args := listWhere(q)
	query := r.s.d.rebind("SELECT " + objectCols + " FROM objects" + where + " AND seq > ? ORDER BY seq LIMIT ?")
	args = append(args, after, n+1)
	rows, err := r.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: list: %w", err)
	}
	defer rows.Close()
	objs := make([]store.Object, 0, min(n+1, 64))
	for rows.Next() {
		o, err := scanObject(rows)
		if err != nil {
			return nil, "", fmt.Errorf("sqlstore: list: %w", err)
		}
		objs = append(objs, o)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlstore: list: %w", err)
	}
	if len(objs) <= n {
		return objs, "", nil
	}
	objs = objs[:n]
	return objs, encodeToken(objs[n-1].Seq, hash), nil
}

func (r *reader) Count(ctx context.Context, q store.ListQuery) (int, error) {
	if r.ended() {
		return 0, errTxDone
	}
	if q.Kind == "" {
		return 0, fmt.Errorf("%w: count without a kind", store.ErrInvalidArgument)
	}
	where, args := listWhere(q)
	var n int
	if err := r.q.QueryRowContext(ctx, r.s.d.rebind("SELECT COUNT(*) FROM objects"+where), args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlstore: count: %w", err)
	}
	return n, nil
}

// Changes returns up to limit changes after the given revision. A limit of
// 0 or less means 1000; limits above 10000 are lowered to 10000.
func (r *reader) Changes(ctx context.Context, after int64, limit int, kinds ...string) ([]store.Change, error) {
	if r.ended() {
		return nil, errTxDone
	}
	if limit <= 0 {
		limit = defaultChangesLimit
	}
	limit = min(limit, maxChangesLimit)
	var b strings.Builder
	b.WriteString("SELECT revision, kind, name, deleted, parent, org, uid, data, etag, seq, create_time, update_time FROM changes WHERE revision > ?")
	args := make([]any, 0, len(kinds)+2)
	args = append(args, after)
	if len(kinds) > 0 {
		b.WriteString(" AND kind IN (")
		for i, k := range kinds {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("?")
			args = append(args, k)
		}
		b.WriteString(")")
	}
	b.WriteString(" ORDER BY revision LIMIT ?")
	args = append(args, limit)
	rows, err := r.q.QueryContext(ctx, r.s.d.rebind(b.String()), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: changes: %w", err)
	}
	defer rows.Close()
	var out []store.Change
	for rows.Next() {
		var c store.Change
		var deleted int64
		var ct, ut int64
		o := &c.Object
		if err := rows.Scan(&c.Revision, &o.Kind, &o.Name, &deleted, &o.Parent, &o.Org, &o.UID, &o.Data, &o.Etag, &o.Seq, &ct, &ut); err != nil {
			return nil, fmt.Errorf("sqlstore: changes: %w", err)
		}
		c.Kind, c.Name, c.Deleted = o.Kind, o.Name, deleted != 0
		o.Revision = c.Revision
		o.CreateTime, o.UpdateTime = fromMicros(ct), fromMicros(ut)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: changes: %w", err)
	}
	return out, nil
}

func (r *reader) Revision(ctx context.Context) (int64, error) {
	if r.ended() {
		return 0, errTxDone
	}
	var rev int64
	if err := r.q.QueryRowContext(ctx, r.s.q.revision).Scan(&rev); err != nil {
		return 0, fmt.Errorf("sqlstore: revision: %w", err)
	}
	return rev, nil
}

func (r *reader) ListAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditEvent, string, error) {
	if r.ended() {
		return nil, "", errTxDone
	}
	n, err := pageSize(q.PageSize)
	if err != nil {
		return nil, "", err
	}
	hash := queryHash("audit", q.Org)
	after, err := decodeToken(q.PageToken, hash)
	if err != nil {
		return nil, "", err
	}
	rows, err := r.q.QueryContext(ctx, r.s.q.listAudit, q.Org, after, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: list audit: %w", err)
	}
	defer rows.Close()
	evs := make([]store.AuditEvent, 0, min(n+1, 64))
	for rows.Next() {
		var ev store.AuditEvent
		var t int64
		if err := rows.Scan(&ev.Seq, &t, &ev.Org, &ev.Principal, &ev.Method, &ev.Resource, &ev.RequestID, &ev.Outcome, &ev.Detail); err != nil {
			return nil, "", fmt.Errorf("sqlstore: list audit: %w", err)
		}
		ev.Time = fromMicros(t)
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlstore: list audit: %w", err)
	}
	if len(evs) <= n {
		return evs, "", nil
	}
	evs = evs[:n]
	return evs, encodeToken(evs[n-1].Seq, hash), nil
}

// errTxDone is returned by a Writer used after its transaction ended.
var errTxDone = errors.New("sqlstore: writer used after its transaction ended")

// writer implements store.Writer inside one transaction.
type writer struct {
	reader
	done bool
}

func newWriter(s *Store, tx *sql.Tx) *writer {
	w := &writer{reader: reader{s: s, q: tx}}
	w.reader.done = &w.done
	return w
}

var _ store.Writer = (*writer)(nil)

func (w *writer) next(ctx context.Context, counter string) (int64, error) {
	var v int64
	if err := w.q.QueryRowContext(ctx, w.s.q.nextCounter, counter).Scan(&v); err != nil {
		return 0, fmt.Errorf("sqlstore: next %s: %w", counter, err)
	}
	return v, nil
}

func (w *writer) exists(ctx context.Context, query string, args ...any) (bool, error) {
	var one int
	err := w.q.QueryRowContext(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sqlstore: %w", err)
	}
	return true, nil
}

func (w *writer) appendChange(ctx context.Context, o store.Object, deleted bool) error {
	del := 0
	if deleted {
		del = 1
	}
	if o.Data == nil {
		o.Data = []byte{}
	}
	if _, err := w.q.ExecContext(ctx, w.s.q.insertChange, o.Revision, o.Kind, o.Name, del, o.Parent, o.Org, o.UID,
		o.Data, o.Etag, o.Seq, micros(o.CreateTime), micros(o.UpdateTime)); err != nil {
		return fmt.Errorf("sqlstore: append change: %w", err)
	}
	return nil
}

func (w *writer) Create(ctx context.Context, obj store.Object, requestID string) (store.Object, error) {
	if w.done {
		return store.Object{}, errTxDone
	}
	if obj.Kind == "" || obj.Name == "" {
		return store.Object{}, fmt.Errorf("%w: an object needs a kind and a name", store.ErrInvalidArgument)
	}
	if requestID != "" {
		var name, uid string
		err := w.q.QueryRowContext(ctx, w.s.q.getRequestID, obj.Kind, requestID).Scan(&name, &uid)
		switch {
		case err == nil:
			o, err := w.reader.Get(ctx, obj.Kind, name)
			if errors.Is(err, store.ErrNotFound) || (err == nil && o.UID != uid) {
				return store.Object{}, fmt.Errorf("%w: request %q created %s %q, since deleted", store.ErrNotFound, requestID, obj.Kind, name)
			}
			return o, err
		case !errors.Is(err, sql.ErrNoRows):
			return store.Object{}, fmt.Errorf("sqlstore: create: request id: %w", err)
		}
	}
	if taken, err := w.exists(ctx, w.s.q.exists, obj.Kind, obj.Name); err != nil {
		return store.Object{}, err
	} else if taken {
		return store.Object{}, fmt.Errorf("%w: %s %q", store.ErrAlreadyExists, obj.Kind, obj.Name)
	}
	if obj.UID == "" {
		obj.UID = newUID()
	} else if taken, err := w.exists(ctx, w.s.q.uidTaken, obj.UID); err != nil {
		return store.Object{}, err
	} else if taken {
		return store.Object{}, fmt.Errorf("%w: uid %q", store.ErrAlreadyExists, obj.UID)
	}
	rev, err := w.next(ctx, "revision")
	if err != nil {
		return store.Object{}, err
	}
	seq, err := w.next(ctx, "seq")
	if err != nil {
		return store.Object{}, err
	}
	t := now()
	obj.Etag, obj.Seq, obj.Revision, obj.CreateTime, obj.UpdateTime = etagFor(rev), seq, rev, t, t
	if obj.Data == nil {
		obj.Data = []byte{}
	}
	if _, err := w.q.ExecContext(ctx, w.s.q.insertObject, obj.Kind, obj.Name, obj.Parent, obj.Org, obj.UID, obj.Data,
		obj.Etag, obj.Seq, obj.Revision, micros(t), micros(t)); err != nil {
		if uniqueViolation(err) {
			return store.Object{}, fmt.Errorf("%w: %s %q: %w", store.ErrAlreadyExists, obj.Kind, obj.Name, err)
		}
		return store.Object{}, fmt.Errorf("sqlstore: create: %w", err)
	}
	if err := w.appendChange(ctx, obj, false); err != nil {
		return store.Object{}, err
	}
	if requestID != "" {
		if _, err := w.q.ExecContext(ctx, w.s.q.insertRequest, obj.Kind, requestID, obj.Name, obj.UID, micros(t)); err != nil {
			return store.Object{}, fmt.Errorf("sqlstore: create: record request id: %w", err)
		}
	}
	return obj, nil
}

// current reads the object an Update or Delete acts on and checks the etag.
func (w *writer) current(ctx context.Context, kind, name, etag string) (store.Object, error) {
	cur, err := w.reader.Get(ctx, kind, name)
	if err != nil {
		return store.Object{}, err
	}
	if etag != "" && etag != cur.Etag {
		return store.Object{}, fmt.Errorf("%w: %s %q has etag %s, not %s", store.ErrEtagMismatch, kind, name, cur.Etag, etag)
	}
	return cur, nil
}

func (w *writer) Update(ctx context.Context, obj store.Object, etag string) (store.Object, error) {
	if w.done {
		return store.Object{}, errTxDone
	}
	cur, err := w.current(ctx, obj.Kind, obj.Name, etag)
	if err != nil {
		return store.Object{}, err
	}
	rev, err := w.next(ctx, "revision")
	if err != nil {
		return store.Object{}, err
	}
	cur.Data = obj.Data
	if cur.Data == nil {
		cur.Data = []byte{}
	}
	cur.Etag, cur.Revision, cur.UpdateTime = etagFor(rev), rev, now()
	if _, err := w.q.ExecContext(ctx, w.s.q.updateObject, cur.Data, cur.Etag, cur.Revision, micros(cur.UpdateTime), cur.Kind, cur.Name); err != nil {
		return store.Object{}, fmt.Errorf("sqlstore: update: %w", err)
	}
	if err := w.appendChange(ctx, cur, false); err != nil {
		return store.Object{}, err
	}
	return cur, nil
}

func (w *writer) Delete(ctx context.Context, kind, name, etag string) error {
	if w.done {
		return errTxDone
	}
	cur, err := w.current(ctx, kind, name, etag)
	if err != nil {
		return err
	}
	rev, err := w.next(ctx, "revision")
	if err != nil {
		return err
	}
	if _, err := w.q.ExecContext(ctx, w.s.q.deleteObject, kind, name); err != nil {
		return fmt.Errorf("sqlstore: delete: %w", err)
	}
	cur.Revision = rev
	return w.appendChange(ctx, cur, true)
}

func (w *writer) AppendAudit(ctx context.Context, ev store.AuditEvent) error {
	if w.done {
		return errTxDone
	}
	seq, err := w.next(ctx, "audit_seq")
	if err != nil {
		return err
	}
	t := now()
	if !ev.Time.IsZero() {
		t = ev.Time.UTC().Truncate(time.Microsecond)
	}
	var detail any
	if ev.Detail != nil {
		detail = ev.Detail
	}
	if _, err := w.q.ExecContext(ctx, w.s.q.insertAudit, seq, micros(t), ev.Org, ev.Principal, ev.Method, ev.Resource,
		ev.RequestID, ev.Outcome, detail); err != nil {
		return fmt.Errorf("sqlstore: append audit: %w", err)
	}
	return nil
}
