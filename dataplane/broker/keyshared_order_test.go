package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// Key_Shared ordering across consumer changes, end to end with the real
// Go client. Every message's payload is "key/seq" where seq is the global
// production index, so per key the production order is increasing seq.

// orderLog records, as messages arrive at the test's consumers, what each
// one received and has not acknowledged yet, and the order in which each
// message of a key was first delivered to anyone.
type orderLog struct {
	mu         sync.Mutex
	seen       map[int]bool              // seq first delivered
	first      map[string][]int          // key -> seqs in first-delivery order
	unacked    []map[string]map[int]bool // consumer -> key -> seqs received, not acknowledged
	received   [][]int                   // consumer -> seqs in arrival order
	violations []string
}

func newOrderLog(consumers int) *orderLog {
	l := &orderLog{seen: map[int]bool{}, first: map[string][]int{}}
	for range consumers {
		l.unacked = append(l.unacked, map[string]map[int]bool{})
		l.received = append(l.received, nil)
	}
	return l
}

func parsePayload(t *testing.T, m pulsar.Message) (string, int) {
	t.Helper()
	key, s, ok := strings.Cut(string(m.Payload()), "/")
	seq, err := strconv.Atoi(s)
	if !ok || err != nil {
		t.Errorf("bad payload %q", m.Payload())
	}
	return key, seq
}

// receive logs that consumer ci got key/seq and checks that no other
// consumer still holds an earlier message of the key unacknowledged.
func (l *orderLog) receive(ci int, key string, seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for other, keys := range l.unacked {
		if other == ci {
			continue
		}
		for s := range keys[key] {
			if s < seq {
				l.violations = append(l.violations, fmt.Sprintf(
					"consumer %d got %s/%d while consumer %d still held %s/%d unacknowledged", ci, key, seq, other, key, s))
			}
		}
	}
	if l.unacked[ci][key] == nil {
		l.unacked[ci][key] = map[int]bool{}
	}
	l.unacked[ci][key][seq] = true
	l.received[ci] = append(l.received[ci], seq)
	if !l.seen[seq] {
		l.seen[seq] = true
		l.first[key] = append(l.first[key], seq)
	}
}

// ack logs an acknowledgement; callers log it before handing it to the
// client, so the broker can never act on an ack the log does not know.
func (l *orderLog) ack(ci int, key string, seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.unacked[ci][key], seq)
}

// forget drops what consumer ci held: it closed, the broker redelivers it.
func (l *orderLog) forget(ci int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unacked[ci] = map[string]map[int]bool{}
}

func (l *orderLog) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// check fails t on any recorded violation and on a key whose messages were
// first delivered out of production order.
func (l *orderLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, v := range l.violations {
		if i == 10 {
			t.Errorf("... and %d more", len(l.violations)-10)
			break
		}
		t.Error(v)
	}
	bad := 0
	for key, seqs := range l.first {
		if !slices.IsSorted(seqs) {
			if bad++; bad <= 3 {
				t.Errorf("key %s first delivered out of order: %v", key, seqs)
			}
		}
	}
	if bad > 3 {
		t.Errorf("... and %d more keys out of order", bad-3)
	}
}

// waitFor polls cond until it holds or the test's deadline passes.
func waitFor(t *testing.T, e *env, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-e.ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// produce sends seqs [from, to) round-robin over keys and waits for them.
func produce(ctx context.Context, p pulsar.Producer, keys []string, from, to int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for seq := from; seq < to; seq++ {
		key := keys[seq%len(keys)]
		wg.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Key: key, Payload: []byte(fmt.Sprintf("%s/%d", key, seq))},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer wg.Done()
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			})
	}
	wg.Wait()
	return firstErr
}

func mustProduce(t *testing.T, e *env, p pulsar.Producer, keys []string, from, to int) {
	t.Helper()
	if err := produce(e.ctx, p, keys, from, to); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// workers runs the test's consumer goroutines; stop ends them and waits,
// before the test's cleanups close the consumers under them.
type workers struct {
	wg   sync.WaitGroup
	stop chan struct{}
	once sync.Once
}

func newWorkers() *workers { return &workers{stop: make(chan struct{})} }

func (w *workers) goRun(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}

func (w *workers) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *workers) halt() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
	}
	return keys
}

