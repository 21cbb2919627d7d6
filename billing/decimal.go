package billing

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// MinorUnitDigits is the number of decimal places amounts are rounded to
// (cents).
const MinorUnitDigits = 2

// ErrBadDecimal is wrapped by ParseDecimal.
var ErrBadDecimal = errors.New("billing: bad decimal")

// maxDecimalDigits bounds a price's digits (a malformed price book cannot
// make rating allocate without limit).
const maxDecimalDigits = 40

// ParseDecimal parses a plain decimal ("12", "0.0009", "-1.5") exactly.
// Exponents, signs other than a leading '-', and empty parts are refused.
func ParseDecimal(s string) (*big.Rat, error) {
	body := strings.TrimPrefix(s, "-")
	intPart, frac, hasDot := strings.Cut(body, ".")
	if intPart == "" || (hasDot && frac == "") || len(body) > maxDecimalDigits {
		return nil, fmt.Errorf("%w %q", ErrBadDecimal, s)
	}
	for _, c := range intPart + frac {
		if c < '0' || c > '9' {
			return nil, fmt.Errorf("%w %q", ErrBadDecimal, s)
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrBadDecimal, s)
	}
	return r, nil
}

// RoundHalfEven rounds r to digits decimal places, halves to the even
// neighbour (banker's rounding).
func RoundHalfEven(r *big.Rat, digits int) *big.Rat {
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(digits)), nil)
	scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(scale))
	num, den := scaled.Num(), scaled.Denom()
	q, m := new(big.Int).QuoRem(num, den, new(big.Int)) // truncated toward zero
	// Compare 2|m| with den.
	twice := new(big.Int).Abs(m)
	twice.Lsh(twice, 1)
	switch c := twice.Cmp(den); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		if num.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return new(big.Rat).SetFrac(q, scale)
}

// FormatDecimal writes r with exactly digits decimal places; r must already
// have at most that many (see RoundHalfEven), else it is rounded half to
// even first.
func FormatDecimal(r *big.Rat, digits int) string {
	return RoundHalfEven(r, digits).FloatString(digits)
}

// FormatExact writes r as a decimal with as many places as it needs, up to
// maxPlaces (then rounded half to even), without trailing zeros.
func FormatExact(r *big.Rat, maxPlaces int) string {
	s := RoundHalfEven(r, maxPlaces).FloatString(maxPlaces)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}
