package broker

// Rate limits and per-topic limits: what a topic's policies say, resolved
// once per change into topicLimits, and the token buckets (package
// ratelimit) the produce and dispatch paths take from. See doc.go for what
// is enforced and how.
//
// Precedence, as in Pulsar: a topic-level policy (/admin/topic-policies,
// local scope over global) over the namespace policy over the broker's
// default (Config). Namespace rate policies are maps keyed by cluster
// name; the entry of this broker's cluster applies (a bare object, as an
// older admin API stored it, is read as this cluster's).
//
// The buckets live as long as the topic and are re-rated in place when a
// policy changes (ratelimit.Bucket.SetRate), so a change does not hand out
// a fresh burst. A resource group's buckets are shared by every topic of
// every namespace in the group on this broker (resourcegroup.go).
//
// Lock order: refreshes run under Topic.pol.mu (the same as
// applyPolicies); they take Topic.mu and then Subscription.mu.

import (
	"encoding/json"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/ratelimit"
)

// clockBase makes nanotime monotonic: buckets must not see wall-clock
// steps.
var clockBase = time.Now()

// nanotime is the buckets' clock.
func nanotime() int64 { return int64(time.Since(clockBase)) }

// rateSpec is a rate limit: msgs and bytes per period; 0 (or less) is no
// limit on that dimension.
type rateSpec struct {
	msgs, bytes int64
	period      time.Duration
}

func (r rateSpec) set() bool { return r.msgs > 0 || r.bytes > 0 }

// topicLimits are a topic's effective limits (0: none). Interned
// (internLimits): compare the value, not the pointer.
type topicLimits struct {
	maxProducers          int
	maxConsumers          int // per topic
	maxConsumersPerSub    int
	maxSubscriptions      int
	maxUnackedPerConsumer int
	maxUnackedPerSub      int

	publish            rateSpec // per second
	dispatch           rateSpec // the topic's, over all its subscriptions
	subDispatch        rateSpec // each subscription's own
	replicatorDispatch rateSpec // each replicator's own (replication.go)
	subscribe          rateSpec // msgs: subscribes per consumer per period

	resourceGroup string

	// bare is the topicRates of a topic with these limits and no bucket;
	// set before the value is shared, so not part of the comparison
	// (the interning map's keys have it nil).
	bare *topicRates
}

// topicRates is what a topic enforces: its limits and its publish and
// dispatch limiters (nil: no rate). Immutable; replaced on a change.
type topicRates struct {
	lim       *topicLimits
	pub, disp *limiter
}

// publisher and dispatcher return the limiters (nil for a nil r).
func (r *topicRates) publisher() *limiter {
	if r == nil {
		return nil
	}
	return r.pub
}

func (r *topicRates) dispatcher() *limiter {
	if r == nil {
		return nil
	}
	return r.disp
}

// noLimits is what a topic runs with before its limits are resolved.
var noLimits = &topicLimits{}

// limits returns the topic's effective limits (none for a nil topic: the
// internal tests' bare subscriptions).
func (t *Topic) limits() *topicLimits {
	if t == nil {
		return noLimits
	}
	if r := t.rates.Load(); r != nil {
		return r.lim
	}
	return noLimits
}

// Pulsar's JSON shapes.
type publishRateJSON struct {
	Msgs  int64 `json:"publishThrottlingRateInMsg"`
	Bytes int64 `json:"publishThrottlingRateInByte"`
}

type dispatchRateJSON struct {
	Msgs   int64 `json:"dispatchThrottlingRateInMsg"`
	Bytes  int64 `json:"dispatchThrottlingRateInByte"`
	Period int64 `json:"ratePeriodInSecond"`
}

type subscribeRateJSON struct {
	PerConsumer int64 `json:"subscribeThrottlingRatePerConsumer"`
	Period      int64 `json:"ratePeriodInSecond"`
}

// clusterEntry returns this cluster's value of a namespace rate policy: a
// map keyed by cluster name, or (as stored before the admin API keyed it)
// the bare value, recognised by its field named probe.
func clusterEntry(raw json.RawMessage, cluster, probe string) (json.RawMessage, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	if _, bare := m[probe]; bare {
		return raw, true
	}
	v, ok := m[cluster]
	return v, ok
}

func parsePublishRate(raw json.RawMessage) (rateSpec, bool) {
	var p publishRateJSON
	if len(raw) == 0 || json.Unmarshal(raw, &p) != nil {
		return rateSpec{}, false
	}
	return rateSpec{msgs: p.Msgs, bytes: p.Bytes, period: time.Second}, true
}

func parseDispatchRate(raw json.RawMessage) (rateSpec, bool) {
	d := dispatchRateJSON{Msgs: -1, Bytes: -1, Period: 1}
	if len(raw) == 0 || json.Unmarshal(raw, &d) != nil {
		return rateSpec{}, false
	}
	return rateSpec{msgs: d.Msgs, bytes: d.Bytes, period: time.Duration(max(d.Period, 1)) * time.Second}, true
}

