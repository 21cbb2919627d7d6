package billing

import (
	"math/big"
	"testing"
)

func TestParseDecimal(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // FloatString(6), "" for an error
	}{
		{"12", "12.000000"}, {"0.0009", "0.000900"}, {"-1.5", "-1.500000"}, {"0", "0.000000"},
		{"", ""}, {".5", ""}, {"5.", ""}, {"1e3", ""}, {"+1", ""}, {"1/3", ""}, {"1.2.3", ""}, {"--1", ""},
		{"12345678901234567890123456789012345678901", ""}, {" 1", ""}, {"0x10", ""},
	} {
		r, err := ParseDecimal(c.in)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("ParseDecimal(%q) = %s, want an error", c.in, r.FloatString(6))
		case c.want != "" && err != nil:
			t.Errorf("ParseDecimal(%q): %v", c.in, err)
		case c.want != "" && r.FloatString(6) != c.want:
			t.Errorf("ParseDecimal(%q) = %s, want %s", c.in, r.FloatString(6), c.want)
		}
	}
}

func TestRoundHalfEven(t *testing.T) {
	for _, c := range []struct {
		num, den int64
		want     string
	}{
		{1, 200, "0.00"},   // 0.005 -> even 0.00
		{3, 200, "0.02"},   // 0.015 -> 0.02
		{5, 200, "0.02"},   // 0.025 -> 0.02
		{7, 200, "0.04"},   // 0.035 -> 0.04
		{-1, 200, "0.00"},  // -0.005 -> -0.00
		{-3, 200, "-0.02"}, // -0.015
		{1, 3, "0.33"},     // 0.333...
		{2, 3, "0.67"},     // 0.666...
		{-2, 3, "-0.67"},
		{1001, 200000, "0.01"}, // 0.005005 -> up
		{12345, 1, "12345.00"},
		{0, 1, "0.00"},
	} {
		got := RoundHalfEven(big.NewRat(c.num, c.den), 2).FloatString(2)
		if got == "-0.00" {
			got = "0.00"
		}
		if got != c.want {
			t.Errorf("RoundHalfEven(%d/%d) = %s, want %s", c.num, c.den, got, c.want)
		}
	}
	if got := FormatExact(big.NewRat(1, 1<<10), 12); got != "0.0009765625" {
		t.Errorf("FormatExact(1/1024) = %s", got)
	}
	if got := FormatExact(big.NewRat(3, 1), 12); got != "3" {
		t.Errorf("FormatExact(3) = %s", got)
	}
}
