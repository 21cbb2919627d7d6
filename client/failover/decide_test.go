package failover

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	const fd, sb = 10 * time.Second, 30 * time.Second
	t0 := time.Unix(1000, 0)
	type step struct {
		at   time.Duration
		up   []bool
		want int
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"primary healthy stays", []step{{0, []bool{true, true}, 0}, {60 * time.Second, []bool{true, true}, 0}}},
		{"short outage rides through", []step{
			{0, []bool{true, true}, 0}, {1 * time.Second, []bool{false, true}, 0},
			{9 * time.Second, []bool{false, true}, 0}, {10 * time.Second, []bool{true, true}, 0}}},
		{"fails over after the delay", []step{
			{0, []bool{false, true}, 0}, {9 * time.Second, []bool{false, true}, 0}, {10 * time.Second, []bool{false, true}, 1}}},
		{"skips a secondary that is down", []step{
			{0, []bool{false, false, true}, 0}, {10 * time.Second, []bool{false, false, true}, 2}}},
		{"stays when nothing else is up", []step{
			{0, []bool{false, false}, 0}, {20 * time.Second, []bool{false, false}, 0}}},
		{"switches back after the primary is up long enough", []step{
			{0, []bool{false, true}, 0}, {10 * time.Second, []bool{false, true}, 1},
			{15 * time.Second, []bool{true, true}, 1}, {44 * time.Second, []bool{true, true}, 1},
			{45 * time.Second, []bool{true, true}, 0}}},
		{"a flapping primary restarts the switch-back clock", []step{
			{0, []bool{false, true}, 0}, {10 * time.Second, []bool{false, true}, 1},
			{15 * time.Second, []bool{true, true}, 1}, {20 * time.Second, []bool{false, true}, 1},
			{25 * time.Second, []bool{true, true}, 1}, {54 * time.Second, []bool{true, true}, 1},
			{55 * time.Second, []bool{true, true}, 0}}},
		{"a failed secondary moves to the primary if it is up", []step{
			{0, []bool{false, true}, 0}, {10 * time.Second, []bool{false, true}, 1},
			{12 * time.Second, []bool{true, false}, 1}, {22 * time.Second, []bool{true, false}, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.steps[0].up)
			s := autoState{downSince: make([]time.Time, n), upSince: make([]time.Time, n)}
			for i, st := range tc.steps {
				got := s.decide(t0.Add(st.at), st.up, fd, sb)
				if got != st.want {
					t.Fatalf("step %d (at %v, up %v): cluster %d, want %d", i, st.at, st.up, got, st.want)
				}
				s.current = got
			}
		})
	}
}
