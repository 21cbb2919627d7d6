package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
)

func encodeRequest(t testing.TB, r *Request) []byte {
	t.Helper()
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, 0)
	if err := fw.WriteRequest(r); err != nil {
		t.Fatalf("WriteRequest(%+v): %v", r, err)
	}
	if err := fw.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func encodeResponse(t testing.TB, r *Response) []byte {
	t.Helper()
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, 0)
	if err := fw.WriteResponse(r); err != nil {
		t.Fatalf("WriteResponse(%+v): %v", r, err)
	}
	if err := fw.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRequestRoundTrip(t *testing.T) {
	payload := []byte("hello, bookie")
	tests := []Request{
		{Op: OpHandshake, RequestID: 1},
		{Op: OpAdd, RequestID: 2, LedgerID: 7, EntryID: 3, LAC: 2, Checksum: Checksum(7, 3, 2, payload), Payload: payload},
		{Op: OpAdd, RequestID: 3, LedgerID: 1 << 62, EntryID: 0, LAC: -1, Checksum: 42, Recovery: true, Payload: []byte{}},
		{Op: OpRead, RequestID: 4, LedgerID: 9, EntryID: 10},
		{Op: OpRead, RequestID: 5, LedgerID: 9, EntryID: -1, ReadFlags: ReadFenceLedger},
		{Op: OpReadLAC, RequestID: 6, LedgerID: 11},
		{Op: OpFence, RequestID: 1<<64 - 1, LedgerID: 12},
		{Op: OpDeleteLedger, RequestID: 8, LedgerID: -5},
	}
	for _, want := range tests {
		t.Run(fmt.Sprintf("%s/%d", want.Op, want.RequestID), func(t *testing.T) {
			b := encodeRequest(t, &want)
			f, n, err := ParseFrame(b, 0)
			if err != nil || n != len(b) {
				t.Fatalf("ParseFrame = %d, %v; want %d, nil", n, err, len(b))
			}
			got, err := DecodeRequest(f)
			if err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			if want.Op == OpAdd && len(want.Payload) == 0 {
				want.Payload = got.Payload[:0:0]
			} else if want.Op != OpAdd {
				want.Payload = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	payload := []byte("entry payload")
	tests := []Response{
		{Op: OpHandshake, RequestID: 1, Version: ProtocolVersion, BookieID: "bookie-1"},
		{Op: OpHandshake, RequestID: 1, Version: ProtocolVersion, BookieID: ""},
		{Op: OpAdd, RequestID: 2, LedgerID: 7, EntryID: 3},
		{Op: OpRead, RequestID: 3, LedgerID: 7, EntryID: 3, LAC: 2, Checksum: 99, Payload: payload},
		{Op: OpReadLAC, RequestID: 4, LAC: 5, LastEntry: 6},
		{Op: OpFence, RequestID: 5, LAC: -1},
		{Op: OpDeleteLedger, RequestID: 6},
	}
	// Every op with every error status.
	for _, op := range []Op{OpHandshake, OpAdd, OpRead, OpReadLAC, OpFence, OpDeleteLedger, OpError} {
		for _, e := range statusTable {
			tests = append(tests, Response{Op: op, RequestID: 100, Status: e.status, Message: e.err.Error()})
		}
	}
	tests = append(tests, Response{Op: OpError, RequestID: 0, Status: StatusMalformed})
	for _, want := range tests {
		t.Run(fmt.Sprintf("%s/%d/%d", want.Op, want.RequestID, want.Status), func(t *testing.T) {
			b := encodeResponse(t, &want)
			f, n, err := ParseFrame(b, 0)
			if err != nil || n != len(b) {
				t.Fatalf("ParseFrame = %d, %v; want %d, nil", n, err, len(b))
			}
			got, err := DecodeResponse(f)
			if err != nil {
				t.Fatalf("DecodeResponse: %v", err)
			}
			if want.Op != OpRead || want.Status != StatusOK {
				if len(got.Payload) != 0 {
					t.Fatalf("unexpected payload %q", got.Payload)
				}
				got.Payload = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
			if want.Status != StatusOK && !errors.Is(got.Status.Err(), statusErr(t, want.Status)) {
				t.Fatalf("status %d maps to %v", got.Status, got.Status.Err())
			}
		})
	}
}

func statusErr(t *testing.T, s Status) error {
	for _, e := range statusTable {
		if e.status == s {
			return e.err
		}
	}
	t.Fatalf("status %d not in table", s)
	return nil
}

func TestStatusTable(t *testing.T) {
	sentinels := []error{ErrNoSuchEntry, ErrNoSuchLedger, ErrFenced, ErrReadOnly, ErrBadRequest, ErrChecksum,
		ErrTooLarge, ErrIO, ErrTimeout, ErrConnClosed, ErrUnsupported, ErrMalformed}
	seen := map[Status]bool{}
	for _, err := range sentinels {
		s := StatusOf(fmt.Errorf("context: %w", err))
		if s == StatusOK || seen[s] {
			t.Fatalf("StatusOf(%v) = %d: not a unique error status", err, s)
		}
		seen[s] = true
		if s.Err() != err {
			t.Fatalf("status %d maps back to %v, want %v", s, s.Err(), err)
		}
	}
	if len(seen) != len(statusTable) {
		t.Fatalf("table has %d entries, %d sentinels", len(statusTable), len(seen))
	}
	if StatusOf(nil) != StatusOK || StatusOK.Err() != nil {
		t.Fatal("StatusOK must map to nil")
	}
	if StatusOf(errors.New("disk on fire")) != StatusIO {
		t.Fatal("unknown errors must map to StatusIO")
	}
	if err := Status(999).Err(); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unknown status = %v, want ErrUnsupported", err)
	}
}

// rawFrame builds a frame with a valid CRC around an arbitrary header.
func rawFrame(version uint8, op Op, flags uint16, id uint64, body []byte) []byte {
	b := AppendFrame(nil, Header{Op: op, Flags: flags, RequestID: id}, body)
	if version != ProtocolVersion {
		b[4] = version
		binary.BigEndian.PutUint32(b[len(b)-4:], crcOf(b[4:len(b)-4]))
	}
	return b
}

func TestParseFrameErrors(t *testing.T) {
	good := AppendFrame(nil, Header{Op: OpReadLAC, RequestID: 3}, make([]byte, 8))
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-1] ^= 1
	flipped := bytes.Clone(good)
	flipped[10] ^= 0x40 // request id bit: the CRC catches it
	short := bytes.Clone(good)
	binary.BigEndian.PutUint32(short, 3)
	huge := bytes.Clone(good)
	binary.BigEndian.PutUint32(huge, 1<<31)

	tests := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"empty", nil, 0, io.ErrUnexpectedEOF},
		{"partial length", good[:2], 0, io.ErrUnexpectedEOF},
		{"truncated", good[:len(good)-1], 0, io.ErrUnexpectedEOF},
		{"length below minimum", short, 0, ErrMalformed},
		{"oversize", huge, 0, ErrTooLarge},
		{"over configured max", good, len(good) - 1, ErrTooLarge},
		{"bad crc", badCRC, 0, ErrMalformed},
		{"flipped header bit", flipped, 0, ErrMalformed},
		{"unknown version", rawFrame(2, OpRead, 0, 1, make([]byte, 16)), 0, ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseFrame(tt.in, tt.max)
			if !errors.Is(err, tt.want) {
				t.Fatalf("ParseFrame = %v, want %v", err, tt.want)
			}
		})
	}
	if _, n, err := ParseFrame(good, len(good)); err != nil || n != len(good) {
		t.Fatalf("frame of exactly max size: %d, %v", n, err)
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	tests := []struct {
		name  string
		op    Op
		flags uint16
		body  []byte
		want  error
	}{
		{"unknown op", Op(0x42), 0, nil, ErrUnsupported},
		{"response op as request", OpAdd | opResponse, 0, nil, ErrUnsupported},
		{"handshake with body", OpHandshake, 0, []byte{1}, ErrMalformed},
		{"add body too short", OpAdd, 0, make([]byte, addReqFixed-1), ErrMalformed},
		{"add unknown flag", OpAdd, 2, make([]byte, addReqFixed), ErrMalformed},
		{"read body too short", OpRead, 0, make([]byte, 15), ErrMalformed},
		{"read body too long", OpRead, 0, make([]byte, 17), ErrMalformed},
		{"read unknown flag", OpRead, 0x80, make([]byte, 16), ErrMalformed},
		{"read lac empty", OpReadLAC, 0, nil, ErrMalformed},
		{"fence flags", OpFence, 1, make([]byte, 8), ErrMalformed},
		{"delete body too long", OpDeleteLedger, 0, make([]byte, 9), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _, err := ParseFrame(AppendFrame(nil, Header{Op: tt.op, Flags: tt.flags, RequestID: 77}, tt.body), 0)
			if err != nil {
				t.Fatal(err)
			}
			r, err := DecodeRequest(f)
			if !errors.Is(err, tt.want) {
				t.Fatalf("DecodeRequest = %v, want %v", err, tt.want)
			}
			if r.RequestID != 77 {
				t.Fatalf("request id %d lost", r.RequestID)
			}
		})
	}
}

