package broker

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"google.golang.org/protobuf/proto"
)

// Consumer is a client consumer attached to a subscription.
type Consumer struct {
	sub      *Subscription
	conn     *conn
	id       uint64
	name     string
	out      flowCounter // dispatched to this consumer
	priority int32
	metadata map[string]string
	sticky   []*pb.IntRange // Key_Shared STICKY ranges
	// outOfOrder is Key_Shared's allowOutOfOrderDelivery; every consumer
	// of a subscription must declare the same.
	outOfOrder bool
	// readCompacted: the consumer reads the compacted view (compaction.go).
	readCompacted bool

	// closed is set when the broker closes the consumer; the client
	// re-subscribes with the same consumer id.
	closed atomic.Bool

	// Guarded by sub.mu.
	announced bool // has been told its active state (Failover)
	permits   int
	lastFlow  int64                   // Unix milliseconds of the last FLOW
	pending   map[ledger.Position]int // dispatched, not acknowledged: messages per entry
	unacked   int                     // messages in pending
	blocked   bool                    // over max_unacked_messages_per_consumer (keyshared_order.go)
}

// closeByBroker tells the client to re-subscribe this consumer.
func (c *Consumer) closeByBroker() {
	c.closed.Store(true)
	a := c.sub.topic.assigned()
	c.conn.send(protocol.NewCloseConsumer(c.id, 0, a.url, a.urlTLS))
}

// consumer returns the live consumer with id, forgetting one the broker
// closed.
func (c *conn) consumer(id uint64) (*Consumer, bool) {
	cons, ok := c.consumers[id]
	if ok && cons.closed.Load() {
		delete(c.consumers, id)
		cons.sub.removeConsumer(cons)
		return nil, false
	}
	return cons, ok
}

// Subscription is a named cursor on a topic with its consumers and its
// dispatcher. Persistent subscriptions run one dispatcher goroutine, woken
// by FLOW, new entries, redelivery requests and consumer changes; it reads
// from the cursor (or the replay set first) and hands entries to consumers
// by the subscription type's rule:
//
//   - Exclusive: the one consumer.
//   - Failover: the active consumer: sorted by priority then name; for a
//     partition the (partition index mod consumers)-th, else the first.
//   - Shared: round-robin over the consumers with permits, best priority
//     level (lowest number) first.
//   - Key_Shared: the consumer owning the hash range of the message key
//     (auto-split: the 0..65535 hash space divided evenly over consumers in
//     arrival order; sticky: the ranges the consumers declared), with the
//     per-key ordering rules of keyshared_order.go.
//
// Entries that cannot be dispatched now (no permits on the consumer that
// must get them, a Key_Shared hash still held by its previous owner, or
// delivery delayed) wait in the replay set, which is dispatched before new
// entries. Key_Shared takes from it only what can go now, so a blocked
// entry does not hold up other keys.
type Subscription struct {
	topic   *Topic
	name    string
	cursor  *ledger.Cursor // nil for non-persistent topics
	durable bool
	out     flowCounter // dispatched since the subscription was loaded

	mu           sync.Mutex
	subType      pb.CommandSubscribe_SubType // -1 until the first consumer
	consumers    []*Consumer
	replay       []replayEntry // sorted by position, unique
	replayHashes map[int32]int // Key_Shared: replay entries per hash
	redeliveries map[ledger.Position]uint32
	delayed      []delayedEntry // sorted by time
	ranges       []keyRange     // Key_Shared auto-split ownership, by start
	held         heldHashes     // Key_Shared: pending entries per hash
	outOfOrder   bool           // Key_Shared allowOutOfOrderDelivery
	rr           int
	closed       bool
	unacked      int       // messages pending at all consumers
	blocked      bool      // over max_unacked_messages_per_subscription
	throttledTo  time.Time // dispatch held for a rate limit until then

	// rl is the subscription's own dispatch buckets
	// (subscriptionDispatchRate; nil: none), kept by refreshLimits.
	rl atomic.Pointer[rateBuckets]
	// seekGen counts cursor resets: entries read before one are stale.
	seekGen uint64

	// replSrc, under mu, is set for a replicated subscription (replsub.go).
	replSrc *replSubSource

	// readCompacted, under mu: the consumers read the compacted view up to
	// the compaction horizon (the first consumer's choice).
	// compactedEarliest, under mu: the next compacted read starts at the
	// view's first entry (a start or seek at earliest), not at the read
	// position.
	readCompacted     bool
	compactedEarliest bool

	wakeCh  chan struct{}
	stopCh  chan struct{}
	done    chan struct{}
	running bool
}

