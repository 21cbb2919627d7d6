package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

func msg(s string) *pulsar.ProducerMessage { return &pulsar.ProducerMessage{Payload: []byte(s)} }

func TestBatchedProduceConsume(t *testing.T) {
	e := newEnv(t)
	topic := "batched"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, BatchingMaxPublishDelay: 50 * time.Millisecond})
	var wg sync.WaitGroup
	const n = 200
	for i := 0; i < n; i++ {
		wg.Add(1)
		p.SendAsync(e.ctx, msg(fmt.Sprintf("m%03d", i)), func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		m := e.receive(c)
		if string(m.Payload()) != fmt.Sprintf("m%03d", i) {
			t.Fatalf("message %d = %q", i, m.Payload())
		}
		c.Ack(m)
	}
}

func TestSharedSubscriptionSpreadsMessages(t *testing.T) {
	e := newEnv(t)
	topic := "shared"
	c1 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared, ReceiverQueueSize: 10})
	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared, ReceiverQueueSize: 10})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 100
	for i := 0; i < n; i++ {
		e.send(p, msg(fmt.Sprint(i)))
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i, c := range []pulsar.Consumer{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx, cancel := contextWithTimeout(e, time.Second)
				m, err := c.Receive(ctx)
				cancel()
				if err != nil {
					return
				}
				c.Ack(m)
				mu.Lock()
				got[string(m.Payload())] = i
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(got) != n {
		t.Fatalf("received %d distinct messages, want %d", len(got), n)
	}
	per := [2]int{}
	for _, c := range got {
		per[c]++
	}
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("shared subscription did not spread: %v", per)
	}
}

func TestExclusiveSecondConsumerRefused(t *testing.T) {
	e := newEnv(t)
	e.consumer(pulsar.ConsumerOptions{Topic: "excl", SubscriptionName: "s", Type: pulsar.Exclusive})
	_, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: "excl", SubscriptionName: "s", Type: pulsar.Exclusive})
	if err == nil {
		t.Fatal("second exclusive consumer accepted")
	}
}

func TestFailoverSwitchesOnClose(t *testing.T) {
	e := newEnv(t)
	topic := "failover"
	c1, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Failover, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Failover, Name: "b"})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	e.send(p, msg("one"))
	m := e.receive(c1)
	c1.Ack(m)
	e.expectNothing(c2, 300*time.Millisecond)
	e.send(p, msg("two"))
	c1.Close()
	m = e.receive(c2)
	if string(m.Payload()) != "two" {
		t.Fatalf("standby got %q after failover", m.Payload())
	}
}

func TestKeySharedKeepsKeysTogether(t *testing.T) {
	e := newEnv(t)
	topic := "keyshared"
	cs := []pulsar.Consumer{
		e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared}),
		e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared}),
	}
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 200
	for i := 0; i < n; i++ {
		e.send(p, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i%10), Payload: []byte(fmt.Sprint(i))})
	}
	owner := map[string]int{}
	last := map[string]int{}
	total := 0
	for ci, c := range cs {
		for {
			ctx, cancel := contextWithTimeout(e, time.Second)
			m, err := c.Receive(ctx)
			cancel()
			if err != nil {
				break
			}
			total++
			c.Ack(m)
			if o, ok := owner[m.Key()]; ok && o != ci {
				t.Fatalf("key %s went to two consumers", m.Key())
			}
			owner[m.Key()] = ci
			var v int
			fmt.Sscan(string(m.Payload()), &v)
			if prev, ok := last[m.Key()]; ok && v < prev {
				t.Fatalf("key %s out of order: %d after %d", m.Key(), v, prev)
			}
			last[m.Key()] = v
		}
	}
	if total != n {
		t.Fatalf("received %d, want %d", total, n)
	}
}

func TestNackRedeliversWithCount(t *testing.T) {
	e := newEnv(t)
	c := e.consumer(pulsar.ConsumerOptions{Topic: "nack", SubscriptionName: "s", Type: pulsar.Shared, NackRedeliveryDelay: 100 * time.Millisecond})
	p := e.producer(pulsar.ProducerOptions{Topic: "nack", DisableBatching: true})
	e.send(p, msg("x"))
	m := e.receive(c)
	if m.RedeliveryCount() != 0 {
		t.Fatalf("first delivery count %d", m.RedeliveryCount())
	}
	c.Nack(m)
	m = e.receive(c)
	if string(m.Payload()) != "x" || m.RedeliveryCount() != 1 {
		t.Fatalf("redelivery: %q count %d", m.Payload(), m.RedeliveryCount())
	}
	c.Ack(m)
}

func TestUnackedRedeliveredToNextConsumer(t *testing.T) {
	e := newEnv(t)
	c1, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: "redeliver", SubscriptionName: "s", Type: pulsar.Shared})
	if err != nil {
		t.Fatal(err)
	}
	p := e.producer(pulsar.ProducerOptions{Topic: "redeliver", DisableBatching: true})
	e.send(p, msg("a"), msg("b"))
	e.receive(c1)
	e.receive(c1)
	c1.Close() // nothing acknowledged
	c2 := e.consumer(pulsar.ConsumerOptions{Topic: "redeliver", SubscriptionName: "s", Type: pulsar.Shared})
	got := []string{string(e.receive(c2).Payload()), string(e.receive(c2).Payload())}
	sort.Strings(got)
	if got[0] != "a" || got[1] != "b" {
		t.Fatalf("redelivered %v", got)
	}
}

