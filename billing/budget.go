package billing

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
)

// BudgetState is where an organization's spending of the month stands
// against a budget.
type BudgetState string

const (
	// Within: no alert threshold reached.
	Within BudgetState = "WITHIN"
	// Alerting: at least one threshold reached, the amount not.
	Alerting BudgetState = "ALERTING"
	// Exceeded: the month's spending reached the amount.
	Exceeded BudgetState = "EXCEEDED"
)

// Budget is a monthly amount with alert thresholds (percent of the amount).
type Budget struct {
	Amount     *big.Rat
	Thresholds []int32
}

// ErrBadBudget is wrapped by ParseBudget.
var ErrBadBudget = errors.New("billing: bad budget")

// ParseBudget checks a budget: a positive decimal amount with at most
// MinorUnitDigits places, thresholds between 1 and 1000 percent, each once.
// The thresholds come back sorted.
func ParseBudget(amount string, thresholds []int32) (Budget, error) {
	a, err := ParseDecimal(amount)
	if err != nil || a.Sign() <= 0 || RoundHalfEven(a, MinorUnitDigits).Cmp(a) != 0 {
		return Budget{}, fmt.Errorf("%w: amount %q must be positive with at most %d decimal places", ErrBadBudget, amount, MinorUnitDigits)
	}
	ts := slices.Clone(thresholds)
	slices.Sort(ts)
	for i, t := range ts {
		if t < 1 || t > 1000 {
			return Budget{}, fmt.Errorf("%w: threshold %d%% is not between 1 and 1000", ErrBadBudget, t)
		}
		if i > 0 && ts[i-1] == t {
			return Budget{}, fmt.Errorf("%w: threshold %d%% given twice", ErrBadBudget, t)
		}
	}
	return Budget{Amount: a, Thresholds: ts}, nil
}

// BudgetEvaluation is the outcome of Evaluate.
type BudgetEvaluation struct {
	State BudgetState
	// Reached are the thresholds the spending has reached, ascending.
	Reached []int32
	// NewAlerts are the reached thresholds not alerted before this period.
	NewAlerts []int32
}

// Evaluate compares spent (the month's invoice total so far) with the
// budget. alerted are the thresholds already alerted in the same period
// (pass nil for a new period). A threshold t is reached when spent is at
// least t% of the amount.
func (b Budget) Evaluate(spent *big.Rat, alerted []int32) BudgetEvaluation {
	ev := BudgetEvaluation{State: Within}
	hundred := big.NewRat(100, 1)
	pct := new(big.Rat).Quo(new(big.Rat).Mul(spent, hundred), b.Amount) // spent as a percent of the amount
	for _, t := range b.Thresholds {
		if pct.Cmp(big.NewRat(int64(t), 1)) >= 0 {
			ev.Reached = append(ev.Reached, t)
			if !slices.Contains(alerted, t) {
				ev.NewAlerts = append(ev.NewAlerts, t)
			}
		}
	}
	switch {
	case spent.Cmp(b.Amount) >= 0:
		ev.State = Exceeded
	case len(ev.Reached) > 0:
		ev.State = Alerting
	}
	return ev
}
