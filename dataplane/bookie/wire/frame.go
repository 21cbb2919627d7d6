package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// ProtocolVersion is the only frame format version this package speaks.
const ProtocolVersion uint8 = 1

const (
	// lengthSize is the size of the length prefix.
	lengthSize = 4
	// headerSize is the fixed frame header: length, version, op, flags,
	// request id.
	headerSize = lengthSize + 1 + 1 + 2 + 8
	// crcSize is the size of the frame trailer.
	crcSize = 4

	// MinFrameSize is the size of a frame with an empty body.
	MinFrameSize = headerSize + crcSize
	// DefaultMaxFrameSize bounds a whole frame (length prefix included): a
	// 5 MiB entry payload plus 1 MiB of headroom.
	DefaultMaxFrameSize = 6 << 20
)

// ErrMalformed reports bytes that are not a valid frame or message: a bad
// length, a CRC mismatch, a body too short or too long for its op, unknown
// flags. The connection that produced it cannot be trusted any more.
var ErrMalformed = errors.New("bookie: malformed frame")

// Op is a frame's operation code. Responses carry the request's op with
// the high bit (opResponse) set.
type Op uint8

// Operation codes. Never renumber: they are on the wire.
const (
	OpHandshake    Op = 0x01
	OpAdd          Op = 0x02
	OpRead         Op = 0x03
	OpReadLAC      Op = 0x04
	OpFence        Op = 0x05
	OpDeleteLedger Op = 0x06
	// OpError answers a request whose op is unknown, or reports a
	// connection-level error (request id 0) just before the server closes
	// the connection. It is only ever sent as a response.
	OpError Op = 0x7f

	opResponse Op = 0x80
)

func (o Op) String() string {
	switch o {
	case OpHandshake:
		return "HANDSHAKE"
	case OpAdd:
		return "ADD"
	case OpRead:
		return "READ"
	case OpReadLAC:
		return "READ_LAC"
	case OpFence:
		return "FENCE"
	case OpDeleteLedger:
		return "DELETE_LEDGER"
	case OpError:
		return "ERROR"
	}
	return fmt.Sprintf("OP(0x%02x)", uint8(o))
}

// known reports whether o is a request op.
func (o Op) known() bool { return o >= OpHandshake && o <= OpDeleteLedger }

// Frame flag bits, meaningful per op. Unknown bits are rejected.
const (
	// FlagRecovery on an ADD: the add comes from a recovering reader and is
	// accepted by a fenced ledger.
	FlagRecovery uint16 = 1 << 0
	// READ carries its ReadFlags in the low byte of the frame flags.
)

// Header is the fixed part of a frame after the length prefix. The version
// is implicit: every frame is written with ProtocolVersion and any other
// version is rejected.
type Header struct {
	Op        Op
	Flags     uint16
	RequestID uint64
}

// Frame is one decoded frame. Body aliases the decoder's buffer: it is valid
// only until the next call to the FrameReader (or as long as the slice
// passed to ParseFrame).
type Frame struct {
	Header
	Body []byte
}

