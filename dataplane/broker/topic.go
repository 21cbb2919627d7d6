package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/ratelimit"
)

// Topic is one open topic (or partition). A persistent topic stores
// messages in its managed ledger; a non-persistent one hands them straight
// to connected consumers.
type Topic struct {
	s    *Service
	name TopicName
	ml   *ledger.ManagedLedger // nil for non-persistent topics

	mu        sync.Mutex
	producers map[uint64]*Producer // by broker-wide producer key
	names     map[string]*Producer
	excl      *exclusiveAccess // nil until the first exclusive producer
	subs      map[string]*Subscription
	closed    bool
	npSeq     int64 // message ids of a non-persistent topic
	quota     quotaState
	// dedup is nil unless deduplication is enabled (dedupOn); the policy
	// watches may switch it while the topic is loaded (policywatch.go).
	dedup atomic.Pointer[dedupState]
	// dedupOn is the deduplicationEnabled policy in force: the topic's own
	// where set, else its namespace's. Kept by refreshLimitsLocked.
	dedupOn atomic.Bool
	// usage is the durable usage counters of a persistent topic
	// (usage_durable.go); nil for non-persistent topics.
	usage *topicUsage
	// pol is the namespace policies snapshot the topic runs with, kept
	// current by the broker's policy watch (policywatch.go).
	pol topicPolicies
	// rates is the topic's effective limits and its publish and dispatch
	// buckets, kept current by refreshLimitsLocked (ratelimits.go); topics
	// without buckets share one per set of limits. subscribeRL holds,
	// under mu, the subscribe-rate bucket of each consumer identity.
	rates       atomic.Pointer[topicRates]
	subscribeRL map[string]*ratelimit.Bucket
	// assignedURL, when set before close, sends clients to that broker
	// (CLOSE_PRODUCER/CLOSE_CONSUMER assigned_broker_service_url and
	// its _tls twin).
	assignedURL atomic.Pointer[assignment]
	// repl holds, under mu, the running replicators by remote cluster
	// (replication.go); replMu serializes their reconciliation.
	repl   map[string]*replicatorRun
	replMu sync.Mutex
	// replIn is set once a remote cluster's replicator produced here: the
	// topic then keeps deduplication state for replicators while loaded.
	replIn atomic.Bool
	// replSubPending holds, under mu, remote replicated-subscription
	// states not yet applied, by subscription (replsub.go).
	replSubPending map[string]*replSubUpdate
	// in and out count the messages and bytes stored for producers
	// (replicators included) and dispatched to consumers since the topic
	// was loaded: the stats' msgInCounter, bytesInCounter, msgOutCounter
	// and bytesOutCounter, which outlive the clients.
	in, out flowCounter
	// mig is the topic's write fence for a migration, nil when not
	// fenced (migration.go); migMu serializes fencing and unfencing.
	mig   atomic.Pointer[migrationRun]
	migMu sync.Mutex
	// compaction is the topic's compaction state and compacted view
	// (compaction.go), nil until used.
	compaction atomic.Pointer[compactor]
}

// exclusiveAccess is the producer access state of a topic that has had an
// exclusive producer; most topics never do, and do not carry it.
type exclusiveAccess struct {
	holder  *Producer   // holder of exclusive access, if any
	waiting []*Producer // WaitForExclusive producers in arrival order
	epoch   uint64      // bumped at every grant of exclusive access
}

// exclusiveLocked returns the holder of exclusive access, if any.
func (t *Topic) exclusiveLocked() *Producer {
	if t.excl == nil {
		return nil
	}
	return t.excl.holder
}

// waitingLocked returns the WaitForExclusive producers in arrival order.
func (t *Topic) waitingLocked() []*Producer {
	if t.excl == nil {
		return nil
	}
	return t.excl.waiting
}

// accessLocked returns the exclusive-access state, made on first use.
func (t *Topic) accessLocked() *exclusiveAccess {
	if t.excl == nil {
		t.excl = &exclusiveAccess{}
	}
	return t.excl
}

// grantLocked gives p exclusive access, in a new epoch.
func (t *Topic) grantLocked(p *Producer) {
	ex := t.accessLocked()
	ex.holder = p
	ex.epoch++
}

// epochLocked is the current access epoch (0 before any exclusive grant).
func (t *Topic) epochLocked() uint64 {
	if t.excl == nil {
		return 0
	}
	return t.excl.epoch
}

// assignment is a broker clients are sent to when a topic closes: its
// pulsar:// and (when it serves TLS) pulsar+ssl:// URLs. A client takes the
// one of its own kind, and looks the topic up when that one is empty.
type assignment struct{ url, urlTLS string }

// assigned returns the broker clients are sent to on close (zero: none).
func (t *Topic) assigned() assignment {
	if p := t.assignedURL.Load(); p != nil {
		return *p
	}
	return assignment{}
}

