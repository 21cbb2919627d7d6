package bundle

import (
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
)

// DefaultCount is the number of bundles a namespace starts with.
const DefaultCount = 4

// Max is the highest hash and the last boundary.
const Max = 0xffffffff

// Hash returns the bundle hash of a full topic name.
func Hash(topic string) uint32 { return crc32.ChecksumIEEE([]byte(topic)) }

// Range is one bundle: hashes Lo <= h < Hi, and h == Max when Hi == Max.
type Range struct {
	Lo, Hi uint32
}

// String is Pulsar's bundle name, "0x00000000_0x40000000".
func (r Range) String() string { return fmt.Sprintf("0x%08x_0x%08x", r.Lo, r.Hi) }

// Contains reports whether hash h belongs to r.
func (r Range) Contains(h uint32) bool {
	return r.Lo <= h && (h < r.Hi || (r.Hi == Max && h == Max))
}

// Errors of parsing and splitting.
var (
	ErrBadRange      = errors.New("bundle: invalid bundle range")
	ErrBadBoundaries = errors.New("bundle: invalid boundaries")
	ErrTooSmall      = errors.New("bundle: range too small to split")
)

// ParseRange parses "0x00000000_0x40000000".
func ParseRange(s string) (Range, error) {
	lo, hi, ok := strings.Cut(s, "_")
	if !ok {
		return Range{}, fmt.Errorf("%w: %q", ErrBadRange, s)
	}
	l, err1 := parseHex(lo)
	h, err2 := parseHex(hi)
	if err1 != nil || err2 != nil || l >= h {
		return Range{}, fmt.Errorf("%w: %q", ErrBadRange, s)
	}
	return Range{l, h}, nil
}

func parseHex(s string) (uint32, error) {
	if !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") {
		return 0, ErrBadRange
	}
	v, err := strconv.ParseUint(s[2:], 16, 32)
	return uint32(v), err
}

// Boundaries are a namespace's bundles: an increasing list that starts at 0
// and ends at Max; bundle i is [b[i], b[i+1]).
type Boundaries []uint32

// Even returns n equal bundles over the whole hash space; the last one takes
// the remainder.
func Even(n int) Boundaries {
	if n < 1 {
		n = 1
	}
	b := make(Boundaries, n+1)
	step := uint64(Max+1) / uint64(n)
	for i := range n {
		b[i] = uint32(uint64(i) * step)
	}
	b[n] = Max
	return b
}

// Parse reads Pulsar's boundary strings ("0x00000000", ...).
func Parse(ss []string) (Boundaries, error) {
	b := make(Boundaries, len(ss))
	for i, s := range ss {
		v, err := parseHex(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %q", ErrBadBoundaries, s)
		}
		b[i] = v
	}
	return b, b.Validate()
}

// Validate checks that b starts at 0, ends at Max and increases strictly.
func (b Boundaries) Validate() error {
	if len(b) < 2 || b[0] != 0 || b[len(b)-1] != Max {
		return fmt.Errorf("%w: must run from 0x00000000 to 0xffffffff", ErrBadBoundaries)
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			return fmt.Errorf("%w: not increasing at %d", ErrBadBoundaries, i)
		}
	}
	return nil
}

// Strings formats b as Pulsar does.
func (b Boundaries) Strings() []string {
	out := make([]string, len(b))
	for i, v := range b {
		out[i] = fmt.Sprintf("0x%08x", v)
	}
	return out
}

// Count is the number of bundles.
func (b Boundaries) Count() int { return len(b) - 1 }

// Ranges lists the bundles in order.
func (b Boundaries) Ranges() []Range {
	out := make([]Range, 0, b.Count())
	for i := 0; i+1 < len(b); i++ {
		out = append(out, Range{b[i], b[i+1]})
	}
	return out
}

// Find returns the bundle holding hash h.
func (b Boundaries) Find(h uint32) Range {
	// First boundary greater than h; the bundle starts one before it.
	i, _ := slices.BinarySearch(b, h)
	if i < len(b) && b[i] == h {
		i++
	}
	if i >= len(b) { // h == Max
		i = len(b) - 1
	}
	return Range{b[i-1], b[i]}
}

// Has reports whether r is one of b's bundles.
func (b Boundaries) Has(r Range) bool {
	i, ok := slices.BinarySearch(b, r.Lo)
	return ok && i+1 < len(b) && b[i+1] == r.Hi
}

// Split divides bundle r of b into two halves at its midpoint and returns
// the new boundaries; b is not modified.
func (b Boundaries) Split(r Range) (Boundaries, error) {
	return b.SplitAt(r, uint32((uint64(r.Lo)+uint64(r.Hi))/2))
}

// SplitAt divides bundle r at hash at (Lo < at < Hi).
func (b Boundaries) SplitAt(r Range, at uint32) (Boundaries, error) {
	if !b.Has(r) {
		return nil, fmt.Errorf("%w: %s is not a bundle", ErrBadRange, r)
	}
	if at <= r.Lo || at >= r.Hi {
		return nil, fmt.Errorf("%w: %s at 0x%08x", ErrTooSmall, r, at)
	}
	i, _ := slices.BinarySearch(b, r.Hi)
	out := slices.Clone(b)
	return slices.Insert(out, i, at), nil
}
