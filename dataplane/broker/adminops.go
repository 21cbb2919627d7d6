package broker

// Operations on topics and subscriptions for the admin REST API
// (package dataplane/admin). They run on the broker's own topic registry, so
// an admin change and the binary protocol see the same topic objects.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// ErrPrecondition is returned when an admin operation is refused because of
// the topic's state (active producers or consumers, a partitioned topic
// addressed as a whole where one partition is needed, ...).
var ErrPrecondition = errors.New("broker: precondition failed")

// topicCreatedPath records when a topic was created through the admin API
// (or first seen by it): /admin/topic-created/<escaped full topic name> ->
// Unix milliseconds.
const topicCreatedPath = "/admin/topic-created"

func topicCreatedKey(t TopicName) string {
	return topicCreatedPath + "/" + url.PathEscape(t.String())
}

// TopicsOfNamespace lists a namespace's topics (partitions included) as the
// binary GET_TOPICS_OF_NAMESPACE does; mode is "PERSISTENT",
// "NON_PERSISTENT" or "ALL" (default).
func (s *Service) TopicsOfNamespace(ctx context.Context, tenant, ns, mode string) ([]string, error) {
	// Pulsar's REST endpoint defaults mode to PERSISTENT (and the Go
	// client's HTTP lookup drops the query string).
	m := pb.CommandGetTopicsOfNamespace_PERSISTENT
	switch strings.ToUpper(mode) {
	case "ALL":
		m = pb.CommandGetTopicsOfNamespace_ALL
	case "NON_PERSISTENT":
		m = pb.CommandGetTopicsOfNamespace_NON_PERSISTENT
	}
	return s.topicsOfNamespace(ctx, tenant+"/"+ns, m)
}

// openTopic returns the topic named t if it is open on this broker.
func (s *Service) openedTopic(t TopicName) *Topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics[t.ledgerName()].topic
}

// TopicExists reports whether the non-partitioned topic (or partition) t
// exists: a stored managed ledger for a persistent topic, an open topic for
// a non-persistent one.
func (s *Service) TopicExists(ctx context.Context, t TopicName) (bool, error) {
	if t.Domain == NonPersistent {
		return s.openedTopic(t) != nil, nil
	}
	return s.mlf.Exists(ctx, t.ledgerName())
}

// DomainTopics lists the non-partitioned topics and partitions of a
// namespace in one domain.
func (s *Service) DomainTopics(ctx context.Context, tenant, ns string, d Domain) ([]string, error) {
	mode := "PERSISTENT"
	if d == NonPersistent {
		mode = "NON_PERSISTENT"
	}
	return s.TopicsOfNamespace(ctx, tenant, ns, mode)
}

// CreateTopic creates the non-partitioned topic t with properties.
func (s *Service) CreateTopic(ctx context.Context, t TopicName, props map[string]string) error {
	// A persistent topic's name is guarded against a partitioned topic of
	// that name by the managed ledger's creation itself (openTopic).
	if t.PartitionIndex() < 0 && t.Domain != Persistent {
		n, err := s.res.Partitions(ctx, t)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: partitioned topic %s already exists", ErrAlreadyExists, t)
		}
	}
	if t.Domain != Persistent {
		s.recordCreated(ctx, t)
		_, err := s.GetTopic(ctx, t, false)
		return err
	}
	// Creating the managed ledger is what tells whether the topic existed
	// or a partitioned topic has its name (one metadata write, no read of
	// its own), and it is opened with the namespace's policies at once.
	// The record keeps the creation time (ManagedLedger.Created), so
	// nothing else is written.
	tp, err := s.getTopic(ctx, t, createTopic)
	if err != nil {
		return err
	}
	if len(props) > 0 {
		if err := tp.ml.SetProperties(ctx, props); err != nil {
			return err
		}
	}
	return nil
}

