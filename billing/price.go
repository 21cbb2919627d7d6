package billing

import (
	"errors"
	"fmt"
	"math/big"
	"time"
)

// ErrBadPriceBook is wrapped by PriceBook.Validate.
var ErrBadPriceBook = errors.New("billing: bad price book")

// PriceBook is one version of the prices of a region. Versions are never
// changed: a new price takes effect as a new book with a later
// EffectiveFrom.
type PriceBook struct {
	// ID names the version ("standard-2026-12").
	ID string `json:"id"`
	// Region is the region it prices ("regions/local-a"); "" prices every
	// region that has no book of its own.
	Region string `json:"region,omitempty"`
	// Currency is an ISO 4217 code ("USD").
	Currency string `json:"currency"`
	// EffectiveFrom is the first instant the book prices; a billing period
	// is rated with the newest book in effect at the period's start.
	EffectiveFrom time.Time `json:"effective_from"`
	Prices        []Price   `json:"prices"`
}

// Price prices one meter.
type Price struct {
	Meter Meter `json:"meter"`
	// Unit names the unit prices are per ("GiB", "million messages").
	Unit string `json:"unit"`
	// UnitSize is how many of the meter's base units make one Unit (1<<30
	// for GiB of bytes); 0 means 1.
	UnitSize int64 `json:"unit_size,omitempty"`
	// FreeUnits is a decimal number of Units free each period, taken before
	// the tiers; "" means none.
	FreeUnits string `json:"free_units,omitempty"`
	// Tiers are graduated: each prices the Units past the previous tier's
	// UpTo up to its own. The last tier has no UpTo.
	Tiers []Tier `json:"tiers"`
}

// Tier is one band of a graduated price.
type Tier struct {
	// UpTo is the decimal number of billable Units (after the free
	// allowance) where the tier ends; "" on the last tier.
	UpTo string `json:"up_to,omitempty"`
	// UnitPrice is the decimal price of one Unit in the tier.
	UnitPrice string `json:"unit_price"`
}

// parsedPrice is a Price with its decimals parsed.
type parsedPrice struct {
	Price
	unitSize *big.Rat
	free     *big.Rat
	upTo     []*big.Rat // nil for the last tier
	prices   []*big.Rat
}

// Validate checks the book: a currency, known meters at most once each,
// positive unit sizes, non-negative prices and allowances, tiers in strictly
// increasing order with only the last one unbounded.
func (b PriceBook) Validate() error {
	_, err := b.parse()
	return err
}

func (b PriceBook) parse() (map[Meter]*parsedPrice, error) {
	if b.ID == "" {
		return nil, fmt.Errorf("%w: no id", ErrBadPriceBook)
	}
	if len(b.Currency) != 3 {
		return nil, fmt.Errorf("%w %s: currency %q is not an ISO 4217 code", ErrBadPriceBook, b.ID, b.Currency)
	}
	out := make(map[Meter]*parsedPrice, len(b.Prices))
	for _, p := range b.Prices {
		if _, err := p.Meter.Info(); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrBadPriceBook, b.ID, err)
		}
		if out[p.Meter] != nil {
			return nil, fmt.Errorf("%w %s: meter %s priced twice", ErrBadPriceBook, b.ID, p.Meter)
		}
		pp := &parsedPrice{Price: p, unitSize: big.NewRat(1, 1), free: new(big.Rat)}
		if p.UnitSize < 0 {
			return nil, fmt.Errorf("%w %s: %s: negative unit size", ErrBadPriceBook, b.ID, p.Meter)
		}
		if p.UnitSize > 0 {
			pp.unitSize = new(big.Rat).SetInt64(p.UnitSize)
		}
		if p.FreeUnits != "" {
			f, err := ParseDecimal(p.FreeUnits)
			if err != nil || f.Sign() < 0 {
				return nil, fmt.Errorf("%w %s: %s: free units %q", ErrBadPriceBook, b.ID, p.Meter, p.FreeUnits)
			}
			pp.free = f
		}
		if len(p.Tiers) == 0 {
			return nil, fmt.Errorf("%w %s: %s: no tiers", ErrBadPriceBook, b.ID, p.Meter)
		}
		prev := new(big.Rat)
		for i, t := range p.Tiers {
			up, err := ParseDecimal(t.UnitPrice)
			if err != nil || up.Sign() < 0 {
				return nil, fmt.Errorf("%w %s: %s: tier %d: unit price %q", ErrBadPriceBook, b.ID, p.Meter, i, t.UnitPrice)
			}
			pp.prices = append(pp.prices, up)
			last := i == len(p.Tiers)-1
			switch {
			case last && t.UpTo != "":
				return nil, fmt.Errorf("%w %s: %s: the last tier must have no up_to", ErrBadPriceBook, b.ID, p.Meter)
			case last:
				pp.upTo = append(pp.upTo, nil)
			case t.UpTo == "":
				return nil, fmt.Errorf("%w %s: %s: tier %d: only the last tier may be unbounded", ErrBadPriceBook, b.ID, p.Meter, i)
			default:
				u, err := ParseDecimal(t.UpTo)
				if err != nil || u.Cmp(prev) <= 0 {
					return nil, fmt.Errorf("%w %s: %s: tier %d: up_to %q must exceed the previous tier's", ErrBadPriceBook, b.ID, p.Meter, i, t.UpTo)
				}
				pp.upTo = append(pp.upTo, u)
				prev = u
			}
		}
		out[p.Meter] = pp
	}
	return out, nil
}

// SelectPriceBook returns the book that prices region for a period starting
// at start: the newest EffectiveFrom not after start among the region's own
// books, else among the books for every region ("" Region).
func SelectPriceBook(books []PriceBook, region string, start time.Time) (PriceBook, bool) {
	for _, want := range []string{region, ""} {
		var best *PriceBook
		for i := range books {
			b := &books[i]
			if b.Region != want || b.EffectiveFrom.After(start) {
				continue
			}
			if best == nil || b.EffectiveFrom.After(best.EffectiveFrom) ||
				(b.EffectiveFrom.Equal(best.EffectiveFrom) && b.ID > best.ID) {
				best = b
			}
		}
		if best != nil {
			return *best, true
		}
	}
	return PriceBook{}, false
}
