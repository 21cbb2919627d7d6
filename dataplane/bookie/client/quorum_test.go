package client

import (
	"slices"
	"testing"
)

func TestWriteSet(t *testing.T) {
	tests := []struct {
		entry int64
		e, qw int
		want  []int
	}{
		{0, 4, 3, []int{0, 1, 2}},
		{1, 4, 3, []int{1, 2, 3}},
		{2, 4, 3, []int{2, 3, 0}},
		{3, 4, 3, []int{3, 0, 1}},
		{4, 4, 3, []int{0, 1, 2}},
		{7, 3, 3, []int{1, 2, 0}},
		{5, 1, 1, []int{0}},
	}
	for _, tt := range tests {
		got := writeSet(nil, tt.entry, tt.e, tt.qw)
		if !slices.Equal(got, tt.want) {
			t.Errorf("writeSet(%d, E=%d, Qw=%d) = %v, want %v", tt.entry, tt.e, tt.qw, got, tt.want)
		}
		for idx := 0; idx < tt.e; idx++ {
			if in := inWriteSet(idx, tt.entry, tt.e, tt.qw); in != slices.Contains(tt.want, idx) {
				t.Errorf("inWriteSet(%d, %d, E=%d, Qw=%d) = %v", idx, tt.entry, tt.e, tt.qw, in)
			}
		}
	}
}

// TestCoverageExhaustive checks the fencing rule against its definition for
// every (E, Qw, Qa) up to 5 and every subset of responding bookies: coverage
// holds exactly when no write set keeps Qa bookies that were not reached.
func TestCoverageExhaustive(t *testing.T) {
	for e := 1; e <= 5; e++ {
		for qw := 1; qw <= e; qw++ {
			for qa := 1; qa <= qw; qa++ {
				for mask := 0; mask < 1<<e; mask++ {
					c := newCoverage(e, qw, qa)
					for i := 0; i < e; i++ {
						if mask&(1<<i) != 0 {
							c.success(i)
						} else {
							c.failure(i)
						}
					}
					// Definition: a writer could still complete an add if some
					// write set has >= Qa bookies not reached.
					writerCanWin := false
					for s := 0; s < e; s++ {
						free := 0
						for _, idx := range writeSet(nil, int64(s), e, qw) {
							if mask&(1<<idx) == 0 {
								free++
							}
						}
						if free >= qa {
							writerCanWin = true
						}
					}
					if c.covered() == writerCanWin {
						t.Fatalf("E=%d Qw=%d Qa=%d mask=%b: covered=%v but writerCanWin=%v", e, qw, qa, mask, c.covered(), writerCanWin)
					}
					if c.impossible() != writerCanWin {
						t.Fatalf("E=%d Qw=%d Qa=%d mask=%b: impossible=%v with every reply in", e, qw, qa, mask, c.impossible())
					}
				}
			}
		}
	}
}

func TestClassifyEntry(t *testing.T) {
	tests := []struct {
		found, missing, qw, qa int
		want                   entryOutcome
	}{
		{1, 0, 3, 2, outcomeRecoverable},
		{0, 1, 3, 2, outcomeUndecided},
		{0, 2, 3, 2, outcomeUnrecoverable},
		{0, 1, 3, 3, outcomeUnrecoverable},
		{0, 2, 3, 1, outcomeUndecided},
		{0, 3, 3, 1, outcomeUnrecoverable},
	}
	for _, tt := range tests {
		if got := classifyEntry(tt.found, tt.missing, tt.qw, tt.qa); got != tt.want {
			t.Errorf("classifyEntry(%+v) = %v", tt, got)
		}
	}
}