// recordCreated stores the creation time of t unless one is stored.
func (s *Service) recordCreated(ctx context.Context, t TopicName) {
	s.md.Create(ctx, topicCreatedKey(t), []byte(strconv.FormatInt(time.Now().UnixMilli(), 10)))
}

// topicCreated returns when t was created. A persistent topic's managed
// ledger record keeps it (pass the open topic as tp); other topics, and
// persistent ones whose record predates that, have it under
// topicCreatedPath, recorded now if it was not (topics created implicitly
// by clients).
func (s *Service) topicCreated(ctx context.Context, t TopicName, tp *Topic) int64 {
	if tp != nil && tp.ml != nil {
		if c := tp.ml.Created(); c > 0 {
			return c
		}
	}
	kv, err := s.md.Get(ctx, topicCreatedKey(t))
	if errors.Is(err, metadata.ErrNotFound) {
		s.recordCreated(ctx, t)
		kv, err = s.md.Get(ctx, topicCreatedKey(t))
	}
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(string(kv.Value), 10, 64)
	return v
}

// CreatePartitionedTopic records a partitioned topic and its creation time.
func (s *Service) CreatePartitionedTopic(ctx context.Context, t TopicName, n int, props map[string]string) error {
	if t.Domain == Persistent {
		exists, err := s.mlf.Exists(ctx, t.ledgerName())
		if err != nil {
			return err
		}
		if exists {
			return fmt.Errorf("%w: non-partitioned topic %s", ErrAlreadyExists, t)
		}
		snap, err := s.namespaceSnapshot(ctx, t)
		if err != nil {
			return err
		}
		if room, err := s.topicsRoom(ctx, snap, t, n); err != nil {
			return err
		} else if !room {
			return fmt.Errorf("%w: %s", ErrPrecondition, tooManyTopicsMsg)
		}
	}
	if err := s.res.CreatePartitioned(ctx, t, n, props); err != nil {
		return err
	}
	s.recordCreated(ctx, t)
	return nil
}

// DeleteTopic deletes the non-partitioned topic (or partition) t. Without
// force it refuses while producers or consumers are connected.
func (s *Service) DeleteTopic(ctx context.Context, t TopicName, force bool) error {
	if tp := s.openedTopic(t); tp != nil && !force && tp.active() {
		return fmt.Errorf("%w: Topic has active producers/subscriptions", ErrPrecondition)
	}
	tp, done, err := s.beginDelete(ctx, t.ledgerName())
	if err != nil {
		return err
	}
	defer s.endDelete(t.ledgerName(), done)
	if tp != nil {
		if err := tp.close(ctx); err != nil && !errors.Is(err, ledger.ErrFenced) {
			s.log.Warn("admin delete: close topic failed", "topic", t.String(), "err", err)
		}
	}
	if t.Domain == Persistent {
		if err := s.mlf.Delete(ctx, t.ledgerName()); err != nil {
			if errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("%w: topic %s", ErrNotFound, t)
			}
			return err
		}
	} else if tp == nil {
		return fmt.Errorf("%w: topic %s", ErrNotFound, t)
	}
	s.md.Delete(ctx, topicCreatedKey(t), metadata.AnyVersion)
	if t.PartitionIndex() < 0 {
		// As in Pulsar 3.x, deleting a topic deletes its schema; a
		// partitioned topic's schema goes with the partitioned topic.
		s.md.Delete(ctx, schemaKey(t), metadata.AnyVersion)
	}
	return nil
}

