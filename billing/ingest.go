package billing

import (
	"errors"
	"fmt"
	"time"
)

// Head is what the control plane holds for one key: the latest total and
// its revision (Exists false before the first record).
type Head struct {
	Exists   bool
	Total    int64
	Revision int64
}

// Received is a usage record as sent: the key's total and its revision.
type Received struct {
	Key      Key
	Quantity int64
	Revision int64
}

// Action is what a received record does.
type Action int

const (
	// Duplicate: a revision already seen; nothing changes.
	Duplicate Action = iota
	// Update: the hour's period is open; its usage becomes the new total.
	Update
	// Adjust: the hour's period is closed; the difference is billed on
	// the period open at arrival as an adjustment record.
	Adjust
)

var actionNames = [...]string{Duplicate: "duplicate", Update: "update", Adjust: "adjust"}

func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is the outcome of Ingest.
type Decision struct {
	Action Action
	// Delta is the change of the key's total (new total minus the old).
	Delta int64
	// BillOn is the period the change is billed on.
	BillOn Period
}

// ErrBadRecord is wrapped by Ingest for a record that cannot be accepted.
var ErrBadRecord = errors.New("billing: bad usage record")

// Ingest decides what a received record does, at now, given the key's
// head and the grace period after a month before its invoice is final.
func Ingest(h Head, r Received, now time.Time, grace time.Duration) (Decision, error) {
	if err := r.Key.Validate(); err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	if r.Quantity < 0 || r.Revision < 1 {
		return Decision{}, fmt.Errorf("%w: quantity %d and revision %d must be >= 0 and >= 1", ErrBadRecord, r.Quantity, r.Revision)
	}
	if r.Key.Hour.After(now.Add(time.Hour)) {
		return Decision{}, fmt.Errorf("%w: hour %s is in the future", ErrBadRecord, r.Key.Hour.Format(time.RFC3339))
	}
	if h.Exists && r.Revision <= h.Revision {
		return Decision{Action: Duplicate}, nil
	}
	d := Decision{Delta: r.Quantity - h.Total}
	if p := PeriodOf(r.Key.Hour); !p.Closed(now, grace) {
		d.Action, d.BillOn = Update, p
	} else {
		d.Action, d.BillOn = Adjust, PeriodOf(now)
	}
	return d, nil
}