type delayedEntry struct {
	at time.Time
	replayEntry
}

func newSubscription(t *Topic, name string, cur *ledger.Cursor, subType pb.CommandSubscribe_SubType) *Subscription {
	if t != nil {
		t.usage.track(name, cur) // before any consumer attaches
	}
	return &Subscription{
		topic: t, name: name, cursor: cur, durable: cur != nil && cur.IsDurable(),
		subType:      subType,
		redeliveries: map[ledger.Position]uint32{},
		replayHashes: map[int32]int{},
		wakeCh:       make(chan struct{}, 1),
		stopCh:       make(chan struct{}),
		done:         make(chan struct{}),
	}
}

// Name returns the subscription's name.
func (s *Subscription) Name() string { return s.name }

func (s *Subscription) wake() {
	select {
	case s.wakeCh <- struct{}{}:
	default:
	}
}

// addConsumer attaches c under the subscription type's rules.
func (s *Subscription) addConsumer(c *Consumer, subType pb.CommandSubscribe_SubType) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return protocol.ErrServiceNotReady.WithMessage("subscription is closing")
	}
	if len(s.consumers) > 0 && s.subType != subType {
		return protocol.ErrConsumerBusy.WithMessage("Subscription is of different type")
	}
	if limit := s.topic.limits().maxConsumersPerSub; limit > 0 && len(s.consumers) >= limit {
		s.topic.s.metrics.rateRefused.WithLabelValues("max_consumers_per_subscription").Inc()
		return protocol.ErrConsumerBusy.WithMessage("Subscription reached max consumers limit")
	}
	if subType == pb.CommandSubscribe_Exclusive && len(s.consumers) > 0 {
		return protocol.ErrConsumerBusy.WithMessage("Exclusive consumer is already connected")
	}
	if subType == pb.CommandSubscribe_Key_Shared && len(s.consumers) > 0 {
		// As in Pulsar, a Key_Shared subscription's consumers agree on the
		// mode and on out-of-order delivery: mixing them would leave the
		// ordering rules of keyshared.go undefined.
		if (len(s.consumers[0].sticky) > 0) != (len(c.sticky) > 0) {
			return protocol.ErrConsumerBusy.WithMessage("Subscription is of different type: its Key_Shared mode differs from the consumer's")
		}
		if s.outOfOrder != c.outOfOrder {
			return protocol.ErrConsumerBusy.WithMessage("Subscription is of different type: its allowOutOfOrderDelivery differs from the consumer's")
		}
	}
	if len(s.consumers) == 0 {
		s.outOfOrder = c.outOfOrder
		s.readCompacted = c.readCompacted
	}
	s.subType = subType
	c.pending = map[ledger.Position]int{}
	s.consumers = append(s.consumers, c)
	s.recheckUnackedLocked(s.topic.limits())
	if subType == pb.CommandSubscribe_Key_Shared && len(c.sticky) == 0 {
		s.splitAddLocked(c)
	}
	if s.cursor != nil && !s.running {
		s.running = true
		go s.run()
	}
	s.wake()
	return nil
}

