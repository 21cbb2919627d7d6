package offload

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// buildObjects lays out entries as Offload does: blocks of at most
// blockSize, returning the data object and its index.
func buildObjects(entries [][]byte, blockSize int) ([]byte, *index) {
	x := &index{LedgerID: 7, Entries: int64(len(entries)), BlockSize: int64(blockSize), Metadata: map[string]string{"k": "v"}}
	var data []byte
	var bb blockBuilder
	bb.reset(0)
	flush := func() {
		b := bb.finish()
		x.Blocks = append(x.Blocks, blockRef{First: bb.first, Part: int32(len(x.Blocks) + 1), Offset: int64(len(data)), Length: int64(len(b))})
		data = append(data, b...)
	}
	for i, e := range entries {
		x.Offsets = append(x.Offsets, int64(len(data)+len(bb.buf)))
		bb.add(int64(i), e)
		if len(bb.buf) >= blockSize {
			flush()
			bb.reset(int64(i + 1))
		}
	}
	if bb.entries > 0 {
		flush()
	}
	x.DataLen = int64(len(data))
	return data, x
}

func TestFormatRoundTrip(t *testing.T) {
	var entries [][]byte
	for i := range 300 {
		entries = append(entries, bytes.Repeat([]byte{byte(i)}, i*7%500))
	}
	entries = append(entries, make([]byte, 9000)) // larger than a block
	data, x := buildObjects(entries, 4096)
	if len(x.Blocks) < 10 {
		t.Fatalf("%d blocks", len(x.Blocks))
	}
	for _, b := range x.Blocks {
		n, cnt, first, err := parseBlockHeader(data[b.Offset:])
		if err != nil || int64(n) != b.Length || first != b.First || cnt == 0 {
			t.Fatalf("block %+v: header %d %d %d %v", b, n, cnt, first, err)
		}
	}
	enc, err := x.encode()
	if err != nil {
		t.Fatal(err)
	}
	y, err := decodeIndex(enc)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(x) != fmt.Sprint(y) {
		t.Fatalf("index changed in the round trip")
	}
	// Every range, read from a span of the data object starting at an
	// arbitrary earlier offset, gives the entries back.
	for _, r := range [][2]int64{{0, 0}, {0, 300}, {17, 18}, {299, 300}, {100, 250}, {300, 300}} {
		from, to, err := y.span(r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		base := max(from-3, 0)
		got, err := y.parseEntries(data[base:to], base, r[0], r[1])
		if err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		for k, e := range got {
			if e.id != r[0]+int64(k) || !bytes.Equal(e.data, entries[e.id]) {
				t.Fatalf("range %v: entry %d wrong", r, e.id)
			}
		}
	}
	// A flipped payload byte is caught by the entry checksum.
	bad := bytes.Clone(data)
	bad[y.Offsets[5]+entryHeaderLen] ^= 1
	if _, err := y.parseEntries(bad, 0, 5, 5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt entry: %v", err)
	}
	// Any flipped index byte is caught.
	for i := 0; i < len(enc); i += 13 {
		b := bytes.Clone(enc)
		b[i] ^= 0x40
		if _, err := decodeIndex(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped index byte %d: %v", i, err)
		}
	}
	if _, _, err := y.span(5, 301); err == nil {
		t.Fatal("span past the last entry")
	}
}

// FuzzDecodeIndex: any bytes decode to an error or to an index whose
// spans stay inside the data object; never a panic.
func FuzzDecodeIndex(f *testing.F) {
	_, x := buildObjects([][]byte{[]byte("a"), []byte("bb"), make([]byte, 5000), []byte("c")}, 4096)
	enc, _ := x.encode()
	f.Add(enc)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		y, err := decodeIndex(b)
		if err != nil {
			return
		}
		for i := int64(0); i < y.Entries; i++ {
			from, to, err := y.span(i, i)
			if err != nil || from < 0 || to > y.DataLen || from >= to {
				t.Fatalf("entry %d: span %d..%d of %d: %v", i, from, to, y.DataLen, err)
			}
		}
	})
}
