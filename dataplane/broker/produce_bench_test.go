package broker_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// Benchmark shape.
const (
	benchPayloadSize = 1 << 10 // bytes per message
	benchWindow      = 1000    // SEND frames in flight
	benchBatchSize   = 100     // messages per entry in the batched variant
)

// BenchmarkProducePath measures the broker's produce path per message: SEND
// frame decode, checksum verification, managed-ledger append (through the
// bookie client to a real bookie), SEND_RECEIPT encode and write.
//
// Setup: a real in-process standalone (standalonetest: broker, metadata
// store and a bookie on disk storage with JournalNoSync, in a temporary
// directory) and a minimal hand-written client on a loopback TCP connection.
// The client writes pre-encoded SEND frames (built with protocol.Marshal and
// protocol.AppendHeadersAndPayload) with at most benchWindow in flight and
// reads receipts with a hand-rolled, allocation-free parser, so the numbers
// are the broker's, not round trips' or the client's. allocs/op and B/op are
// process-wide, so they include the bookie and metadata store; one op is one
// 1 KiB message (in the batched variant one entry carries benchBatchSize of
// them). The producer exists before the timer starts.
func BenchmarkProducePath(b *testing.B) {
	b.Run("single", func(b *testing.B) { benchProduce(b, 1) })
	b.Run(fmt.Sprintf("batch%d", benchBatchSize), func(b *testing.B) { benchProduce(b, benchBatchSize) })
}

func benchProduce(b *testing.B, batch int) {
	sa := standalonetest.Start(b, standalonetest.Config(b.TempDir(), standalonetest.FreeAddr(b)))
	c := dialBenchClient(b, sa.ServiceURL())
	const prodID = 1
	topic := fmt.Sprintf("persistent://public/default/produce-bench-%d-%d", batch, b.N)
	c.roundTrip(b, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(prodID), RequestId: proto.Uint64(2),
	}}, pb.BaseCommand_PRODUCER_SUCCESS)

	// A ring of pre-encoded frames with distinct sequence ids; receipt i
	// must carry the sequence id of frame i%len(ring).
	ringLen := 1024
	if batch > 1 {
		ringLen = 16
	}
	ring := make([][]byte, ringLen)
	for i := range ring {
		ring[i] = benchSendFrame(b, prodID, uint64(i), batch)
	}
	entries := (b.N + batch - 1) / batch
	window := max(benchWindow/batch, 1)

	sem := make(chan struct{}, window)
	readErr := make(chan error, 1)
	var got atomic.Int64
	go func() { readErr <- c.readReceipts(entries, ringLen, sem, &got) }()

	w := bufio.NewWriterSize(c.nc, 256<<10)
	b.SetBytes(benchPayloadSize)
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := range entries {
		select {
		case sem <- struct{}{}:
		default:
			// Window full: push out what is buffered, then wait.
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			sem <- struct{}{}
		}
		if _, err := w.Write(ring[i%ringLen]); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := <-readErr; err != nil {
		b.Fatalf("after %d receipts: %v", got.Load(), err)
	}
	b.StopTimer()
	// allocs/op rounds down; per entry shows the batched variant's cost.
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(entries), "allocs/entry")
	c.nc.Close()
}

// benchSendFrame encodes a whole SEND frame: one message, or a batch entry
// of n messages, of benchPayloadSize bytes each.
func benchSendFrame(b *testing.B, prodID, seq uint64, n int) []byte {
	b.Helper()
	payload := make([]byte, benchPayloadSize)
	for i := range payload {
		payload[i] = byte(i)
	}
	meta := &pb.MessageMetadata{
		ProducerName: proto.String("bench"), SequenceId: proto.Uint64(seq), PublishTime: proto.Uint64(1700000000000),
	}
	body := payload
	if n > 1 {
		meta.NumMessagesInBatch = proto.Int32(int32(n))
		body = nil
		for range n {
			var err error
			if body, err = protocol.AppendBatchMessage(body, &pb.SingleMessageMetadata{}, payload); err != nil {
				b.Fatal(err)
			}
		}
	}
	hp, err := protocol.AppendHeadersAndPayload(nil, meta, body)
	if err != nil {
		b.Fatal(err)
	}
	send := &pb.CommandSend{ProducerId: proto.Uint64(prodID), SequenceId: proto.Uint64(seq)}
	if n > 1 {
		send.NumMessages = proto.Int32(int32(n))
	}
	frame, err := protocol.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: send}, nil, hp)
	if err != nil {
		b.Fatal(err)
	}
	return frame
}

