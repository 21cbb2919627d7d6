package billing

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
)

// Usage is a quantity of one meter used in one region, in the meter's base
// unit. Rating sums the quantities of equal (Region, Meter) first, so how
// usage is split across records never changes the result.
type Usage struct {
	Region   string
	Meter    Meter
	Quantity int64
}

// LineItem is one priced line: the units of one meter in one region that
// fall in one tier (or in the free allowance).
type LineItem struct {
	Region string `json:"region"`
	Meter  Meter  `json:"meter"`
	// Tier is the tier's index; -1 for the free allowance.
	Tier int `json:"tier"`
	// Quantity is in the price's Unit, exact.
	Quantity *big.Rat `json:"-"`
	Unit     string   `json:"unit"`
	// UnitPrice is the tier's price per Unit.
	UnitPrice *big.Rat `json:"-"`
	// Amount is Quantity × UnitPrice rounded half to even to the minor unit.
	Amount *big.Rat `json:"-"`
}

// Rating is the result of rating usage against one book.
type Rating struct {
	Currency string
	Lines    []LineItem
	// Total is the sum of the lines' rounded amounts.
	Total *big.Rat
	// Unpriced lists meters with usage the book has no price for (not
	// billed).
	Unpriced []Meter
}

// ErrOverflow is returned when a sum of quantities exceeds int64.
var ErrOverflow = errors.New("billing: usage quantity overflows int64")

// sumKey is one (region, meter).
type sumKey struct {
	region string
	meter  Meter
}

// sumUsage adds quantities per (region, meter). Negative quantities (credit
// adjustments) are allowed; the sum of a pair must not be negative.
func sumUsage(usage []Usage) (map[sumKey]int64, error) {
	out := map[sumKey]int64{}
	for _, u := range usage {
		k := sumKey{u.Region, u.Meter}
		s := out[k]
		if (u.Quantity > 0 && s > math.MaxInt64-u.Quantity) || (u.Quantity < 0 && s < math.MinInt64-u.Quantity) {
			return nil, fmt.Errorf("%w: %s %s", ErrOverflow, u.Region, u.Meter)
		}
		out[k] = s + u.Quantity
	}
	for k, q := range out {
		if q < 0 {
			return nil, fmt.Errorf("billing: %s %s sums to %d, below zero", k.region, k.meter, q)
		}
	}
	return out, nil
}

// Rate prices usage with book. Usage of every region is priced with the
// same book; see RateRegions for several.
func Rate(usage []Usage, book PriceBook) (Rating, error) {
	prices, err := book.parse()
	if err != nil {
		return Rating{}, err
	}
	sums, err := sumUsage(usage)
	if err != nil {
		return Rating{}, err
	}
	keys := make([]sumKey, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sortKeys(keys)
	r := Rating{Currency: book.Currency, Total: new(big.Rat)}
	for _, k := range keys {
		q := sums[k]
		if q == 0 {
			continue
		}
		p := prices[k.meter]
		if p == nil {
			r.Unpriced = append(r.Unpriced, k.meter)
			continue
		}
		for _, li := range rateOne(k.region, q, p) {
			r.Total.Add(r.Total, li.Amount)
			r.Lines = append(r.Lines, li)
		}
	}
	return r, nil
}

// rateOne applies the allowance and the tiers, in order, to q base units.
func rateOne(region string, q int64, p *parsedPrice) []LineItem {
	units := new(big.Rat).Quo(new(big.Rat).SetInt64(q), p.unitSize)
	var out []LineItem
	if p.free.Sign() > 0 {
		free := minRat(units, p.free)
		out = append(out, LineItem{Region: region, Meter: p.Meter, Tier: -1, Quantity: free, Unit: p.Unit,
			UnitPrice: new(big.Rat), Amount: new(big.Rat)})
		units = new(big.Rat).Sub(units, free)
	}
	floor := new(big.Rat)
	for i, up := range p.prices {
		if units.Cmp(floor) <= 0 {
			break
		}
		in := new(big.Rat).Sub(units, floor)
		if hi := p.upTo[i]; hi != nil {
			in = minRat(in, new(big.Rat).Sub(hi, floor))
			floor = hi
		}
		amount := RoundHalfEven(new(big.Rat).Mul(in, up), MinorUnitDigits)
		out = append(out, LineItem{Region: region, Meter: p.Meter, Tier: i, Quantity: in, Unit: p.Unit,
			UnitPrice: up, Amount: amount})
		if p.upTo[i] == nil {
			break
		}
	}
	return out
}

func minRat(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) <= 0 {
		return new(big.Rat).Set(a)
	}
	return new(big.Rat).Set(b)
}

func sortKeys(keys []sumKey) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].region != keys[j].region {
			return keys[i].region < keys[j].region
		}
		return meterOrder(keys[i].meter) < meterOrder(keys[j].meter)
	})
}
