package broker

import (
	"context"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Message TTL (namespace policy message_ttl_in_seconds): every
// Config.MessageTTLCheckInterval the broker acknowledges, on every durable
// subscription of every open persistent topic, the messages published
// longer ago than the TTL, as Pulsar does. Expiry is by whole entry and by
// publish time, found by binary search over the ledger. The TTL comes from
// the topic's policy snapshot (policywatch.go), so a pass over topics
// without a TTL costs no I/O, and a changed TTL applies at the next pass.

// topicPassLoop runs pass over every open persistent topic every interval
// until the service stops (the TTL expiry and the backlog-quota pass), each
// topic's call bounded by a minute; failures are logged as what failed.
func (s *Service) topicPassLoop(interval time.Duration, what string, pass func(*Topic, context.Context, time.Time) error) {
	defer s.wg.Done()
	base, stop := s.stopContext(0)
	defer stop()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopping:
			return
		case <-t.C:
		}
		for _, tp := range s.openTopics() {
			if tp.ml == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(base, time.Minute)
			if err := pass(tp, ctx, time.Now()); err != nil {
				s.log.Warn(what+" failed", "topic", tp.name.String(), "err", err)
			}
			cancel()
		}
	}
}

// expireMessages acknowledges, on every durable subscription, the entries
// published before now minus the namespace's message TTL.
func (t *Topic) expireMessages(ctx context.Context, now time.Time) error {
	p := t.policies()
	if p.MessageTTLInSeconds == nil || *p.MessageTTLInSeconds <= 0 {
		return nil
	}
	_, err := t.acknowledgeOlderThan(ctx, now.Add(-time.Duration(*p.MessageTTLInSeconds)*time.Second))
	return err
}

// acknowledgeOlderThan acknowledges, on every durable subscription, the
// entries published before cutoff (TTL expiry and the message_age backlog
// quota's eviction). It returns the subscriptions it moved.
func (t *Topic) acknowledgeOlderThan(ctx context.Context, cutoff time.Time) ([]string, error) {
	ms := uint64(cutoff.UnixMilli())
	first, err := t.ml.Search(ctx, func(e ledger.Entry) bool {
		meta, _, err := protocol.ParseHeadersAndPayload(e.Data)
		return err != nil || meta.GetPublishTime() >= ms
	})
	if err != nil {
		return nil, err
	}
	last, ok := t.positionBefore(first)
	if !ok {
		return nil, nil // nothing old enough
	}
	var moved []string
	for _, c := range t.ml.Cursors() {
		if !c.IsDurable() || internalCursor(c.Name()) {
			continue
		}
		if c.MarkDeletePosition().Compare(last) < 0 {
			if err := c.AckCumulative(last); err != nil {
				return moved, err
			}
			moved = append(moved, c.Name())
		}
	}
	t.notifySubscriptions()
	return moved, nil
}

// positionBefore returns the stored entry just before p, if any.
func (t *Topic) positionBefore(p ledger.Position) (ledger.Position, bool) {
	if last := t.ml.LastConfirmed(); last.Less(p) {
		return last, last.EntryID >= 0
	}
	if p.EntryID > 0 {
		return ledger.Position{LedgerID: p.LedgerID, EntryID: p.EntryID - 1}, true
	}
	var prev *ledger.LedgerInfo
	for _, l := range t.ml.Ledgers() {
		if l.ID >= p.LedgerID {
			break
		}
		if l.Entries > 0 {
			l := l
			prev = &l
		}
	}
	if prev == nil {
		return ledger.Position{}, false
	}
	return ledger.Position{LedgerID: prev.ID, EntryID: prev.Entries - 1}, true
}
