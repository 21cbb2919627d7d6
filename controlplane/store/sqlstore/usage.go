package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/magnetar-dev/magnetar/controlplane/store"
)

var _ store.UsageStore = (*Store)(nil)

// maxUsageBatch bounds the records of one IngestUsage call.
const maxUsageBatch = 1000

const usageEntryCols = "seq, idem_key, entry, org, cluster, region, meter, hour, quantity, period, revision, update_time"

// IngestUsage implements store.UsageStore.
func (s *Store) IngestUsage(ctx context.Context, recs []store.UsageRecord, decide func(store.UsageRecord, store.UsageHead) (store.UsageChange, error)) ([]store.UsageChange, error) {
	if len(recs) > maxUsageBatch {
		return nil, fmt.Errorf("%w: %d usage records in one batch, at most %d", store.ErrInvalidArgument, len(recs), maxUsageBatch)
	}
	for _, r := range recs {
		if r.Key == "" || r.Org == "" || r.Meter == "" {
			return nil, fmt.Errorf("%w: usage record without a key, organization or meter", store.ErrInvalidArgument)
		}
	}
	var out []store.UsageChange
	err := s.Tx(ctx, func(sw store.Writer) error {
		w := sw.(*writer)
		out = out[:0]
		for _, r := range recs {
			ch, err := w.ingestOne(ctx, r, decide)
			if err != nil {
				return err
			}
			out = append(out, ch)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (w *writer) ingestOne(ctx context.Context, r store.UsageRecord, decide func(store.UsageRecord, store.UsageHead) (store.UsageChange, error)) (store.UsageChange, error) {
	d := w.s.d
	var h store.UsageHead
	err := w.q.QueryRowContext(ctx, d.rebind("SELECT total, revision FROM usage_heads WHERE idem_key = ?"), r.Key).Scan(&h.Total, &h.Revision)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return store.UsageChange{}, fmt.Errorf("sqlstore: usage head: %w", err)
	default:
		h.Exists = true
	}
	ch, err := decide(r, h)
	if err != nil || !ch.Apply {
		return ch, err
	}
	t := micros(now())
	if h.Exists {
		_, err = w.q.ExecContext(ctx, d.rebind("UPDATE usage_heads SET total = ?, revision = ?, update_time = ? WHERE idem_key = ?"),
			r.Total, r.Revision, t, r.Key)
	} else {
		_, err = w.q.ExecContext(ctx, d.rebind("INSERT INTO usage_heads (idem_key, org, cluster, region, meter, hour, total, revision, update_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
			r.Key, r.Org, r.Cluster, r.Region, r.Meter, micros(r.Hour), r.Total, r.Revision, t)
	}
	if err != nil {
		return ch, fmt.Errorf("sqlstore: usage head: %w", err)
	}
	entry := int64(0)
	if ch.Adjustment {
		entry = r.Revision
	} else {
		res, err := w.q.ExecContext(ctx, d.rebind("UPDATE usage_entries SET quantity = quantity + ?, revision = ?, update_time = ? WHERE idem_key = ? AND entry = 0"),
			ch.Delta, r.Revision, t, r.Key)
		if err != nil {
			return ch, fmt.Errorf("sqlstore: usage entry: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return ch, fmt.Errorf("sqlstore: usage entry: %w", err)
		} else if n == 1 {
			return ch, nil
		}
	}
	seq, err := w.next(ctx, "usage_seq")
	if err != nil {
		return ch, err
	}
	if _, err := w.q.ExecContext(ctx, d.rebind("INSERT INTO usage_entries ("+usageEntryCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		seq, r.Key, entry, r.Org, r.Cluster, r.Region, r.Meter, micros(r.Hour), ch.Delta, ch.Period, r.Revision, t); err != nil {
		return ch, fmt.Errorf("sqlstore: usage entry: %w", err)
	}
	return ch, nil
}

// usageWhere builds the WHERE clause of q.
func usageWhere(q store.UsageQuery) (string, []any, error) {
	if q.Org == "" {
		return "", nil, fmt.Errorf("%w: usage query without an organization", store.ErrInvalidArgument)
	}
	conds, args := []string{"org = ?"}, []any{q.Org}
	for _, f := range []struct{ col, v string }{{"cluster", q.Cluster}, {"meter", q.Meter}, {"period", q.Period}} {
		if f.v != "" {
			conds, args = append(conds, f.col+" = ?"), append(args, f.v)
		}
	}
	if !q.Start.IsZero() {
		conds, args = append(conds, "hour >= ?"), append(args, micros(q.Start))
	}
	if !q.End.IsZero() {
		conds, args = append(conds, "hour < ?"), append(args, micros(q.End))
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// ListUsage implements store.UsageStore.
func (s *Store) ListUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageEntry, string, error) {
	if s.closed.Load() {
		return nil, "", store.ErrClosed
	}
	n, err := pageSize(q.PageSize)
	if err != nil {
		return nil, "", err
	}
	hash := queryHash("usage", q.Org, q.Cluster, q.Meter, q.Period, q.Start.String(), q.End.String())
	after, err := decodeToken(q.PageToken, hash)
	if err != nil {
		return nil, "", err
	}
	where, args, err := usageWhere(q)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.rdb.QueryContext(ctx, s.d.rebind("SELECT "+usageEntryCols+" FROM usage_entries"+where+" AND seq > ? ORDER BY seq LIMIT ?"),
		append(args, after, n+1)...)
	if err != nil {
		return nil, "", s.wrapErr(fmt.Errorf("sqlstore: list usage: %w", err))
	}
	defer rows.Close()
	var out []store.UsageEntry
	for rows.Next() {
		var e store.UsageEntry
		var entry, hour, ut int64
		if err := rows.Scan(&e.Seq, &e.Key, &entry, &e.Org, &e.Cluster, &e.Region, &e.Meter, &hour, &e.Quantity, &e.Period, &e.Revision, &ut); err != nil {
			return nil, "", fmt.Errorf("sqlstore: list usage: %w", err)
		}
		e.Adjustment, e.Hour, e.UpdateTime = entry != 0, fromMicros(hour), fromMicros(ut)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.wrapErr(fmt.Errorf("sqlstore: list usage: %w", err))
	}
	if len(out) <= n {
		return out, "", nil
	}
	out = out[:n]
	return out, encodeToken(out[n-1].Seq, hash), nil
}

// SumUsage implements store.UsageStore.
func (s *Store) SumUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageSum, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	where, args, err := usageWhere(q)
	if err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, s.d.rebind("SELECT region, meter, hour, SUM(quantity), COUNT(*) FROM usage_entries"+where+
		" GROUP BY region, meter, hour ORDER BY hour, region, meter"), args...)
	if err != nil {
		return nil, s.wrapErr(fmt.Errorf("sqlstore: sum usage: %w", err))
	}
	defer rows.Close()
	var out []store.UsageSum
	for rows.Next() {
		var u store.UsageSum
		var hour int64
		if err := rows.Scan(&u.Region, &u.Meter, &hour, &u.Quantity, &u.Entries); err != nil {
			return nil, fmt.Errorf("sqlstore: sum usage: %w", err)
		}
		u.Hour = fromMicros(hour)
		out = append(out, u)
	}
	return out, s.wrapErr(rows.Err())
}

// UsagePeriods implements store.UsageStore.
func (s *Store) UsagePeriods(ctx context.Context, org string) ([]string, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	rows, err := s.rdb.QueryContext(ctx, s.d.rebind("SELECT DISTINCT period FROM usage_entries WHERE org = ? ORDER BY period"), org)
	if err != nil {
		return nil, s.wrapErr(fmt.Errorf("sqlstore: usage periods: %w", err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("sqlstore: usage periods: %w", err)
		}
		out = append(out, p)
	}
	return out, s.wrapErr(rows.Err())
}
