package billing

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// functionBook prices function instance-seconds per instance-hour: 10
// hours free a month, then 0.05 up to 1000 hours and 0.04 after.
func functionBook() PriceBook {
	return PriceBook{ID: "fn-v1", Currency: "USD", EffectiveFrom: jan, Prices: []Price{
		{Meter: FunctionInstanceSeconds, Unit: "instance-hour", UnitSize: 3600, FreeUnits: "10", Tiers: []Tier{
			{UpTo: "1000", UnitPrice: "0.05"}, {UnitPrice: "0.04"}}},
	}}
}

func TestRateFunctionInstanceSeconds(t *testing.T) {
	if err := functionBook().Validate(); err != nil {
		t.Fatal(err)
	}
	const hour = 3600
	for _, c := range []struct {
		name  string
		usage []Usage
		want  string
	}{
		{"inside the allowance", []Usage{{"r", FunctionInstanceSeconds, 10 * hour}}, "function_instance_seconds/10=0.00 total=0.00"},
		{"two hours past it", []Usage{{"r", FunctionInstanceSeconds, 12 * hour}},
			"function_instance_seconds/10=0.00 function_instance_seconds/2=0.10 total=0.10"},
		{"half an hour rounds half to even", []Usage{{"r", FunctionInstanceSeconds, 10*hour + hour/2}},
			"function_instance_seconds/10=0.00 function_instance_seconds/0.5=0.02 total=0.02"},
		{"a second is billed exactly", []Usage{{"r", FunctionInstanceSeconds, 10*hour + 1}},
			"function_instance_seconds/10=0.00 function_instance_seconds/0.000277777778=0.00 total=0.00"},
		{"both tiers", []Usage{{"r", FunctionInstanceSeconds, 1510 * hour}},
			"function_instance_seconds/10=0.00 function_instance_seconds/1000=50.00 function_instance_seconds/500=20.00 total=70.00"},
		// Two instances for a 30-day month: 1440 instance-hours, from
		// hourly records of both instances' seconds.
		{"a month of two instances in hourly records", func() []Usage {
			var u []Usage
			for h := 0; h < 720; h++ {
				u = append(u, Usage{"r", FunctionInstanceSeconds, 2 * hour})
			}
			return u
		}(), "function_instance_seconds/10=0.00 function_instance_seconds/1000=50.00 function_instance_seconds/430=17.20 total=67.20"},
	} {
		r, err := Rate(c.usage, functionBook())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := amounts(r); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	// A book without the meter does not bill it.
	r, err := Rate([]Usage{{"r", FunctionInstanceSeconds, 99 * hour}}, testBook())
	if err != nil || len(r.Unpriced) != 1 || r.Unpriced[0] != FunctionInstanceSeconds || r.Total.Sign() != 0 {
		t.Fatalf("unpriced: %+v %v", r, err)
	}
}

// The brokers' FunctionInstanceSeconds is a counter of the process: rolled
// up with its epoch like the other process counters (a restarted broker's
// counter starts again from zero and is not counted twice).
func TestRollupFunctionInstanceSeconds(t *testing.T) {
	report := func(epoch string, secs ...int64) UsageReport {
		r := UsageReport{Epoch: epoch}
		for i, s := range secs {
			r.Namespaces = append(r.Namespaces, NamespaceUsage{Tenant: "t", Namespace: string(rune('a' + i)), FunctionInstanceSeconds: s})
		}
		return r
	}
	h10 := Hour(t0)
	r := NewRollup()
	steps := []struct {
		at   time.Time
		rep  UsageReport
		want int64
	}{
		{t0, report("e1", 30, 12), 42},                   // both namespaces since the process started
		{t0.Add(time.Minute), report("e1", 90, 72), 162}, // +120
		{t0.Add(2 * time.Minute), report("e2", 5), 167},  // restarted: the new process's seconds
		{t0.Add(3 * time.Minute), report("e2", 65), 227}, // +60
	}
	for i, s := range steps {
		if err := r.Observe(org, cl, s.at, s.rep.Samples("b1"), nil); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got, _ := quantity(r, FunctionInstanceSeconds, h10); got != s.want {
			t.Fatalf("step %d: %d instance-seconds, want %d", i, got, s.want)
		}
	}
	info, err := FunctionInstanceSeconds.Info()
	if err != nil || info.Gauge || info.Unit != "instance-second" {
		t.Fatalf("meter info %+v %v", info, err)
	}
}

// An invoice shows function instance-seconds as its own lines, in the CSV
// too.
func TestInvoiceFunctionInstanceSeconds(t *testing.T) {
	feb := PeriodOf(jan.AddDate(0, 1, 0))
	book := functionBook()
	book.Prices = append(book.Prices, testBook().Prices...)
	usage := []Usage{{"regions/a", FunctionInstanceSeconds, 20 * 3600}, {"regions/a", MessagesIn, 1_000_000}}
	inv, err := BuildInvoice("organizations/acme", feb, usage, []PriceBook{book})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range inv.Lines {
		lines = append(lines, string(l.Meter)+"/"+FormatDecimal(l.Amount, 2))
	}
	if got := strings.Join(lines, " "); got != "messages_in/0.40 function_instance_seconds/0.00 function_instance_seconds/0.50" ||
		FormatDecimal(inv.Total, 2) != "0.90" {
		t.Fatalf("lines %s total %s", got, FormatDecimal(inv.Total, 2))
	}
	var buf bytes.Buffer
	if err := inv.CSV().WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "regions/a,function_instance_seconds,1,10,instance-hour,0.05,0.50,USD") {
		t.Fatalf("CSV:\n%s", buf.String())
	}
}
