package billing

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const gib = 1 << 30

var jan = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testBook prices bytes in per GiB with a free allowance and three tiers,
// messages in per million, and storage per GiB-hour.
func testBook() PriceBook {
	return PriceBook{ID: "std-v1", Currency: "USD", EffectiveFrom: jan, Prices: []Price{
		{Meter: BytesIn, Unit: "GiB", UnitSize: gib, FreeUnits: "10", Tiers: []Tier{
			{UpTo: "100", UnitPrice: "0.09"}, {UpTo: "1000", UnitPrice: "0.07"}, {UnitPrice: "0.05"}}},
		{Meter: MessagesIn, Unit: "million messages", UnitSize: 1_000_000, Tiers: []Tier{{UnitPrice: "0.40"}}},
		{Meter: StorageBytes, Unit: "GiB-hour", UnitSize: gib, Tiers: []Tier{{UnitPrice: "0.0001"}}},
	}}
}

func amounts(r Rating) string {
	var b strings.Builder
	for _, l := range r.Lines {
		b.WriteString(string(l.Meter))
		b.WriteByte('/')
		b.WriteString(FormatExact(l.Quantity, 12))
		b.WriteByte('=')
		b.WriteString(FormatDecimal(l.Amount, 2))
		b.WriteByte(' ')
	}
	b.WriteString("total=" + FormatDecimal(r.Total, 2))
	return b.String()
}

