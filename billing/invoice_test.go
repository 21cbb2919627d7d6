package billing

import (
	"bytes"
	"errors"
	"flag"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestInvoiceGolden rates a month of two regions with a region's own book
// and the global one and compares the CSV with testdata.
func TestInvoiceGolden(t *testing.T) {
	books := []PriceBook{testBook(),
		{ID: "b-v1", Region: "regions/b", Currency: "USD", EffectiveFrom: jan, Prices: []Price{
			{Meter: BytesOut, Unit: "GiB", UnitSize: gib, Tiers: []Tier{{UpTo: "1", UnitPrice: "0"}, {UnitPrice: "0.12"}}},
			{Meter: BrokerHours, Unit: "broker-hour", Tiers: []Tier{{UnitPrice: "0.25"}}},
		}},
	}
	feb := PeriodOf(jan.AddDate(0, 1, 0))
	var usage []Usage
	for h := 0; h < 672; h++ { // every hour of February 2026
		usage = append(usage, Usage{"regions/a", BytesIn, 3 * gib / 2}, Usage{"regions/a", MessagesIn, 1234},
			Usage{"regions/b", BytesOut, gib / 3}, Usage{"regions/b", BrokerHours, 3}, Usage{"regions/b", Topics, 12})
	}
	inv, err := BuildInvoice("organizations/acme", feb, usage, books)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := inv.CSV().WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "invoice-2026-02.csv", buf.Bytes())
	if len(inv.Unpriced) != 1 || inv.Unpriced[0] != "regions/b topics" {
		t.Errorf("unpriced = %v", inv.Unpriced)
	}

	empty, err := BuildInvoice("organizations/idle", feb, nil, books)
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	empty.CSV().WriteCSV(&buf)
	golden(t, "invoice-empty.csv", buf.Bytes())
}

func TestInvoiceErrors(t *testing.T) {
	feb := PeriodOf(jan.AddDate(0, 1, 0))
	if _, err := BuildInvoice("o", feb, []Usage{{"regions/x", BytesIn, 1}}, nil); !errors.Is(err, ErrNoPriceBook) {
		t.Errorf("no book: %v", err)
	}
	eur := PriceBook{ID: "eu", Region: "regions/eu", Currency: "EUR", EffectiveFrom: jan, Prices: []Price{
		{Meter: BytesIn, Unit: "GiB", UnitSize: gib, Tiers: []Tier{{UnitPrice: "0.1"}}}}}
	if _, err := BuildInvoice("o", feb, []Usage{{"regions/eu", BytesIn, 1}, {"regions/us", BytesIn, 1}},
		[]PriceBook{testBook(), eur}); !errors.Is(err, ErrCurrencies) {
		t.Errorf("two currencies: %v", err)
	}
}

func TestPeriods(t *testing.T) {
	p, err := ParsePeriod("2026-12")
	if err != nil || p.String() != "2026-12" || !p.Start().Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) ||
		!p.End().Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) || p.Next().String() != "2027-01" {
		t.Fatalf("period %v %v", p, err)
	}
	for _, bad := range []string{"", "2026-13", "2026/12", "26-12", "2026-12-01"} {
		if _, err := ParsePeriod(bad); err == nil {
			t.Errorf("ParsePeriod(%q) accepted", bad)
		}
	}
	if got := PeriodOf(time.Date(2026, 12, 31, 23, 59, 59, 0, time.FixedZone("x", -3600))); got.String() != "2027-01" {
		t.Errorf("PeriodOf is not UTC: %s", got)
	}
}

// TestInvoiceLifecycle: draft until the grace after the month has passed,
// then finalized once, then immutable; credit notes only on a finalized
// invoice and never more than its total.
func TestInvoiceLifecycle(t *testing.T) {
	grace := 48 * time.Hour
	p := PeriodOf(jan)
	inv, err := BuildInvoice("organizations/acme", p, []Usage{{"r", MessagesIn, 25_000_000}}, []PriceBook{testBook()})
	if err != nil {
		t.Fatal(err)
	}
	if inv.State != Draft || FormatDecimal(inv.Total, 2) != "10.00" {
		t.Fatalf("draft: %s %s", inv.State, FormatDecimal(inv.Total, 2))
	}
	if _, err := NewCreditNote(inv, "cn1", "outage", "1.00", nil, jan); !errors.Is(err, ErrBadCreditNote) {
		t.Errorf("credit note on a draft: %v", err)
	}
	for _, at := range []time.Time{jan.AddDate(0, 0, 10), p.End(), p.End().Add(grace - time.Nanosecond)} {
		if _, err := inv.Finalize(at, grace); !errors.Is(err, ErrPeriodOpen) {
			t.Errorf("finalize at %s: %v", at, err)
		}
	}
	fin, err := inv.Finalize(p.ClosesAt(grace), grace)
	if err != nil || fin.State != Finalized || !fin.FinalizedAt.Equal(p.ClosesAt(grace)) {
		t.Fatalf("finalize: %v %v", fin.State, err)
	}
	if _, err := fin.Finalize(p.ClosesAt(grace).Add(time.Hour), grace); !errors.Is(err, ErrImmutable) {
		t.Errorf("second finalize: %v", err)
	}
	now := p.ClosesAt(grace).Add(time.Hour)
	for _, c := range []struct {
		id, reason, amount string
		credited           *big.Rat
		ok                 bool
	}{
		{"cn1", "outage", "2.50", nil, true},
		{"cn1", "outage", "10.00", nil, true},
		{"cn1", "outage", "10.01", nil, false},
		{"cn1", "outage", "7.51", big.NewRat(5, 2), false},
		{"cn1", "outage", "7.50", big.NewRat(5, 2), true},
		{"cn1", "outage", "0", nil, false},
		{"cn1", "outage", "-1", nil, false},
		{"cn1", "outage", "0.001", nil, false},
		{"", "outage", "1", nil, false},
		{"cn1", "", "1", nil, false},
	} {
		cn, err := NewCreditNote(fin, c.id, c.reason, c.amount, c.credited, now)
		if (err == nil) != c.ok {
			t.Errorf("credit %s (credited %v): %v", c.amount, c.credited, err)
		}
		if err == nil && (cn.Invoice != p || FormatDecimal(cn.Amount, 2) != FormatDecimal(mustDec(c.amount), 2)) {
			t.Errorf("credit note %+v", cn)
		}
	}
}

func mustDec(s string) *big.Rat {
	r, err := ParseDecimal(s)
	if err != nil {
		panic(err)
	}
	return r
}
