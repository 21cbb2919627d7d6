package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// compactionStatus is Pulsar's LongRunningProcessStatus.
type compactionStatus struct {
	Status    string `json:"status"`
	LastError string `json:"lastError"`
}

// partitionedCompactionStatus sums up the partitions' statuses: ERROR if
// one failed (lastError names each failed partition), else RUNNING while
// one runs, else NOT_RUN while one was never compacted, else SUCCESS.
func (h *Handler) partitionedCompactionStatus(q *request, tn broker.TopicName, n int) error {
	rank := map[string]int{broker.CompactionSuccess: 0, broker.CompactionNotRun: 1, broker.CompactionRunning: 2, broker.CompactionError: 3}
	out := compactionStatus{Status: broker.CompactionSuccess}
	var errs []string
	for i := range n {
		st, err := h.svc.TopicCompactionStatus(q.ctx, tn.Partition(i))
		if errors.Is(err, broker.ErrNotFound) {
			st, err = broker.CompactionStatus{State: broker.CompactionNotRun}, nil // never created
		}
		if err != nil {
			return err
		}
		if rank[st.State] > rank[out.Status] {
			out.Status = st.State
		}
		if st.State == broker.CompactionError {
			errs = append(errs, fmt.Sprintf("partition %d: %s", i, st.LastError))
		}
	}
	out.LastError = strings.Join(errs, "; ")
	return ok(q, out)
}

// topicCompaction serves /admin/v2/persistent/{t}/{ns}/{topic}/compaction:
// PUT starts compacting the topic (204; 409 while a compaction runs; each
// partition of a partitioned topic), GET reports the compaction's status
// (NOT_RUN, RUNNING, SUCCESS or ERROR with lastError; of a partitioned
// topic, the partitions' statuses summed up).
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
			return h.partitionedCompactionStatus(q, tn, n)
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