// announceActive tells Failover consumers which one is active. A new
// consumer is told on its first FLOW: the client registers a consumer only
// after the SUBSCRIBE reply was handed over, and drops an
// ACTIVE_CONSUMER_CHANGE for a consumer it does not know yet; it sends
// FLOW once registered.
func (s *Subscription) announceActive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.activeChangedLocked()
}

// firstFlowLocked announces c's active state when its first FLOW arrives.
func (s *Subscription) firstFlowLocked(c *Consumer) {
	if c.announced {
		return
	}
	c.announced = true
	if s.subType == pb.CommandSubscribe_Failover {
		c.conn.send(protocol.NewActiveConsumerChange(c.id, c == s.activeConsumerLocked()))
	}
}

// removeConsumer detaches c; what it had not acknowledged is redelivered.
func (s *Subscription) removeConsumer(c *Consumer) {
	s.mu.Lock()
	i := slices.Index(s.consumers, c)
	if i < 0 {
		s.mu.Unlock()
		return
	}
	s.consumers = slices.Delete(s.consumers, i, i+1)
	s.splitRemoveLocked(c)
	for pos := range c.pending {
		s.redeliverPendingLocked(c, pos)
	}
	c.pending = nil
	empty := len(s.consumers) == 0
	s.activeChangedLocked()
	s.mu.Unlock()
	s.wake()
	if empty && !s.durable {
		s.topic.dropNonDurable(s)
	}
}

// close stops the dispatcher; with notify, consumers are told to reconnect.
func (s *Subscription) close(notify bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	consumers := slices.Clone(s.consumers)
	running := s.running
	s.mu.Unlock()
	close(s.stopCh)
	if running {
		<-s.done
	}
	if notify {
		for _, c := range consumers {
			c.closeByBroker()
		}
	}
}

// activeConsumerLocked returns the consumer that receives messages under
// Exclusive and Failover.
func (s *Subscription) activeConsumerLocked() *Consumer {
	if len(s.consumers) == 0 {
		return nil
	}
	if s.subType != pb.CommandSubscribe_Failover {
		return s.consumers[0]
	}
	idx := s.topic.name.PartitionIndex()
	if idx < 0 {
		return s.consumers[0]
	}
	sorted := slices.Clone(s.consumers)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].priority != sorted[j].priority {
			return sorted[i].priority < sorted[j].priority
		}
		return sorted[i].name < sorted[j].name
	})
	return sorted[idx%len(sorted)]
}

// activeChangedLocked tells Failover consumers which one is active.
func (s *Subscription) activeChangedLocked() {
	if s.subType != pb.CommandSubscribe_Failover {
		return
	}
	active := s.activeConsumerLocked()
	for _, c := range s.consumers {
		if c.announced {
			c.conn.send(protocol.NewActiveConsumerChange(c.id, c == active))
		}
	}
}

// addReplayLocked schedules an entry for (re)delivery.
func (s *Subscription) addReplayLocked(r replayEntry, redelivery bool) {
	if redelivery {
		s.redeliveries[r.pos]++
	}
	i, found := slices.BinarySearchFunc(s.replay, r.pos, compareReplayPos)
	if found {
		return
	}
	s.replay = slices.Insert(s.replay, i, r)
	if r.hash != noHash {
		s.replayHashes[r.hash]++
	}
}

func compareReplayPos(r replayEntry, p ledger.Position) int { return r.pos.Compare(p) }

// totalPermitsLocked sums the permits of consumers that may receive now.
func (s *Subscription) totalPermitsLocked() int {
	switch s.subType {
	case pb.CommandSubscribe_Exclusive, pb.CommandSubscribe_Failover:
		if a := s.activeConsumerLocked(); a != nil {
			return a.permits
		}
		return 0
	}
	if s.blocked {
		return 0
	}
	n := 0
	for _, c := range s.consumers {
		n += max(c.availableLocked(), 0)
	}
	return n
}

