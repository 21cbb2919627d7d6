package billing

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
	"time"
)

// Period is a calendar month in UTC, the span of one invoice.
type Period struct {
	Year  int
	Month time.Month
}

// PeriodOf is the period holding t.
func PeriodOf(t time.Time) Period {
	t = t.UTC()
	return Period{t.Year(), t.Month()}
}

// ParsePeriod parses "2026-12".
func ParsePeriod(s string) (Period, error) {
	t, err := time.Parse("2006-01", s)
	if err != nil {
		return Period{}, fmt.Errorf("billing: period %q is not YYYY-MM", s)
	}
	return PeriodOf(t), nil
}

func (p Period) String() string { return fmt.Sprintf("%04d-%02d", p.Year, int(p.Month)) }

// Start is the period's first instant.
func (p Period) Start() time.Time { return time.Date(p.Year, p.Month, 1, 0, 0, 0, 0, time.UTC) }

// End is the first instant after the period.
func (p Period) End() time.Time { return p.Start().AddDate(0, 1, 0) }

// Next is the following period.
func (p Period) Next() Period { return PeriodOf(p.End()) }

// ClosesAt is when the period's invoice is finalized: grace after its end.
// Usage arriving later for the period is billed as an adjustment on the
// period open then.
func (p Period) ClosesAt(grace time.Duration) time.Time { return p.End().Add(grace) }

// Closed reports whether the period is closed at now.
func (p Period) Closed(now time.Time, grace time.Duration) bool {
	return !now.Before(p.ClosesAt(grace))
}

// InvoiceState is an invoice's place in its lifecycle.
type InvoiceState string

const (
	// Draft: the period is open (or in its grace period); the invoice is
	// recomputed from the usage on every read.
	Draft InvoiceState = "DRAFT"
	// Finalized: the period is closed; the invoice is stored and never
	// changes.
	Finalized InvoiceState = "FINALIZED"
)

// Invoice is one organization's bill for one period.
type Invoice struct {
	Organization string
	Period       Period
	State        InvoiceState
	Currency     string
	Lines        []LineItem
	// Total is the sum of the lines' amounts.
	Total *big.Rat
	// Unpriced lists (region, meter) pairs with usage no book prices.
	Unpriced []string
	// FinalizedAt is set when State is Finalized.
	FinalizedAt time.Time
}

// Errors of the invoice lifecycle.
var (
	ErrImmutable   = errors.New("billing: invoice is finalized and cannot change")
	ErrPeriodOpen  = errors.New("billing: period is still open")
	ErrNoPriceBook = errors.New("billing: no price book")
	ErrCurrencies  = errors.New("billing: price books of one invoice disagree on the currency")
)

// BuildInvoice rates an organization's usage billed on period (usage of the
// period and adjustments that arrived in it) with the books in effect at
// the period's start, one per region. The invoice is a Draft; see Finalize.
func BuildInvoice(org string, period Period, usage []Usage, books []PriceBook) (Invoice, error) {
	byRegion := map[string][]Usage{}
	for _, u := range usage {
		byRegion[u.Region] = append(byRegion[u.Region], u)
	}
	regions := make([]string, 0, len(byRegion))
	for r := range byRegion {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	inv := Invoice{Organization: org, Period: period, State: Draft, Total: new(big.Rat)}
	for _, r := range regions {
		book, ok := SelectPriceBook(books, r, period.Start())
		if !ok {
			return Invoice{}, fmt.Errorf("%w for region %q in %s", ErrNoPriceBook, r, period)
		}
		rt, err := Rate(byRegion[r], book)
		if err != nil {
			return Invoice{}, err
		}
		if inv.Currency == "" {
			inv.Currency = rt.Currency
		} else if inv.Currency != rt.Currency {
			return Invoice{}, fmt.Errorf("%w: %s and %s", ErrCurrencies, inv.Currency, rt.Currency)
		}
		inv.Lines = append(inv.Lines, rt.Lines...)
		inv.Total.Add(inv.Total, rt.Total)
		for _, m := range rt.Unpriced {
			inv.Unpriced = append(inv.Unpriced, r+" "+string(m))
		}
	}
	if inv.Currency == "" {
		if book, ok := SelectPriceBook(books, "", period.Start()); ok {
			inv.Currency = book.Currency
		}
	}
	return inv, nil
}

// Finalize returns the invoice finalized at now, which must be at or after
// the period's close; a finalized invoice cannot be finalized again.
func (inv Invoice) Finalize(now time.Time, grace time.Duration) (Invoice, error) {
	if inv.State == Finalized {
		return inv, ErrImmutable
	}
	if !inv.Period.Closed(now, grace) {
		return inv, fmt.Errorf("%w: %s closes at %s", ErrPeriodOpen, inv.Period, inv.Period.ClosesAt(grace).Format(time.RFC3339))
	}
	inv.State, inv.FinalizedAt = Finalized, now.UTC()
	return inv, nil
}

// CreditNote corrects a finalized invoice: an amount returned to the
// organization, never more in total than the invoice's total.
type CreditNote struct {
	ID       string
	Invoice  Period
	Reason   string
	Amount   *big.Rat
	IssuedAt time.Time
}

// ErrBadCreditNote is wrapped by NewCreditNote.
var ErrBadCreditNote = errors.New("billing: bad credit note")

// NewCreditNote checks and makes a credit note of amount (a decimal with at
// most MinorUnitDigits places) against inv, given what earlier credit notes
// of inv already returned.
func NewCreditNote(inv Invoice, id, reason, amount string, credited *big.Rat, now time.Time) (CreditNote, error) {
	if inv.State != Finalized {
		return CreditNote{}, fmt.Errorf("%w: invoice %s is %s; a draft changes with its usage instead", ErrBadCreditNote, inv.Period, inv.State)
	}
	if id == "" || reason == "" {
		return CreditNote{}, fmt.Errorf("%w: id and reason are required", ErrBadCreditNote)
	}
	a, err := ParseDecimal(amount)
	if err != nil || a.Sign() <= 0 || RoundHalfEven(a, MinorUnitDigits).Cmp(a) != 0 {
		return CreditNote{}, fmt.Errorf("%w: amount %q must be positive with at most %d decimal places", ErrBadCreditNote, amount, MinorUnitDigits)
	}
	if credited == nil {
		credited = new(big.Rat)
	}
	if left := new(big.Rat).Sub(inv.Total, credited); a.Cmp(left) > 0 {
		return CreditNote{}, fmt.Errorf("%w: amount %s exceeds what the invoice leaves to credit (%s)",
			ErrBadCreditNote, amount, FormatDecimal(left, MinorUnitDigits))
	}
	return CreditNote{ID: id, Invoice: inv.Period, Reason: reason, Amount: a, IssuedAt: now.UTC()}, nil
}
