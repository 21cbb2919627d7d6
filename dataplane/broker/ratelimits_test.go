package broker_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// Rate tests measure a rate from timestamps the test takes itself, over a
// window after the bucket's initial burst, and assert it within ±10% of
// the limit. Nothing asserts how long anything took: a loaded machine makes
// the broker slower, which can only lower a rate that the limit holds far
// below the broker's throughput, and the windows are long (several
// seconds' worth of messages) so scheduling noise averages out.

// measuredRate is events per second between timestamp from and the last.
func measuredRate(t *testing.T, ts []time.Time, from int) float64 {
	t.Helper()
	if len(ts) <= from+1 {
		t.Fatalf("%d timestamps, need more than %d", len(ts), from+1)
	}
	// The least-squares slope of message index over time: a client
	// goroutine that stalls and then drains its receive queue moves a few
	// timestamps, not the rate (the ratio of the end points would swing
	// with the one at from).
	var n, st, si, stt, sti float64
	t0 := ts[from]
	for i := from; i < len(ts); i++ {
		x, y := ts[i].Sub(t0).Seconds(), float64(i)
		n, st, si, stt, sti = n+1, st+x, si+y, stt+x*x, sti+x*y
	}
	den := n*stt - st*st
	if den <= 0 {
		t.Fatalf("timestamps %v .. %v span no time", ts[from], ts[len(ts)-1])
	}
	return (n*sti - st*si) / den
}

// assertRate checks got within ±10% of want.
func assertRate(t *testing.T, what string, got, want float64) {
	t.Helper()
	t.Logf("%s: %.1f/s (limit %.1f/s, ratio %.3f)", what, got, want, got/want)
	if got < 0.9*want || got > 1.1*want {
		t.Fatalf("%s: %.1f/s, want %.1f/s ±10%%", what, got, want)
	}
}

// publishTimes sends n messages of size bytes asynchronously through p and
// returns the times their receipts arrived, in order.
func publishTimes(e *env, p pulsar.Producer, n, size int) []time.Time {
	e.t.Helper()
	var mu sync.Mutex
	var ts []time.Time
	var failed error
	done := make(chan struct{})
	payload := []byte(strings.Repeat("x", size))
	for i := 0; i < n; i++ {
		p.SendAsync(e.ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && failed == nil {
				failed = err
			}
			ts = append(ts, time.Now())
			if len(ts) == n {
				close(done)
			}
		})
	}
	select {
	case <-done:
	case <-e.ctx.Done():
		e.t.Fatalf("receipts: %v", e.ctx.Err())
	}
	if failed != nil {
		e.t.Fatalf("a throttled send failed: %v", failed)
	}
	return ts
}

// receiveTimes receives n messages and returns when each arrived.
func receiveTimes(e *env, c pulsar.Consumer, n int) []time.Time {
	e.t.Helper()
	ts := make([]time.Time, 0, n)
	for range n {
		m := e.receive(c)
		ts = append(ts, time.Now())
		c.Ack(m)
	}
	return ts
}

func createNamespace(e *env, ns string, fields map[string]string) {
	e.t.Helper()
	other := map[string]json.RawMessage{}
	for k, v := range fields {
		other[k] = json.RawMessage(v)
	}
	tenant, name, _ := strings.Cut(ns, "/")
	if err := e.sa.Broker().Resources().CreateNamespace(e.ctx, tenant, name, broker.Policies{Other: other}); err != nil {
		e.t.Fatal(err)
	}
}

