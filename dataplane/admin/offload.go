package admin

import (
	"net/http"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
)

// offloadStatus is Pulsar's OffloadProcessStatus.
type offloadStatus struct {
	Status                  string    `json:"status"`
	LastError               string    `json:"lastError"`
	FirstUnoffloadedMessage messageID `json:"firstUnoffloadedMessage"`
}

// topicOffload serves /admin/v2/persistent/{t}/{ns}/{topic}/offload: PUT
// with a message id starts offloading the ledgers before that message's
// ledger (204; 409 while an offload runs), GET reports the offload's
// status. A partitioned topic is offloaded partition by partition, as in
// Pulsar.
func (h *Handler) topicOffload(q *request, tn broker.TopicName) error {
	if tn.Domain != broker.Persistent {
		return failf(http.StatusMethodNotAllowed, "Offload is only for persistent topics")
	}
	n, exists, err := h.topicState(q, tn)
	if err != nil {
		return err
	}
	if n > 0 {
		return failf(http.StatusMethodNotAllowed, "Offload of a partitioned topic is not allowed: offload each partition")
	}
	if !exists {
		return errTopicMissing
	}
	switch q.method() {
	case http.MethodGet:
		st, err := h.svc.TopicOffloadStatus(q.ctx, tn)
		if err != nil {
			return err
		}
		return ok(q, offloadStatus{Status: string(st.State), LastError: st.LastError,
			FirstUnoffloadedMessage: idOf(tn, st.FirstUnoffloaded)})
	case http.MethodPut, http.MethodPost:
		var id messageID
		found, err := q.decode(&id)
		if err != nil {
			return err
		}
		if !found {
			return failf(http.StatusBadRequest, "A message id is required")
		}
		if err := h.svc.OffloadTopic(q.ctx, tn, ledger.Position{LedgerID: id.LedgerID, EntryID: id.EntryID}); err != nil {
			return err
		}
		return noContent(q)
	}
	return errNotAllowed
}
