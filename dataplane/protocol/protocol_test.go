package protocol

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// Frames built by hand from the byte format in doc.go, independent of the
// encoder. Protobuf bytes: key = field<<3 | wiretype (0 varint, 2 length).
var (
	// PING: type=18 (08 12), ping={} (field 18 length: 92 01, len 00).
	goldenPing = "00000009" + "00000005" + "0812920100"
	// SEND{producer_id=1, sequence_id=2}: 08 06, field 6 (32) len 4: 08 01 10 02.
	goldenSendCmd = "0806320408011002"
	// MessageMetadata{producer_name="p", sequence_id=2, publish_time=3}, payload "hi".
	// CRC32C over "00000007 0a0170 1002 1803 6869" is 0x41955213.
	goldenHeadersAndPayload = "0e01" + "41955213" + "00000007" + "0a0170100218036869"
	goldenSend              = "0000001f" + "00000008" + goldenSendCmd + goldenHeadersAndPayload
	// MESSAGE{consumer_id=7, message_id{3,4}} + BrokerEntryMetadata{5, 6}.
	goldenMessageCmd = "08094a080807120408031004"
	goldenBEM        = "0e02" + "00000004" + "08051006"
	goldenMessage    = "0000002d" + "0000000c" + goldenMessageCmd + goldenBEM + goldenHeadersAndPayload
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sendCmd() *pulsarwire.BaseCommand {
	return &pulsarwire.BaseCommand{
		Type: pulsarwire.BaseCommand_SEND.Enum(),
		Send: &pulsarwire.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2)},
	}
}

func goldenMeta() *pulsarwire.MessageMetadata {
	return &pulsarwire.MessageMetadata{
		ProducerName: proto.String("p"),
		SequenceId:   proto.Uint64(2),
		PublishTime:  proto.Uint64(3),
	}
}

func TestCRC32CIsCastagnoli(t *testing.T) {
	// The standard check value of CRC-32C.
	if got := crc32cOf([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("crc32c check value %#x", got)
	}
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("package table check value %#x", got)
	}
}