func setTopicPolicy(e *env, topic, name, value string) {
	e.t.Helper()
	tn, err := broker.ParseTopicName(topic)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.sa.Broker().Resources().UpdateTopicPolicies(e.ctx, tn, false, func(m map[string]json.RawMessage) error {
		m[name] = json.RawMessage(value)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

func loadedTopic(e *env, topic string) *broker.Topic {
	e.t.Helper()
	tn, err := broker.ParseTopicName(topic)
	if err != nil {
		e.t.Fatal(err)
	}
	tp := broker.LoadedTopic(e.sa.Broker(), tn)
	if tp == nil {
		e.t.Fatalf("%s is not loaded", topic)
	}
	return tp
}

func awaitPublishLimited(e *env, topic string, want bool) {
	e.t.Helper()
	awaitCond(e.t, 10*time.Second, fmt.Sprintf("%s publish limited=%v", topic, want), func() bool {
		p, _ := loadedTopic(e, topic).RateLimited()
		return p == want
	})
}

// TestPublishRateNamespaceLive: the namespace's publishMaxMessageRate (this
// cluster's entry), set while the producer is connected, holds it to the
// rate: the producer is slowed (every send succeeds), not failed; removing
// the policy lifts the limit.
func TestPublishRateNamespaceLive(t *testing.T) {
	e := newEnv(t)
	const rate = 400
	createNamespace(e, "public/pubrate", nil)
	topic := "persistent://public/pubrate/t"
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 500})
	e.send(p, msg("before"))
	setNamespaceField(e, "public/pubrate", "publishMaxMessageRate",
		json.RawMessage(fmt.Sprintf(`{"standalone":{"publishThrottlingRateInMsg":%d,"publishThrottlingRateInByte":-1},"other":{"publishThrottlingRateInMsg":1}}`, rate)))
	awaitPublishLimited(e, topic, true)
	// A second of burst, then 5 s at the rate measured after 2 s.
	ts := publishTimes(e, p, 7*rate, 100)
	assertRate(t, "namespace publish rate", measuredRate(t, ts, 2*rate), rate)

	setNamespaceField(e, "public/pubrate", "publishMaxMessageRate", nil)
	awaitPublishLimited(e, topic, false)
}

// TestPublishRateTopicBytes: the topic-level publishRate in bytes holds a
// producer of 4 KiB messages to the byte rate (so about 256 messages a
// second), overriding a namespace rate.
func TestPublishRateTopicBytes(t *testing.T) {
	e := newEnv(t)
	const byteRate, size = 1 << 20, 4 << 10
	createNamespace(e, "public/pubbytes", map[string]string{
		"publishMaxMessageRate": `{"standalone":{"publishThrottlingRateInMsg":10,"publishThrottlingRateInByte":-1}}`,
	})
	topic := "persistent://public/pubbytes/t"
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 500})
	setTopicPolicy(e, topic, "publishRate", fmt.Sprintf(`{"publishThrottlingRateInMsg":-1,"publishThrottlingRateInByte":%d}`, byteRate))
	// The entry is the payload plus its metadata (tens of bytes): the
	// message rate is a little under byteRate/size.
	want := float64(byteRate) / float64(size+60)
	awaitCond(t, 10*time.Second, "the topic policy to replace the namespace rate", func() bool {
		ts := publishTimes(e, p, 40, size)
		return measuredRate(t, ts, 0) > 20 // 10/s under the namespace's rate
	})
	ts := publishTimes(e, p, int(6*want), size)
	assertRate(t, "topic byte rate (messages)", measuredRate(t, ts, int(2*want)), want)
}

// TestDispatchRateTopic: the topic's dispatchRate (topic-level policy,
// over a namespace's dispatchRate) holds a backlog's delivery to the rate.
func TestDispatchRateTopic(t *testing.T) {
	e := newEnv(t)
	const rate = 300
	createNamespace(e, "public/disprate", map[string]string{
		"topicDispatchRate": `{"standalone":{"dispatchThrottlingRateInMsg":5,"dispatchThrottlingRateInByte":-1,"ratePeriodInSecond":1}}`,
	})
	topic := "persistent://public/disprate/t"
	c := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	setTopicPolicy(e, topic, "dispatchRate",
		fmt.Sprintf(`{"dispatchThrottlingRateInMsg":%d,"dispatchThrottlingRateInByte":-1,"ratePeriodInSecond":1}`, rate))
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 2000})
	n := 6 * rate
	publishTimes(e, p, n, 100)
	ts := receiveTimes(e, c, n)
	assertRate(t, "topic dispatch rate", measuredRate(t, ts, 2*rate), rate)
}

// TestDispatchRateSubscription: subscriptionDispatchRate (a period of two
// seconds) applies to each subscription on its own: two subscriptions
// each get the rate.
func TestDispatchRateSubscription(t *testing.T) {
	e := newEnv(t)
	const perPeriod, period = 500, 2 // 250 a second
	createNamespace(e, "public/subrate", map[string]string{
		"subscriptionDispatchRate": fmt.Sprintf(`{"standalone":{"dispatchThrottlingRateInMsg":%d,"dispatchThrottlingRateInByte":-1,"ratePeriodInSecond":%d}}`, perPeriod, period),
	})
	topic := "persistent://public/subrate/t"
	c1 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s1"})
	c2 := e.consumer(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s2"})
	if !loadedTopic(e, topic).SubscriptionRateLimited("s1") {
		t.Fatal("s1 has no dispatch rate")
	}
	const rate = perPeriod / period
	n := 7 * rate
	p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 2000})
	publishTimes(e, p, n, 100)
	var wg sync.WaitGroup
	var ts1, ts2 []time.Time
	wg.Add(2)
	go func() { defer wg.Done(); ts1 = receiveAll(e, c1, n) }()
	go func() { defer wg.Done(); ts2 = receiveAll(e, c2, n) }()
	wg.Wait()
	if len(ts1) < n || len(ts2) < n {
		t.Fatalf("received %d and %d of %d", len(ts1), len(ts2), n)
	}
	// The burst is one period's worth (two seconds of the rate).
	assertRate(t, "s1", measuredRate(t, ts1, perPeriod+rate), rate)
	assertRate(t, "s2", measuredRate(t, ts2, perPeriod+rate), rate)
}