func TestRate(t *testing.T) {
	for _, c := range []struct {
		name  string
		usage []Usage
		want  string
	}{
		{"nothing", nil, "total=0.00"},
		{"inside the allowance", []Usage{{"r", BytesIn, 5 * gib}}, "bytes_in/5=0.00 total=0.00"},
		{"allowance then first tier", []Usage{{"r", BytesIn, 15 * gib}}, "bytes_in/10=0.00 bytes_in/5=0.45 total=0.45"},
		{"exactly the first tier's end", []Usage{{"r", BytesIn, 110 * gib}}, "bytes_in/10=0.00 bytes_in/100=9.00 total=9.00"},
		{"all tiers in order", []Usage{{"r", BytesIn, 1510 * gib}},
			"bytes_in/10=0.00 bytes_in/100=9.00 bytes_in/900=63.00 bytes_in/500=25.00 total=97.00"},
		{"a fraction of a unit", []Usage{{"r", BytesIn, 10*gib + gib/4}}, "bytes_in/10=0.00 bytes_in/0.25=0.02 total=0.02"},
		{"half a cent rounds to even (down)", []Usage{{"r", MessagesIn, 12_500}}, "messages_in/0.0125=0.00 total=0.00"},
		{"half a cent rounds to even (up)", []Usage{{"r", MessagesIn, 37_500}}, "messages_in/0.0375=0.02 total=0.02"},
		{"meters in Meters order", []Usage{{"r", StorageBytes, 3 * gib}, {"r", MessagesIn, 2_000_000}},
			"messages_in/2=0.80 storage_bytes/3=0.00 total=0.80"},
		{"split records sum first", []Usage{{"r", MessagesIn, 6_250}, {"r", MessagesIn, 6_250}}, "messages_in/0.0125=0.00 total=0.00"},
		{"negative adjustment", []Usage{{"r", MessagesIn, 3_000_000}, {"r", MessagesIn, -1_000_000}}, "messages_in/2=0.80 total=0.80"},
		{"unpriced meter is not billed", []Usage{{"r", Topics, 7}}, "total=0.00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Rate(c.usage, testBook())
			if err != nil {
				t.Fatal(err)
			}
			if got := amounts(r); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestRateErrors(t *testing.T) {
	if _, err := Rate([]Usage{{"r", MessagesIn, 1 << 62}, {"r", MessagesIn, 1 << 62}}, testBook()); !errors.Is(err, ErrOverflow) {
		t.Errorf("overflow: %v", err)
	}
	if _, err := Rate([]Usage{{"r", MessagesIn, -1}}, testBook()); err == nil {
		t.Error("a negative sum was rated")
	}
	bad := func(f func(b *PriceBook)) PriceBook { b := testBook(); f(&b); return b }
	for name, b := range map[string]PriceBook{
		"no id":              bad(func(b *PriceBook) { b.ID = "" }),
		"bad currency":       bad(func(b *PriceBook) { b.Currency = "DOLLARS" }),
		"unknown meter":      bad(func(b *PriceBook) { b.Prices[0].Meter = "bogus" }),
		"meter twice":        bad(func(b *PriceBook) { b.Prices[1].Meter = BytesIn }),
		"negative size":      bad(func(b *PriceBook) { b.Prices[0].UnitSize = -1 }),
		"bad allowance":      bad(func(b *PriceBook) { b.Prices[0].FreeUnits = "-1" }),
		"no tiers":           bad(func(b *PriceBook) { b.Prices[0].Tiers = nil }),
		"negative price":     bad(func(b *PriceBook) { b.Prices[0].Tiers[0].UnitPrice = "-0.01" }),
		"bad price":          bad(func(b *PriceBook) { b.Prices[0].Tiers[0].UnitPrice = "cheap" }),
		"bounded last tier":  bad(func(b *PriceBook) { b.Prices[0].Tiers[2].UpTo = "5000" }),
		"unbounded middle":   bad(func(b *PriceBook) { b.Prices[0].Tiers[1].UpTo = "" }),
		"tiers out of order": bad(func(b *PriceBook) { b.Prices[0].Tiers[1].UpTo = "50" }),
		"equal tier bounds":  bad(func(b *PriceBook) { b.Prices[0].Tiers[1].UpTo = "100" }),
	} {
		if err := b.Validate(); !errors.Is(err, ErrBadPriceBook) {
			t.Errorf("%s: Validate = %v", name, err)
		}
		if _, err := Rate(nil, b); err == nil {
			t.Errorf("%s: rated with an invalid book", name)
		}
	}
}

func TestSelectPriceBook(t *testing.T) {
	books := []PriceBook{
		{ID: "all-v1", EffectiveFrom: jan},
		{ID: "all-v2", EffectiveFrom: jan.AddDate(0, 3, 0)},
		{ID: "a-v1", Region: "regions/a", EffectiveFrom: jan.AddDate(0, 1, 0)},
	}
	for _, c := range []struct {
		region string
		at     time.Time
		want   string
	}{
		{"regions/a", jan, "all-v1"},                  // a's own book not in effect yet
		{"regions/a", jan.AddDate(0, 1, 0), "a-v1"},   // its own book from its start
		{"regions/a", jan.AddDate(0, 5, 0), "a-v1"},   // the region's own wins over a newer global one
		{"regions/b", jan.AddDate(0, 2, 0), "all-v1"}, // global, newest in effect
		{"regions/b", jan.AddDate(0, 3, 0), "all-v2"},
		{"regions/b", jan.AddDate(0, -1, 0), ""}, // none in effect
	} {
		b, ok := SelectPriceBook(books, c.region, c.at)
		if got := map[bool]string{true: b.ID}[ok]; got != c.want {
			t.Errorf("SelectPriceBook(%s, %s) = %q, want %q", c.region, c.at.Format("2006-01"), got, c.want)
		}
	}
}

// randomUsage returns usage of a few meters in a few regions.
func randomUsage(rng *rand.Rand, n int) []Usage {
	meters := []Meter{BytesIn, MessagesIn, StorageBytes, Topics}
	out := make([]Usage, n)
	for i := range out {
		out[i] = Usage{Region: []string{"r1", "r2"}[rng.IntN(2)], Meter: meters[rng.IntN(len(meters))],
			Quantity: rng.Int64N(200 * gib)}
	}
	return out
}

// TestRateProperties: the line items add up to the total; splitting or
// reordering the records never changes the result; within a meter the
// tiers come in order, each full before the next is used.
func TestRateProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	book := testBook()
	prices, _ := book.parse()
	for iter := 0; iter < 300; iter++ {
		usage := randomUsage(rng, 1+rng.IntN(20))
		r, err := Rate(usage, book)
		if err != nil {
			t.Fatal(err)
		}
		sum := new(big.Rat)
		for _, l := range r.Lines {
			sum.Add(sum, l.Amount)
			if RoundHalfEven(l.Amount, 2).Cmp(l.Amount) != 0 {
				t.Fatalf("line amount %s is not in cents", l.Amount.FloatString(6))
			}
		}
		if sum.Cmp(r.Total) != 0 {
			t.Fatalf("lines sum to %s, total %s", sum.FloatString(2), r.Total.FloatString(2))
		}

		// Split every record in random parts and shuffle.
		var split []Usage
		for _, u := range usage {
			left := u.Quantity
			for left > 0 {
				part := 1 + rng.Int64N(left)
				split = append(split, Usage{u.Region, u.Meter, part})
				left -= part
			}
		}
		rng.Shuffle(len(split), func(i, j int) { split[i], split[j] = split[j], split[i] })
		r2, err := Rate(split, book)
		if err != nil {
			t.Fatal(err)
		}
		if amounts(r2) != amounts(r) {
			t.Fatalf("split usage rates differently:\n%s\n%s", amounts(r), amounts(r2))
		}

		// Tiers in order: indices increase within a (region, meter) and
		// every tier but the meter's last is filled to its bound.
		for i, l := range r.Lines {
			if i+1 < len(r.Lines) && r.Lines[i+1].Region == l.Region && r.Lines[i+1].Meter == l.Meter {
				next := r.Lines[i+1]
				if next.Tier != l.Tier+1 {
					t.Fatalf("tier %d followed by %d", l.Tier, next.Tier)
				}
				p := prices[l.Meter]
				want := p.free
				if l.Tier >= 0 {
					lo := new(big.Rat)
					if l.Tier > 0 {
						lo = p.upTo[l.Tier-1]
					}
					want = new(big.Rat).Sub(p.upTo[l.Tier], lo)
				}
				if l.Quantity.Cmp(want) != 0 {
					t.Fatalf("%s tier %d holds %s before the next is used, want %s", l.Meter, l.Tier,
						l.Quantity.FloatString(4), want.FloatString(4))
				}
			}
		}
	}
}

// BenchmarkRate rates a month of hourly records of many organizations:
// 10,000 organizations × 720 hours × 4 meters. Reports records/s.
func BenchmarkRate(b *testing.B) {
	const orgs, hours, meters = 10_000, 720, 4
	book := testBook()
	ms := []Meter{BytesIn, MessagesIn, StorageBytes, BytesOut}
	perOrg := make([]Usage, 0, hours*meters)
	rng := rand.New(rand.NewPCG(3, 4))
	for h := 0; h < hours; h++ {
		for _, m := range ms {
			perOrg = append(perOrg, Usage{Region: "regions/a", Meter: m, Quantity: rng.Int64N(gib)})
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for o := 0; o < orgs; o++ {
			if _, err := BuildInvoice("organizations/o", PeriodOf(jan), perOrg, []PriceBook{book}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(orgs*hours*meters)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
