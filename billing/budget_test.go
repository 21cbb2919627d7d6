package billing

import (
	"errors"
	"slices"
	"testing"
)

func TestParseBudget(t *testing.T) {
	b, err := ParseBudget("100.50", []int32{100, 50, 80})
	if err != nil || !slices.Equal(b.Thresholds, []int32{50, 80, 100}) || FormatDecimal(b.Amount, 2) != "100.50" {
		t.Fatalf("%+v %v", b, err)
	}
	for _, c := range []struct {
		amount string
		ts     []int32
	}{{"0", nil}, {"-1", nil}, {"1.001", nil}, {"x", nil}, {"10", []int32{0}}, {"10", []int32{1001}}, {"10", []int32{50, 50}}} {
		if _, err := ParseBudget(c.amount, c.ts); !errors.Is(err, ErrBadBudget) {
			t.Errorf("ParseBudget(%q, %v) = %v", c.amount, c.ts, err)
		}
	}
}

func TestBudgetEvaluate(t *testing.T) {
	b, _ := ParseBudget("100", []int32{50, 80, 100, 120})
	for _, c := range []struct {
		spent   string
		alerted []int32
		state   BudgetState
		reached []int32
		alerts  []int32
	}{
		{"0", nil, Within, nil, nil},
		{"49.99", nil, Within, nil, nil},
		{"50", nil, Alerting, []int32{50}, []int32{50}},
		{"85", []int32{50}, Alerting, []int32{50, 80}, []int32{80}},
		{"85", []int32{50, 80}, Alerting, []int32{50, 80}, nil},
		{"99.99", []int32{50, 80}, Alerting, []int32{50, 80}, nil},
		{"100", []int32{50, 80}, Exceeded, []int32{50, 80, 100}, []int32{100}},
		{"150", nil, Exceeded, []int32{50, 80, 100, 120}, []int32{50, 80, 100, 120}},
	} {
		ev := b.Evaluate(mustDec(c.spent), c.alerted)
		if ev.State != c.state || !slices.Equal(ev.Reached, c.reached) || !slices.Equal(ev.NewAlerts, c.alerts) {
			t.Errorf("spent %s alerted %v: %+v, want %s %v %v", c.spent, c.alerted, ev, c.state, c.reached, c.alerts)
		}
	}
	// No thresholds: only the amount matters.
	nb, _ := ParseBudget("10", nil)
	if ev := nb.Evaluate(mustDec("10"), nil); ev.State != Exceeded || len(ev.NewAlerts) != 0 {
		t.Errorf("no thresholds: %+v", ev)
	}
}
