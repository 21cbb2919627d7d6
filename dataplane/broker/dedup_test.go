package broker_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"google.golang.org/protobuf/proto"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

func seqMsg(seq int64) *pulsar.ProducerMessage {
	return &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("m", seq)), SequenceID: &seq}
}

// TestDeduplication: with deduplication enabled on the namespace, a
// producer re-sending sequence ids is stored once, and a producer with the
// same name learns the last sequence id, also after the topic is reopened
// (from the snapshot) and when the state is rebuilt from the entries.
func TestDeduplication(t *testing.T) {
	e := newEnv(t)
	res := e.sa.Broker().Resources()
	on := true
	if err := res.CreateNamespace(e.ctx, "public", "dedup", broker.Policies{DeduplicationEnabled: &on}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/dedup/t"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "dp", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []int64{0, 1, 2, 1, 2, 3} {
		if _, err := p.Send(e.ctx, seqMsg(s)); err != nil {
			t.Fatal(err)
		}
	}
	for want := int64(0); want <= 3; want++ {
		m := e.receive(c)
		if string(m.Payload()) != fmt.Sprint("m", want) {
			t.Fatalf("got %q, want m%d (duplicates must not be stored)", m.Payload(), want)
		}
		c.Ack(m)
	}
	e.expectNothing(c, 300*time.Millisecond)
	p.Close()

	// Reopen the topic: the snapshot written at close restores the state.
	tn, _ := broker.ParseTopicName(topic)
	if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	p2, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "dp", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	// The client numbers its next message from the last sequence id the
	// broker returned (3).
	if _, err := p2.Send(e.ctx, msg("next")); err != nil {
		t.Fatal(err)
	}
	if got := p2.LastSequenceID(); got != 4 {
		t.Fatalf("sequence id of the first message after reopen = %d, want 4", got)
	}
	if m := e.receive(c); string(m.Payload()) != "next" {
		t.Fatalf("got %q", m.Payload())
	}
	if _, err := p2.Send(e.ctx, seqMsg(2)); err != nil {
		t.Fatal(err)
	}
	e.expectNothing(c, 300*time.Millisecond)
}