// run is the dispatcher goroutine of a persistent subscription.
func (s *Subscription) run() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stopCh
		cancel()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.dispatch(ctx)
		s.mu.Lock()
		wait := time.Hour
		if len(s.delayed) > 0 {
			wait = max(time.Until(s.delayed[0].at), time.Millisecond)
		}
		if !s.throttledTo.IsZero() {
			wait = min(wait, max(time.Until(s.throttledTo), time.Millisecond))
		}
		s.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-s.stopCh:
			return
		case <-s.wakeCh:
		case <-timer.C:
			s.releaseDelayed()
		}
	}
}

// releaseDelayed moves delayed entries whose time has come to replay.
func (s *Subscription) releaseDelayed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	n := 0
	for n < len(s.delayed) && !s.delayed[n].at.After(now) {
		s.addReplayLocked(s.delayed[n].replayEntry, false)
		n++
	}
	s.delayed = s.delayed[n:]
}

// dispatch sends entries while consumers have permits and entries exist.
// Each round first takes from the replay set; only when nothing there can
// go does it read new entries from the cursor. Every round makes progress
// (entries delivered, found gone, or read from the cursor) or returns.
func (s *Subscription) dispatch(ctx context.Context) {
	batch := s.topic.s.cfg.DispatchBatch
	for ctx.Err() == nil {
		tl, sl := s.topic.rates.Load().dispatcher(), s.rl.Load()
		budget := s.dispatchBudget(tl, sl)
		if budget == 0 {
			return // held for a dispatch rate; run wakes it
		}
		s.mu.Lock()
		permits := s.totalPermitsLocked()
		if permits <= 0 || len(s.consumers) == 0 {
			s.mu.Unlock()
			return
		}
		if budget > 0 {
			permits = min(permits, budget)
		}
		var replay []replayEntry
		if s.subType == pb.CommandSubscribe_Key_Shared {
			replay = s.takeKeySharedReplayLocked(min(batch, permits))
		} else {
			replay = s.takeReplayLocked(min(batch, permits))
		}
		full := s.replayFullLocked()
		gen := s.seekGen
		s.mu.Unlock()

		if len(replay) > 0 {
			var entries []ledger.Entry
			var live [][]int64
			for _, r := range replay {
				if s.cursor.IsAcked(r.pos) {
					continue
				}
				e, l, ok := s.readForReplay(ctx, r.pos)
				if !ok {
					continue // trimmed or gone
				}
				entries, live = append(entries, e), append(live, l)
			}
			sent, msgs, bytes := s.deliver(entries, live, gen)
			chargeDispatch(tl, sl, msgs, bytes)
			if sent > 0 || len(entries) < len(replay) {
				continue
			}
			// What was picked went back (state changed meanwhile): do not
			// spin on it, read new entries instead.
		}
		if full {
			return
		}
		if handled, stop := s.dispatchCompacted(ctx, min(batch, permits), gen, tl, sl); stop {
			return
		} else if handled {
			continue
		}
		entries, err := s.cursor.ReadEntries(ctx, min(batch, permits))
		if err != nil {
			if ctx.Err() == nil {
				s.topic.s.log.Warn("dispatch read failed", "topic", s.topic.name.String(), "sub", s.name, "err", err)
			}
			return
		}
		if max, fenced := s.topic.capDispatch(); fenced {
			// A fenced topic serves what it stored before the fence
			// (migration.go); the read position stays at the first entry
			// after it.
			n := len(entries)
			for n > 0 && entries[n-1].Pos.Compare(max) > 0 {
				n--
			}
			if n < len(entries) {
				s.cursor.Seek(entries[n].Pos)
				entries = entries[:n]
			}
		}
		if len(entries) == 0 {
			return
		}
		// Entries read and not delivered were parked or delayed: keep
		// going, the other consumers may have permits for what follows.
		_, msgs, bytes := s.deliver(entries, nil, gen)
		chargeDispatch(tl, sl, msgs, bytes)
	}
}

