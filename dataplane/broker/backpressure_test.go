package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/memstorage"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/brokernode"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// stallStorage is a bookie storage that stores every entry but holds back
// the acknowledgement of adds to the ledgers chosen with stall until
// release: a bookie that stopped answering for one topic only.
type stallStorage struct {
	storage.Storage
	mu      sync.Mutex
	stalled map[int64]bool
	held    []func()
}

func (s *stallStorage) AddEntry(ledgerID, entryID, lac int64, data []byte, recovery bool, done func(error)) {
	s.Storage.AddEntry(ledgerID, entryID, lac, data, recovery, func(err error) {
		s.mu.Lock()
		if s.stalled[ledgerID] {
			s.held = append(s.held, func() { done(err) })
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		done(err)
	})
}

func (s *stallStorage) stall(ledgerID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stalled == nil {
		s.stalled = map[int64]bool{}
	}
	s.stalled[ledgerID] = true
}

func (s *stallStorage) heldAdds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// release acknowledges the held adds, in the order they arrived, and stops
// stalling.
func (s *stallStorage) release() {
	s.mu.Lock()
	held := s.held
	s.held, s.stalled = nil, nil
	s.mu.Unlock()
	for _, done := range held {
		done()
	}
}

// startStallCluster runs a broker node and one bookie over st and an
// in-memory metadata store, and returns the broker's service URL.
func startStallCluster(t *testing.T, st *stallStorage, bcfg broker.Config) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := standalonetest.QuietLogger()
	md := memstore.New()
	t.Cleanup(func() { md.Close() })
	startBookie(t, ctx, "127.0.0.1:0", t.TempDir(), st, md)
	bcfg.BinaryAddr = "127.0.0.1:0"
	node, err := brokernode.Start(ctx, brokernode.Config{
		Metadata: md, NoAuditor: true, HTTPAddr: "127.0.0.1:0",
		Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Broker: bcfg, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Unblock anything still stalled so the node can close its ledgers.
		st.release()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := node.Shutdown(sctx); err != nil {
			t.Errorf("broker node shutdown: %v", err)
		}
	})
	return node.ServiceURL()
}

// asyncResult is the outcome of one SendAsync.
type asyncResult struct {
	seq int
	id  pulsar.MessageID
	err error
}