// TestDeduplicationRebuiltFromEntries: enabling deduplication on a topic
// that already holds messages rebuilds each producer's last sequence id by
// replaying the entries (no snapshot exists yet).
func TestDeduplicationRebuiltFromEntries(t *testing.T) {
	e := newEnv(t)
	res := e.sa.Broker().Resources()
	if err := res.CreateNamespace(e.ctx, "public", "later", broker.Policies{}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/later/t"
	// A subscription retains the entries (without one Pulsar keeps nothing).
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "keep"})
	p, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "rp", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(0); s <= 5; s++ {
		if _, err := p.Send(e.ctx, seqMsg(s)); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	on := true
	if err := res.UpdateNamespace(e.ctx, "public", "later", func(p *broker.Policies) error {
		p.DeduplicationEnabled = &on
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tn, _ := broker.ParseTopicName(topic)
	if err := e.sa.Broker().UnloadTopic(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	p2 := e.producer(pulsar.ProducerOptions{Topic: topic, Name: "rp", DisableBatching: true})
	if _, err := p2.Send(e.ctx, msg("next")); err != nil {
		t.Fatal(err)
	}
	if got := p2.LastSequenceID(); got != 6 {
		t.Fatalf("first sequence id after enabling dedup = %d, want 6", got)
	}
}

// TestDedupRule is Pulsar's MessageDeduplication.isDuplicate rule: a SEND
// is judged by its first sequence id (sequence_id) against the last id
// pushed and persisted for its producer; it records its highest id
// (highest_sequence_id for a batch). Only the last chunk of a chunked
// message is judged.
func TestDedupRule(t *testing.T) {
	msg := func(seq int64) broker.DedupStep { return broker.DedupStep{Producer: "p", Seq: seq, ChunkID: -1} }
	batch := func(first, last int64) broker.DedupStep {
		return broker.DedupStep{Producer: "p", Seq: first, Highest: last, ChunkID: -1}
	}
	chunk := func(seq int64, id, n int32) broker.DedupStep {
		return broker.DedupStep{Producer: "p", Seq: seq, ChunkID: id, NumChunks: n}
	}
	inFlight := func(s broker.DedupStep) broker.DedupStep { s.InFlight = true; return s }
	failed := func(s broker.DedupStep) broker.DedupStep { s.Fail = true; return s }
	other := func(seq int64) broker.DedupStep { return broker.DedupStep{Producer: "q", Seq: seq, ChunkID: -1} }

	for _, tc := range []struct {
		name      string
		persisted map[string]int64
		steps     []broker.DedupStep
		want      []string
		wantLast  int64 // of producer p
	}{
		{"single messages", nil, []broker.DedupStep{msg(0), msg(1), msg(2), msg(1), msg(2), msg(3)},
			[]string{"new", "new", "new", "dup", "dup", "new"}, 3},
		{"gap is new", nil, []broker.DedupStep{msg(0), msg(5), msg(3)}, []string{"new", "new", "dup"}, 5},
		{"batch resent whole", nil, []broker.DedupStep{batch(0, 4), batch(0, 4)}, []string{"new", "dup"}, 4},
		{"batch overlapping the last one is a duplicate", nil, []broker.DedupStep{batch(0, 4), batch(3, 7)},
			[]string{"new", "dup"}, 4},
		{"batch starting at the last id is a duplicate", nil, []broker.DedupStep{batch(0, 4), batch(4, 9)},
			[]string{"new", "dup"}, 4},
		{"next batch", nil, []broker.DedupStep{batch(0, 4), batch(5, 9), msg(9), msg(10)},
			[]string{"new", "new", "dup", "new"}, 10},
		{"single message inside the last batch", nil, []broker.DedupStep{batch(0, 4), msg(2)}, []string{"new", "dup"}, 4},
		{"from a snapshot", map[string]int64{"p": 10}, []broker.DedupStep{msg(10), batch(8, 12), msg(11)},
			[]string{"dup", "dup", "new"}, 11},
		{"copy still being written", nil, []broker.DedupStep{msg(0), inFlight(msg(1)), msg(1)},
			[]string{"new", "new", "unknown"}, 0},
		{"re-sent after a failed write", nil, []broker.DedupStep{msg(0), failed(msg(1)), msg(1)},
			[]string{"new", "new", "new"}, 1},
		{"chunks: only the last is judged", nil, []broker.DedupStep{
			chunk(0, 0, 3), chunk(0, 1, 3), chunk(0, 2, 3),
			chunk(1, 0, 2), chunk(1, 1, 2)},
			[]string{"new", "new", "new", "new", "new"}, 1},
		{"chunks re-sent", nil, []broker.DedupStep{
			chunk(0, 0, 3), chunk(0, 1, 3), chunk(0, 2, 3),
			chunk(0, 1, 3), chunk(0, 2, 3)},
			[]string{"new", "new", "new", "new", "dup"}, 0},
		{"chunks re-sent after a crash before the last", nil, []broker.DedupStep{
			msg(0), chunk(1, 0, 3), chunk(1, 1, 3),
			chunk(1, 0, 3), chunk(1, 1, 3), chunk(1, 2, 3)},
			[]string{"new", "new", "new", "new", "new", "new"}, 1},
		{"last chunk still being written", nil, []broker.DedupStep{
			chunk(0, 0, 2), inFlight(chunk(0, 1, 2)), chunk(0, 1, 2)},
			[]string{"new", "new", "unknown"}, -1},
		{"producers are independent", nil, []broker.DedupStep{msg(5), other(0), other(5), msg(5), other(5)},
			[]string{"new", "new", "new", "dup", "dup"}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, last := broker.RunDedup(tc.persisted, tc.steps)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("verdicts %v, want %v", got, tc.want)
			}
			l, ok := last["p"]
			if !ok {
				l = -1
			}
			if l != tc.wantLast {
				t.Errorf("last sequence id of p = %d, want %d", l, tc.wantLast)
			}
		})
	}
}

// dedupNamespace creates public/<ns> with deduplication on.
func dedupNamespace(e *env, ns string) {
	e.t.Helper()
	on := true
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, "public", ns, broker.Policies{DeduplicationEnabled: &on}); err != nil {
		e.t.Fatal(err)
	}
}

// chunkPayload is message i of a chunked test: about size bytes, its
// content derived from i so a consumer can check it arrived intact.
func chunkPayload(i, size int) []byte {
	b := []byte(fmt.Sprintf("msg-%04d:", i))
	for len(b) < size {
		b = append(b, byte('a'+(i+len(b))%26))
	}
	return b
}

func chunkIndex(t *testing.T, payload []byte) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(string(payload), "msg-%04d:", &i); err != nil {
		t.Fatalf("payload %.20q: %v", payload, err)
	}
	return i
}