// keysInLowerHalf returns n keys whose hash falls in 0..32767: the range
// that a second auto-split consumer takes from the first.
func keysInLowerHalf(prefix string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if broker.KeyHash(k) < 32768 {
			out = append(out, k)
		}
	}
	return out
}

// TestKeySharedOrderOnJoin: a second consumer joins while the first one
// holds a backlog of delivered, unacknowledged messages of every key. The
// keys that move to the newcomer must wait until the first consumer has
// acknowledged what it holds of them.
func TestKeySharedOrderOnJoin(t *testing.T) {
	e := newEnv(t)
	const topic, n, gateAt = "ks-order-join", 2000, 300
	keys := keyNames(50)
	log := newOrderLog(2)
	c1 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	w := newWorkers()
	defer w.halt()
	gate := make(chan struct{})

	// consume receives on c and acknowledges with a lag of window
	// messages, and everything it holds once idle for a while, as a slow
	// consumer eventually does. It waits at the gate after gateAfter
	// messages and takes pace per message after that.
	consume := func(ci int, c pulsar.Consumer, window, gateAfter int, pace time.Duration) {
		var held []pulsar.Message
		ackOne := func(m pulsar.Message) {
			k, s := parsePayload(t, m)
			log.ack(ci, k, s)
			_ = c.Ack(m) // fails only once the consumer is closed
		}
		got := 0
		for !w.stopped() {
			ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
			m, err := c.Receive(ctx)
			cancel()
			if err != nil {
				for _, h := range held {
					ackOne(h)
				}
				held = held[:0]
				continue
			}
			k, s := parsePayload(t, m)
			log.receive(ci, k, s)
			held = append(held, m)
			if len(held) > window {
				ackOne(held[0])
				held = held[1:]
			}
			got++
			if got == gateAfter {
				select {
				case <-gate:
				case <-w.stop:
					return
				}
			}
			if got > gateAfter && pace > 0 {
				// Pacing makes c1 a slow consumer, so it still has a
				// backlog queued when the newcomer starts receiving.
				time.Sleep(pace)
			}
		}
	}

	mustProduce(t, e, p, keys, 0, n/2)
	w.goRun(func() { consume(0, c1, 100, gateAt, 2*time.Millisecond) })
	waitFor(t, e, "c1 to reach the gate", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.received[0]) >= gateAt
	})
	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared})
	w.goRun(func() { consume(1, c2, 20, -1, 0) })
	mustProduce(t, e, p, keys, n/2, n)
	close(gate)

	waitFor(t, e, "every message", func() bool { return log.distinct() == n })
	w.halt()
	log.check(t)
	if len(log.received[1]) == 0 {
		t.Error("the second consumer received nothing")
	}
}