// beginDelete marks the topic registered under key as being deleted and
// returns it if it is open. Until endDelete, opens of that name wait: a
// client that reconnects when the deletion closes its topic must not reopen
// the managed ledger the deletion is removing. A deletion waits for an open
// or another deletion of the name in progress.
func (s *Service) beginDelete(ctx context.Context, key string) (*Topic, chan struct{}, error) {
	for {
		s.mu.Lock()
		sl := s.topics[key]
		var busy chan struct{}
		switch {
		case sl.fut != nil:
			busy = sl.fut.done
		case sl.deleting != nil:
			busy = sl.deleting
		}
		if busy == nil {
			done := make(chan struct{})
			s.topics[key] = topicSlot{deleting: done}
			s.mu.Unlock()
			return sl.topic, done, nil
		}
		s.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// endDelete ends the deletion beginDelete marked and lets opens proceed.
func (s *Service) endDelete(key string, done chan struct{}) {
	s.mu.Lock()
	if s.topics[key].deleting == done {
		delete(s.topics, key)
	}
	s.mu.Unlock()
	close(done)
}

// DeletePartitionedTopic deletes every partition and then the metadata.
func (s *Service) DeletePartitionedTopic(ctx context.Context, t TopicName, force bool) error {
	n, err := s.res.Partitions(ctx, t)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: partitioned topic %s", ErrNotFound, t)
	}
	if !force {
		for i := 0; i < n; i++ {
			if tp := s.openedTopic(t.Partition(i)); tp != nil && tp.active() {
				return fmt.Errorf("%w: Topic has active producers/subscriptions", ErrPrecondition)
			}
		}
	}
	for i := 0; i < n; i++ {
		if err := s.DeleteTopic(ctx, t.Partition(i), true); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	if err := s.res.DeletePartitioned(ctx, t); err != nil {
		return err
	}
	s.md.Delete(ctx, topicCreatedKey(t), metadata.AnyVersion)
	s.md.Delete(ctx, schemaKey(t), metadata.AnyVersion)
	return nil
}

// active reports whether producers or consumers are attached.
func (t *Topic) active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.producers) > 0 || len(t.waitingLocked()) > 0 {
		return true
	}
	for _, s := range t.subs {
		s.mu.Lock()
		n := len(s.consumers)
		s.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// UnloadTopic closes t on this broker; its clients are told to reconnect
// and the topic is reopened on their next use.
func (s *Service) UnloadTopic(ctx context.Context, t TopicName) error {
	if tp := s.openedTopic(t); tp != nil {
		return tp.close(ctx)
	}
	exists, err := s.TopicExists(ctx, t)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%w: topic %s", ErrNotFound, t)
	}
	return nil
}

// persistentTopic opens an existing persistent topic (or partition).
func (s *Service) persistentTopic(ctx context.Context, t TopicName) (*Topic, error) {
	if t.Domain != Persistent {
		return nil, fmt.Errorf("%w: operation not supported on non-persistent topic %s", ErrPrecondition, t)
	}
	tp, err := s.GetTopic(ctx, t, false)
	if err != nil {
		if errors.Is(err, protocol.ErrTopicNotFound) {
			return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		if errors.Is(err, protocol.ErrNotAllowed) {
			return nil, fmt.Errorf("%w: %v", ErrPrecondition, err)
		}
		return nil, err
	}
	return tp, nil
}

// TerminateTopic refuses further messages on t and returns its last
// message's position.
func (s *Service) TerminateTopic(ctx context.Context, t TopicName) (ledger.Position, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return ledger.Position{}, err
	}
	pos, err := tp.ml.Terminate(ctx)
	if err != nil {
		return pos, err
	}
	// Producers are closed; re-creating one fails with TopicTerminated.
	tp.mu.Lock()
	for _, p := range tp.producers {
		p.closeByBroker()
	}
	tp.mu.Unlock()
	return pos, nil
}

// LastMessageID returns the position of t's last confirmed entry.
func (s *Service) LastMessageID(ctx context.Context, t TopicName) (ledger.Position, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return ledger.Position{}, err
	}
	return tp.ml.LastConfirmed(), nil
}

// TopicProperties returns the properties of a topic: those of the
// partitioned metadata for a partitioned topic, else the managed ledger's.
func (s *Service) TopicProperties(ctx context.Context, t TopicName) (map[string]string, error) {
	if t.PartitionIndex() < 0 {
		m, ok, err := s.res.partitionedMeta(ctx, t)
		if err != nil {
			return nil, err
		}
		if ok {
			return m.Properties, nil
		}
	}
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return nil, err
	}
	return tp.ml.Properties(), nil
}

