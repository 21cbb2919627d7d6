package broker

import (
	"fmt"
	"testing"
)

func TestMurmur3Vectors(t *testing.T) {
	for _, tt := range []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0},
		{"", 1, 0x514e28b7},
		{"hello", 0, 0x248bfa47},
		{"The quick brown fox jumps over the lazy dog", 0, 0x2e4ff723},
	} {
		if got := murmur3x86_32([]byte(tt.in), tt.seed); got != tt.want {
			t.Errorf("murmur3(%q, %d) = %#x, want %#x", tt.in, tt.seed, got, tt.want)
		}
	}
}

func TestAutoSplitRanges(t *testing.T) {
	s := &Subscription{}
	cs := []*Consumer{{name: "a"}, {name: "b"}, {name: "c"}}
	for _, c := range cs {
		s.splitAddLocked(c)
	}
	// The ranges tile the hash space.
	next := int32(0)
	for _, r := range s.ranges {
		if r.start != next || r.end < r.start {
			t.Fatalf("ranges do not tile: %+v", s.ranges)
		}
		next = r.end + 1
	}
	if next != keyHashRange {
		t.Fatalf("ranges end at %d", next)
	}
	owned := map[*Consumer]int{}
	for i := 0; i < 3000; i++ {
		owned[s.autoSplitOwnerLocked(keyHash(fmt.Sprint("k", i)))]++
	}
	if len(owned) != 3 {
		t.Fatalf("keys reach %d of 3 consumers", len(owned))
	}
	s.splitRemoveLocked(cs[1])
	for _, r := range s.ranges {
		if r.c == cs[1] {
			t.Fatal("removed consumer still owns a range")
		}
	}
	if s.ranges[0].start != 0 || s.ranges[len(s.ranges)-1].end != keyHashRange-1 {
		t.Fatalf("ranges after removal: %+v", s.ranges)
	}
}