// TestKeySharedOrderOnLeave: the first consumer closes with unacknowledged
// messages while new messages keep coming; the remaining consumer gets the
// closed one's messages, per key before any newer message of the key.
func TestKeySharedOrderOnLeave(t *testing.T) {
	e := newEnv(t)
	const topic, n1, n2 = "ks-order-leave", 500, 1000
	keys := keyNames(50)
	log := newOrderLog(2)
	c1, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared})
	if err != nil {
		t.Fatal(err)
	}
	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared,
		ReceiverQueueSize: 50})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, BatcherBuilderType: pulsar.KeyBasedBatchBuilder,
		BatchingMaxPublishDelay: time.Millisecond})
	mustProduce(t, e, p, keys, 0, n1)

	// c1 receives its share and acknowledges nothing; c2 acknowledges
	// everything as it comes.
	w := newWorkers()
	defer w.halt()
	w.goRun(func() {
		for !w.stopped() {
			ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
			m, err := c2.Receive(ctx)
			cancel()
			if err != nil {
				continue
			}
			k, s := parsePayload(t, m)
			log.receive(1, k, s)
			log.ack(1, k, s)
			_ = c2.Ack(m)
		}
	})
	waitFor(t, e, "the first batch", func() bool {
		ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
		m, err := c1.Receive(ctx)
		cancel()
		if err == nil {
			k, s := parsePayload(t, m)
			log.receive(0, k, s)
		}
		return log.distinct() == n1
	})
	log.mu.Lock()
	held := len(log.received[0])
	log.mu.Unlock()
	if held == 0 {
		t.Fatal("c1 got none of the first batch")
	}

	// Close c1 while the second batch is being produced.
	sent := make(chan error, 1)
	go func() { sent <- produce(e.ctx, p, keys, n1, n1+n2) }()
	log.forget(0)
	c1.Close()
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	waitFor(t, e, "every message at c2", func() bool { return log.distinct() == n1+n2 })
	w.halt()
	log.check(t)

	// c2's own arrival order per key is production order: the redelivered
	// messages came before newer ones of their key.
	last := map[string]int{}
	for _, seq := range log.received[1] {
		k := keys[seq%len(keys)]
		if prev, ok := last[k]; ok && seq <= prev {
			t.Errorf("c2 got %s/%d after %s/%d", k, seq, k, prev)
		}
		last[k] = seq
	}
}

// TestKeySharedStuckKeyStallsOnlyItself: after a second consumer joins, a
// key whose previous owner never acknowledges is held back, while the other
// keys that moved keep flowing; once the old owner closes, the held key's
// messages arrive, redelivered ones first.
func TestKeySharedStuckKeyStallsOnlyItself(t *testing.T) {
	e := newEnv(t)
	const topic, per = "ks-order-stuck", 10
	moved := keysInLowerHalf("k", 6)
	stuck, free := moved[0], moved[1:]
	c1, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared})
	if err != nil {
		t.Fatal(err)
	}
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	seq := 0
	send := func(key string) {
		e.send(p, &pulsar.ProducerMessage{Key: key, Payload: []byte(fmt.Sprintf("%s/%d", key, seq))})
		seq++
	}
	for range per {
		for _, k := range moved {
			send(k)
		}
	}
	// c1 takes everything and acknowledges all but the stuck key.
	for range per * len(moved) {
		m := e.receive(c1)
		if k, _ := parsePayload(t, m); k != stuck {
			c1.Ack(m)
		}
	}

	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared})
	firstNew := seq
	for range per {
		for _, k := range moved {
			send(k)
		}
	}
	for range per * len(free) {
		m := e.receive(c2)
		k, s := parsePayload(t, m)
		if k == stuck {
			t.Fatalf("c2 got %s/%d while c1 still holds earlier messages of the key", k, s)
		}
		c2.Ack(m)
	}
	e.expectNothing(c2, 300*time.Millisecond)

	// Closing c1 releases the stuck key: its held messages come first,
	// then the newer ones, in order.
	c1.Close()
	var got []int
	for range 2 * per {
		m := e.receive(c2)
		k, s := parsePayload(t, m)
		if k != stuck {
			t.Fatalf("c2 got %s/%d, want only %s", k, s, stuck)
		}
		got = append(got, s)
		c2.Ack(m)
	}
	if !slices.IsSorted(got) || got[per-1] >= firstNew || got[per] < firstNew {
		t.Fatalf("stuck key after release: %v (new messages start at %d)", got, firstNew)
	}
}

