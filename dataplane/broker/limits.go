package broker

// Count limits: producers, consumers and subscriptions per topic,
// consumers per subscription, topics per namespace, and the subscribe rate
// per consumer. Each is refused with Pulsar's error and message (quoted
// from its broker so clients and tests that match them keep working).

import (
	"context"
	"fmt"
	"net"

	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/ratelimit"
)

// errTooManyTopics refuses a topic a client would auto-create in a
// namespace at its max_topics_per_namespace; the admin API answers 412
// with the same reason (ErrPrecondition).
const tooManyTopicsMsg = "Exceed maximum number of topics in namespace."

var errTooManyTopics = protocol.ErrNotAllowed.WithMessage(tooManyTopicsMsg)

// checkMaxSubscriptionsLocked refuses a new subscription on a topic at its
// max_subscriptions_per_topic (maxSubscriptionsPerTopic). Called with t.mu
// held.
func (t *Topic) checkMaxSubscriptionsLocked() error {
	if limit := t.limits().maxSubscriptions; limit > 0 && len(t.subs) >= limit {
		t.s.metrics.rateRefused.WithLabelValues("max_subscriptions_per_topic").Inc()
		return protocol.ErrNotAllowed.WithMessage("Exceed the maximum number of subscriptions of the topic: " + t.name.String())
	}
	return nil
}

// checkMaxConsumers refuses a consumer on a topic at its
// max_consumers_per_topic (maxConsumers). Two subscribes racing may both
// pass, as in Pulsar.
func (t *Topic) checkMaxConsumers() error {
	limit := t.limits().maxConsumers
	if limit <= 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.subs {
		s.mu.Lock()
		n += len(s.consumers)
		s.mu.Unlock()
	}
	if n >= limit {
		t.s.metrics.rateRefused.WithLabelValues("max_consumers_per_topic").Inc()
		return protocol.ErrConsumerBusy.WithMessage("Topic reached max consumers limit")
	}
	return nil
}

// subscribeRLMax is when a topic's subscribe rate starts forgetting the
// identities whose bucket is full again (they are as new).
const subscribeRLMax = 1024

// admitSubscribe applies the subscribe rate (subscribeRate:
// subscribeThrottlingRatePerConsumer per ratePeriodInSecond) to one
// SUBSCRIBE, keyed as Pulsar keys it: the client's host, the consumer name
// and the consumer id.
func (t *Topic) admitSubscribe(remote net.Addr, name string, id uint64) error {
	spec := t.limits().subscribe
	if !spec.set() {
		return nil
	}
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	key := fmt.Sprintf("%s\x00%s\x00%d", host, name, id)
	now := nanotime()
	t.mu.Lock()
	b := t.subscribeRL[key]
	if b == nil {
		// Pruning scans the map: only at 1024, 2048, 4096, ... entries,
		// so it costs O(1) per new identity however many there are.
		if n := len(t.subscribeRL); n >= subscribeRLMax && n&(n-1) == 0 {
			for k, o := range t.subscribeRL {
				if n, _ := o.Rate(); o.Tokens(now) >= n {
					delete(t.subscribeRL, k)
				}
			}
		}
		b = ratelimit.New(spec.msgs, spec.period, now)
		setKey(&t.subscribeRL, key, b)
	} else {
		b.SetRate(spec.msgs, spec.period, now)
	}
	t.mu.Unlock()
	if b.Tokens(now) <= 0 {
		t.s.metrics.rateRefused.WithLabelValues("subscribe_rate").Inc()
		return protocol.ErrNotAllowed.WithMessage("Subscribe limited by subscribe rate limit per consumer.")
	}
	b.Consume(1, now)
	return nil
}

// topicsRoom reports whether n more persistent topics (or partitions) fit
// in t's namespace under max_topics_per_namespace. Counting lists the
// namespace's topics, so it runs only when the limit is set and a topic is
// really created.
func (s *Service) topicsRoom(ctx context.Context, ns *policySnapshot, t TopicName, n int) (bool, error) {
	limit, _ := parseInt(ns.Other["max_topics_per_namespace"])
	if limit <= 0 {
		return true, nil
	}
	topics, err := s.TopicsOfNamespace(ctx, t.Tenant, t.Namespace, "PERSISTENT")
	if err != nil {
		return false, err
	}
	if len(topics)+n > limit {
		s.metrics.rateRefused.WithLabelValues("max_topics_per_namespace").Inc()
		return false, nil
	}
	return true, nil
}
