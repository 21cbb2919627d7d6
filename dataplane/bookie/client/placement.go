package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// availableBookies lists the registered bookies (read-only ones included).
func availableBookies(ctx context.Context, md metadata.Store) ([]bookie.Registration, error) {
	return bookie.ListAvailable(ctx, md)
}

// chooseEnsemble picks n bookies from candidates, none of them in exclude,
// spreading them over as many (region, rack) groups as possible: it takes one
// bookie from each group in turn, groups and members shuffled by rnd.
// Read-only bookies are never chosen.
func chooseEnsemble(rnd *rand.Rand, candidates []bookie.Registration, n int, exclude []string) ([]string, error) {
	groups := map[string][]string{}
	var keys []string
	for _, b := range candidates {
		if b.ReadOnly || slices.Contains(exclude, b.Addr) {
			continue
		}
		k := b.Region + "/" + b.Rack
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		if !slices.Contains(groups[k], b.Addr) {
			groups[k] = append(groups[k], b.Addr)
		}
	}
	slices.Sort(keys) // deterministic for a seeded rnd
	rnd.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for _, k := range keys {
		g := groups[k]
		rnd.Shuffle(len(g), func(i, j int) { g[i], g[j] = g[j], g[i] })
	}
	out := make([]string, 0, n)
	for len(out) < n {
		progress := false
		for _, k := range keys {
			if len(groups[k]) == 0 || len(out) == n {
				continue
			}
			out = append(out, groups[k][0])
			groups[k] = groups[k][1:]
			progress = true
		}
		if !progress {
			return nil, fmt.Errorf("%w: need %d, have %d", ErrNotEnoughBookies, n, len(out))
		}
	}
	return out, nil
}

// chooseReplacement picks one bookie for a fragment, preferring a (region,
// rack) group not already used by the rest of the fragment.
func chooseReplacement(rnd *rand.Rand, candidates []bookie.Registration, fragment []string, replaced int) (string, error) {
	used := map[string]bool{}
	groupOf := map[string]string{}
	for _, b := range candidates {
		groupOf[b.Addr] = b.Region + "/" + b.Rack
	}
	for i, a := range fragment {
		if i != replaced {
			used[groupOf[a]] = true
		}
	}
	var fresh, any []string
	for _, b := range candidates {
		if b.ReadOnly || slices.Contains(fragment, b.Addr) {
			continue
		}
		any = append(any, b.Addr)
		if !used[groupOf[b.Addr]] {
			fresh = append(fresh, b.Addr)
		}
	}
	pool := fresh
	if len(pool) == 0 {
		pool = any
	}
	if len(pool) == 0 {
		return "", fmt.Errorf("%w: no bookie outside the ensemble", ErrNotEnoughBookies)
	}
	slices.Sort(pool)
	return pool[rnd.IntN(len(pool))], nil
}