// TestKeySharedNoPermitsDoesNotStallOthers: a consumer that stops
// receiving (its queue full, no permits left) must not hold up the keys of
// the other consumer.
func TestKeySharedNoPermitsDoesNotStallOthers(t *testing.T) {
	e := newEnv(t)
	const topic, n = "ks-order-permits", 600
	keys := keyNames(50)
	// c1 joins first and keeps the upper half of the hash space; it never
	// calls Receive.
	e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared, ReceiverQueueSize: 5})
	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	mustProduce(t, e, p, keys, 0, n)
	want := 0
	for seq := range n {
		if broker.KeyHash(keys[seq%len(keys)]) < 32768 {
			want++
		}
	}
	last := map[string]int{}
	for i := 0; i < want; i++ {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		m, err := c2.Receive(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("c2 received %d of its %d messages, then nothing", i, want)
		} else if err != nil {
			t.Fatal(err)
		}
		k, s := parsePayload(t, m)
		if broker.KeyHash(k) >= 32768 {
			t.Fatalf("c2 got %s, a key of c1", k)
		}
		if prev, ok := last[k]; ok && s <= prev {
			t.Fatalf("c2 got %s/%d after %s/%d", k, s, k, prev)
		}
		last[k] = s
		c2.Ack(m)
	}
}

// TestKeySharedNackAfterMoveKeepsOrder: the first consumer holds messages
// of keys that then move to a newcomer, and negatively acknowledges them.
// The newcomer gets nothing of those keys while they are held, then the
// redelivered messages, then the newer ones, per key in order.
func TestKeySharedNackAfterMoveKeepsOrder(t *testing.T) {
	e := newEnv(t)
	const topic, per = "ks-order-nack", 5
	keys := keysInLowerHalf("n", 4)
	c1 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared,
		NackRedeliveryDelay: 50 * time.Millisecond})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	mustProduce(t, e, p, keys, 0, per*len(keys))
	var held []pulsar.Message
	for range per * len(keys) {
		held = append(held, e.receive(c1))
	}

	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared})
	firstNew := per * len(keys)
	mustProduce(t, e, p, keys, firstNew, 2*firstNew)
	e.expectNothing(c2, 300*time.Millisecond)

	for _, m := range held {
		c1.Nack(m)
	}
	got := map[string][]int{}
	for range 2 * firstNew {
		m := e.receive(c2)
		k, s := parsePayload(t, m)
		if s < firstNew && m.RedeliveryCount() == 0 {
			t.Errorf("%s/%d came back with redelivery count 0", k, s)
		}
		got[k] = append(got[k], s)
		c2.Ack(m)
	}
	for _, k := range keys {
		if s := got[k]; len(s) != 2*per || !slices.IsSorted(s) || s[per-1] >= firstNew {
			t.Errorf("key %s at c2: %v (new messages start at %d)", k, s, firstNew)
		}
	}
	e.expectNothing(c1, 100*time.Millisecond)
}

// TestKeySharedOutOfOrderOptIn: consumers that allow out-of-order delivery
// do not wait for a previous owner, and a consumer that disagrees with the
// subscription on it, or on the Key_Shared mode, is refused.
func TestKeySharedOutOfOrderOptIn(t *testing.T) {
	e := newEnv(t)
	const topic = "ks-order-optin"
	relaxed := &pulsar.KeySharedPolicy{Mode: pulsar.KeySharedPolicyModeAutoSplit, AllowOutOfOrderDelivery: true}
	key := keysInLowerHalf("o", 1)[0]
	c1 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared, KeySharedPolicy: relaxed})
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	mustProduce(t, e, p, []string{key}, 0, 1)
	e.receive(c1) // held, never acknowledged

	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared, KeySharedPolicy: relaxed})
	mustProduce(t, e, p, []string{key}, 1, 2)
	if k, s := parsePayload(t, e.receive(c2)); k != key || s != 1 {
		t.Fatalf("c2 got %s/%d", k, s)
	}

	sticky, err := pulsar.NewKeySharedPolicySticky([]int{0, 65535})
	if err != nil {
		t.Fatal(err)
	}
	for name, pol := range map[string]*pulsar.KeySharedPolicy{
		"ordered":  {Mode: pulsar.KeySharedPolicyModeAutoSplit},
		"sticky":   sticky,
		"defaults": nil,
	} {
		c, err := e.client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared,
			KeySharedPolicy: pol})
		if err == nil {
			c.Close()
			t.Errorf("%s consumer joined a subscription that allows out-of-order delivery", name)
		}
	}
}
