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
// publish time, found by binary search over the ledger.

// expireLoop runs the TTL check until the service stops.
func (s *Service) expireLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.MessageTTLCheckInterval)
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
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := tp.expireMessages(ctx, time.Now()); err != nil {
				s.log.Warn("message expiry failed", "topic", tp.name.String(), "err", err)
			}
			cancel()
		}
	}
}

// expireMessages acknowledges, on every durable subscription, the entries
// published before now minus the namespace's message TTL.
func (t *Topic) expireMessages(ctx context.Context, now time.Time) error {
	p, _, err := t.s.res.GetNamespace(ctx, t.name.Tenant, t.name.Namespace)
	if err != nil || p.MessageTTLInSeconds == nil || *p.MessageTTLInSeconds <= 0 {
		return nil
	}
	cutoff := uint64(now.Add(-time.Duration(*p.MessageTTLInSeconds) * time.Second).UnixMilli())
	first, err := t.ml.Search(ctx, func(e ledger.Entry) bool {
		meta, _, err := protocol.ParseHeadersAndPayload(e.Data)
		return err != nil || meta.GetPublishTime() >= cutoff
	})
	if err != nil {
		return err
	}
	last, ok := t.positionBefore(first)
	if !ok {
		return nil // nothing old enough
	}
	for _, c := range t.ml.Cursors() {
		if !c.IsDurable() || c.Name() == dedupCursor {
			continue
		}
		if c.MarkDeletePosition().Compare(last) < 0 {
			if err := c.AckCumulative(last); err != nil {
				return err
			}
		}
	}
	t.notifySubscriptions()
	return nil
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
