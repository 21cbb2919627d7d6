package bundle

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestEven(t *testing.T) {
	b := Even(4)
	want := []string{"0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"}
	got := b.Strings()
	if len(got) != len(want) {
		t.Fatalf("Even(4) = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Even(4) = %v, want %v", got, want)
		}
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 3, 7, 16, 1000} {
		if err := Even(n).Validate(); err != nil || Even(n).Count() != n {
			t.Fatalf("Even(%d): %v count %d", n, err, Even(n).Count())
		}
	}
}

func TestFindCoversEveryHashOnce(t *testing.T) {
	for _, b := range []Boundaries{Even(1), Even(4), Even(3), {0, 1, 2, Max - 1, Max}} {
		edges := []uint32{0, 1, 2, Max - 1, Max}
		for _, v := range b {
			edges = append(edges, v, v-1, v+1)
		}
		r := rand.New(rand.NewPCG(1, 2))
		for range 2000 {
			edges = append(edges, r.Uint32())
		}
		for _, h := range edges {
			got := b.Find(h)
			if !got.Contains(h) || !b.Has(got) {
				t.Fatalf("%v.Find(%#x) = %v", b.Strings(), h, got)
			}
			n := 0
			for _, rg := range b.Ranges() {
				if rg.Contains(h) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("hash %#x in %d bundles of %v", h, n, b.Strings())
			}
		}
	}
}

func TestRangeNames(t *testing.T) {
	r := Range{0x40000000, 0x80000000}
	if r.String() != "0x40000000_0x80000000" {
		t.Fatal(r.String())
	}
	p, err := ParseRange("0x40000000_0x80000000")
	if err != nil || p != r {
		t.Fatal(p, err)
	}
	for _, bad := range []string{"", "0x1", "0x2_0x1", "1_2", "0x_0x1", "0x100000000_0x100000001", "0x1_0x1"} {
		if _, err := ParseRange(bad); !errors.Is(err, ErrBadRange) {
			t.Errorf("ParseRange(%q) = %v", bad, err)
		}
	}
}

func TestSplit(t *testing.T) {
	b := Even(2)
	nb, err := b.Split(Range{0, 0x80000000})
	if err != nil {
		t.Fatal(err)
	}
	if got := nb.Strings(); len(got) != 4 || got[1] != "0x40000000" || got[2] != "0x80000000" {
		t.Fatalf("split = %v", got)
	}
	if b.Count() != 2 {
		t.Fatal("Split modified its receiver")
	}
	if _, err := nb.Split(Range{0, 0x80000000}); !errors.Is(err, ErrBadRange) {
		t.Fatalf("split of a non-bundle: %v", err)
	}
	tiny := Boundaries{0, 1, Max}
	if _, err := tiny.Split(Range{0, 1}); !errors.Is(err, ErrTooSmall) {
		t.Fatalf("split of a one-hash bundle: %v", err)
	}
	last, err := nb.Split(Range{0x80000000, Max})
	if err != nil || last.Validate() != nil || last.Count() != 4 {
		t.Fatalf("split last: %v %v", last.Strings(), err)
	}
}

func TestParse(t *testing.T) {
	b, err := Parse([]string{"0x00000000", "0x80000000", "0xffffffff"})
	if err != nil || b.Count() != 2 {
		t.Fatal(b, err)
	}
	for _, bad := range [][]string{{}, {"0x00000000"}, {"0x00000001", "0xffffffff"}, {"0x00000000", "0x10", "0x10", "0xffffffff"}, {"zz"}} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%v) accepted", bad)
		}
	}
}

// The hash is CRC-32 (IEEE) of the full name, the value Pulsar's admin tools
// use to place a topic (checked against the polynomial's published check
// value for "123456789").
func TestHash(t *testing.T) {
	if got := Hash("123456789"); got != 0xcbf43926 {
		t.Fatalf("Hash check value = %#x", got)
	}
	if Hash("persistent://public/default/a") == Hash("persistent://public/default/b") {
		t.Fatal("distinct names hash alike")
	}
}
