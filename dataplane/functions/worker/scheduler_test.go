package worker

import (
	"fmt"
	"testing"
)

func insts(n int, fn string) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("function/public/default/%s/%d", fn, i))
	}
	return out
}

func loads(a map[string]string) map[string]int {
	l := map[string]int{}
	for _, w := range a {
		l[w]++
	}
	return l
}

func TestScheduleBalancesAndKeepsPlacements(t *testing.T) {
	all := append(insts(4, "a"), insts(2, "b")...)
	a := Schedule(nil, all, []string{"w1"})
	if len(a) != 6 || loads(a)["w1"] != 6 {
		t.Fatalf("one worker: %v", a)
	}
	// A second and third worker join: each takes an even share.
	b := Schedule(a, all, []string{"w1", "w2", "w3"})
	for w, n := range loads(b) {
		if n != 2 {
			t.Fatalf("after join %s runs %d: %v", w, n, b)
		}
	}
	moved := 0
	for k, w := range b {
		if a[k] != w {
			moved++
		}
	}
	if moved != 4 {
		t.Fatalf("join moved %d instances, want 4", moved)
	}
	// Scheduling again changes nothing.
	c := Schedule(b, all, []string{"w1", "w2", "w3"})
	for k := range c {
		if c[k] != b[k] {
			t.Fatalf("stable input moved %s: %s -> %s", k, b[k], c[k])
		}
	}
	// w2 dies: its instances go to the others, nothing else moves.
	d := Schedule(c, all, []string{"w1", "w3"})
	for k, w := range d {
		if w == "w2" {
			t.Fatalf("%s still on the dead worker", k)
		}
		if c[k] != "w2" && c[k] != w {
			t.Fatalf("%s moved from a live worker: %s -> %s", k, c[k], w)
		}
	}
	if l := loads(d); l["w1"] != 3 || l["w3"] != 3 {
		t.Fatalf("after leave: %v", l)
	}
}

func TestScheduleSpreadsAComponent(t *testing.T) {
	a := Schedule(nil, insts(2, "a"), []string{"w1", "w2"})
	if a["function/public/default/a/0"] == a["function/public/default/a/1"] {
		t.Fatalf("both instances on one worker: %v", a)
	}
}

func TestScheduleNoWorkers(t *testing.T) {
	if a := Schedule(map[string]string{"x/0": "w"}, []string{"x/0"}, nil); len(a) != 0 {
		t.Fatalf("assigned with no workers: %v", a)
	}
}

func TestScheduleDropsRemovedInstances(t *testing.T) {
	a := Schedule(nil, insts(3, "a"), []string{"w1"})
	b := Schedule(a, insts(1, "a"), []string{"w1"})
	if len(b) != 1 {
		t.Fatalf("removed instances kept: %v", b)
	}
}
