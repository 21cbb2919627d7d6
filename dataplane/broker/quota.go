package broker

import (
	"context"
	"errors"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Backlog quotas (namespace policy backlog_quota_map). A topic's backlog is
// what its slowest durable subscription has not acknowledged. Two quota
// types, each with its own policy, as in Pulsar:
//
//   - destination_storage: limitSize bytes. The backlog's size is
//     estimated from the slowest subscription's unacknowledged entry count
//     and the topic's average entry size.
//   - message_age: limitTime seconds. The backlog's age is the age of the
//     oldest unacknowledged message of any durable subscription (its
//     publish time).
//
// Policies when a quota is exceeded:
//
//   - producer_request_hold (the default) and producer_exception: the
//     broker closes the topic's producers and refuses new ones with
//     ProducerBlockedQuotaExceededError (the client retries) or
//     ProducerBlockedQuotaExceededException (the client fails its pending
//     messages). Producers are checked on SEND and on creation, with the
//     verdict cached for quotaCheckInterval; a policy change drops the
//     cached verdict (policywatch.go).
//   - consumer_backlog_eviction: producers are never blocked. Instead the
//     periodic quota pass (Config.BacklogQuotaCheckInterval) advances the
//     cursors of the subscriptions over the quota, acknowledging their
//     oldest entries as the admin "skip" operation does: over limitSize, a
//     subscription is cut to 90% of the limit (Pulsar's reduction factor,
//     so the next few messages do not trigger another eviction); for
//     message_age, every entry published more than limitTime ago is
//     acknowledged, as TTL expiry does. Between passes a backlog can
//     exceed the quota.
//
// The age of the oldest unacknowledged message costs one entry read per
// subscription, so the SEND path never reads it: the periodic pass does,
// and only again for a subscription whose mark-delete position moved
// since. The SEND path uses a measurement only while the subscription's
// mark-delete position is still the one it was taken at, so acknowledging
// unblocks producers at once, but a backlog that just became too old
// blocks them only after the next pass (up to BacklogQuotaCheckInterval
// late).

const (
	quotaCheckInterval = time.Second
	// evictionTarget is the fraction of limitSize a subscription is cut
	// to by consumer_backlog_eviction.
	evictionTarget = 0.9

	quotaTypeSize = "destination_storage"
	quotaTypeAge  = "message_age"
	policyEvict   = "consumer_backlog_eviction"
)

type backlogQuota struct {
	LimitSize int64  `json:"limitSize"`
	LimitTime int64  `json:"limitTime"` // seconds
	Policy    string `json:"policy"`
}

// quotaState is a topic's quota bookkeeping, guarded by Topic.mu.
type quotaState struct {
	checked int64 // last evaluation for producers, Unix ns (0: none; not a time.Time: per topic)
	err     error // its verdict; nil: within quota
	// oldest is, per durable subscription with a backlog, the publish
	// time of its first unacknowledged entry, measured by the periodic
	// pass at mark-delete position md.
	oldest map[string]oldestUnacked
}

type oldestUnacked struct {
	md          ledger.Position
	publishTime int64 // Unix milliseconds
}

// sizeQuota and ageQuota return the topic's quotas of each type, if set.
func (p *policySnapshot) sizeQuota() (backlogQuota, bool) {
	q, ok := p.quotas[quotaTypeSize]
	return q, ok && q.LimitSize > 0
}

func (p *policySnapshot) ageQuota() (backlogQuota, bool) {
	q, ok := p.quotas[quotaTypeAge]
	return q, ok && q.LimitTime > 0
}

// quotaError returns the error producers get while t is over a backlog
// quota whose policy blocks producers, or nil. It is called on every SEND:
// the answer is cached for quotaCheckInterval; evaluating it reads only
// memory.
func (t *Topic) quotaError() error {
	if t.ml == nil {
		return nil
	}
	t.mu.Lock()
	if time.Duration(time.Now().UnixNano()-t.quota.checked) < quotaCheckInterval {
		err := t.quota.err
		t.mu.Unlock()
		return err
	}
	oldest := t.quota.oldest
	t.mu.Unlock()
	now := time.Now()
	err := t.evalQuota(now, oldest)
	t.mu.Lock()
	t.quota.checked, t.quota.err = now.UnixNano(), err
	t.mu.Unlock()
	return err
}

func (t *Topic) evalQuota(now time.Time, oldest map[string]oldestUnacked) error {
	p := t.policies()
	if q, ok := p.sizeQuota(); ok && q.Policy != policyEvict && t.backlogBytes() > q.LimitSize {
		return quotaExceeded(q.Policy)
	}
	if q, ok := p.ageQuota(); ok && q.Policy != policyEvict {
		if pt, ok := t.oldestPublishTime(oldest); ok && now.UnixMilli()-pt > q.LimitTime*1000 {
			return quotaExceeded(q.Policy)
		}
	}
	return nil
}

func quotaExceeded(policy string) error {
	if policy == "producer_exception" {
		return protocol.ErrProducerBlockedQuotaException.WithMessage("Cannot publish: topic backlog quota exceeded")
	}
	return protocol.ErrProducerBlockedQuotaExceeded.WithMessage("Cannot publish: topic backlog quota exceeded")
}

// durableCursors returns the cursors of the topic's durable subscriptions
// (not the internal dedup cursor).
func (t *Topic) durableCursors() []*ledger.Cursor {
	all := t.ml.Cursors()
	out := all[:0:0]
	for _, c := range all {
		if c.IsDurable() && !internalCursor(c.Name()) {
			out = append(out, c)
		}
	}
	return out
}

// avgEntrySize is the topic's average stored entry size, or 0 when empty.
func (t *Topic) avgEntrySize() int64 {
	entries := t.ml.NumberOfEntries()
	if entries <= 0 {
		return 0
	}
	return max(t.ml.TotalSize()/entries, 1)
}

// backlogBytes estimates the slowest durable subscription's backlog size.
func (t *Topic) backlogBytes() int64 {
	avg := t.avgEntrySize()
	if avg == 0 {
		return 0
	}
	var worst int64
	for _, c := range t.durableCursors() {
		worst = max(worst, c.Backlog())
	}
	return worst * avg
}

// oldestPublishTime returns the earliest publish time among the measured
// oldest unacknowledged entries still current (their subscription's
// mark-delete position has not moved since), if any.
func (t *Topic) oldestPublishTime(oldest map[string]oldestUnacked) (int64, bool) {
	if len(oldest) == 0 {
		return 0, false
	}
	var pt int64
	found := false
	for _, c := range t.durableCursors() {
		o, ok := oldest[c.Name()]
		if !ok || o.md != c.MarkDeletePosition() || c.Backlog() == 0 {
			continue
		}
		if !found || o.publishTime < pt {
			pt, found = o.publishTime, true
		}
	}
	return pt, found
}

// checkBacklogQuota is one topic's periodic quota pass: it evicts the
// backlog over consumer_backlog_eviction quotas and measures the oldest
// unacknowledged messages for message_age quotas that block producers.
// A topic without quotas costs a snapshot load.
func (t *Topic) checkBacklogQuota(ctx context.Context, now time.Time) error {
	p := t.policies()
	sizeQ, hasSize := p.sizeQuota()
	ageQ, hasAge := p.ageQuota()
	if !hasAge || ageQ.Policy == policyEvict {
		t.mu.Lock()
		t.quota.oldest = nil
		t.mu.Unlock()
	}
	if !hasSize && !hasAge {
		return nil
	}
	moved := false
	if hasAge && ageQ.Policy == policyEvict {
		subs, err := t.acknowledgeOlderThan(ctx, now.Add(-time.Duration(ageQ.LimitTime)*time.Second))
		if err != nil {
			return err
		}
		if len(subs) > 0 {
			t.s.log.Info("backlog quota: evicted messages older than the limit", "topic", t.name.String(),
				"subscriptions", subs, "limitTime", ageQ.LimitTime)
			moved = true
		}
	}
	if hasSize && sizeQ.Policy == policyEvict {
		n, err := t.evictToSize(sizeQ.LimitSize)
		if err != nil {
			return err
		}
		moved = moved || n > 0
	}
	if hasAge && ageQ.Policy != policyEvict {
		if err := t.measureOldest(ctx); err != nil {
			return err
		}
	}
	// Producers see the new measurements at their next SEND.
	t.mu.Lock()
	t.quota.checked = 0
	t.mu.Unlock()
	if moved {
		t.notifySubscriptions()
	}
	return nil
}

// evictToSize cuts every durable subscription whose backlog exceeds limit
// bytes to evictionTarget of it, skipping its oldest unacknowledged
// entries. It returns how many entries it skipped.
func (t *Topic) evictToSize(limit int64) (int64, error) {
	avg := t.avgEntrySize()
	if avg == 0 {
		return 0, nil
	}
	keep := int64(float64(limit)*evictionTarget) / avg
	var total int64
	for _, c := range t.durableCursors() {
		backlog := c.Backlog()
		if backlog*avg <= limit {
			continue
		}
		n := backlog - keep
		if err := c.SkipEntries(n); err != nil {
			return total, err
		}
		total += n
		t.s.log.Info("backlog quota: evicted oldest messages", "topic", t.name.String(), "subscription", c.Name(),
			"entries", n, "backlog", backlog, "limitSize", limit)
	}
	return total, nil
}

// measureOldest records, for every durable subscription with a backlog,
// the publish time of its first unacknowledged entry. It reads an entry
// only for subscriptions whose mark-delete position moved since the last
// measurement.
func (t *Topic) measureOldest(ctx context.Context) error {
	t.mu.Lock()
	prev := t.quota.oldest
	t.mu.Unlock()
	next := map[string]oldestUnacked{}
	for _, c := range t.durableCursors() {
		if c.Backlog() == 0 {
			continue
		}
		md := c.MarkDeletePosition()
		if o, ok := prev[c.Name()]; ok && o.md == md {
			next[c.Name()] = o
			continue
		}
		es, err := t.ml.Read(ctx, t.ml.Next(md), 1, 0)
		if errors.Is(err, ledger.ErrInvalidPosition) {
			continue // trimmed or moved meanwhile: measured next pass
		}
		if err != nil {
			return err
		}
		if len(es) == 0 {
			continue
		}
		meta, _, err := protocol.ParseHeadersAndPayload(es[0].Data)
		if err != nil {
			continue
		}
		next[c.Name()] = oldestUnacked{md: md, publishTime: int64(meta.GetPublishTime())}
	}
	t.mu.Lock()
	t.quota.oldest = next
	t.mu.Unlock()
	return nil
}