// dispatchBudget returns how many messages the dispatch rates (the topic's
// and its resource group's, tl, and the subscription's own, sl) allow now:
// -1 without a message limit, 0 when a rate is spent, in which case the
// dispatcher is held until the balances are positive again. Dispatch is
// slowed, never failed: entries stay in the backlog.
func (s *Subscription) dispatchBudget(tl *limiter, sl *rateBuckets) int {
	if tl == nil && sl == nil {
		return -1
	}
	now := nanotime()
	var wait time.Duration
	budget := int64(-1)
	if tl != nil {
		wait = tl.wait(1, now)
		budget = tl.msgBudget(now)
	}
	if sl != nil {
		wait = max(wait, sl.wait(1, now))
		if b := sl.msgBudget(now); b >= 0 && (budget < 0 || b < budget) {
			budget = b
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if wait > 0 {
		s.throttledTo = time.Now().Add(wait)
		s.topic.s.metrics.dispatchThrottled.Inc()
		return 0
	}
	s.throttledTo = time.Time{}
	return int(min(budget, math.MaxInt32))
}

// chargeDispatch takes what was dispatched from the dispatch buckets.
func chargeDispatch(tl *limiter, sl *rateBuckets, msgs, bytes int) {
	if tl == nil && sl == nil || msgs == 0 {
		return
	}
	now := nanotime()
	if tl != nil {
		tl.consume(int64(msgs), int64(bytes), now)
	}
	if sl != nil {
		sl.consume(int64(msgs), int64(bytes), now)
	}
}

// entryInfo is what dispatch needs from an entry's message metadata.
type entryInfo struct {
	numMessages int
	key         string
	deliverAt   int64
}

func parseEntryInfo(data []byte) entryInfo {
	meta, _, err := protocol.ParseHeadersAndPayload(data)
	if err != nil {
		return entryInfo{numMessages: 1}
	}
	info := entryInfo{numMessages: protocol.NumMessages(meta), deliverAt: meta.GetDeliverAtTime()}
	if k := meta.GetOrderingKey(); len(k) > 0 {
		info.key = string(k)
	} else {
		info.key = meta.GetPartitionKey()
	}
	return info
}

// deliver hands entries to consumers and returns how many were sent, with
// their messages and bytes; entries that cannot go now are kept for replay
// or delay. Entries read before a seek (gen is the seekGen they were read
// under) are dropped. live, when not nil, holds for each entry of the
// compacted view the batch indexes to deliver (nil: all).
func (s *Subscription) deliver(entries []ledger.Entry, live [][]int64, gen uint64) (sent, msgs, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.seekGen {
		return 0, 0, 0
	}
	now := time.Now().UnixMilli()
	keyShared := s.subType == pb.CommandSubscribe_Key_Shared
	for i, e := range entries {
		info := parseEntryInfo(e.Data)
		r := replayEntry{pos: e.Pos, hash: noHash, n: info.numMessages}
		if keyShared {
			r.hash = keyHash(info.key)
		}
		if info.deliverAt > now && (s.subType == pb.CommandSubscribe_Shared || keyShared) {
			at := time.UnixMilli(info.deliverAt)
			i := sort.Search(len(s.delayed), func(i int) bool { return s.delayed[i].at.After(at) })
			s.delayed = slices.Insert(s.delayed, i, delayedEntry{at, r})
			continue
		}
		var c *Consumer
		switch {
		case s.blocked:
			// The subscription reached its unacknowledged-message limit
			// with an earlier entry of this batch: the rest wait.
		case keyShared:
			c = s.keySharedTargetLocked(e.Pos, r.hash)
		default:
			c = s.pickConsumerLocked(info.key)
		}
		if c == nil {
			s.addReplayLocked(r, false)
			continue
		}
		c.permits -= info.numMessages
		s.trackPendingLocked(c, e.Pos, info.numMessages, r.hash)
		id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(e.Pos.LedgerID)), EntryId: proto.Uint64(uint64(e.Pos.EntryID))}
		var ackSet []int64
		if acked, size, ok := s.cursor.BatchAckSet(e.Pos); ok {
			ackSet = unackedBits(acked, size)
		}
		if live != nil && live[i] != nil {
			ackSet = intersectBits(ackSet, live[i])
		}
		cmd := protocol.NewMessage(c.id, id, s.redeliveries[e.Pos], ackSet, nil)
		c.conn.sendFrame(outFrame{cmd: cmd, payload: e.Data})
		s.countDispatched(c, info.numMessages, e.Data)
		sent++
		msgs += info.numMessages
		bytes += len(e.Data)
	}
	return sent, msgs, bytes
}