// benchClient is the minimal Pulsar client of the benchmark.
type benchClient struct {
	nc  net.Conn
	br  *bufio.Reader
	buf []byte
}

func dialBenchClient(b *testing.B, serviceURL string) *benchClient {
	b.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(serviceURL, "pulsar://"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	c := &benchClient{nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
	c.roundTrip(b, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("produce-bench"), ProtocolVersion: proto.Int32(21),
	}}, pb.BaseCommand_CONNECTED)
	return c
}

// roundTrip writes cmd and fails unless the next frame is of type want.
func (c *benchClient) roundTrip(b *testing.B, cmd *pb.BaseCommand, want pb.BaseCommand_Type) {
	b.Helper()
	frame, err := protocol.Marshal(cmd, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.nc.Write(frame); err != nil {
		b.Fatal(err)
	}
	f, err := protocol.NewReader(c.br).ReadFrame()
	if err != nil {
		b.Fatal(err)
	}
	if f.Cmd.GetType() != want {
		b.Fatalf("got %v, want %v: %v", f.Cmd.GetType(), want, f.Cmd)
	}
}

// readReceipts reads n SEND_RECEIPTs, releasing a window slot for each and
// checking that the i-th carries sequence id i%ringLen. It parses frames by
// hand so that the client adds no allocations to the measurement.
func (c *benchClient) readReceipts(n, ringLen int, sem <-chan struct{}, got *atomic.Int64) error {
	var hdr [4]byte
	for i := range n {
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			return err
		}
		size := int(binary.BigEndian.Uint32(hdr[:]))
		if cap(c.buf) < size {
			c.buf = make([]byte, size)
		}
		frame := c.buf[:size]
		if _, err := io.ReadFull(c.br, frame); err != nil {
			return err
		}
		seq, err := parseReceipt(frame[4:])
		if err != nil {
			return err
		}
		if want := uint64(i % ringLen); seq != want {
			return fmt.Errorf("receipt %d has sequence id %d, want %d", i, seq, want)
		}
		got.Add(1)
		<-sem
	}
	return nil
}

// BaseCommand and CommandSendReceipt field numbers (PulsarApi.proto).
const (
	fieldType        = 1
	fieldSendReceipt = 7
	fieldSequenceID  = 2
)

var errNotReceipt = errors.New("produce bench: frame is not a SEND_RECEIPT")

// parseReceipt returns the sequence id of an encoded SEND_RECEIPT
// BaseCommand.
func parseReceipt(b []byte) (uint64, error) {
	var typ uint64
	var body []byte
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == fieldType && wt == protowire.VarintType:
			typ, n = protowire.ConsumeVarint(b)
		case num == fieldSendReceipt && wt == protowire.BytesType:
			body, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, wt, b)
		}
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if typ != uint64(pb.BaseCommand_SEND_RECEIPT) || body == nil {
		return 0, fmt.Errorf("%w: type %v", errNotReceipt, pb.BaseCommand_Type(typ))
	}
	for len(body) > 0 {
		num, wt, n := protowire.ConsumeTag(body)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		body = body[n:]
		if num == fieldSequenceID && wt == protowire.VarintType {
			v, n := protowire.ConsumeVarint(body)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			return v, nil
		}
		n = protowire.ConsumeFieldValue(num, wt, body)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		body = body[n:]
	}
	return 0, fmt.Errorf("%w: no sequence id", errNotReceipt)
}