func parseSubscribeRate(raw json.RawMessage) (rateSpec, bool) {
	r := subscribeRateJSON{PerConsumer: -1, Period: 30}
	if len(raw) == 0 || json.Unmarshal(raw, &r) != nil {
		return rateSpec{}, false
	}
	return rateSpec{msgs: r.PerConsumer, period: time.Duration(max(r.Period, 1)) * time.Second}, true
}

func parseInt(raw json.RawMessage) (int, bool) {
	var n int
	if len(raw) == 0 || json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	return max(n, 0), true
}

// resolveLimits computes a topic's limits from its namespace's policies and
// its own topic-level policies (tp; nil: none).
func (s *Service) resolveLimits(ns *policySnapshot, tp map[string]json.RawMessage) *topicLimits {
	cluster := s.cfg.ClusterName
	other := ns.Other
	l := topicLimits{
		maxUnackedPerConsumer: max(s.cfg.MaxUnackedMessagesPerConsumer, 0),
		maxUnackedPerSub:      max(s.cfg.MaxUnackedMessagesPerSubscription, 0),
	}
	ints := []struct {
		dst          *int
		nsKey, tpKey string
	}{
		{&l.maxProducers, "max_producers_per_topic", "maxProducers"},
		{&l.maxConsumers, "max_consumers_per_topic", "maxConsumers"},
		{&l.maxConsumersPerSub, "max_consumers_per_subscription", "maxConsumersPerSubscription"},
		{&l.maxSubscriptions, "max_subscriptions_per_topic", "maxSubscriptionsPerTopic"},
		{&l.maxUnackedPerConsumer, "max_unacked_messages_per_consumer", "maxUnackedMessagesOnConsumer"},
		{&l.maxUnackedPerSub, "max_unacked_messages_per_subscription", "maxUnackedMessagesOnSubscription"},
	}
	for _, f := range ints {
		if n, ok := parseInt(tp[f.tpKey]); ok {
			*f.dst = n
		} else if n, ok := parseInt(other[f.nsKey]); ok {
			*f.dst = n
		}
	}
	rates := []struct {
		dst          *rateSpec
		nsKey, tpKey string
		probe        string
		parse        func(json.RawMessage) (rateSpec, bool)
	}{
		{&l.publish, "publishMaxMessageRate", "publishRate", "publishThrottlingRateInMsg", parsePublishRate},
		{&l.dispatch, "topicDispatchRate", "dispatchRate", "dispatchThrottlingRateInMsg", parseDispatchRate},
		{&l.subDispatch, "subscriptionDispatchRate", "subscriptionDispatchRate", "dispatchThrottlingRateInMsg", parseDispatchRate},
		{&l.replicatorDispatch, "replicatorDispatchRate", "replicatorDispatchRate", "dispatchThrottlingRateInMsg", parseDispatchRate},
		{&l.subscribe, "clusterSubscribeRate", "subscribeRate", "subscribeThrottlingRatePerConsumer", parseSubscribeRate},
	}
	for _, f := range rates {
		if r, ok := f.parse(tp[f.tpKey]); ok {
			*f.dst = r
		} else if raw, ok := clusterEntry(other[f.nsKey], cluster, f.probe); ok {
			*f.dst, _ = f.parse(raw)
		}
	}
	if raw, ok := other["resource_group_name"]; ok {
		json.Unmarshal(raw, &l.resourceGroup)
	}
	return s.internLimits(l)
}

// internLimits returns the one *topicLimits the broker holds for l's
// value: topics with the same limits (almost all of them) share it rather
// than carry their own copy (an idle topic's footprint counts).
func (s *Service) internLimits(l topicLimits) *topicLimits {
	if p, ok := s.limInterned.Load(l); ok {
		return p.(*topicLimits)
	}
	p := &topicLimits{}
	*p = l
	p.bare = &topicRates{lim: p}
	v, _ := s.limInterned.LoadOrStore(l, p)
	return v.(*topicLimits)
}

// rateBuckets are the buckets of one rate limit; either may be nil.
type rateBuckets struct {
	msgs, bytes *ratelimit.Bucket
}

func (rb rateBuckets) empty() bool { return rb.msgs == nil && rb.bytes == nil }

// rebucket returns buckets for spec, re-rating prev's in place.
func rebucket(prev rateBuckets, spec rateSpec, now int64) rateBuckets {
	one := func(b *ratelimit.Bucket, n int64) *ratelimit.Bucket {
		switch {
		case n <= 0:
			return nil
		case b == nil:
			return ratelimit.New(n, spec.period, now)
		}
		b.SetRate(n, spec.period, now)
		return b
	}
	return rateBuckets{msgs: one(prev.msgs, spec.msgs), bytes: one(prev.bytes, spec.bytes)}
}