// TestBackpressureStalledTopicStopsOnlyItsConnection: while the bookie
// holds back the writes of one topic, the broker stops reading the
// connection of that topic's producer once MaxPendingPublishPerConnection
// SENDs are in flight (the producer's queue fills and SendAsync blocks,
// and nothing else on that connection is read, not even a lookup), while a
// producer of another topic on another connection keeps publishing. Once
// the bookie answers, every message is receipted and consumed in order.
func TestBackpressureStalledTopicStopsOnlyItsConnection(t *testing.T) {
	const perConn = 8      // broker: SENDs in flight per connection
	const clientQueue = 24 // client: MaxPendingMessages, above perConn
	const total = 40       // async messages, more than the client queues
	st := &stallStorage{Storage: memstorage.New()}
	url := startStallCluster(t, st, broker.Config{MaxPendingPublishPerConnection: perConn})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	slowClient := standalonetest.NewClient(t, url)  // connection of the stalled producer
	otherClient := standalonetest.NewClient(t, url) // connection of the other topic's producer
	readClient := standalonetest.NewClient(t, url)  // consumers
	slowTopic, otherTopic := "persistent://public/default/bp-slow", "persistent://public/default/bp-other"

	cons, err := readClient.Subscribe(pulsar.ConsumerOptions{Topic: slowTopic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	slow, err := slowClient.CreateProducer(pulsar.ProducerOptions{Topic: slowTopic, DisableBatching: true,
		MaxPendingMessages: clientQueue, SendTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	other, err := otherClient.CreateProducer(pulsar.ProducerOptions{Topic: otherTopic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	// The first message shows which bookie ledger the slow topic writes to.
	first, err := slow.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("0")})
	if err != nil {
		t.Fatal(err)
	}
	st.stall(first.LedgerID())

	results := make(chan asyncResult, total)
	var submitted atomic.Int64
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		for i := 1; i <= total; i++ {
			seq := i
			slow.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(seq))},
				func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					results <- asyncResult{seq: seq, id: id, err: err}
				})
			submitted.Add(1)
		}
	}()

	// The broker reads perConn SENDs of the connection and stops: the
	// bookie holds exactly that many adds, and the client, whose queue is
	// larger, blocks in SendAsync once its queue is full.
	awaitCond(t, 15*time.Second, "the stalled topic's writes to reach the per-connection limit", func() bool {
		return st.heldAdds() >= perConn
	})
	awaitCond(t, 15*time.Second, "SendAsync to block on the full producer queue", func() bool {
		return submitted.Load() >= clientQueue
	})
	// A lookup and a producer creation on the same connection wait too:
	// the broker is not reading that socket.
	blockedCreate := make(chan error, 1)
	go func() {
		p, err := slowClient.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/bp-third"})
		if err == nil {
			p.Close()
		}
		blockedCreate <- err
	}()

	// Meanwhile the other topic's producer, on its own connection, works.
	otherCons, err := readClient.Subscribe(pulsar.ConsumerOptions{Topic: otherTopic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer otherCons.Close()
	for i := range 5 {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := other.Send(sctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint("other-", i))})
		scancel()
		if err != nil {
			t.Fatalf("producer of another topic blocked by the stalled one: %v", err)
		}
	}
	for i := range 5 {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := otherCons.Receive(rctx)
		rcancel()
		if err != nil || string(m.Payload()) != fmt.Sprint("other-", i) {
			t.Fatalf("other topic: got %v %v, want other-%d", m, err, i)
		}
		otherCons.Ack(m)
	}

	// Still stalled: nothing more was read from the slow connection.
	if n := st.heldAdds(); n != perConn {
		t.Fatalf("bookie holds %d adds of the stalled topic, want exactly %d (the broker kept reading the connection)", n, perConn)
	}
	if n := submitted.Load(); n != clientQueue {
		t.Fatalf("%d SendAsync calls returned while the producer queue (%d) was full", n, clientQueue)
	}
	select {
	case err := <-blockedCreate:
		t.Fatalf("a producer was created on the paused connection (err %v)", err)
	default:
	}
	select {
	case r := <-results:
		t.Fatalf("message %d completed while its topic was stalled (err %v)", r.seq, r.err)
	default:
	}

	st.release()
	<-sendDone
	var prev pulsar.MessageID = first
	got := make([]asyncResult, 0, total)
	for len(got) < total {
		select {
		case r := <-results:
			got = append(got, r)
		case <-ctx.Done():
			t.Fatalf("only %d of %d messages receipted after the bookie answered", len(got), total)
		}
	}
	for i, r := range got {
		if r.err != nil {
			t.Fatalf("message %d failed: %v", r.seq, r.err)
		}
		if r.seq != i+1 {
			t.Fatalf("receipt %d is for message %d: receipts out of order", i+1, r.seq)
		}
		if !(prev.LedgerID() < r.id.LedgerID() || (prev.LedgerID() == r.id.LedgerID() && prev.EntryID() < r.id.EntryID())) {
			t.Fatalf("message %d stored at %v, not after %v", r.seq, r.id, prev)
		}
		prev = r.id
	}
	if err := <-blockedCreate; err != nil {
		t.Fatalf("producer creation on the resumed connection: %v", err)
	}
	for want := 0; want <= total; want++ {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := cons.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("receive message %d: %v", want, err)
		}
		if string(m.Payload()) != strconv.Itoa(want) {
			t.Fatalf("consumed %q, want %d: messages out of order", m.Payload(), want)
		}
		cons.Ack(m)
	}
}

