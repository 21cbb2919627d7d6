package protocol

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// Sizes and magic numbers of the framing.
const (
	// DefaultMaxMessageSize is the max message size a broker announces in
	// CONNECTED unless configured otherwise, and what clients assume when it
	// is absent.
	DefaultMaxMessageSize = 5 << 20
	// FrameHeadroom is what a frame may carry beyond the max message size
	// (command and headers); clients apply the same allowance.
	FrameHeadroom = 10 << 10
	// DefaultMaxFrameSize is a Reader's default limit on totalSize.
	DefaultMaxFrameSize = DefaultMaxMessageSize + FrameHeadroom

	// MagicChecksum starts the checksummed message headers.
	MagicChecksum uint16 = 0x0e01
	// MagicBrokerEntryMetadata starts an optional broker entry metadata block.
	MagicBrokerEntryMetadata uint16 = 0x0e02

	// defaultReadBufferSize is the bufio size of a Reader; commands up to
	// this size are decoded without copying.
	defaultReadBufferSize = 64 << 10
	// maxRetainedScratch bounds the scratch buffer a Reader keeps for
	// commands larger than its bufio buffer.
	maxRetainedScratch = 256 << 10
)

// Frame is one decoded frame.
type Frame struct {
	// Cmd is the frame's command.
	Cmd *pulsarwire.BaseCommand
	// HeadersAndPayload is every byte after the command (from the first
	// magic number to the end of the payload) for SEND and MESSAGE frames,
	// otherwise nil. It is owned by the caller and never reused by the
	// Reader.
	HeadersAndPayload []byte
}

// Reader decodes frames from a byte stream. It is not safe for concurrent
// use.
type Reader struct {
	br       *bufio.Reader
	maxFrame int
	bufSize  int
	scratch  []byte
	unmarsh  proto.UnmarshalOptions
	hdr      [8]byte  // frame sizes; a field so it does not escape per call
	send     sendSlot // backing store of fast-decoded SENDs (ReadFrameInto)
}

// sendSlot holds a SEND decoded by decodeSendFast: the command's fields
// point into it, so a broker's steady stream of SENDs decodes without
// allocating.
type sendSlot struct {
	typ         pulsarwire.BaseCommand_Type
	cmd         pulsarwire.CommandSend
	producerID  uint64
	sequenceID  uint64
	highestSeq  uint64
	numMessages int32
}

// ReaderOption configures a Reader.
type ReaderOption func(*Reader)

// WithMaxFrameSize sets the largest accepted totalSize (default
// DefaultMaxFrameSize). A broker configured with a max message size m should
// pass m + FrameHeadroom. Values below 8 are raised to 8.
func WithMaxFrameSize(n int) ReaderOption {
	return func(r *Reader) { r.maxFrame = max(n, 8) }
}

// WithBufferSize sets the size of the Reader's bufio buffer (default 64 KiB).
func WithBufferSize(n int) ReaderOption {
	return func(r *Reader) { r.bufSize = max(n, 16) }
}

// NewReader returns a Reader reading frames from r through its own
// bufio.Reader.
func NewReader(r io.Reader, opts ...ReaderOption) *Reader {
	rd := &Reader{maxFrame: DefaultMaxFrameSize, bufSize: defaultReadBufferSize}
	for _, o := range opts {
		o(rd)
	}
	rd.br = bufio.NewReaderSize(r, rd.bufSize)
	return rd
}

// ReadFrame reads the next frame and returns it with a freshly allocated
// command. At a clean end of stream (no byte of a new frame read) it returns
// io.EOF; any other error means the stream is unusable.
func (r *Reader) ReadFrame() (Frame, error) {
	f := Frame{Cmd: new(pulsarwire.BaseCommand)}
	if err := r.readFrame(&f, false); err != nil {
		return Frame{}, err
	}
	return f, nil
}

// ReadFrameInto reads the next frame into f, reusing f.Cmd (reset first) when
// it is not nil, so that a connection loop decoding one command at a time
// allocates only what the command's fields need. The caller must not keep
// f.Cmd or anything it points to past the next call that reuses it.
// f.HeadersAndPayload is always a new slice (or nil) owned by the caller.
// A SEND of the usual shape (producer_id, sequence_id, num_messages,
// highest_sequence_id and nothing else) is decoded without allocating: its
// CommandSend and scalars then live in the Reader, valid until the next
// call. Errors are as for ReadFrame.
func (r *Reader) ReadFrameInto(f *Frame) error { return r.readFrame(f, true) }

func (r *Reader) readFrame(f *Frame, reuse bool) error {
	f.HeadersAndPayload = nil
	if f.Cmd == nil {
		f.Cmd = new(pulsarwire.BaseCommand)
	} else {
		proto.Reset(f.Cmd)
	}

	hdr := &r.hdr
	if n, err := io.ReadFull(r.br, hdr[:4]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return io.EOF
		}
		return truncated("frame size", err)
	}
	total := binary.BigEndian.Uint32(hdr[:4])
	if uint64(total) > uint64(r.maxFrame) {
		return fmt.Errorf("%w: frame of %d bytes, limit %d", ErrFrameTooLarge, total, r.maxFrame)
	}
	if total < 4 {
		return fmt.Errorf("%w: frame size %d leaves no room for the command size", ErrMalformedFrame, total)
	}
	if _, err := io.ReadFull(r.br, hdr[4:8]); err != nil {
		return truncated("command size", err)
	}
	cmdSize := binary.BigEndian.Uint32(hdr[4:8])
	if cmdSize > total-4 {
		return fmt.Errorf("%w: command size %d exceeds frame size %d", ErrMalformedFrame, cmdSize, total)
	}
	if cmdSize == 0 {
		return fmt.Errorf("%w: empty command", ErrBadCommand)
	}
	if err := r.readCommand(int(cmdSize), f.Cmd, reuse); err != nil {
		return err
	}

	rest := int(total - 4 - cmdSize)
	if rest == 0 {
		return nil
	}
	switch f.Cmd.GetType() {
	case pulsarwire.BaseCommand_SEND, pulsarwire.BaseCommand_MESSAGE:
		b := make([]byte, rest)
		if _, err := io.ReadFull(r.br, b); err != nil {
			return truncated("headers and payload", err)
		}
		f.HeadersAndPayload = b
	default:
		// Other commands carry no payload; trailing bytes are ignored, as
		// other implementations do.
		if _, err := r.br.Discard(rest); err != nil {
			return truncated("frame tail", err)
		}
	}
	return nil
}