// TestDeduplicationChunkedMessages: every chunk of a chunked message
// carries the same sequence id; with deduplication on, every chunk is
// stored and each receipted message reaches the consumer whole.
func TestDeduplicationChunkedMessages(t *testing.T) {
	e := newEnv(t)
	dedupNamespace(e, "dedupchunk")
	topic := "persistent://public/dedupchunk/t"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, Name: "cp", DisableBatching: true,
		EnableChunking: true, ChunkMaxMessageSize: 1000})
	const n, size = 5, 4500 // five chunks each
	for i := range n {
		if _, err := p.Send(e.ctx, &pulsar.ProducerMessage{Payload: chunkPayload(i, size)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		m := e.receive(c)
		if !bytes.Equal(m.Payload(), chunkPayload(i, size)) {
			t.Fatalf("message %d: got %d bytes %.20q, want %d bytes of message %d", i, len(m.Payload()), m.Payload(), size, i)
		}
		c.Ack(m)
	}
	// Deduplication still works for whole chunked messages: a chunked
	// message re-sent with an old sequence id is not stored again.
	old := int64(1)
	if _, err := p.Send(e.ctx, &pulsar.ProducerMessage{Payload: chunkPayload(99, size), SequenceID: &old}); err != nil {
		t.Fatal(err)
	}
	e.expectNothing(c, 300*time.Millisecond)
}

// TestDeduplicationBatchJudgedByFirstID: a batch (sequence_id = its first
// message, highest_sequence_id = its last; the Java client sets both, the
// Go client only the first, so this test speaks the wire itself) is a
// duplicate when its first id is not above the last id stored, even when
// its last id is: it gets a receipt for -1:-1 and none of it is stored.
func TestDeduplicationBatchJudgedByFirstID(t *testing.T) {
	e := newEnv(t)
	dedupNamespace(e, "dedupbatch")
	topic := "persistent://public/dedupbatch/t"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})

	nc, err := net.Dial("tcp", strings.TrimPrefix(e.sa.ServiceURL(), "pulsar://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := protocol.NewReader(bufio.NewReader(nc))
	write := func(cmd *pb.BaseCommand, hp []byte) {
		t.Helper()
		frame, err := protocol.Marshal(cmd, nil, hp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	read := func(want pb.BaseCommand_Type) *pb.BaseCommand {
		t.Helper()
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		for {
			f, err := br.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if f.Cmd.GetType() == pb.BaseCommand_PING {
				write(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}}, nil)
				continue
			}
			if f.Cmd.GetType() != want {
				t.Fatalf("got %v, want %v: %v", f.Cmd.GetType(), want, f.Cmd)
			}
			return f.Cmd
		}
	}
	write(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("dedup-test"), ProtocolVersion: proto.Int32(21)}}, nil)
	read(pb.BaseCommand_CONNECTED)
	write(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1), ProducerName: proto.String("bp")}}, nil)
	read(pb.BaseCommand_PRODUCER_SUCCESS)

	// sendBatch sends messages first..last as one batch entry and returns
	// the ledger id of its receipt.
	sendBatch := func(first, last int64) int64 {
		t.Helper()
		n := int(last - first + 1)
		meta := &pb.MessageMetadata{ProducerName: proto.String("bp"), SequenceId: proto.Uint64(uint64(first)),
			PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), NumMessagesInBatch: proto.Int32(int32(n))}
		var body []byte
		for s := first; s <= last; s++ {
			var err error
			if body, err = protocol.AppendBatchMessage(body, &pb.SingleMessageMetadata{
				PayloadSize: proto.Int32(int32(len(fmt.Sprint("m", s)))), SequenceId: proto.Uint64(uint64(s))},
				[]byte(fmt.Sprint("m", s))); err != nil {
				t.Fatal(err)
			}
		}
		hp, err := protocol.AppendHeadersAndPayload(nil, meta, body)
		if err != nil {
			t.Fatal(err)
		}
		write(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1),
			SequenceId: proto.Uint64(uint64(first)), HighestSequenceId: proto.Uint64(uint64(last)),
			NumMessages: proto.Int32(int32(n))}}, hp)
		r := read(pb.BaseCommand_SEND_RECEIPT).GetSendReceipt()
		if r.GetSequenceId() != uint64(first) {
			t.Fatalf("receipt for sequence id %d, want %d", r.GetSequenceId(), first)
		}
		return int64(r.GetMessageId().GetLedgerId())
	}
	if l := sendBatch(0, 4); l < 0 {
		t.Fatalf("first batch: receipt ledger %d, want it stored", l)
	}
	if l := sendBatch(3, 7); l != -1 {
		t.Fatalf("batch 3..7 after 0..4: receipt ledger %d, want -1 (a duplicate)", l)
	}
	if l := sendBatch(4, 9); l != -1 {
		t.Fatalf("batch 4..9 after 0..4: receipt ledger %d, want -1 (a duplicate)", l)
	}
	if l := sendBatch(5, 6); l < 0 {
		t.Fatalf("batch 5..6 after 0..4: receipt ledger %d, want it stored", l)
	}
	for _, want := range []int64{0, 1, 2, 3, 4, 5, 6} {
		m := e.receive(c)
		if string(m.Payload()) != fmt.Sprint("m", want) {
			t.Fatalf("got %q, want m%d", m.Payload(), want)
		}
		c.Ack(m)
	}
	e.expectNothing(c, 300*time.Millisecond)
}
