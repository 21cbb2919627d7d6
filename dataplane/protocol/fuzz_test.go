package protocol

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

func FuzzReadFrame(f *testing.F) {
	for _, s := range []string{goldenPing, goldenSend, goldenMessage, goldenPing + goldenSend, "", "00000000", "ffffffff00000001"} {
		b, _ := hex.DecodeString(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in), WithMaxFrameSize(1<<16), WithBufferSize(32))
		var fr Frame
		for range 64 {
			err := r.ReadFrameInto(&fr)
			if err == io.EOF {
				return
			}
			if err != nil {
				if !isDecodeError(err) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			// A decoded command re-encodes to a decodable frame.
			b, err := Marshal(fr.Cmd, nil, fr.HeadersAndPayload)
			if err != nil {
				t.Fatalf("re-encode %v: %v", fr.Cmd.GetType(), err)
			}
			g, err := NewReader(bytes.NewReader(b)).ReadFrame()
			if err != nil || !proto.Equal(g.Cmd, fr.Cmd) || !bytes.Equal(g.HeadersAndPayload, fr.HeadersAndPayload) {
				t.Fatalf("re-decode: %v", err)
			}
			if fr.HeadersAndPayload != nil {
				if meta, payload, err := ParseHeadersAndPayload(fr.HeadersAndPayload); err == nil && IsBatch(meta) {
					_, _ = ParseBatch(meta, payload)
				}
			}
		}
	})
}

func isDecodeError(err error) bool {
	for _, e := range []error{ErrFrameTooLarge, ErrTruncatedFrame, ErrMalformedFrame, ErrBadCommand} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func FuzzParseHeadersAndPayload(f *testing.F) {
	hp, _ := hex.DecodeString(goldenHeadersAndPayload)
	bem, _ := hex.DecodeString(goldenBEM)
	f.Add(hp)
	f.Add(append(bem, hp...))
	var batch []byte
	batch, _ = AppendBatchMessage(batch, &pulsarwire.SingleMessageMetadata{PartitionKey: proto.String("k")}, []byte("v"))
	batch, _ = AppendBatchMessage(batch, &pulsarwire.SingleMessageMetadata{}, nil)
	meta := goldenMeta()
	meta.NumMessagesInBatch = proto.Int32(2)
	b, _ := AppendHeadersAndPayload(nil, meta, batch)
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		_ = VerifyChecksum(in)
		_, _, _ = SplitBrokerEntryMetadata(in)
		meta, payload, err := ParseHeadersAndPayload(in)
		if err != nil {
			return
		}
		if len(payload) > len(in) {
			t.Fatal("payload longer than input")
		}
		// The checksum was valid, so re-encoding gives back valid bytes.
		out, err := AppendHeadersAndPayload(nil, meta, payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyChecksum(out); err != nil {
			t.Fatal(err)
		}
		if IsBatch(meta) {
			msgs, err := ParseBatch(meta, payload)
			if err == nil && len(msgs) != NumMessages(meta) {
				t.Fatalf("%d messages, metadata says %d", len(msgs), NumMessages(meta))
			}
		}
	})
}

// A SEND frame as pulsar-client-go builds it for a 1 KiB message.
func benchSendFrame(b *testing.B) []byte {
	meta := &pulsarwire.MessageMetadata{
		ProducerName: proto.String("standalone-0-42"),
		SequenceId:   proto.Uint64(123456),
		PublishTime:  proto.Uint64(1700000000000),
		Properties:   []*pulsarwire.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}},
	}
	hp, err := AppendHeadersAndPayload(nil, meta, make([]byte, 1024))
	if err != nil {
		b.Fatal(err)
	}
	cmd := &pulsarwire.BaseCommand{
		Type: pulsarwire.BaseCommand_SEND.Enum(),
		Send: &pulsarwire.CommandSend{
			ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(123456), NumMessages: proto.Int32(1),
		},
	}
	frame, err := Marshal(cmd, nil, hp)
	if err != nil {
		b.Fatal(err)
	}
	return frame
}

// repeatReader serves the same frame forever.
type repeatReader struct {
	frame []byte
	off   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.frame[r.off:])
		n += c
		r.off = (r.off + c) % len(r.frame)
	}
	return n, nil
}

func BenchmarkReadSendFrame(b *testing.B) {
	frame := benchSendFrame(b)
	r := NewReader(&repeatReader{frame: frame})
	var f Frame
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.ReadFrameInto(&f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseHeadersAndPayload(b *testing.B) {
	frame := benchSendFrame(b)
	f, err := NewReader(bytes.NewReader(frame)).ReadFrame()
	if err != nil {
		b.Fatal(err)
	}
	var meta pulsarwire.MessageMetadata
	b.SetBytes(int64(len(f.HeadersAndPayload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseHeadersAndPayloadInto(f.HeadersAndPayload, &meta); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteMessageFrame(b *testing.B) {
	frame := benchSendFrame(b)
	f, err := NewReader(bytes.NewReader(frame)).ReadFrame()
	if err != nil {
		b.Fatal(err)
	}
	cmd := NewMessage(3, &pulsarwire.MessageIdData{LedgerId: proto.Uint64(10), EntryId: proto.Uint64(20)}, 0, nil, nil)
	bem := &pulsarwire.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(1700000000000), Index: proto.Uint64(99)}
	w := bufio.NewWriterSize(io.Discard, 64<<10)
	b.SetBytes(int64(len(f.HeadersAndPayload)))
	b.ReportAllocs()
	for b.Loop() {
		if err := WritePayloadCommand(w, cmd, bem, f.HeadersAndPayload); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzDecompress(f *testing.F) {
	for c := range 5 {
		f.Add(int32(c), uint32(11), []byte("hello world"))
	}
	f.Add(int32(1), uint32(1<<20), []byte{0xf0, 0x00})
	f.Fuzz(func(t *testing.T, codec int32, size uint32, payload []byte) {
		meta := &pulsarwire.MessageMetadata{Compression: pulsarwire.CompressionType(codec).Enum(), UncompressedSize: proto.Uint32(size)}
		out, err := Decompress(meta, payload)
		if err != nil {
			if !errors.Is(err, ErrBadBatch) && !errors.Is(err, ErrCompressed) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if codec != 0 && len(out) != int(size) {
			t.Fatalf("%d bytes out, uncompressed_size %d", len(out), size)
		}
	})
}