func TestDecodeResponseErrors(t *testing.T) {
	ok := []byte{0, 0}
	tests := []struct {
		name  string
		op    Op
		flags uint16
		body  []byte
	}{
		{"request op", OpAdd, 0, ok},
		{"unknown response op", Op(0x42) | opResponse, 0, ok},
		{"no status", OpAdd | opResponse, 0, nil},
		{"flags", OpAdd | opResponse, 1, append(ok, make([]byte, 16)...)},
		{"add short", OpAdd | opResponse, 0, append(ok, make([]byte, 15)...)},
		{"read short", OpRead | opResponse, 0, append(ok, make([]byte, 27)...)},
		{"read lac long", OpReadLAC | opResponse, 0, append(ok, make([]byte, 17)...)},
		{"fence short", OpFence | opResponse, 0, ok},
		{"delete long", OpDeleteLedger | opResponse, 0, append(ok, 1)},
		{"handshake short", OpHandshake | opResponse, 0, ok},
		{"error op with OK", OpError | opResponse, 0, ok},
		{"message too long", OpAdd | opResponse, 0, append([]byte{0, 3}, make([]byte, MaxMessageLen+1)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _, err := ParseFrame(AppendFrame(nil, Header{Op: tt.op, Flags: tt.flags, RequestID: 5}, tt.body), 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeResponse(f); !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodeResponse = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	fw := NewFrameWriter(io.Discard, MinFrameSize+addReqFixed+4)
	if err := fw.WriteRequest(&Request{Op: OpAdd, Payload: make([]byte, 5)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize add = %v, want ErrTooLarge", err)
	}
	if err := fw.WriteRequest(&Request{Op: OpAdd, Payload: make([]byte, 4)}); err != nil {
		t.Fatalf("add of exactly max size: %v", err)
	}
	if err := fw.WriteRequest(&Request{Op: Op(0x42)}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unknown op = %v", err)
	}
	if err := fw.WriteResponse(&Response{Op: Op(0x42)}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unknown response op = %v", err)
	}
}

func TestFrameReaderStream(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, 0)
	big := bytes.Repeat([]byte{7}, 2<<20)
	reqs := []Request{
		{Op: OpAdd, RequestID: 1, LedgerID: 1, Payload: []byte("a")},
		{Op: OpAdd, RequestID: 2, LedgerID: 1, EntryID: 1, Payload: big},
		{Op: OpFence, RequestID: 3, LedgerID: 1},
		{Op: OpAdd, RequestID: 4, LedgerID: 1, EntryID: 2, Payload: []byte("small after big")},
	}
	for i := range reqs {
		if err := fw.WriteRequest(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	fw.Flush()
	stream := buf.Bytes()
	fr := NewFrameReader(bytes.NewReader(stream), 0)
	for i, want := range reqs {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got, err := DecodeRequest(f)
		if err != nil {
			t.Fatal(err)
		}
		if got.RequestID != want.RequestID || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("frame %d: got id %d payload %d bytes", i, got.RequestID, len(got.Payload))
		}
	}
	if _, err := fr.ReadFrame(); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
	fr = NewFrameReader(bytes.NewReader(stream[:len(stream)-3]), 0)
	var err error
	for err == nil {
		_, err = fr.ReadFrame()
	}
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("cut stream: %v, want io.ErrUnexpectedEOF", err)
	}
	fr = NewFrameReader(bytes.NewReader(stream), 1<<20)
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.ReadFrame(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize frame: %v, want ErrTooLarge", err)
	}
}

func TestCodecAllocations(t *testing.T) {
	payload := make([]byte, 1024)
	req := Request{Op: OpAdd, RequestID: 1, LedgerID: 1, EntryID: 2, LAC: 1, Checksum: 5, Payload: payload}
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, 0)
	// Warm up buffers.
	fw.WriteRequest(&req)
	fw.Flush()
	one := bytes.Clone(buf.Bytes())
	stream := &repeatReader{frame: one}
	fr := NewFrameReader(stream, 0)
	fr.ReadFrame()
	allocs := testing.AllocsPerRun(200, func() {
		buf.Reset()
		if err := fw.WriteRequest(&req); err != nil {
			t.Fatal(err)
		}
		fw.Flush()
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeRequest(f); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("encode+decode of an add allocates %.1f times, want 0", allocs)
	}
}

// repeatReader returns the same frame forever.
type repeatReader struct {
	frame []byte
	off   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := copy(p, r.frame[r.off:])
	r.off = (r.off + n) % len(r.frame)
	return n, nil
}

func BenchmarkEncodeDecodeAdd(b *testing.B) {
	payload := make([]byte, 1024)
	req := Request{Op: OpAdd, RequestID: 1, LedgerID: 1, EntryID: 2, LAC: 1, Checksum: 5, Payload: payload}
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, 0)
	fw.WriteRequest(&req)
	fw.Flush()
	fr := NewFrameReader(&repeatReader{frame: bytes.Clone(buf.Bytes())}, 0)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		fw.WriteRequest(&req)
		fw.Flush()
		f, _ := fr.ReadFrame()
		DecodeRequest(f)
	}
}
