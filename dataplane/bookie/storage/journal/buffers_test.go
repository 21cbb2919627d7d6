package journal

import (
	"bytes"
	"testing"
)

// TestPendingBufferDoubles: appended to with no writer draining it, the
// pending group grows by doubling from firstPendingCap, never past what
// pending can reach, and keeps its records intact; the O_DIRECT stage
// doubles too. Growing in append's quarter steps would allocate (and first
// touch) a new buffer some twenty times on the way to a few MiB.
func TestPendingBufferDoubles(t *testing.T) {
	const maxPending = 4 << 20
	j := &Journal{opts: Options{MaxPendingBytes: maxPending}}
	data := bytes.Repeat([]byte{0xab}, 1000)
	var caps []int
	var n int64
	for len(j.buf) < maxPending {
		if _, err := j.AppendChecksummed(1, n, n-1, data, EntryChecksum(1, n, n-1, data), func(error) {}); err != nil {
			t.Fatal(err)
		}
		n++
		if c := cap(j.buf); len(caps) == 0 || caps[len(caps)-1] != c {
			caps = append(caps, c)
		}
	}
	want := firstPendingCap
	for i, c := range caps {
		last := i == len(caps)-1
		switch {
		case !last && c != want:
			t.Fatalf("capacities %v: step %d is %d, want %d (doubling from %d)", caps, i, c, want, firstPendingCap)
		case last && (c > maxPending+EncodedLen(len(data)) || c < maxPending):
			t.Fatalf("capacities %v: the last is %d, want %d..%d", caps, c, maxPending, maxPending+EncodedLen(len(data)))
		}
		want *= 2
	}
	for i, b := 0, j.buf; len(b) > 0; i++ {
		r, size, err := DecodeRecord(b)
		if err != nil || r.Entry != int64(i) || !bytes.Equal(r.Data, data) {
			t.Fatalf("record %d after the buffer grew: %+v, %v", i, r, err)
		}
		b = b[size:]
	}

	var stages []int
	for size := directBlock; size <= 8<<20; size += 64 << 10 {
		if s := j.stageBuf(size); len(s) != size {
			t.Fatalf("stageBuf(%d) has %d bytes", size, len(s))
		}
		if c := cap(j.stage); len(stages) == 0 || stages[len(stages)-1] != c {
			stages = append(stages, c)
		}
	}
	if len(stages) > 10 {
		t.Fatalf("the stage was allocated %d times on the way to 8 MiB (%v), want it to double", len(stages), stages)
	}
}