// newTopic returns a topic whose maps are made on first use (setKey): an
// idle topic does not pay for them.
func newTopic(s *Service, name TopicName, ml *ledger.ManagedLedger) *Topic {
	return &Topic{s: s, name: name, ml: ml}
}

// setKey sets (*m)[k] = v, making the map on first use.
func setKey[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = make(map[K]V)
	}
	(*m)[k] = v
}

// Name returns the topic's name.
func (t *Topic) Name() TopicName { return t.name }

// loadSubscriptions reopens the durable subscriptions of the topic so their
// backlog is retained and visible before any consumer reconnects.
func (t *Topic) loadSubscriptions(ctx context.Context) error {
	for _, cur := range t.ml.Cursors() {
		if !cur.IsDurable() || internalCursor(cur.Name()) || isReplicatorCursor(cur.Name()) {
			continue
		}
		s := newSubscription(t, cur.Name(), cur, -1)
		if cur.Properties()[replicatedProp] == "true" {
			s.markReplicated()
		}
		t.mu.Lock()
		setKey(&t.subs, cur.Name(), s)
		t.mu.Unlock()
	}
	return nil
}

// close closes producers, consumers and the managed ledger.
func (t *Topic) close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	producers := make([]*Producer, 0, len(t.producers))
	for _, p := range t.producers {
		producers = append(producers, p)
	}
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, p := range producers {
		p.closeByBroker()
	}
	for _, s := range subs {
		s.close(true)
	}
	t.stopMigration()
	t.stopReplicators()
	t.stopCompaction()
	// Forget the topic only once its managed ledger is closed: meanwhile
	// lookups find the closing topic and clients are told to retry
	// (ServiceNotReady), so a reopen never races the close.
	var err error
	if t.ml != nil {
		t.usage.stop()
		if uerr := t.usage.advanceOut(ctx, ""); uerr != nil {
			t.s.log.Warn("usage: counting consumed entries failed", "topic", t.name.String(), "err", uerr)
		}
		if d := t.dedup.Load(); d != nil {
			if serr := d.snapshot(ctx, t.ml); serr != nil {
				t.s.log.Warn("dedup snapshot failed", "topic", t.name.String(), "err", serr)
			}
		}
		err = t.ml.Close(ctx)
	}
	t.s.forgetTopic(t)
	return err
}

// producerAccess registers p under the topic's access-mode rules. It
// returns ready=false for a WaitForExclusive producer that must wait.
func (t *Topic) addProducer(p *Producer) (ready bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false, protocol.ErrServiceNotReady.WithMessage("topic is closing")
	}
	if old, ok := t.names[p.name]; ok && old != p {
		return false, protocol.ErrProducerBusy.WithMessage(fmt.Sprintf("Producer with name '%s' is already connected to topic", p.name))
	}
	// max_producers_per_topic (0: no limit). A fencing producer replaces
	// the others, so it is never refused for their number.
	if limit := t.limits().maxProducers; limit > 0 && p.mode != pb.ProducerAccessMode_ExclusiveWithFencing &&
		len(t.producers)+len(t.waitingLocked()) >= limit {
		return false, protocol.ErrProducerBusy.WithMessage("Topic reached max producers limit")
	}
	switch p.mode {
	case pb.ProducerAccessMode_Shared:
		if ex := t.exclusiveLocked(); ex != nil {
			return false, protocol.ErrProducerBusy.WithMessage("Topic has an existing exclusive producer: " + ex.name)
		}
	case pb.ProducerAccessMode_Exclusive:
		if t.exclusiveLocked() != nil || len(t.producers) > 0 {
			return false, protocol.ErrProducerFenced.WithMessage("Topic has existing shared producers or an exclusive producer")
		}
		t.grantLocked(p)
	case pb.ProducerAccessMode_ExclusiveWithFencing:
		for _, old := range t.producers {
			old.closeByBroker()
			t.removeProducerLocked(old)
		}
		t.grantLocked(p)
	case pb.ProducerAccessMode_WaitForExclusive:
		if t.exclusiveLocked() != nil || len(t.producers) > 0 {
			ex := t.accessLocked()
			ex.waiting = append(ex.waiting, p)
			setKey(&t.names, p.name, p)
			return false, nil
		}
		t.grantLocked(p)
	default:
		return false, protocol.ErrNotAllowed.WithMessage("unknown producer access mode")
	}
	p.epoch = t.epochLocked()
	setKey(&t.producers, p.key(), p)
	setKey(&t.names, p.name, p)
	return true, nil
}

func (t *Topic) removeProducer(p *Producer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeProducerLocked(p)
}