func TestGoldenEncode(t *testing.T) {
	hp, err := AppendHeadersAndPayload(nil, goldenMeta(), []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(hp); got != goldenHeadersAndPayload {
		t.Errorf("headers and payload\n got %s\nwant %s", got, goldenHeadersAndPayload)
	}
	for _, tc := range []struct {
		name string
		cmd  *pulsarwire.BaseCommand
		bem  *pulsarwire.BrokerEntryMetadata
		hp   []byte
		want string
	}{
		{"ping", NewPing(), nil, nil, goldenPing},
		{"send", sendCmd(), nil, hp, goldenSend},
		{"message", NewMessage(7, &pulsarwire.MessageIdData{LedgerId: proto.Uint64(3), EntryId: proto.Uint64(4)}, 0, nil, nil),
			&pulsarwire.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(5), Index: proto.Uint64(6)}, hp, goldenMessage},
	} {
		got, err := Marshal(tc.cmd, tc.bem, tc.hp)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if hex.EncodeToString(got) != tc.want {
			t.Errorf("%s\n got %x\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestGoldenDecode(t *testing.T) {
	stream := unhex(t, goldenPing+goldenSend+goldenMessage)
	r := NewReader(bytes.NewReader(stream))

	f, err := r.ReadFrame()
	if err != nil || f.Cmd.GetType() != pulsarwire.BaseCommand_PING || f.HeadersAndPayload != nil {
		t.Fatalf("ping: %v %v %x", err, f.Cmd, f.HeadersAndPayload)
	}

	f, err = r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(f.Cmd, sendCmd()) {
		t.Errorf("send command %v", f.Cmd)
	}
	if hex.EncodeToString(f.HeadersAndPayload) != goldenHeadersAndPayload {
		t.Errorf("send headers %x", f.HeadersAndPayload)
	}
	meta, payload, err := ParseHeadersAndPayload(f.HeadersAndPayload)
	if err != nil || !proto.Equal(meta, goldenMeta()) || string(payload) != "hi" {
		t.Errorf("send payload: %v %v %q", err, meta, payload)
	}

	f, err = r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if f.Cmd.GetMessage().GetConsumerId() != 7 || f.Cmd.GetMessage().GetMessageId().GetEntryId() != 4 {
		t.Errorf("message command %v", f.Cmd)
	}
	bem, rest, err := SplitBrokerEntryMetadata(f.HeadersAndPayload)
	if err != nil || bem.GetBrokerTimestamp() != 5 || bem.GetIndex() != 6 || hex.EncodeToString(rest) != goldenHeadersAndPayload {
		t.Errorf("broker entry metadata: %v %v %x", err, bem, rest)
	}
	meta, payload, err = ParseHeadersAndPayload(f.HeadersAndPayload)
	if err != nil || !proto.Equal(meta, goldenMeta()) || string(payload) != "hi" {
		t.Errorf("message payload: %v %v %q", err, meta, payload)
	}

	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

// TestRoundTripEveryCommand builds one frame of each command type, with the
// required fields set by a generic filler, and checks that each survives a
// round trip.
func TestRoundTripEveryCommand(t *testing.T) {
	hp, err := AppendHeadersAndPayload(nil, goldenMeta(), []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	var sent []*pulsarwire.BaseCommand
	types := pulsarwire.BaseCommand_CONNECT.Descriptor().Values()
	for i := 0; i < types.Len(); i++ {
		cmd := fillCommand(t, pulsarwire.BaseCommand_Type(types.Get(i).Number()))
		var err error
		switch cmd.GetType() {
		case pulsarwire.BaseCommand_SEND:
			err = WritePayloadCommand(w, cmd, nil, hp)
		case pulsarwire.BaseCommand_MESSAGE:
			err = WritePayloadCommand(w, cmd, &pulsarwire.BrokerEntryMetadata{Index: proto.Uint64(9)}, hp)
		default:
			err = WriteCommand(w, cmd)
		}
		if err != nil {
			t.Fatalf("%v: %v", cmd.GetType(), err)
		}
		sent = append(sent, cmd)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(sent) < 58 {
		t.Fatalf("only %d command types", len(sent))
	}

	r := NewReader(&buf)
	var f Frame // reused: exercises ReadFrameInto's reset
	for _, want := range sent {
		if err := r.ReadFrameInto(&f); err != nil {
			t.Fatalf("%v: %v", want.GetType(), err)
		}
		if !proto.Equal(f.Cmd, want) {
			t.Errorf("%v: got %v", want.GetType(), f.Cmd)
		}
		switch want.GetType() {
		case pulsarwire.BaseCommand_SEND, pulsarwire.BaseCommand_MESSAGE:
			meta, payload, err := ParseHeadersAndPayload(f.HeadersAndPayload)
			if err != nil || meta.GetProducerName() != "p" || string(payload) != "payload" {
				t.Errorf("%v payload: %v %v %q", want.GetType(), err, meta, payload)
			}
		default:
			if f.HeadersAndPayload != nil {
				t.Errorf("%v: unexpected payload", want.GetType())
			}
		}
	}
	if err := r.ReadFrameInto(&f); err != io.EOF {
		t.Fatalf("at end: %v", err)
	}
}

// fillCommand returns a BaseCommand of type typ whose command field (same
// number as the type) has every required field, recursively, set to a
// non-zero value.
func fillCommand(t *testing.T, typ pulsarwire.BaseCommand_Type) *pulsarwire.BaseCommand {
	t.Helper()
	cmd := &pulsarwire.BaseCommand{Type: typ.Enum()}
	m := cmd.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(protoreflectNumber(typ))
	if fd == nil {
		t.Fatalf("no command field for %v", typ)
	}
	sub := m.Mutable(fd).Message()
	fillRequired(sub)
	if err := proto.CheckInitialized(cmd); err != nil {
		t.Fatalf("%v: %v", typ, err)
	}
	return cmd
}

func TestOwnershipAcrossReads(t *testing.T) {
	hp1, _ := AppendHeadersAndPayload(nil, goldenMeta(), []byte("first"))
	hp2, _ := AppendHeadersAndPayload(nil, goldenMeta(), []byte("second"))
	a, _ := Marshal(sendCmd(), nil, hp1)
	b, _ := Marshal(sendCmd(), nil, hp2)
	r := NewReader(bytes.NewReader(append(a, b...)), WithBufferSize(16))
	f1, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	f2, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f1.HeadersAndPayload, hp1) || !bytes.Equal(f2.HeadersAndPayload, hp2) {
		t.Fatal("payload of an earlier frame changed after a later read")
	}
	if f1.Cmd == f2.Cmd {
		t.Fatal("ReadFrame reused the command")
	}
}

func TestLargeCommandBeyondBuffer(t *testing.T) {
	cmd := NewError(1, pulsarwire.ServerError_UnknownError, strings.Repeat("x", 1000))
	b, err := Marshal(cmd, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(append(b, b...)), WithBufferSize(64))
	for range 2 {
		f, err := r.ReadFrame()
		if err != nil || !proto.Equal(f.Cmd, cmd) {
			t.Fatalf("%v %v", err, f.Cmd)
		}
	}
}

func TestReaderErrors(t *testing.T) {
	frame := func(total, cmdSize uint32, body []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, total)
		b = binary.BigEndian.AppendUint32(b, cmdSize)
		return append(b, body...)
	}
	ping := unhex(t, goldenPing)
	send := unhex(t, goldenSend)
	for _, tc := range []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"oversize", frame(1<<30, 5, nil), 0, ErrFrameTooLarge},
		{"oversize at limit+1", frame(101, 5, nil), 100, ErrFrameTooLarge},
		{"total below 4", frame(3, 0, nil)[:4], 0, ErrMalformedFrame},
		{"cmd beyond total", frame(9, 6, unhex(t, "0812920100")), 0, ErrMalformedFrame},
		{"empty command", frame(4, 0, nil), 0, ErrBadCommand},
		{"garbage command", frame(7, 3, []byte{0xff, 0xff, 0xff}), 0, ErrBadCommand},
		{"missing type", frame(7, 3, unhex(t, "920100")), 0, ErrBadCommand},
		{"type without body", frame(6, 2, unhex(t, "0806")), 0, ErrBadCommand},
		{"missing required", frame(8, 4, unhex(t, "08063200")), 0, ErrBadCommand},
		{"size cut", ping[:2], 0, ErrTruncatedFrame},
		{"cmd size cut", ping[:6], 0, ErrTruncatedFrame},
		{"command cut", ping[:len(ping)-1], 0, ErrTruncatedFrame},
		{"payload cut", send[:len(send)-1], 0, ErrTruncatedFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []ReaderOption
			if tc.max > 0 {
				opts = append(opts, WithMaxFrameSize(tc.max))
			}
			_, err := NewReader(bytes.NewReader(tc.in), opts...).ReadFrame()
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReaderIOError(t *testing.T) {
	boom := errors.New("boom")
	_, err := NewReader(io.MultiReader(bytes.NewReader([]byte{0, 0}), errReader{boom})).ReadFrame()
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestTrailingBytesOnSimpleCommandIgnored(t *testing.T) {
	b := unhex(t, "0000000b"+"00000005"+"0812920100"+"abcd")
	b = append(b, unhex(t, goldenPing)...)
	r := NewReader(bytes.NewReader(b))
	for range 2 {
		f, err := r.ReadFrame()
		if err != nil || f.Cmd.GetType() != pulsarwire.BaseCommand_PING || f.HeadersAndPayload != nil {
			t.Fatalf("%v %v", err, f)
		}
	}
}

func TestParseHeadersAndPayloadErrors(t *testing.T) {
	good := unhex(t, goldenHeadersAndPayload)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	noMeta, _ := AppendHeadersAndPayload(nil, &pulsarwire.MessageMetadata{}, []byte("x"))
	hugeMetaSize := bytes.Clone(good)
	binary.BigEndian.PutUint32(hugeMetaSize[6:], 1000)
	binary.BigEndian.PutUint32(hugeMetaSize[2:], crc32cOf(hugeMetaSize[6:]))
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrBadMetadata},
		{"short", good[:9], ErrBadMetadata},
		{"bad magic", flip(1), ErrBadMagic},
		{"crc field", flip(3), ErrChecksum},
		{"payload bit", flip(len(good) - 1), ErrChecksum},
		{"metadata bit", flip(11), ErrChecksum},
		{"metadata size beyond end", hugeMetaSize, ErrBadMetadata},
		{"missing required metadata", noMeta, ErrBadMetadata},
		{"bem cut", unhex(t, "0e020000"), ErrBadMetadata},
		{"bem beyond end", unhex(t, "0e0200000010"+"08"), ErrBadMetadata},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseHeadersAndPayload(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// ParseHeadersAndPayload skips the block; SplitBrokerEntryMetadata decodes it.
	if _, _, err := SplitBrokerEntryMetadata(append(unhex(t, "0e0200000002ffff"), good...)); !errors.Is(err, ErrBadMetadata) {
		t.Fatalf("garbage broker entry metadata: %v", err)
	}
	if err := VerifyChecksum(flip(18)); !errors.Is(err, ErrChecksum) {
		t.Fatalf("VerifyChecksum: %v", err)
	}
	if err := VerifyChecksum(good); err != nil {
		t.Fatalf("VerifyChecksum: %v", err)
	}
	bem, _ := AppendBrokerEntryMetadata(nil, &pulsarwire.BrokerEntryMetadata{Index: proto.Uint64(1)})
	if err := VerifyChecksum(append(bem, good...)); err != nil {
		t.Fatalf("VerifyChecksum with broker entry metadata: %v", err)
	}
	// A checksum failure is reported to a producer as ChecksumError.
	_, _, err := ParseHeadersAndPayload(flip(18))
	if code, _ := ServerErrorOf(err); code != pulsarwire.ServerError_ChecksumError {
		t.Fatalf("code %v", code)
	}
}

func TestWriteRefusesIncompleteCommand(t *testing.T) {
	w := bufio.NewWriter(io.Discard)
	if err := WriteCommand(w, &pulsarwire.BaseCommand{Type: pulsarwire.BaseCommand_SEND.Enum(), Send: &pulsarwire.CommandSend{}}); err == nil {
		t.Fatal("wrote a SEND without its required fields")
	}
	if err := WriteCommand(w, nil); err == nil {
		t.Fatal("wrote a nil command")
	}
}

func TestBatch(t *testing.T) {
	var payload []byte
	var err error
	keys := []string{"a", "", "c"}
	for i, k := range keys {
		smm := &pulsarwire.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(i))}
		if k != "" {
			smm.PartitionKey = proto.String(k)
		}
		if payload, err = AppendBatchMessage(payload, smm, []byte(strings.Repeat("v", i))); err != nil {
			t.Fatal(err)
		}
	}
	meta := goldenMeta()
	meta.NumMessagesInBatch = proto.Int32(int32(len(keys)))
	hp, err := AppendHeadersAndPayload(nil, meta, payload)
	if err != nil {
		t.Fatal(err)
	}
	meta2, payload2, err := ParseHeadersAndPayload(hp)
	if err != nil {
		t.Fatal(err)
	}
	if !IsBatch(meta2) || NumMessages(meta2) != 3 {
		t.Fatalf("batch %v", meta2)
	}
	msgs, err := ParseBatch(meta2, payload2)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 {
		t.Fatalf("%d messages", len(msgs))
	}
	for i, m := range msgs {
		if m.Meta.GetPartitionKey() != keys[i] || m.Meta.GetSequenceId() != uint64(i) || len(m.Payload) != i {
			t.Errorf("message %d: %v %q", i, m.Meta, m.Payload)
		}
	}

	// A batch of one is still a batch.
	one := goldenMeta()
	one.NumMessagesInBatch = proto.Int32(1)
	if !IsBatch(one) || IsBatch(goldenMeta()) || NumMessages(goldenMeta()) != 1 {
		t.Fatal("batch presence rule")
	}

	for _, tc := range []struct {
		name    string
		count   int32
		comp    pulsarwire.CompressionType
		payload []byte
		want    error
	}{
		{"too few", 4, pulsarwire.CompressionType_NONE, payload, ErrBadBatch},
		{"too many", 2, pulsarwire.CompressionType_NONE, payload, ErrBadBatch},
		{"negative", -1, pulsarwire.CompressionType_NONE, payload, ErrBadBatch},
		{"cut", 3, pulsarwire.CompressionType_NONE, payload[:len(payload)-1], ErrBadBatch},
		{"size cut", 3, pulsarwire.CompressionType_NONE, payload[:2], ErrBadBatch},
		{"compressed", 3, pulsarwire.CompressionType_LZ4, payload, ErrCompressed},
	} {
		m := goldenMeta()
		m.NumMessagesInBatch = proto.Int32(tc.count)
		m.Compression = tc.comp.Enum()
		if _, err := ParseBatch(m, tc.payload); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := ParseBatch(goldenMeta(), payload); !errors.Is(err, ErrNotBatch) {
		t.Errorf("non-batch: %v", err)
	}
}

func TestErrorTable(t *testing.T) {
	vals := pulsarwire.ServerError_UnknownError.Descriptor().Values()
	if vals.Len() != len(serverErrors) {
		t.Fatalf("%d ServerError values, %d table entries", vals.Len(), len(serverErrors))
	}
	for i := 0; i < vals.Len(); i++ {
		code := pulsarwire.ServerError(vals.Get(i).Number())
		e := ErrorForCode(code, "")
		if e.Code != code {
			t.Errorf("code %v maps to %v", code, e.Code)
		}
	}
	if ErrorForCode(999, "").Code != pulsarwire.ServerError_UnknownError {
		t.Error("unknown code")
	}

	custom := ErrTopicNotFound.WithMessage("topic persistent://a/b/c not found")
	wrapped := errors.Join(errors.New("context"), custom)
	if !errors.Is(wrapped, ErrTopicNotFound) || errors.Is(wrapped, ErrTopicTerminated) {
		t.Error("errors.Is by code")
	}
	if code, msg := ServerErrorOf(wrapped); code != pulsarwire.ServerError_TopicNotFound || msg != custom.Message {
		t.Errorf("ServerErrorOf: %v %q", code, msg)
	}
	if code, msg := ServerErrorOf(errors.New("disk /dev/sda1 on fire")); code != pulsarwire.ServerError_UnknownError || strings.Contains(msg, "sda") {
		t.Errorf("internal error leaked: %v %q", code, msg)
	}
	if !IsRetriable(ErrServiceNotReady) || IsRetriable(ErrTopicNotFound) || IsRetriable(errors.New("x")) {
		t.Error("IsRetriable")
	}
	// Clients match these names: they must be exactly the enum names.
	if !strings.Contains(ErrProducerFenced.Error(), "ProducerFenced") || !strings.Contains(ErrTopicTerminated.Error(), "TopicTerminatedError") {
		t.Error("error text")
	}
	cmd := NewErrorFrom(5, custom)
	if cmd.GetError().GetError() != pulsarwire.ServerError_TopicNotFound || cmd.GetError().GetRequestId() != 5 {
		t.Errorf("NewErrorFrom %v", cmd)
	}
}

func TestBuildersAreWritable(t *testing.T) {
	epoch := uint64(3)
	id := &pulsarwire.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}
	for _, cmd := range []*pulsarwire.BaseCommand{
		NewConnected("magnetar", 20, 5<<20, &pulsarwire.FeatureFlags{SupportsAuthRefresh: proto.Bool(true)}),
		NewPing(), NewPong(), NewSuccess(1),
		NewError(1, pulsarwire.ServerError_TopicNotFound, "nope"),
		NewSendError(1, 2, pulsarwire.ServerError_PersistenceError, "x"),
		NewSendReceipt(1, 2, 0, 3, 4),
		NewProducerSuccess(1, "p", -1, nil, &epoch, true),
		NewMessage(1, id, 2, []int64{3}, &epoch),
		NewCloseProducer(1, 2, "pulsar://b:6650", ""),
		NewCloseConsumer(1, 2, "", ""),
		NewActiveConsumerChange(1, true),
		NewAckResponse(1, 2, 0, 0, nil),
		NewAckResponse(1, 2, 1, 1, ErrTransactionConflict),
	} {
		if err := WriteCommand(bufio.NewWriter(io.Discard), cmd); err != nil {
			t.Errorf("%v: %v", cmd.GetType(), err)
		}
	}
	if NewAckResponse(1, 2, 0, 0, nil).GetAckResponse().Error != nil {
		t.Error("successful ack response carries an error")
	}
}
