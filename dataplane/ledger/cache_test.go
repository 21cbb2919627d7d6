package ledger

import (
	"fmt"
	"testing"
)

// TestEntryCacheEvictsOldestAndRecycles: the cache stays within its byte
// budget, evicts in insertion order across managed ledgers, drops ledgers,
// and reuses evicted items without changing what get returns.
func TestEntryCacheEvictsOldestAndRecycles(t *testing.T) {
	const entry = 100
	limit := int64(10 * (entry + cacheItemOverhead))
	c := newEntryCache(limit)
	a, b := &ManagedLedger{name: "a"}, &ManagedLedger{name: "b"}
	data := func(ml *ManagedLedger, i int) []byte {
		d := make([]byte, entry)
		copy(d, fmt.Sprintf("%s-%d", ml.name, i))
		return d
	}
	mlOf := func(i int) *ManagedLedger {
		if i%2 == 0 {
			return a
		}
		return b
	}
	for i := range 100 {
		ml := mlOf(i)
		c.put(ml, Position{1, int64(i)}, data(ml, i), 0)
		c.put(ml, Position{1, int64(i)}, []byte("duplicate ignored"), 0)
		if c.bytes() > limit {
			t.Fatalf("after %d puts: %d bytes, limit %d", i+1, c.bytes(), limit)
		}
		for j := 0; j <= i; j++ {
			got, _, ok := c.get(mlOf(j), Position{1, int64(j)})
			if want := j > i-10; ok != want {
				t.Fatalf("after put %d: entry %d cached=%v, want %v", i, j, ok, want)
			}
			if ok && string(got) != string(data(mlOf(j), j)) {
				t.Fatalf("entry %d: got %q", j, got)
			}
		}
	}
	if c.nfree > maxFreeCacheItems {
		t.Fatalf("%d free items", c.nfree)
	}
	c.dropLedger(a, 1)
	for j := 90; j < 100; j++ {
		if _, _, ok := c.get(mlOf(j), Position{1, int64(j)}); ok != (mlOf(j) == b) {
			t.Fatalf("after dropping a: entry %d cached=%v", j, ok)
		}
	}
	c.dropLedger(b, -1)
	if c.bytes() != 0 || c.head != nil || c.tail != nil || len(c.byML) != 0 {
		t.Fatalf("not empty: %d bytes, %d ledgers", c.bytes(), len(c.byML))
	}
	c.put(a, Position{2, 0}, data(a, 0), 0)
	if got, _, ok := c.get(a, Position{2, 0}); !ok || string(got) != string(data(a, 0)) {
		t.Fatalf("after emptying: %q %v", got, ok)
	}
	if c.put(a, Position{2, 1}, make([]byte, limit), 0); c.bytes() > limit {
		t.Fatalf("oversized entry cached")
	}
}