func (t *Topic) removeProducerLocked(p *Producer) {
	if t.names[p.name] == p {
		delete(t.names, p.name)
	}
	if ex := t.excl; ex != nil {
		for i, w := range ex.waiting {
			if w == p {
				ex.waiting = append(ex.waiting[:i], ex.waiting[i+1:]...)
				return
			}
		}
	}
	if _, ok := t.producers[p.key()]; !ok {
		return
	}
	delete(t.producers, p.key())
	ex := t.excl
	if ex == nil {
		return // never exclusive: nobody waits
	}
	if ex.holder == p {
		ex.holder = nil
	}
	// Hand exclusive access to the next waiting producer.
	if ex.holder == nil && len(t.producers) == 0 && len(ex.waiting) > 0 {
		next := ex.waiting[0]
		ex.waiting = ex.waiting[1:]
		t.grantLocked(next)
		next.epoch = ex.epoch
		setKey(&t.producers, next.key(), next)
		next.conn.send(protocol.NewProducerSuccess(next.requestID, next.name, -1, nil, &next.epoch, true))
	}
}

// publish stores one entry (a message or a batch) and answers it through
// op (which, on success, wakes the topic's subscriptions first). Entries of
// one topic are acknowledged in the order published. The topic keeps data:
// the caller must not modify it afterwards.
func (t *Topic) publish(data []byte, op *publishOp) {
	if t.ml == nil {
		t.mu.Lock()
		t.npSeq++
		pos := ledger.Position{LedgerID: 0, EntryID: t.npSeq}
		subs := make([]*Subscription, 0, len(t.subs))
		for _, s := range t.subs {
			subs = append(subs, s)
		}
		t.mu.Unlock()
		for _, s := range subs {
			s.deliverNonPersistent(pos, data)
		}
		op.AddComplete(pos, nil)
		return
	}
	t.ml.AddEntryOwned(data, op)
}

// notifySubscriptions wakes every subscription's dispatcher.
func (t *Topic) notifySubscriptions() {
	t.mu.Lock()
	for _, s := range t.subs {
		s.wake()
	}
	t.wakeReplicatorsLocked()
	t.mu.Unlock()
}

// subscription returns the named subscription, creating it (and its
// cursor) when needed.
func (t *Topic) subscription(ctx context.Context, name string, durable bool, initial ledger.InitialPosition, start *ledger.Position, inclusive bool, subType pb.CommandSubscribe_SubType) (*Subscription, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, protocol.ErrServiceNotReady.WithMessage("topic is closing")
	}
	if s, ok := t.subs[name]; ok {
		t.mu.Unlock()
		return s, nil
	}
	if err := t.checkMaxSubscriptionsLocked(); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	t.mu.Unlock()

	var cur *ledger.Cursor
	var err error
	// fromEarliest: a read_compacted consumer starts with the whole
	// compacted view, entries of trimmed ledgers included.
	fromEarliest := false
	switch {
	case t.ml == nil:
	case durable:
		// Loaded subscriptions are in t.subs: this cursor is new, or is
		// reopened after an unsubscribe.
		cur, err = t.ml.OpenCursor(ctx, name, initial)
		fromEarliest = initial == ledger.InitialEarliest
	default:
		p := ledger.Latest
		if initial == ledger.InitialEarliest {
			p = ledger.Earliest
		}
		if start != nil {
			p = *start
		}
		fromEarliest = p == ledger.Earliest
		cur, err = t.ml.NewNonDurableCursor(p, inclusive)
	}
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.subs[name]; ok {
		return s, nil
	}
	s := newSubscription(t, name, cur, subType)
	s.durable = durable
	s.compactedEarliest = fromEarliest
	setKey(&t.subs, name, s)
	if lim := t.limits(); lim.subDispatch.set() {
		if rb := rebucket(rateBuckets{}, lim.subDispatch, nanotime()); !rb.empty() {
			s.rl.Store(&rb)
		}
	}
	return s, nil
}

// removeSubscription forgets a subscription and, if durable, deletes its
// cursor.
func (t *Topic) removeSubscription(ctx context.Context, s *Subscription) error {
	t.mu.Lock()
	if t.subs[s.name] == s {
		delete(t.subs, s.name)
	}
	t.mu.Unlock()
	s.close(false)
	if s.durable {
		t.usage.untrack(s.name)
	}
	if t.ml != nil && s.durable {
		if err := t.ml.DeleteCursor(ctx, s.name); err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
	}
	return nil
}

// dropNonDurable forgets a non-durable subscription once its last consumer
// left.
func (t *Topic) dropNonDurable(s *Subscription) {
	t.mu.Lock()
	if t.subs[s.name] == s {
		delete(t.subs, s.name)
	}
	t.mu.Unlock()
	s.close(false)
}

// Subscriptions returns the subscription names, sorted.
func (t *Topic) Subscriptions() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.subs))
	for n := range t.subs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// flowCounter counts messages and bytes.
type flowCounter struct{ msgs, bytes atomic.Int64 }

func (f *flowCounter) add(msgs, bytes int) {
	f.msgs.Add(int64(max(msgs, 1)))
	f.bytes.Add(int64(bytes))
}
