package broker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Backlog quotas (namespace policy backlog_quota_map, type
// destination_storage): when a topic's backlog, the bytes its slowest
// durable subscription has not acknowledged, passes limitSize, producers
// are stopped: the broker closes them and refuses new ones, with
// ProducerBlockedQuotaExceededError (producer_request_hold: the client
// retries) or ProducerBlockedQuotaExceededException (producer_exception:
// the client fails its pending messages). consumer_backlog_eviction is
// accepted and not enforced yet. The backlog is estimated from entry counts
// and the topic's average entry size, at most once per quotaCheckInterval.

const quotaCheckInterval = time.Second

type backlogQuota struct {
	LimitSize int64  `json:"limitSize"`
	LimitTime int64  `json:"limitTime"`
	Policy    string `json:"policy"`
}

// quotaState is a topic's last quota evaluation.
type quotaState struct {
	checked time.Time
	err     error // nil: within quota
}

// quotaError returns the error producers get while t is over its backlog
// quota, or nil. It is called on every SEND: the answer is cached for
// quotaCheckInterval, and only a recheck reads the metadata store, bounded
// so a slow store cannot hold the connection's reader for long.
func (t *Topic) quotaError() error {
	if t.ml == nil {
		return nil
	}
	t.mu.Lock()
	if time.Since(t.quota.checked) < quotaCheckInterval {
		err := t.quota.err
		t.mu.Unlock()
		return err
	}
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := t.evalQuota(ctx)
	t.mu.Lock()
	t.quota = quotaState{checked: time.Now(), err: err}
	t.mu.Unlock()
	return err
}

func (t *Topic) evalQuota(ctx context.Context) error {
	p, _, err := t.s.res.GetNamespace(ctx, t.name.Tenant, t.name.Namespace)
	if err != nil {
		return nil
	}
	raw, ok := p.Other["backlog_quota_map"]
	if !ok {
		return nil
	}
	var m map[string]backlogQuota
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	q, ok := m["destination_storage"]
	if !ok || q.LimitSize <= 0 {
		return nil
	}
	entries := t.ml.NumberOfEntries()
	if entries <= 0 {
		return nil
	}
	avg := t.ml.TotalSize() / entries
	var worst int64
	for _, c := range t.ml.Cursors() {
		if c.IsDurable() && c.Name() != dedupCursor {
			worst = max(worst, c.Backlog())
		}
	}
	if worst*avg <= q.LimitSize {
		return nil
	}
	switch q.Policy {
	case "producer_exception":
		return protocol.ErrProducerBlockedQuotaException.WithMessage("Cannot publish: topic backlog quota exceeded")
	case "consumer_backlog_eviction":
		return nil
	}
	return protocol.ErrProducerBlockedQuotaExceeded.WithMessage("Cannot publish: topic backlog quota exceeded")
}
