package wire

import (
	"encoding/binary"
	"fmt"
)

// Request is any request message, decoded or to be encoded. Which fields are
// meaningful depends on Op (see doc.go for the body of each op).
type Request struct {
	Op        Op
	RequestID uint64
	LedgerID  int64
	EntryID   int64     // ADD, READ
	LAC       int64     // ADD
	Checksum  uint32    // ADD
	Recovery  bool      // ADD
	ReadFlags ReadFlags // READ
	// Payload is the entry of an ADD. A decoded Payload aliases the frame
	// it came from.
	Payload []byte
}

// Response is any response message. Op is the op of the request it answers
// (OpError for an unknown op or a connection-level error). When Status is
// not StatusOK only Message is meaningful.
type Response struct {
	Op        Op
	RequestID uint64
	Status    Status
	Message   string // status != OK: human-readable detail (<= MaxMessageLen bytes)
	LedgerID  int64  // ADD, READ
	EntryID   int64  // ADD, READ
	LAC       int64  // READ, READ_LAC, FENCE
	LastEntry int64  // READ_LAC
	Checksum  uint32 // READ
	// Payload is the entry of a READ. A decoded Payload aliases the frame it
	// came from.
	Payload  []byte
	Version  uint8  // HANDSHAKE
	BookieID string // HANDSHAKE
}

// MaxMessageLen bounds an error response's message; longer ones are cut.
const MaxMessageLen = 1024

// Fixed body sizes.
const (
	addReqFixed     = 8 + 8 + 8 + 4
	readReqFixed    = 8 + 8
	ledgerReqFixed  = 8
	statusSize      = 2
	addRespFixed    = statusSize + 8 + 8
	readRespFixed   = statusSize + 8 + 8 + 8 + 4
	readLACResp     = statusSize + 8 + 8
	fenceResp       = statusSize + 8
	deleteResp      = statusSize
	handshakeFixed  = statusSize + 1
	maxBookieIDSize = 255
)

func malformed(op Op, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, op, fmt.Sprintf(format, args...))
}

// DecodeRequest decodes a request frame. Payload aliases f.Body. Unknown ops
// return ErrUnsupported (the frame's RequestID is still usable); bodies of the
// wrong size or unknown flag bits return ErrMalformed.
func DecodeRequest(f Frame) (Request, error) {
	r := Request{Op: f.Op, RequestID: f.RequestID}
	b := f.Body
	allowed := uint16(0)
	switch f.Op {
	case OpHandshake:
		if len(b) != 0 {
			return r, malformed(f.Op, "body of %d bytes, want 0", len(b))
		}
	case OpAdd:
		if len(b) < addReqFixed {
			return r, malformed(f.Op, "body of %d bytes, want at least %d", len(b), addReqFixed)
		}
		r.LedgerID = int64(binary.BigEndian.Uint64(b[0:]))
		r.EntryID = int64(binary.BigEndian.Uint64(b[8:]))
		r.LAC = int64(binary.BigEndian.Uint64(b[16:]))
		r.Checksum = binary.BigEndian.Uint32(b[24:])
		r.Payload = b[addReqFixed:]
		r.Recovery = f.Flags&FlagRecovery != 0
		allowed = FlagRecovery
	case OpRead:
		if len(b) != readReqFixed {
			return r, malformed(f.Op, "body of %d bytes, want %d", len(b), readReqFixed)
		}
		r.LedgerID = int64(binary.BigEndian.Uint64(b[0:]))
		r.EntryID = int64(binary.BigEndian.Uint64(b[8:]))
		r.ReadFlags = ReadFlags(f.Flags)
		allowed = uint16(ReadFenceLedger)
	case OpReadLAC, OpFence, OpDeleteLedger:
		if len(b) != ledgerReqFixed {
			return r, malformed(f.Op, "body of %d bytes, want %d", len(b), ledgerReqFixed)
		}
		r.LedgerID = int64(binary.BigEndian.Uint64(b[0:]))
	default:
		return r, fmt.Errorf("%w: request op %s", ErrUnsupported, f.Op)
	}
	if f.Flags&^allowed != 0 {
		return r, malformed(f.Op, "unknown flags 0x%04x", f.Flags&^allowed)
	}
	return r, nil
}

// WriteRequest encodes r into the writer's buffer (the caller flushes).
// The payload is copied or written through, not retained.
func (fw *FrameWriter) WriteRequest(r *Request) error {
	h := Header{Op: r.Op, RequestID: r.RequestID}
	b := fw.scratch[headerSize:]
	var n int
	var payload []byte
	switch r.Op {
	case OpHandshake:
	case OpAdd:
		binary.BigEndian.PutUint64(b[0:], uint64(r.LedgerID))
		binary.BigEndian.PutUint64(b[8:], uint64(r.EntryID))
		binary.BigEndian.PutUint64(b[16:], uint64(r.LAC))
		binary.BigEndian.PutUint32(b[24:], r.Checksum)
		n, payload = addReqFixed, r.Payload
		if r.Recovery {
			h.Flags |= FlagRecovery
		}
	case OpRead:
		binary.BigEndian.PutUint64(b[0:], uint64(r.LedgerID))
		binary.BigEndian.PutUint64(b[8:], uint64(r.EntryID))
		n = readReqFixed
		h.Flags = uint16(r.ReadFlags)
	case OpReadLAC, OpFence, OpDeleteLedger:
		binary.BigEndian.PutUint64(b[0:], uint64(r.LedgerID))
		n = ledgerReqFixed
	default:
		return fmt.Errorf("%w: request op %s", ErrUnsupported, r.Op)
	}
	return fw.writeFrame(h, n, payload)
}