// receiveAll is receiveTimes for use off the test goroutine: it stops at
// the first error.
func receiveAll(e *env, c pulsar.Consumer, n int) []time.Time {
	ts := make([]time.Time, 0, n)
	for range n {
		m, err := c.Receive(e.ctx)
		if err != nil {
			return ts
		}
		ts = append(ts, time.Now())
		c.Ack(m)
	}
	return ts
}

// TestResourceGroupSharedAcrossTopics: a resource group's publish rate is
// one bucket for every topic of its namespaces: two producers on two
// topics together get the group's rate.
func TestResourceGroupSharedAcrossTopics(t *testing.T) {
	e := newEnv(t)
	const rate = 400
	res := e.sa.Broker().Resources()
	if err := res.PutResourceGroup(e.ctx, "rg1", json.RawMessage(fmt.Sprintf(`{"publishRateInMsgs":%d,"publishRateInBytes":-1,"dispatchRateInMsgs":-1,"dispatchRateInBytes":-1}`, rate))); err != nil {
		t.Fatal(err)
	}
	createNamespace(e, "public/rgns", map[string]string{"resource_group_name": `"rg1"`})
	ta, tb := "persistent://public/rgns/a", "persistent://public/rgns/b"
	pa := e.producer(pulsar.ProducerOptions{Topic: ta, DisableBatching: true, MaxPendingMessages: 500})
	pb := e.producer(pulsar.ProducerOptions{Topic: tb, DisableBatching: true, MaxPendingMessages: 500})
	awaitPublishLimited(e, ta, true)
	awaitPublishLimited(e, tb, true)
	var wg sync.WaitGroup
	var tsa, tsb []time.Time
	wg.Add(2)
	go func() { defer wg.Done(); tsa = publishTimes(e, pa, 3*rate, 100) }()
	go func() { defer wg.Done(); tsb = publishTimes(e, pb, 3*rate, 100) }()
	wg.Wait()
	all := append(slices.Clone(tsa), tsb...)
	slices.SortFunc(all, func(x, y time.Time) int { return x.Compare(y) })
	// Whether one producer finishes first or not, the group's rate holds
	// the sum.
	assertRate(t, "two topics in one resource group", measuredRate(t, all, 2*rate), rate)

	// Deleting the group's namespace membership lifts the limit.
	setNamespaceField(e, "public/rgns", "resource_group_name", nil)
	awaitPublishLimited(e, ta, false)
}

// TestResourceGroupDispatchShared: a resource group's dispatch rate is one
// bucket for the subscriptions of every topic in it, and a group created
// after the namespace named it applies once it exists.
func TestResourceGroupDispatchShared(t *testing.T) {
	e := newEnv(t)
	const rate = 300
	createNamespace(e, "public/rgdisp", map[string]string{"resource_group_name": `"rgd"`})
	ta, tb := "persistent://public/rgdisp/a", "persistent://public/rgdisp/b"
	ca := e.consumer(pulsar.ConsumerOptions{Topic: ta, SubscriptionName: "s"})
	cb := e.consumer(pulsar.ConsumerOptions{Topic: tb, SubscriptionName: "s"})
	if err := e.sa.Broker().Resources().PutResourceGroup(e.ctx, "rgd",
		json.RawMessage(fmt.Sprintf(`{"publishRateInMsgs":-1,"publishRateInBytes":-1,"dispatchRateInMsgs":%d,"dispatchRateInBytes":-1}`, rate))); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "the group's dispatch rate", func() bool {
		_, d := loadedTopic(e, ta).RateLimited()
		return d
	})
	n := 3 * rate
	for _, topic := range []string{ta, tb} {
		p := e.producer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 2000})
		publishTimes(e, p, n, 100)
	}
	var wg sync.WaitGroup
	var tsa, tsb []time.Time
	wg.Add(2)
	go func() { defer wg.Done(); tsa = receiveAll(e, ca, n) }()
	go func() { defer wg.Done(); tsb = receiveAll(e, cb, n) }()
	wg.Wait()
	all := append(slices.Clone(tsa), tsb...)
	slices.SortFunc(all, func(x, y time.Time) int { return x.Compare(y) })
	// Past the burst (a second of the rate) and one more second.
	assertRate(t, "two topics' subscriptions in one resource group", measuredRate(t, all, 2*rate), rate)
}
