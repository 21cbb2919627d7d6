package protocol

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// BenchmarkDecodeVerifySend is the broker's per-SEND protocol work: decode
// the frame (ReadFrameInto, reusing the command) and verify the checksum of
// its headers and payload (1 KiB message).
func BenchmarkDecodeVerifySend(b *testing.B) {
	frame := benchSendFrame(b)
	r := NewReader(&repeatReader{frame: frame})
	var f Frame
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.ReadFrameInto(&f); err != nil {
			b.Fatal(err)
		}
		if err := VerifyChecksum(f.HeadersAndPayload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteSendReceipt is the broker's per-SEND answer.
func BenchmarkWriteSendReceipt(b *testing.B) {
	w := bufio.NewWriterSize(io.Discard, 64<<10)
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteSendReceipt(w, 7, 123456, 0, 1234, 56789); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAppendSendReceiptMatchesMarshal: the hand-encoded receipt is the
// frame the protobuf runtime writes for NewSendReceipt, byte for byte.
func TestAppendSendReceiptMatchesMarshal(t *testing.T) {
	vals := []uint64{0, 1, 127, 128, 300, 1 << 32, 1<<63 + 5, ^uint64(0)}
	for _, prod := range vals {
		for _, seq := range vals {
			for _, high := range vals {
				for _, id := range [][2]uint64{{0, 0}, {5, 9}, {1 << 40, 127}, {^uint64(0), ^uint64(0)}} {
					want, err := Marshal(NewSendReceipt(prod, seq, high, id[0], id[1]), nil, nil)
					if err != nil {
						t.Fatal(err)
					}
					got := AppendSendReceipt([]byte{0xaa}, prod, seq, high, id[0], id[1])
					if got[0] != 0xaa || !bytes.Equal(got[1:], want) {
						t.Fatalf("receipt(%d, %d, %d, %v):\n got %x\nwant %x", prod, seq, high, id, got[1:], want)
					}
					f, err := NewReader(bytes.NewReader(got[1:])).ReadFrame()
					if err != nil {
						t.Fatal(err)
					}
					if r := f.Cmd.GetSendReceipt(); r.GetSequenceId() != seq || r.GetMessageId().GetEntryId() != id[1] {
						t.Fatalf("decoded %v", f.Cmd)
					}
				}
			}
		}
	}
	var sb bytes.Buffer
	w := bufio.NewWriter(&sb)
	if err := WriteSendReceipt(w, 1, 2, 3, 4, 5); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if want := AppendSendReceipt(nil, 1, 2, 3, 4, 5); !bytes.Equal(sb.Bytes(), want) {
		t.Fatalf("WriteSendReceipt wrote %x, want %x", sb.Bytes(), want)
	}
}

// sendFastCases are SEND commands the fast decoder takes and ones it must
// hand to the protobuf runtime.
func sendFastCases() []*pulsarwire.BaseCommand {
	send := func(s *pulsarwire.CommandSend) *pulsarwire.BaseCommand {
		return &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_SEND.Enum(), Send: s}
	}
	return []*pulsarwire.BaseCommand{
		send(&pulsarwire.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2)}),
		send(&pulsarwire.CommandSend{ProducerId: proto.Uint64(0), SequenceId: proto.Uint64(0), NumMessages: proto.Int32(1)}),
		send(&pulsarwire.CommandSend{ProducerId: proto.Uint64(^uint64(0)), SequenceId: proto.Uint64(1 << 40),
			NumMessages: proto.Int32(-3), HighestSequenceId: proto.Uint64(1<<40 + 99)}),
		send(&pulsarwire.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2), TxnidMostBits: proto.Uint64(5)}),
		send(&pulsarwire.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2), IsChunk: proto.Bool(true)}),
		send(&pulsarwire.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2), Marker: proto.Bool(true)}),
		send(&pulsarwire.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2),
			MessageId: &pulsarwire.MessageIdData{LedgerId: proto.Uint64(3), EntryId: proto.Uint64(4)}}),
		NewPing(),
		NewSendReceipt(1, 2, 3, 4, 5),
	}
}