func TestCumulativeAck(t *testing.T) {
	e := newEnv(t)
	c := e.consumer(pulsar.ConsumerOptions{Topic: "cumulative", SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: "cumulative", DisableBatching: true})
	for i := 0; i < 10; i++ {
		e.send(p, msg(fmt.Sprint(i)))
	}
	var last pulsar.Message
	for i := 0; i < 10; i++ {
		last = e.receive(c)
	}
	if err := c.AckCumulative(last); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c2 := e.consumer(pulsar.ConsumerOptions{Topic: "cumulative", SubscriptionName: "s"})
	e.send(p, msg("after"))
	if m := e.receive(c2); string(m.Payload()) != "after" {
		t.Fatalf("after cumulative ack got %q", m.Payload())
	}
}

func TestReaderFromEarliestAndMessageID(t *testing.T) {
	e := newEnv(t)
	p := e.producer(pulsar.ProducerOptions{Topic: "reader", DisableBatching: true})
	var ids []pulsar.MessageID
	for i := 0; i < 10; i++ {
		ids = append(ids, e.send(p, msg(fmt.Sprint(i)))...)
	}
	r, err := e.client.CreateReader(pulsar.ReaderOptions{Topic: "reader", StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 10; i++ {
		m, err := r.Next(e.ctx)
		if err != nil || string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("reader %d: %v %q", i, err, m.Payload())
		}
	}
	if r.HasNext() {
		t.Fatal("HasNext after the last message")
	}
	// Exclusive start at message 4: the next is 5; inclusive: 4.
	for _, inclusive := range []bool{false, true} {
		r2, err := e.client.CreateReader(pulsar.ReaderOptions{Topic: "reader", StartMessageID: ids[4], StartMessageIDInclusive: inclusive})
		if err != nil {
			t.Fatal(err)
		}
		m, err := r2.Next(e.ctx)
		want := "5"
		if inclusive {
			want = "4"
		}
		if err != nil || string(m.Payload()) != want {
			t.Fatalf("reader from id (inclusive=%v): %v %q", inclusive, err, m.Payload())
		}
		r2.Close()
	}
}

func TestSeekToMessageID(t *testing.T) {
	e := newEnv(t)
	// The client drops the seek target itself unless the consumer is
	// inclusive (it filters at or below its start id), as against Pulsar.
	c := e.consumer(pulsar.ConsumerOptions{Topic: "seek", SubscriptionName: "s", StartMessageIDInclusive: true})
	p := e.producer(pulsar.ProducerOptions{Topic: "seek", DisableBatching: true})
	var ids []pulsar.MessageID
	for i := 0; i < 10; i++ {
		ids = append(ids, e.send(p, msg(fmt.Sprint(i)))...)
	}
	for i := 0; i < 10; i++ {
		c.Ack(e.receive(c))
	}
	if err := c.Seek(ids[3]); err != nil {
		t.Fatal(err)
	}
	if m := e.receive(c); string(m.Payload()) != "3" {
		t.Fatalf("after seek got %q, want 3", m.Payload())
	}
}

// TestSeekByTime: a consumer and a reader seek back to a publish time and
// get the first message published at or after it next; a reader seeks
// back by message id too. The broker closes the consumer before it
// answers the seek, and the clients re-subscribe from the new position.
func TestSeekByTime(t *testing.T) {
	e := newEnv(t)
	c := e.consumer(pulsar.ConsumerOptions{Topic: "seektime", SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: "seektime", DisableBatching: true})
	var ids []pulsar.MessageID
	for i := 0; i < 10; i++ {
		ids = append(ids, e.send(p, msg(fmt.Sprint(i)))...)
	}
	var times []time.Time
	for i := 0; i < 10; i++ {
		m := e.receive(c)
		times = append(times, m.PublishTime())
		c.Ack(m)
	}
	// Publish times have millisecond resolution and may repeat.
	first := 0
	for times[first].Before(times[5]) {
		first++
	}
	if err := c.SeekByTime(times[5]); err != nil {
		t.Fatal(err)
	}
	for i := first; i < 10; i++ {
		if m := e.receive(c); string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("consumer after seek by time got %q, want %d", m.Payload(), i)
		}
	}

	r, err := e.client.CreateReader(pulsar.ReaderOptions{Topic: "seektime", StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	next := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
		defer cancel()
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
		return string(m.Payload())
	}
	for i := 0; i < 10; i++ {
		next()
	}
	if err := r.SeekByTime(times[5]); err != nil {
		t.Fatal(err)
	}
	for i := first; i < 10; i++ {
		if got := next(); got != fmt.Sprint(i) {
			t.Fatalf("reader after seek by time got %q, want %d", got, i)
		}
	}
	if err := r.Seek(ids[3]); err != nil {
		t.Fatal(err)
	}
	// The broker delivers from the message sought; the reader (not
	// StartMessageIDInclusive) drops that one.
	for i := 4; i < 10; i++ {
		if got := next(); got != fmt.Sprint(i) {
			t.Fatalf("reader after seek by id got %q, want %d", got, i)
		}
	}
}

func TestPartitionedTopicAutoCreateAndRoute(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	tn := "persistent://public/default/parts"
	// Create 3 partitions through the broker's metadata layer.
	if err := createPartitioned(e, tn, 3); err != nil {
		t.Fatal(err)
	}
	c := e.consumer(pulsar.ConsumerOptions{Topic: tn, SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: tn, DisableBatching: true})
	parts, err := e.client.TopicPartitions(tn)
	if err != nil || len(parts) != 3 {
		t.Fatalf("partitions: %v %v", parts, err)
	}
	for i := 0; i < 30; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	seenParts := map[string]bool{}
	for i := 0; i < 30; i++ {
		m := e.receive(c)
		seenParts[m.Topic()] = true
		c.Ack(m)
	}
	if len(seenParts) < 2 {
		t.Fatalf("messages came from %d partitions", len(seenParts))
	}
}

func TestNonPersistentTopic(t *testing.T) {
	e := newEnv(t)
	topic := "non-persistent://public/default/np"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	e.send(p, msg("live"))
	if m := e.receive(c); string(m.Payload()) != "live" {
		t.Fatalf("got %q", m.Payload())
	}
}

func TestProducerNameUniqueAndExclusiveAccess(t *testing.T) {
	e := newEnv(t)
	e.producer(pulsar.ProducerOptions{Topic: "names", Name: "p1"})
	if _, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: "names", Name: "p1"}); err == nil {
		t.Fatal("duplicate producer name accepted")
	}
	e.producer(pulsar.ProducerOptions{Topic: "excl-prod", ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	_, err := e.client.CreateProducer(pulsar.ProducerOptions{Topic: "excl-prod", ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	if err == nil {
		t.Fatal("second exclusive producer accepted")
	}
	if !errors.Is(err, pulsar.ErrProducerFenced) && err.Error() == "" {
		t.Fatalf("unexpected error %v", err)
	}
}

func TestLastMessageIDAndUnsubscribe(t *testing.T) {
	e := newEnv(t)
	c := e.consumer(pulsar.ConsumerOptions{Topic: "lastid", SubscriptionName: "s"})
	p := e.producer(pulsar.ProducerOptions{Topic: "lastid", DisableBatching: true})
	ids := e.send(p, msg("a"), msg("b"))
	last, err := c.GetLastMessageIDs()
	if err != nil || len(last) != 1 {
		t.Fatalf("GetLastMessageIDs: %v %v", last, err)
	}
	if last[0].LedgerID() != ids[1].LedgerID() || last[0].EntryID() != ids[1].EntryID() {
		t.Fatalf("last id %v, want %v", last[0], ids[1])
	}
	if err := c.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
}

func TestDelayedDelivery(t *testing.T) {
	e := newEnv(t)
	c := e.consumer(pulsar.ConsumerOptions{Topic: "delayed", SubscriptionName: "s", Type: pulsar.Shared})
	p := e.producer(pulsar.ProducerOptions{Topic: "delayed", DisableBatching: true})
	start := time.Now()
	e.send(p, &pulsar.ProducerMessage{Payload: []byte("later"), DeliverAfter: 700 * time.Millisecond})
	e.send(p, msg("now"))
	if m := e.receive(c); string(m.Payload()) != "now" {
		t.Fatalf("first delivered %q, want the undelayed message", m.Payload())
	}
	m := e.receive(c)
	if string(m.Payload()) != "later" || time.Since(start) < 600*time.Millisecond {
		t.Fatalf("delayed message %q after %v", m.Payload(), time.Since(start))
	}
}

func TestBacklogQuotaStopsProducers(t *testing.T) {
	e := newEnv(t)
	res := e.sa.Broker().Resources()
	if err := res.CreateNamespace(e.ctx, "public", "quota", broker.Policies{Other: map[string]json.RawMessage{
		"backlog_quota_map": json.RawMessage(`{"destination_storage":{"limitSize":10240,"limitTime":-1,"policy":"producer_exception"}}`),
	}}); err != nil {
		t.Fatal(err)
	}
	topic := "persistent://public/quota/t"
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "slow", ReceiverQueueSize: 1})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 3 * time.Second})
	var err error
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; err == nil; i++ {
		if time.Now().After(deadline) {
			t.Fatal("producer never stopped by the backlog quota")
		}
		_, err = p.Send(e.ctx, &pulsar.ProducerMessage{Payload: make([]byte, 4096)})
	}
	if _, cerr := e.client.CreateProducer(pulsar.ProducerOptions{Topic: topic}); cerr == nil {
		t.Fatal("producer created on a topic over its backlog quota")
	}
}