// TestBackpressureBrokerBudgetHoldsEveryConnection: the broker-wide byte
// budget for unpersisted messages (MaxPendingPublishBytes) bounds memory
// across connections: once a stalled topic's writes fill it, the broker
// stops reading the stalled producer's connection and also holds a SEND
// of another connection that does not fit, until writes complete; then
// every message of both is stored in order.
func TestBackpressureBrokerBudgetHoldsEveryConnection(t *testing.T) {
	const size = 10000   // payload bytes: a SEND is a little larger
	const budget = 35000 // three SENDs fit, a fourth does not
	const total = 8
	st := &stallStorage{Storage: memstorage.New()}
	url := startStallCluster(t, st, broker.Config{MaxMessageSize: 16 << 10, MaxPendingPublishBytes: budget})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	slowClient := standalonetest.NewClient(t, url)
	otherClient := standalonetest.NewClient(t, url)
	readClient := standalonetest.NewClient(t, url)
	slowTopic, otherTopic := "persistent://public/default/budget-slow", "persistent://public/default/budget-other"
	payload := func(tag string, i int) []byte {
		b := make([]byte, size)
		copy(b, fmt.Sprintf("%s-%03d;", tag, i))
		return b
	}
	tagOf := func(m pulsar.Message) string {
		s := string(m.Payload())
		if i := strings.IndexByte(s, ';'); i >= 0 {
			return s[:i]
		}
		return s
	}

	cons, err := readClient.Subscribe(pulsar.ConsumerOptions{Topic: slowTopic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	otherCons, err := readClient.Subscribe(pulsar.ConsumerOptions{Topic: otherTopic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer otherCons.Close()
	slow, err := slowClient.CreateProducer(pulsar.ProducerOptions{Topic: slowTopic, DisableBatching: true, SendTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	other, err := otherClient.CreateProducer(pulsar.ProducerOptions{Topic: otherTopic, DisableBatching: true, SendTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Send(ctx, &pulsar.ProducerMessage{Payload: payload("other", 0)}); err != nil {
		t.Fatal(err) // the budget is free: the other topic works
	}
	first, err := slow.Send(ctx, &pulsar.ProducerMessage{Payload: payload("slow", 0)})
	if err != nil {
		t.Fatal(err)
	}
	st.stall(first.LedgerID())

	results := make(chan asyncResult, total)
	for i := 1; i <= total; i++ {
		seq := i
		slow.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload("slow", seq)},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				results <- asyncResult{seq: seq, id: id, err: err}
			})
	}
	awaitCond(t, 15*time.Second, "the stalled writes to fill the budget", func() bool { return st.heldAdds() >= 3 })

	otherDone := make(chan error, 1)
	go func() {
		_, err := other.Send(ctx, &pulsar.ProducerMessage{Payload: payload("other", 1)})
		otherDone <- err
	}()
	select {
	case err := <-otherDone:
		t.Fatalf("a SEND that does not fit the exhausted budget completed (err %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	if n := st.heldAdds(); n != 3 {
		t.Fatalf("bookie holds %d adds, want 3: the budget of %d bytes fits three %d-byte messages", n, budget, size)
	}

	st.release()
	if err := <-otherDone; err != nil {
		t.Fatalf("other topic after the budget freed: %v", err)
	}
	for i := 1; i <= total; i++ {
		select {
		case r := <-results:
			if r.err != nil || r.seq != i {
				t.Fatalf("receipt %d: message %d, err %v", i, r.seq, r.err)
			}
		case <-ctx.Done():
			t.Fatalf("only %d of %d messages receipted after the bookie answered", i-1, total)
		}
	}
	for i := 0; i <= total; i++ {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := cons.Receive(rctx)
		rcancel()
		if err != nil || tagOf(m) != fmt.Sprintf("slow-%03d", i) {
			t.Fatalf("stalled topic: got %v, want slow-%03d", err, i)
		}
		cons.Ack(m)
	}
	for i := 0; i <= 1; i++ {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := otherCons.Receive(rctx)
		rcancel()
		if err != nil || tagOf(m) != fmt.Sprintf("other-%03d", i) {
			t.Fatalf("other topic: got %v, want other-%03d", err, i)
		}
		otherCons.Ack(m)
	}
}