// TestReadFrameIntoFastSend: ReadFrameInto (fast SEND decoding) and
// ReadFrame (protobuf runtime) decode the same commands, including a stream
// that alternates SENDs with other commands into one reused Frame.
func TestReadFrameIntoFastSend(t *testing.T) {
	var stream []byte
	var want []*pulsarwire.BaseCommand
	for _, cmd := range sendFastCases() {
		hp, err := AppendHeadersAndPayload(nil, &pulsarwire.MessageMetadata{
			ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1),
		}, []byte("payload"))
		if err != nil {
			t.Fatal(err)
		}
		if cmd.GetType() != pulsarwire.BaseCommand_SEND {
			hp = nil
		}
		frame, err := Marshal(cmd, nil, hp)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, frame...)
		want = append(want, cmd)
	}
	// Raw frames the encoder would not write: a repeated scalar (last one
	// wins), a send field sent twice (merged), an unknown field.
	raw := [][]byte{
		{0x08, 0x06, 0x32, 0x06, 0x08, 0x01, 0x10, 0x02, 0x08, 0x07},
		{0x08, 0x06, 0x32, 0x02, 0x08, 0x01, 0x32, 0x02, 0x10, 0x02},
		{0x08, 0x06, 0x32, 0x06, 0x08, 0x01, 0x10, 0x02, 0x78, 0x01},
		{0x08, 0x06, 0x32, 0x04, 0x08, 0x01, 0x10, 0x02, 0x50, 0x01},
	}
	for _, c := range raw {
		frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(c)))
		frame = binary.BigEndian.AppendUint32(frame, uint32(len(c)))
		stream = append(stream, append(frame, c...)...)
		cmd := new(pulsarwire.BaseCommand)
		if err := proto.Unmarshal(c, cmd); err != nil {
			t.Fatalf("%x: %v", c, err)
		}
		want = append(want, cmd)
	}
	slow := NewReader(bytes.NewReader(stream))
	fast := NewReader(bytes.NewReader(stream))
	var f Frame
	for i, w := range want {
		sf, err := slow.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: ReadFrame: %v", i, err)
		}
		if err := fast.ReadFrameInto(&f); err != nil {
			t.Fatalf("frame %d: ReadFrameInto: %v", i, err)
		}
		if !proto.Equal(sf.Cmd, w) || !proto.Equal(f.Cmd, w) {
			t.Fatalf("frame %d:\n fast %v\n slow %v\n want %v", i, f.Cmd, sf.Cmd, w)
		}
		if !bytes.Equal(f.HeadersAndPayload, sf.HeadersAndPayload) {
			t.Fatalf("frame %d: payloads differ", i)
		}
	}
	if err := fast.ReadFrameInto(&f); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
}

// FuzzReadFrameIntoMatchesReadFrame: for any input, both decoding paths
// agree on the commands and on failing.
func FuzzReadFrameIntoMatchesReadFrame(f *testing.F) {
	for _, cmd := range sendFastCases() {
		frame, err := Marshal(cmd, nil, nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		slow := NewReader(bytes.NewReader(in))
		fast := NewReader(bytes.NewReader(in))
		var fr Frame
		for {
			sf, serr := slow.ReadFrame()
			ferr := fast.ReadFrameInto(&fr)
			if (serr == nil) != (ferr == nil) {
				t.Fatalf("ReadFrame: %v, ReadFrameInto: %v", serr, ferr)
			}
			if serr != nil {
				return
			}
			if !proto.Equal(sf.Cmd, fr.Cmd) || !bytes.Equal(sf.HeadersAndPayload, fr.HeadersAndPayload) {
				t.Fatalf("fast %v, slow %v", fr.Cmd, sf.Cmd)
			}
		}
	})
}