// UpdateTopicProperties merges props into the topic's properties; an empty
// value removes a key.
func (s *Service) UpdateTopicProperties(ctx context.Context, t TopicName, props map[string]string) error {
	if t.PartitionIndex() < 0 {
		ok, err := s.res.updatePartitionedProperties(ctx, t, props)
		if err != nil || ok {
			return err
		}
	}
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return err
	}
	return tp.ml.SetProperties(ctx, props)
}

// Subscriptions.

// subscriptionOf returns the named subscription of an open persistent topic.
func (s *Service) subscriptionOf(ctx context.Context, t TopicName, name string) (*Topic, *Subscription, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	tp.mu.Lock()
	sub := tp.subs[name]
	tp.mu.Unlock()
	if sub == nil || sub.cursor == nil {
		return tp, nil, fmt.Errorf("%w: Subscription not found", ErrNotFound)
	}
	return tp, sub, nil
}

// TopicSubscriptions lists a topic's subscriptions.
func (s *Service) TopicSubscriptions(ctx context.Context, t TopicName) ([]string, error) {
	if t.Domain == NonPersistent {
		tp := s.openedTopic(t)
		if tp == nil {
			return nil, fmt.Errorf("%w: topic %s", ErrNotFound, t)
		}
		return tp.Subscriptions(), nil
	}
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return nil, err
	}
	return tp.Subscriptions(), nil
}

// CreateSubscription creates a durable subscription positioned so that at
// (ledger.Earliest, ledger.Latest or an entry) is the next entry delivered.
func (s *Service) CreateSubscription(ctx context.Context, t TopicName, name string, at ledger.Position) error {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return err
	}
	tp.mu.Lock()
	_, exists := tp.subs[name]
	tp.mu.Unlock()
	if exists {
		return fmt.Errorf("%w: Subscription already exists for topic", ErrAlreadyExists)
	}
	initial := ledger.InitialLatest
	if at == ledger.Earliest {
		initial = ledger.InitialEarliest
	}
	sub, err := tp.subscription(ctx, name, true, initial, nil, false, -1)
	if err != nil {
		return err
	}
	if at != ledger.Earliest && at != ledger.Latest {
		if err := sub.seek(at); err != nil {
			return err
		}
	}
	return sub.cursor.Flush(ctx)
}

// DeleteSubscription removes a subscription; without force it refuses
// while consumers are connected.
func (s *Service) DeleteSubscription(ctx context.Context, t TopicName, name string, force bool) error {
	tp, sub, err := s.subscriptionOf(ctx, t, name)
	if err != nil {
		return err
	}
	sub.mu.Lock()
	consumers := slices.Clone(sub.consumers)
	sub.mu.Unlock()
	if len(consumers) > 0 && !force {
		return fmt.Errorf("%w: Subscription has active connected consumers", ErrPrecondition)
	}
	for _, c := range consumers {
		sub.removeConsumerQuiet(c)
		c.closeByBroker()
	}
	return tp.removeSubscription(ctx, sub)
}

// ResetSubscription moves a subscription so target is the next entry
// delivered and makes its consumers reconnect (see handleSeek).
func (s *Service) ResetSubscription(ctx context.Context, t TopicName, name string, target ledger.Position) error {
	_, sub, err := s.subscriptionOf(ctx, t, name)
	if err != nil {
		return err
	}
	detached, err := sub.seekAndDetach(target)
	for _, c := range detached {
		c.closeByBroker()
	}
	return err
}

// positionAtTime returns the first entry published at or after ts
// (Unix milliseconds), or the position after the last entry.
func positionAtTime(ctx context.Context, ml *ledger.ManagedLedger, ts int64) (ledger.Position, error) {
	return ml.Search(ctx, func(e ledger.Entry) bool {
		meta, _, err := protocol.ParseHeadersAndPayload(e.Data)
		return err == nil && int64(meta.GetPublishTime()) >= ts
	})
}

