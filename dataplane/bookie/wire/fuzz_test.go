package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzDecodeFrame feeds arbitrary bytes to the frame parser, the stream
// reader and both message decoders. They must never panic, must agree, and
// every accepted message must re-encode to the exact input bytes.
func FuzzDecodeFrame(f *testing.F) {
	payload := []byte("payload")
	for _, r := range []Request{
		{Op: OpHandshake, RequestID: 1},
		{Op: OpAdd, RequestID: 2, LedgerID: 1, EntryID: 2, LAC: 1, Checksum: Checksum(1, 2, 1, payload), Payload: payload},
		{Op: OpAdd, RequestID: 3, LedgerID: 1, Recovery: true},
		{Op: OpRead, RequestID: 4, LedgerID: 1, EntryID: 2, ReadFlags: ReadFenceLedger},
		{Op: OpReadLAC, RequestID: 5, LedgerID: 1},
		{Op: OpFence, RequestID: 6, LedgerID: 1},
		{Op: OpDeleteLedger, RequestID: 7, LedgerID: 1},
	} {
		f.Add(encodeRequest(f, &r))
	}
	for _, r := range []Response{
		{Op: OpHandshake, RequestID: 1, Version: 1, BookieID: "b1"},
		{Op: OpAdd, RequestID: 2, LedgerID: 1, EntryID: 2},
		{Op: OpRead, RequestID: 3, LedgerID: 1, EntryID: 2, LAC: 1, Checksum: 9, Payload: payload},
		{Op: OpReadLAC, RequestID: 4, LAC: 1, LastEntry: 2},
		{Op: OpFence, RequestID: 5, LAC: 1},
		{Op: OpDeleteLedger, RequestID: 6},
		{Op: OpError, RequestID: 0, Status: StatusMalformed, Message: "bad"},
		{Op: OpAdd, RequestID: 7, Status: StatusFenced, Message: "fenced"},
	} {
		f.Add(encodeResponse(f, &r))
	}
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2})

	const maxSize = 1 << 16
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, n, err := ParseFrame(data, maxSize)
		sf, serr := NewFrameReader(bytes.NewReader(data), maxSize).ReadFrame()
		if err != nil {
			if serr == nil {
				t.Fatalf("ParseFrame failed (%v) but ReadFrame accepted", err)
			}
			if err == io.ErrUnexpectedEOF && n != 0 {
				t.Fatalf("incomplete frame consumed %d bytes", n)
			}
			return
		}
		if serr != nil {
			t.Fatalf("ReadFrame failed (%v) but ParseFrame accepted", serr)
		}
		if n < MinFrameSize || n > len(data) || n > maxSize {
			t.Fatalf("frame size %d out of bounds (input %d)", n, len(data))
		}
		if sf.Header != fr.Header || !bytes.Equal(sf.Body, fr.Body) {
			t.Fatal("ParseFrame and ReadFrame disagree")
		}
		frame := data[:n]
		if req, err := DecodeRequest(fr); err == nil {
			if got := encodeRequest(t, &req); !bytes.Equal(got, frame) {
				t.Fatalf("request %+v re-encodes differently:\n%x\n%x", req, got, frame)
			}
		} else if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) {
			t.Fatalf("DecodeRequest error %v is not ErrMalformed/ErrUnsupported", err)
		}
		if resp, err := DecodeResponse(fr); err == nil {
			if got := encodeResponse(t, &resp); !bytes.Equal(got, frame) {
				t.Fatalf("response %+v re-encodes differently:\n%x\n%x", resp, got, frame)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodeResponse error %v is not ErrMalformed", err)
		}
	})
}