func (rb rateBuckets) consume(msgs, bytes, now int64) {
	if rb.msgs != nil {
		rb.msgs.Consume(msgs, now)
	}
	if rb.bytes != nil {
		rb.bytes.Consume(bytes, now)
	}
}

// wait is how long until both balances are at least atLeast.
func (rb rateBuckets) wait(atLeast, now int64) time.Duration {
	var d time.Duration
	if rb.msgs != nil {
		d = rb.msgs.Wait(atLeast, now)
	}
	if rb.bytes != nil {
		d = max(d, rb.bytes.Wait(atLeast, now))
	}
	return d
}

// msgBudget is how many messages the msgs bucket allows now (-1: no
// limit).
func (rb rateBuckets) msgBudget(now int64) int64 {
	if rb.msgs == nil {
		return -1
	}
	return max(rb.msgs.Tokens(now), 0)
}

// limiter is what one flow of a topic (its publishing, or its dispatch to
// all subscriptions) takes tokens from: its own buckets and its resource
// group's.
type limiter struct {
	own, group rateBuckets
}

func newLimiter(prev *limiter, spec rateSpec, group rateBuckets, now int64) *limiter {
	var own rateBuckets
	if prev != nil {
		own = prev.own
	}
	own = rebucket(own, spec, now)
	if own.empty() && group.empty() {
		return nil
	}
	return &limiter{own: own, group: group}
}

func (l *limiter) consume(msgs, bytes, now int64) {
	l.own.consume(msgs, bytes, now)
	l.group.consume(msgs, bytes, now)
}

func (l *limiter) wait(atLeast, now int64) time.Duration {
	return max(l.own.wait(atLeast, now), l.group.wait(atLeast, now))
}

// msgBudget is the fewest messages any bucket allows now (-1: no limit).
func (l *limiter) msgBudget(now int64) int64 {
	b := l.own.msgBudget(now)
	if g := l.group.msgBudget(now); g >= 0 && (b < 0 || g < b) {
		b = g
	}
	return b
}

// refreshLimitsLocked resolves the topic's limits again (after a change of
// its namespace's or its own policies, or of its resource group) and
// re-rates its buckets. Called with t.pol.mu held.
func (t *Topic) refreshLimitsLocked() {
	tp := t.s.topicPolicies(t.name)
	lim := t.s.resolveLimits(t.policies(), tp)
	t.dedupOn.Store(dedupPolicy(t.policies(), tp))
	now := nanotime()
	var pubGroup, dispGroup rateBuckets
	if g := t.s.rgs.get(lim.resourceGroup); g != nil {
		pubGroup, dispGroup = g.buckets()
	}
	prev := t.rates.Load()
	pub := newLimiter(prev.publisher(), lim.publish, pubGroup, now)
	disp := newLimiter(prev.dispatcher(), lim.dispatch, dispGroup, now)
	if pub == nil && disp == nil {
		t.rates.Store(lim.bare)
	} else {
		t.rates.Store(&topicRates{lim: lim, pub: pub, disp: disp})
	}
	t.mu.Lock()
	if !lim.subscribe.set() {
		t.subscribeRL = nil
	}
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, s := range subs {
		s.refreshLimits(lim, now)
	}
}

// catchUpLimits resolves a topic's limits again if a topic-level policy or
// a resource group changed while it was opening (limitGen moved from gen,
// its value before the open).
func (s *Service) catchUpLimits(t *Topic, gen uint64) {
	if s.limitGen.Load() == gen {
		return
	}
	t.pol.mu.Lock()
	defer t.pol.mu.Unlock()
	t.refreshLimitsLocked()
}

// refreshLimits re-rates the subscription's own dispatch buckets and
// re-evaluates its unacknowledged-message blocks under new limits.
func (s *Subscription) refreshLimits(lim *topicLimits, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var prev rateBuckets
	if p := s.rl.Load(); p != nil {
		prev = *p
	}
	if rb := rebucket(prev, lim.subDispatch, now); rb.empty() {
		s.rl.Store(nil)
	} else {
		s.rl.Store(&rb)
	}
	s.recheckUnackedLocked(lim)
	// Whatever changed (a lifted block, a removed or raised rate), the
	// dispatcher decides again now rather than at the end of a hold.
	s.throttledTo = time.Time{}
	s.wake()
}

// refreshTopicLimits refreshes the limits of every open topic that match
// selects. A topic still opening is not among them: it catches up
// (catchUpLimits) after it became visible, seeing limitGen moved.
func (s *Service) refreshTopicLimits(match func(*Topic) bool) {
	s.limitGen.Add(1)
	for _, t := range s.openTopics() {
		if match(t) {
			t.pol.mu.Lock()
			t.refreshLimitsLocked()
			t.followDedupLocked()
			t.pol.mu.Unlock()
		}
	}
}