// ResetSubscriptionToTime moves a subscription to the first message
// published at or after ts (Unix milliseconds).
func (s *Service) ResetSubscriptionToTime(ctx context.Context, t TopicName, name string, ts int64) error {
	tp, _, err := s.subscriptionOf(ctx, t, name)
	if err != nil {
		return err
	}
	target, err := positionAtTime(ctx, tp.ml, ts)
	if err != nil {
		target = ledger.Latest
	}
	return s.ResetSubscription(ctx, t, name, target)
}

// SkipMessages acknowledges the next n entries of a subscription.
func (s *Service) SkipMessages(ctx context.Context, t TopicName, name string, n int64) error {
	_, sub, err := s.subscriptionOf(ctx, t, name)
	if err != nil {
		return err
	}
	if err := sub.cursor.SkipEntries(n); err != nil {
		return err
	}
	sub.wake()
	return nil
}

// ClearBacklog acknowledges everything stored for a subscription.
func (s *Service) ClearBacklog(ctx context.Context, t TopicName, name string) error {
	_, sub, err := s.subscriptionOf(ctx, t, name)
	if err != nil {
		return err
	}
	if err := sub.cursor.ClearBacklog(); err != nil {
		return err
	}
	sub.wake()
	return nil
}

// ExpireMessages acknowledges a subscription's messages published more
// than seconds ago.
func (s *Service) ExpireMessages(ctx context.Context, t TopicName, name string, seconds int64) error {
	tp, sub, err := s.subscriptionOf(ctx, t, name)
	if err != nil {
		return err
	}
	first, err := positionAtTime(ctx, tp.ml, time.Now().Add(-time.Duration(seconds)*time.Second).UnixMilli())
	if err != nil {
		return err
	}
	last := tp.ml.LastConfirmed()
	upTo, ok := last, true
	if !last.Less(first) {
		upTo, ok = prevPosition(tp.ml, first)
	}
	if !ok || upTo.EntryID < 0 {
		return nil
	}
	if err := sub.cursor.AckCumulative(upTo); err != nil && !errors.Is(err, ledger.ErrInvalidPosition) {
		return err
	}
	sub.wake()
	return nil
}

// prevPosition returns the stored entry just before p, if any.
func prevPosition(ml *ledger.ManagedLedger, p ledger.Position) (ledger.Position, bool) {
	if p.EntryID > 0 {
		return ledger.Position{LedgerID: p.LedgerID, EntryID: p.EntryID - 1}, true
	}
	ls := ml.Ledgers()
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].ID < p.LedgerID && ls[i].Entries > 0 {
			return ledger.Position{LedgerID: ls[i].ID, EntryID: ls[i].Entries - 1}, true
		}
	}
	return ledger.Position{}, false
}

// PeekMessage returns the n-th (1-based) unacknowledged entry of a
// subscription. A subscription that does not exist peeks from the first
// stored entry.
func (s *Service) PeekMessage(ctx context.Context, t TopicName, name string, n int) (ledger.Entry, error) {
	if n < 1 {
		return ledger.Entry{}, fmt.Errorf("%w: position must be at least 1", ErrPrecondition)
	}
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return ledger.Entry{}, err
	}
	tp.mu.Lock()
	sub := tp.subs[name]
	tp.mu.Unlock()
	var cur *ledger.Cursor
	from := ledger.Earliest
	if sub != nil && sub.cursor != nil {
		cur = sub.cursor
		from = cur.MarkDeletePosition()
	}
	last := tp.ml.LastConfirmed()
	pos := tp.ml.Next(from)
	for !last.Less(pos) {
		es, err := tp.ml.Read(ctx, pos, 100, 0)
		if err != nil {
			return ledger.Entry{}, err
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if cur != nil && cur.IsAcked(e.Pos) {
				continue
			}
			if n--; n == 0 {
				return e, nil
			}
		}
		pos = tp.ml.Next(es[len(es)-1].Pos)
	}
	return ledger.Entry{}, fmt.Errorf("%w: Message not found", ErrNotFound)
}

