package worker

import (
	"slices"
	"strings"
)

// Schedule assigns instances to workers. It is pure: prev is the current
// assignment (instance key -> worker id), instances every instance that
// should run, workers the live workers. The result keeps every instance
// where it is unless its worker is gone or holds more than its share
// (ceil(instances/workers)); the rest go to the least-loaded worker,
// preferring one that runs no other instance of the same component. So a
// worker that joins takes its share from the busiest ones, and one that
// leaves has its instances spread over the others, with no more moves than
// balance needs.
//
// Instance keys are "<kind>/<tenant>/<namespace>/<name>/<index>"; the
// component is everything before the last '/'.
func Schedule(prev map[string]string, instances, workers []string) map[string]string {
	out := make(map[string]string, len(instances))
	if len(workers) == 0 {
		return out
	}
	workers = slices.Clone(workers)
	slices.Sort(workers)
	instances = slices.Clone(instances)
	slices.Sort(instances)
	live := make(map[string]bool, len(workers))
	for _, w := range workers {
		live[w] = true
	}
	capacity := (len(instances) + len(workers) - 1) / len(workers)
	load := make(map[string]int, len(workers))
	// per worker, how many instances of each component it runs
	spread := make(map[string]map[string]int, len(workers))
	place := func(inst, w string) {
		out[inst] = w
		load[w]++
		if spread[w] == nil {
			spread[w] = map[string]int{}
		}
		spread[w][component(inst)]++
	}
	var pending []string
	for _, inst := range instances {
		if w, ok := prev[inst]; ok && live[w] && load[w] < capacity {
			place(inst, w)
			continue
		}
		pending = append(pending, inst)
	}
	for _, inst := range pending {
		c := component(inst)
		best := ""
		for _, w := range workers {
			if best == "" || load[w] < load[best] ||
				(load[w] == load[best] && spread[w][c] < spread[best][c]) {
				best = w
			}
		}
		place(inst, best)
	}
	// Moves from the busiest to the idlest until they differ by at most one.
	for {
		hi, lo := workers[0], workers[0]
		for _, w := range workers {
			if load[w] > load[hi] {
				hi = w
			}
			if load[w] < load[lo] {
				lo = w
			}
		}
		if load[hi]-load[lo] <= 1 {
			break
		}
		var move string
		for _, inst := range instances {
			if out[inst] == hi && (move == "" || spread[lo][component(inst)] < spread[lo][component(move)]) {
				move = inst
			}
		}
		load[hi]--
		spread[hi][component(move)]--
		place(move, lo)
	}
	return out
}

func component(inst string) string {
	if i := strings.LastIndexByte(inst, '/'); i >= 0 {
		return inst[:i]
	}
	return inst
}