// unackedBits converts acknowledged-index bits to Pulsar's ack_set, where
// bit 1 means "still to deliver".
func unackedBits(acked []uint64, size int) []int64 {
	out := make([]int64, (size+63)/64)
	for i := 0; i < size; i++ {
		w, b := i/64, uint(i%64)
		if w >= len(acked) || acked[w]&(1<<b) == 0 {
			out[w] |= 1 << b
		}
	}
	return out
}

// pickConsumerLocked chooses the consumer for an entry, or nil if the one
// that must get it has no permits.
func (s *Subscription) pickConsumerLocked(key string) *Consumer {
	switch s.subType {
	case pb.CommandSubscribe_Exclusive, pb.CommandSubscribe_Failover:
		if a := s.activeConsumerLocked(); a != nil && a.permits > 0 {
			return a
		}
		return nil
	case pb.CommandSubscribe_Key_Shared:
		c := s.keyOwnerLocked(keyHash(key))
		if c != nil && c.availableLocked() > 0 {
			return c
		}
		return nil
	}
	// Shared: round-robin within the best priority level that has permits.
	best := int32(1 << 30)
	for _, c := range s.consumers {
		if c.availableLocked() > 0 && c.priority < best {
			best = c.priority
		}
	}
	n := len(s.consumers)
	for i := 0; i < n; i++ {
		c := s.consumers[(s.rr+i)%n]
		if c.availableLocked() > 0 && c.priority == best {
			s.rr = (s.rr + i + 1) % n
			return c
		}
	}
	return nil
}

// keyOwnerLocked returns the consumer whose range holds hash h: a STICKY
// range if one does, else the auto-split ranges.
func (s *Subscription) keyOwnerLocked(h int32) *Consumer {
	if len(s.consumers) == 0 {
		return nil
	}
	for _, c := range s.consumers {
		for _, r := range c.sticky {
			if h >= r.GetStart() && h <= r.GetEnd() {
				return c
			}
		}
	}
	return s.autoSplitOwnerLocked(h)
}

// deliverNonPersistent pushes a message of a non-persistent topic to one
// consumer with permits; without one it is dropped (Pulsar semantics).
func (s *Subscription) deliverNonPersistent(pos ledger.Position, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := parseEntryInfo(data)
	c := s.pickConsumerLocked(info.key)
	if c == nil {
		return
	}
	c.permits -= info.numMessages
	id := &pb.MessageIdData{LedgerId: proto.Uint64(uint64(pos.LedgerID)), EntryId: proto.Uint64(uint64(pos.EntryID))}
	c.conn.sendFrame(outFrame{cmd: protocol.NewMessage(c.id, id, 0, nil, nil), payload: data})
	s.countDispatched(c, info.numMessages, data)
}

// countDispatched counts an entry of n messages handed to consumer c: the
// broker's metrics, the namespace's usage, and the topic's, subscription's
// and consumer's stats.
func (s *Subscription) countDispatched(c *Consumer, n int, data []byte) {
	s.topic.s.metrics.outMessages.Add(float64(n))
	s.topic.s.metrics.outBytes.Add(float64(len(data)))
	s.topic.s.metrics.usage.out(s.topic.name, n, data)
	s.out.add(n, len(data))
	c.out.add(n, len(data))
	s.topic.out.add(n, len(data))
}