// ParseFrame decodes the first frame in b. It returns the frame (whose Body
// aliases b) and the number of bytes it occupies. If b holds less than the
// whole frame it returns io.ErrUnexpectedEOF. maxFrameSize <= 0 means
// DefaultMaxFrameSize. Errors wrap ErrMalformed, ErrTooLarge or
// ErrUnsupported.
func ParseFrame(b []byte, maxFrameSize int) (Frame, int, error) {
	if len(b) < lengthSize {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	total, err := checkLength(binary.BigEndian.Uint32(b), maxFrameSize)
	if err != nil {
		return Frame{}, 0, err
	}
	if len(b) < total {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	f, err := parseChecked(b[:total])
	return f, total, err
}

// checkLength validates a length prefix and returns the whole frame size.
func checkLength(n uint32, maxFrameSize int) (int, error) {
	if maxFrameSize <= 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	total := uint64(n) + lengthSize
	if total < MinFrameSize {
		return 0, fmt.Errorf("%w: frame length %d below minimum %d", ErrMalformed, n, MinFrameSize-lengthSize)
	}
	if total > uint64(maxFrameSize) {
		return 0, fmt.Errorf("%w: frame of %d bytes exceeds limit %d", ErrTooLarge, total, maxFrameSize)
	}
	return int(total), nil
}

// parseChecked decodes a complete frame b (length prefix included, already
// bounds-checked) and verifies its CRC and version.
func parseChecked(b []byte) (Frame, error) {
	end := len(b) - crcSize
	want := binary.BigEndian.Uint32(b[end:])
	if got := crc32.Checksum(b[lengthSize:end], castagnoli); got != want {
		return Frame{}, fmt.Errorf("%w: frame crc 0x%08x, computed 0x%08x", ErrMalformed, want, got)
	}
	f := Frame{
		Header: Header{
			Op:        Op(b[5]),
			Flags:     binary.BigEndian.Uint16(b[6:]),
			RequestID: binary.BigEndian.Uint64(b[8:]),
		},
		Body: b[headerSize:end:end],
	}
	if v := b[4]; v != ProtocolVersion {
		// The header is intact (the CRC matched), so the request id is
		// usable for an error reply.
		return f, fmt.Errorf("%w: frame version %d, want %d", ErrUnsupported, v, ProtocolVersion)
	}
	return f, nil
}

// FrameReader reads frames from a stream, reusing one buffer. It is not safe
// for concurrent use.
type FrameReader struct {
	r   *bufio.Reader
	max int
	buf []byte
	lb  [lengthSize]byte
}

// readBufferSize is the bufio buffer in front of the connection.
const readBufferSize = 64 << 10

// shrinkThreshold: a buffer grown beyond this is released after a frame
// that needs less than a sixteenth of it, so one large entry does not pin
// megabytes per idle connection.
const shrinkThreshold = 1 << 20

// NewFrameReader returns a reader of frames no larger than maxFrameSize
// (<= 0: DefaultMaxFrameSize).
func NewFrameReader(r io.Reader, maxFrameSize int) *FrameReader {
	if maxFrameSize <= 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	return &FrameReader{r: bufio.NewReaderSize(r, readBufferSize), max: maxFrameSize}
}

// ReadFrame reads the next frame. The returned Body aliases the reader's
// buffer and is overwritten by the next ReadFrame. A clean end of stream
// before a frame starts returns io.EOF; a stream cut inside a frame returns
// io.ErrUnexpectedEOF. Invalid frames return errors wrapping ErrMalformed,
// ErrTooLarge or ErrUnsupported; on ErrUnsupported the returned frame's
// header is valid.
func (fr *FrameReader) ReadFrame() (Frame, error) {
	lb := fr.lb[:]
	if _, err := io.ReadFull(fr.r, lb); err != nil {
		return Frame{}, err
	}
	total, err := checkLength(binary.BigEndian.Uint32(lb), fr.max)
	if err != nil {
		return Frame{}, err
	}
	if cap(fr.buf) > shrinkThreshold && total < cap(fr.buf)/16 {
		fr.buf = nil
	}
	if cap(fr.buf) < total {
		fr.buf = make([]byte, total, max(total, 4<<10))
	}
	b := fr.buf[:total]
	copy(b, lb)
	if _, err := io.ReadFull(fr.r, b[lengthSize:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return parseChecked(b)
}

// FrameWriter encodes frames into a buffered writer. It is not safe for
// concurrent use; the owner flushes.
type FrameWriter struct {
	w       *bufio.Writer
	max     int
	scratch [headerSize + 64]byte
}

// writeBufferSize is the bufio buffer in front of the connection.
const writeBufferSize = 64 << 10

// NewFrameWriter returns a writer of frames no larger than maxFrameSize
// (<= 0: DefaultMaxFrameSize).
func NewFrameWriter(w io.Writer, maxFrameSize int) *FrameWriter {
	if maxFrameSize <= 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	return &FrameWriter{w: bufio.NewWriterSize(w, writeBufferSize), max: maxFrameSize}
}

// Flush writes buffered frames to the underlying writer.
func (fw *FrameWriter) Flush() error { return fw.w.Flush() }

// Buffered returns the number of bytes waiting for Flush.
func (fw *FrameWriter) Buffered() int { return fw.w.Buffered() }

// writeFrame writes one frame whose body is fixed (at most 64 bytes, taken
// from fw.scratch[headerSize:]) followed by payload. Payload is copied into
// the buffer or written through; it is not retained.
func (fw *FrameWriter) writeFrame(h Header, fixedLen int, payload []byte) error {
	total := headerSize + fixedLen + len(payload) + crcSize
	if total > fw.max {
		return fmt.Errorf("%w: frame of %d bytes exceeds limit %d", ErrTooLarge, total, fw.max)
	}
	s := fw.scratch[:headerSize+fixedLen]
	binary.BigEndian.PutUint32(s[0:], uint32(total-lengthSize))
	s[4] = ProtocolVersion
	s[5] = byte(h.Op)
	binary.BigEndian.PutUint16(s[6:], h.Flags)
	binary.BigEndian.PutUint64(s[8:], h.RequestID)
	crc := crc32.Update(0, castagnoli, s[lengthSize:])
	crc = crc32.Update(crc, castagnoli, payload)
	if _, err := fw.w.Write(s); err != nil {
		return err
	}
	if _, err := fw.w.Write(payload); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(s[:crcSize], crc) // the header is written: reuse
	_, err := fw.w.Write(s[:crcSize])
	return err
}

// WriteRawFrame writes a frame with an arbitrary header and body. It exists
// for tests and tools that need to produce frames the typed encoders never
// would (unknown ops or flags).
func (fw *FrameWriter) WriteRawFrame(h Header, body []byte) error {
	return fw.writeFrame(h, 0, body)
}

// AppendFrame appends the encoding of one frame with the given header and
// body to dst.
func AppendFrame(dst []byte, h Header, body []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(headerSize-lengthSize+len(body)+crcSize))
	dst = append(dst, ProtocolVersion, byte(h.Op))
	dst = binary.BigEndian.AppendUint16(dst, h.Flags)
	dst = binary.BigEndian.AppendUint64(dst, h.RequestID)
	dst = append(dst, body...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start+lengthSize:], castagnoli))
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
