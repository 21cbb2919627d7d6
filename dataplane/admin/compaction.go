package admin

import (
	"net/http"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// compactionStatus is Pulsar's LongRunningProcessStatus.
type compactionStatus struct {
	Status    string `json:"status"`
	LastError string `json:"lastError"`
}

// topicCompaction serves /admin/v2/persistent/{t}/{ns}/{topic}/compaction:
// PUT starts compacting the topic (204; 409 while a compaction runs; each
// partition of a partitioned topic), GET reports the compaction's status
// (NOT_RUN, RUNNING, SUCCESS or ERROR with lastError).
func (h *Handler) topicCompaction(q *request, tn broker.TopicName) error {
	if tn.Domain != broker.Persistent {
		return failf(http.StatusMethodNotAllowed, "Compaction is only for persistent topics")
	}
	switch q.method() {
	case http.MethodGet:
		n, exists, err := h.topicState(q, tn)
		if err != nil {
			return err
		}
		if n > 0 {
			return failf(http.StatusMethodNotAllowed, "Compaction status of a partitioned topic is per partition")
		}
		if !exists {
			return errTopicMissing
		}
		st, err := h.svc.TopicCompactionStatus(q.ctx, tn)
		if err != nil {
			return err
		}
		return ok(q, compactionStatus{Status: st.State, LastError: st.LastError})
	case http.MethodPut, http.MethodPost:
		return h.forEachPartition(q, tn, func(p broker.TopicName) error {
			return h.svc.CompactTopic(q.ctx, p)
		})
	}
	return errNotAllowed
}