// DecodeResponse decodes a response frame. Payload aliases f.Body; Message
// and BookieID are copies.
func DecodeResponse(f Frame) (Response, error) {
	op := f.Op &^ opResponse
	r := Response{Op: op, RequestID: f.RequestID}
	if f.Op&opResponse == 0 || (!op.known() && op != OpError) {
		return r, malformed(f.Op, "not a response op")
	}
	if f.Flags != 0 {
		return r, malformed(op, "unknown flags 0x%04x", f.Flags)
	}
	b := f.Body
	if len(b) < statusSize {
		return r, malformed(op, "body of %d bytes has no status", len(b))
	}
	r.Status = Status(binary.BigEndian.Uint16(b))
	if r.Status != StatusOK {
		if len(b)-statusSize > MaxMessageLen {
			return r, malformed(op, "error message of %d bytes", len(b)-statusSize)
		}
		r.Message = string(b[statusSize:])
		return r, nil
	}
	want := -1 // exact body size; -1: checked below
	switch op {
	case OpHandshake:
		if len(b) < handshakeFixed || len(b)-handshakeFixed > maxBookieIDSize {
			return r, malformed(op, "body of %d bytes", len(b))
		}
		r.Version = b[2]
		r.BookieID = string(b[handshakeFixed:])
	case OpAdd:
		want = addRespFixed
	case OpRead:
		if len(b) < readRespFixed {
			return r, malformed(op, "body of %d bytes, want at least %d", len(b), readRespFixed)
		}
		r.LedgerID = int64(binary.BigEndian.Uint64(b[2:]))
		r.EntryID = int64(binary.BigEndian.Uint64(b[10:]))
		r.LAC = int64(binary.BigEndian.Uint64(b[18:]))
		r.Checksum = binary.BigEndian.Uint32(b[26:])
		r.Payload = b[readRespFixed:]
	case OpReadLAC:
		want = readLACResp
	case OpFence:
		want = fenceResp
	case OpDeleteLedger:
		want = deleteResp
	case OpError:
		return r, malformed(op, "error response with status OK")
	}
	if want >= 0 {
		if len(b) != want {
			return r, malformed(op, "body of %d bytes, want %d", len(b), want)
		}
		switch op {
		case OpAdd:
			r.LedgerID = int64(binary.BigEndian.Uint64(b[2:]))
			r.EntryID = int64(binary.BigEndian.Uint64(b[10:]))
		case OpReadLAC:
			r.LAC = int64(binary.BigEndian.Uint64(b[2:]))
			r.LastEntry = int64(binary.BigEndian.Uint64(b[10:]))
		case OpFence:
			r.LAC = int64(binary.BigEndian.Uint64(b[2:]))
		}
	}
	return r, nil
}

// WriteResponse encodes r into the writer's buffer (the caller flushes). The
// payload is copied or written through, not retained.
func (fw *FrameWriter) WriteResponse(r *Response) error {
	h := Header{Op: r.Op | opResponse, RequestID: r.RequestID}
	b := fw.scratch[headerSize:]
	binary.BigEndian.PutUint16(b, uint16(r.Status))
	if r.Status != StatusOK {
		msg := r.Message
		if len(msg) > MaxMessageLen {
			msg = msg[:MaxMessageLen]
		}
		// The message is written through as the payload; converting a
		// string to []byte for Write does not allocate when it does not
		// escape, but keep it simple: errors are rare.
		return fw.writeFrame(h, statusSize, []byte(msg))
	}
	n := statusSize
	var payload []byte
	switch r.Op {
	case OpHandshake:
		if len(r.BookieID) > maxBookieIDSize {
			return fmt.Errorf("%w: bookie id of %d bytes", ErrBadRequest, len(r.BookieID))
		}
		b[2] = r.Version
		n, payload = handshakeFixed, []byte(r.BookieID)
	case OpAdd:
		binary.BigEndian.PutUint64(b[2:], uint64(r.LedgerID))
		binary.BigEndian.PutUint64(b[10:], uint64(r.EntryID))
		n = addRespFixed
	case OpRead:
		binary.BigEndian.PutUint64(b[2:], uint64(r.LedgerID))
		binary.BigEndian.PutUint64(b[10:], uint64(r.EntryID))
		binary.BigEndian.PutUint64(b[18:], uint64(r.LAC))
		binary.BigEndian.PutUint32(b[26:], r.Checksum)
		n, payload = readRespFixed, r.Payload
	case OpReadLAC:
		binary.BigEndian.PutUint64(b[2:], uint64(r.LAC))
		binary.BigEndian.PutUint64(b[10:], uint64(r.LastEntry))
		n = readLACResp
	case OpFence:
		binary.BigEndian.PutUint64(b[2:], uint64(r.LAC))
		n = fenceResp
	case OpDeleteLedger:
	default:
		return fmt.Errorf("%w: response op %s with status OK", ErrUnsupported, r.Op)
	}
	return fw.writeFrame(h, n, payload)
}
