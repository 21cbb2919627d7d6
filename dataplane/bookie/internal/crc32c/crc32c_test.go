package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestMatchesHashCRC32(t *testing.T) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 200; n++ {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		seed := r.Uint32()
		if got, want := Small(seed, p), crc32.Update(seed, tab, p); got != want {
			t.Fatalf("len %d: Small = %08x, want %08x", n, got, want)
		}
		if got, want := Update(seed, p), crc32.Update(seed, tab, p); got != want {
			t.Fatalf("len %d: Update = %08x, want %08x", n, got, want)
		}
		// Chaining a small header and a large payload, as the formats do.
		if n > 10 {
			if got, want := Update(Small(0, p[:10]), p[10:]), Checksum(p); got != want {
				t.Fatalf("len %d: chained = %08x, want %08x", n, got, want)
			}
		}
	}
}

func TestSmallHeaderDoesNotAllocate(t *testing.T) {
	payload := make([]byte, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		var h [24]byte
		h[0] = 1
		_ = Update(Small(0, h[:]), payload)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per checksum of a stack header, want 0", allocs)
	}
}
