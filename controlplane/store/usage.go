package store

import (
	"context"
	"time"
)

// UsageRecord is one hourly usage total as a region agent sends it.
type UsageRecord struct {
	// Key is the record's idempotency key (billing.Key.IdempotencyKey).
	Key     string
	Org     string // "organizations/acme"
	Cluster string // "organizations/acme/clusters/prod"
	Region  string // "regions/r1"
	Meter   string
	Hour    time.Time // UTC, on the hour
	// Total is the hour's total so far; Revision grows with every change.
	Total    int64
	Revision int64
}

// UsageHead is what the store holds for a key: the newest total and
// revision (Exists false before the key's first record).
type UsageHead struct {
	Exists   bool
	Total    int64
	Revision int64
}

// UsageChange is what a record does to the stored usage, decided by the
// caller from the key's head (billing.Ingest).
type UsageChange struct {
	// Apply false: a duplicate; nothing is written.
	Apply bool
	// Delta is added to what Period bills for the key.
	Delta int64
	// Period is the billing period ("2026-12") of the change.
	Period string
	// Adjustment: the change is a new adjustment entry (the hour's own
	// period is closed), not an update of the hour's usage entry.
	Adjustment bool
}

// UsageEntry is one stored entry: a key's usage (billed on the hour's
// period) or one of its adjustments (billed on a later period).
type UsageEntry struct {
	Seq        int64 // set by the store: creation order
	Key        string
	Adjustment bool
	Org        string
	Cluster    string
	Region     string
	Meter      string
	Hour       time.Time
	Quantity   int64 // what Period bills
	Period     string
	Revision   int64 // the record revision that last changed the entry
	UpdateTime time.Time
}

// UsageQuery selects entries of one organization. Empty fields do not
// filter; Start and End bound Hour (Start <= Hour < End).
type UsageQuery struct {
	Org     string
	Cluster string
	Meter   string
	Period  string
	Start   time.Time
	End     time.Time
	// PageSize and PageToken as for ListQuery (ListUsage only).
	PageSize  int
	PageToken string
}

// UsageSum is the sum of the entries of one (region, meter, hour).
type UsageSum struct {
	Region   string
	Meter    string
	Hour     time.Time
	Quantity int64
	Entries  int64
}

// UsageStore holds usage records. A Store that implements it serves the
// billing API.
type UsageStore interface {
	// IngestUsage applies records in one transaction: for each, decide
	// gets the key's head and says what to write; the head then becomes
	// the record's total and revision. decide may run again if the
	// transaction is retried; it must be pure. The changes are returned in
	// record order.
	IngestUsage(ctx context.Context, recs []UsageRecord, decide func(UsageRecord, UsageHead) (UsageChange, error)) ([]UsageChange, error)
	// ListUsage returns one page of entries in Seq order.
	ListUsage(ctx context.Context, q UsageQuery) ([]UsageEntry, string, error)
	// SumUsage sums the entries matching q by (region, meter, hour),
	// ordered by hour, region, meter.
	SumUsage(ctx context.Context, q UsageQuery) ([]UsageSum, error)
	// UsagePeriods lists the billing periods with entries of org, oldest
	// first.
	UsagePeriods(ctx context.Context, org string) ([]string, error)
}