// ReadEntry returns the entry at pos of topic t.
func (s *Service) ReadEntry(ctx context.Context, t TopicName, pos ledger.Position) (ledger.Entry, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return ledger.Entry{}, err
	}
	last := tp.ml.LastConfirmed()
	if pos.EntryID < 0 || last.Less(pos) {
		return ledger.Entry{}, fmt.Errorf("%w: Message id not found", ErrNotFound)
	}
	if !slices.ContainsFunc(tp.ml.Ledgers(), func(l ledger.LedgerInfo) bool { return l.ID == pos.LedgerID }) {
		return ledger.Entry{}, fmt.Errorf("%w: Message id not found", ErrNotFound)
	}
	es, err := tp.ml.Read(ctx, pos, 1, 0)
	if err != nil || len(es) == 0 || es[0].Pos != pos {
		return ledger.Entry{}, fmt.Errorf("%w: Message id not found", ErrNotFound)
	}
	return es[0], nil
}

// ExamineMessage returns the topic's nth entry (from 1), counted from its
// first stored entry, or back from its last when fromLatest.
func (s *Service) ExamineMessage(ctx context.Context, t TopicName, fromLatest bool, n int64) (ledger.Entry, error) {
	if n < 1 {
		return ledger.Entry{}, fmt.Errorf("%w: messagePosition must be at least 1", ErrPrecondition)
	}
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return ledger.Entry{}, err
	}
	ls := tp.ml.Ledgers()
	if fromLatest {
		slices.Reverse(ls)
	}
	for _, l := range ls {
		if n <= l.Entries {
			e := n - 1
			if fromLatest {
				e = l.Entries - n
			}
			return s.ReadEntry(ctx, t, ledger.Position{LedgerID: l.ID, EntryID: e})
		}
		n -= l.Entries
	}
	return ledger.Entry{}, fmt.Errorf("%w: Message not found", ErrNotFound)
}

// MessageIDAtTime returns the first entry published at or after ts.
func (s *Service) MessageIDAtTime(ctx context.Context, t TopicName, ts int64) (ledger.Position, error) {
	tp, err := s.persistentTopic(ctx, t)
	if err != nil {
		return ledger.Position{}, err
	}
	p, err := positionAtTime(ctx, tp.ml, ts)
	if err != nil {
		return ledger.Position{}, err
	}
	if tp.ml.LastConfirmed().Less(p) {
		return ledger.Position{}, fmt.Errorf("%w: Message ID not found", ErrNotFound)
	}
	return p, nil
}

// Partitioned-topic metadata helpers.

func (r *Resources) partitionedMeta(ctx context.Context, t TopicName) (partitionedMetadata, bool, error) {
	var m partitionedMetadata
	_, err := r.getJSON(ctx, partitionedKey(t), &m)
	if errors.Is(err, ErrNotFound) {
		return m, false, nil
	}
	return m, err == nil, err
}

// updatePartitionedProperties merges props into a partitioned topic's
// properties; ok is false when t is not partitioned.
func (r *Resources) updatePartitionedProperties(ctx context.Context, t TopicName, props map[string]string) (bool, error) {
	for {
		var m partitionedMetadata
		v, err := r.getJSON(ctx, partitionedKey(t), &m)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return true, err
		}
		next := maps.Clone(m.Properties)
		if next == nil {
			next = map[string]string{}
		}
		for k, val := range props {
			if val == "" {
				delete(next, k)
			} else {
				next[k] = val
			}
		}
		m.Properties = next
		err = r.putJSON(ctx, partitionedKey(t), m, v)
		if !errors.Is(err, ErrConflict) {
			return true, err
		}
	}
}