// readCommand decodes the next n bytes as a BaseCommand into cmd (which is
// empty). With fast, a SEND of the usual shape is decoded into r.send.
func (r *Reader) readCommand(n int, cmd *pulsarwire.BaseCommand, fast bool) error {
	var b []byte
	if n <= r.br.Size() {
		var err error
		if b, err = r.br.Peek(n); err != nil {
			return truncated("command", err)
		}
		defer r.br.Discard(n) //nolint:errcheck // Peek succeeded: the bytes are buffered
	} else {
		if cap(r.scratch) < n {
			r.scratch = make([]byte, n)
		}
		b = r.scratch[:n]
		if _, err := io.ReadFull(r.br, b); err != nil {
			return truncated("command", err)
		}
		if cap(r.scratch) > maxRetainedScratch {
			defer func() { r.scratch = nil }()
		}
	}
	if fast && r.decodeSendFast(b, cmd) {
		return nil
	}
	if err := r.unmarsh.Unmarshal(b, cmd); err != nil {
		return fmt.Errorf("%w: %w", ErrBadCommand, err)
	}
	if !typeMatchesBody(cmd) {
		return fmt.Errorf("%w: type %v without its command", ErrBadCommand, cmd.GetType())
	}
	return nil
}

func truncated(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: stream ended inside the %s", ErrTruncatedFrame, what)
	}
	return fmt.Errorf("protocol: reading %s: %w", what, err)
}

// typeMatchesBody reports whether the command field named by cmd.Type is set
// (PING and PONG may omit theirs: the body is empty). An unknown type is
// accepted here; the broker answers it as unsupported.
func typeMatchesBody(cmd *pulsarwire.BaseCommand) bool {
	fd := cmd.ProtoReflect().Descriptor().Fields().ByNumber(protoreflect.FieldNumber(cmd.GetType()))
	if fd == nil || fd.Message() == nil {
		return true
	}
	switch cmd.GetType() {
	case pulsarwire.BaseCommand_PING, pulsarwire.BaseCommand_PONG:
		return true
	}
	return cmd.ProtoReflect().Has(fd)
}

// BaseCommand and CommandSend field numbers the fast SEND decoder knows.
const (
	fieldCommandType      = 1
	fieldCommandSend      = 6
	fieldSendProducerID   = 1
	fieldSendSequenceID   = 2
	fieldSendNumMessages  = 3
	fieldSendHighestSeqID = 6
)

// decodeSendFast decodes b into cmd, pointing it at r.send, when b is a
// SEND with only the fields a producer normally sets, each well-formed, and
// both required ones present. It returns false, leaving cmd untouched, for
// anything else (other commands, transactions, chunks, markers, unknown or
// repeated message fields, malformed input); the caller then decodes b with
// the protobuf runtime, which yields the same message or the error.
func (r *Reader) decodeSendFast(b []byte, cmd *pulsarwire.BaseCommand) bool {
	var typ uint64
	var body []byte
	haveType := false
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == fieldCommandType && wt == protowire.VarintType:
			typ, n = protowire.ConsumeVarint(b)
			haveType = true
		case num == fieldCommandSend && wt == protowire.BytesType && body == nil:
			body, n = protowire.ConsumeBytes(b)
			if body == nil {
				body = []byte{}
			}
		default:
			return false
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	if !haveType || typ != uint64(pulsarwire.BaseCommand_SEND) || body == nil {
		return false
	}
	var prod, seq, highest, num uint64
	var haveProd, haveSeq, haveHighest, haveNum bool
	for len(body) > 0 {
		f, wt, n := protowire.ConsumeTag(body)
		if n < 0 || wt != protowire.VarintType {
			return false
		}
		body = body[n:]
		v, n := protowire.ConsumeVarint(body)
		if n < 0 {
			return false
		}
		body = body[n:]
		switch f {
		case fieldSendProducerID:
			prod, haveProd = v, true
		case fieldSendSequenceID:
			seq, haveSeq = v, true
		case fieldSendNumMessages:
			num, haveNum = v, true
		case fieldSendHighestSeqID:
			highest, haveHighest = v, true
		default:
			return false
		}
	}
	if !haveProd || !haveSeq {
		return false
	}
	sl := &r.send
	sl.cmd.Reset()
	sl.typ = pulsarwire.BaseCommand_SEND
	sl.producerID, sl.sequenceID = prod, seq
	sl.cmd.ProducerId, sl.cmd.SequenceId = &sl.producerID, &sl.sequenceID
	if haveNum {
		sl.numMessages = int32(num)
		sl.cmd.NumMessages = &sl.numMessages
	}
	if haveHighest {
		sl.highestSeq = highest
		sl.cmd.HighestSequenceId = &sl.highestSeq
	}
	cmd.Type, cmd.Send = &sl.typ, &sl.cmd
	return true
}
