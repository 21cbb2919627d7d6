package admin

import (
	"encoding/json"
	"errors"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
)

// topicName builds and validates a topic name from path segments.
func (h *Handler) topicName(q *request, d broker.Domain, tenant, ns, local string) (broker.TopicName, error) {
	if d != broker.Persistent && d != broker.NonPersistent {
		return broker.TopicName{}, errNotFound
	}
	tn, err := broker.ParseTopicName(string(d) + "://" + tenant + "/" + ns + "/" + local)
	if err != nil {
		return broker.TopicName{}, failf(http.StatusPreconditionFailed, "Invalid topic name: %v", err)
	}
	return tn, nil
}

// messageID is Pulsar's MessageIdImpl JSON.
type messageID struct {
	LedgerID       int64 `json:"ledgerId"`
	EntryID        int64 `json:"entryId"`
	PartitionIndex int   `json:"partitionIndex"`
}

func idOf(t broker.TopicName, p ledger.Position) messageID {
	return messageID{LedgerID: p.LedgerID, EntryID: p.EntryID, PartitionIndex: t.PartitionIndex()}
}

// topicState says what t is: partitioned (n > 0) or an existing
// non-partitioned topic.
func (h *Handler) topicState(q *request, tn broker.TopicName) (partitions int, exists bool, err error) {
	if err := h.checkNamespace(q, tn.Tenant, tn.Namespace); err != nil {
		return 0, false, err
	}
	if tn.PartitionIndex() < 0 {
		n, err := h.res.Partitions(q.ctx, tn)
		if err != nil || n > 0 {
			return n, n > 0, err
		}
	}
	exists, err = h.svc.TopicExists(q.ctx, tn)
	return 0, exists, err
}

// topics serves /admin/v2/{persistent|non-persistent}/...
func (h *Handler) topics(q *request, d broker.Domain) error {
	switch {
	case len(q.seg) == 2 && q.method() == http.MethodGet:
		if err := h.checkNamespace(q, q.seg[0], q.seg[1]); err != nil {
			return err
		}
		list, err := h.svc.DomainTopics(q.ctx, q.seg[0], q.seg[1], d)
		if err != nil {
			return err
		}
		return ok(q, nonNilStrings(list))
	case len(q.seg) == 3 && q.seg[2] == "partitioned" && q.method() == http.MethodGet:
		if err := h.checkNamespace(q, q.seg[0], q.seg[1]); err != nil {
			return err
		}
		parts, err := h.res.PartitionedTopics(q.ctx, q.seg[0], q.seg[1], d)
		if err != nil {
			return err
		}
		out := make([]string, 0, len(parts))
		for _, p := range parts {
			out = append(out, p.String())
		}
		return ok(q, out)
	case len(q.seg) < 3:
		return errNotFound
	}
	tn, err := h.topicName(q, d, q.seg[0], q.seg[1], q.seg[2])
	if err != nil {
		return err
	}
	rest := q.rest(3)
	if len(rest) == 0 {
		switch q.method() {
		case http.MethodPut:
			return h.createTopic(q, tn)
		case http.MethodDelete:
			return h.deleteTopic(q, tn)
		}
		return errNotAllowed
	}
	op := rest[0]
	switch {
	case op == "partitions" && len(rest) == 1:
		return h.partitions(q, tn)
	case op == "stats" && len(rest) == 1 && q.method() == http.MethodGet:
		return h.topicStats(q, tn)
	case op == "partitioned-stats" && len(rest) == 1 && q.method() == http.MethodGet:
		return h.partitionedStats(q, tn)
	case (op == "internalStats" || op == "internal-stats") && len(rest) == 1 && q.method() == http.MethodGet:
		if err := h.requireTopic(q, tn); err != nil {
			return err
		}
		st, err := h.svc.InternalStats(q.ctx, tn)
		if err != nil {
			return err
		}
		return ok(q, st)
	case op == "unload" && len(rest) == 1 && q.method() == http.MethodPut:
		return h.forEachPartition(q, tn, func(t broker.TopicName) error { return h.svc.UnloadTopic(q.ctx, t) })
	case op == "terminate" && len(rest) == 1 && q.method() == http.MethodPost:
		if err := h.requireTopic(q, tn); err != nil {
			return err
		}
		pos, err := h.svc.TerminateTopic(q.ctx, tn)
		if err != nil {
			return err
		}
		return ok(q, idOf(tn, pos))
	case op == "lastMessageId" && len(rest) == 1 && q.method() == http.MethodGet:
		if err := h.requireTopic(q, tn); err != nil {
			return err
		}
		pos, err := h.svc.LastMessageID(q.ctx, tn)
		if err != nil {
			return err
		}
		return ok(q, idOf(tn, pos))
	case op == "properties" && len(rest) == 1:
		return h.topicProperties(q, tn)
	case op == "subscriptions" && len(rest) == 1 && q.method() == http.MethodGet:
		return h.listSubscriptions(q, tn)
	case op == "subscription" && len(rest) >= 2:
		return h.subscription(q, tn, rest[1], rest[2:])
	case op == "all_subscription" && len(rest) == 3 && rest[1] == "expireMessages" && q.method() == http.MethodPost:
		secs, err := strconv.ParseInt(rest[2], 10, 64)
		if err != nil {
			return failf(http.StatusBadRequest, "Invalid expire time %q", rest[2])
		}
		return h.forEachPartition(q, tn, func(t broker.TopicName) error {
			subs, err := h.svc.TopicSubscriptions(q.ctx, t)
			if err != nil {
				return err
			}
			for _, s := range subs {
				if err := h.svc.ExpireMessages(q.ctx, t, s, secs); err != nil {
					return err
				}
			}
			return nil
		})
	case op == "messageid" && len(rest) == 2 && q.method() == http.MethodGet:
		ts, err := strconv.ParseInt(rest[1], 10, 64)
		if err != nil {
			return failf(http.StatusBadRequest, "Invalid timestamp %q", rest[1])
		}
		if err := h.requireTopic(q, tn); err != nil {
			return err
		}
		pos, err := h.svc.MessageIDAtTime(q.ctx, tn, ts)
		if err != nil {
			return err
		}
		return ok(q, idOf(tn, pos))
	case op == "ledger" && len(rest) == 4 && rest[2] == "entry" && q.method() == http.MethodGet:
		l, err1 := strconv.ParseInt(rest[1], 10, 64)
		e, err2 := strconv.ParseInt(rest[3], 10, 64)
		if err1 != nil || err2 != nil {
			return failf(http.StatusBadRequest, "Invalid message id")
		}
		if err := h.requireTopic(q, tn); err != nil {
			return err
		}
		entry, err := h.svc.ReadEntry(q.ctx, tn, ledger.Position{LedgerID: l, EntryID: e})
		if err != nil {
			return err
		}
		return writeMessage(q, tn, entry)
	case op == "examinemessage" && len(rest) == 1 && q.method() == http.MethodGet:
		from := q.query("initialPosition")
		if from == "" {
			from = "latest"
		}
		if from != "latest" && from != "earliest" {
			return failf(http.StatusBadRequest, "Invalid initialPosition %q: want earliest or latest", from)
		}
		n := int64(1)
		if v := q.query("messagePosition"); v != "" {
			var err error
			if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 1 {
				return failf(http.StatusPreconditionFailed, "Invalid messagePosition %q", v)
			}
		}
		if err := h.requireTopic(q, tn); err != nil {
			return err
		}
		entry, err := h.svc.ExamineMessage(q.ctx, tn, from == "latest", n)
		if err != nil {
			return err
		}
		return writeMessage(q, tn, entry)
	case op == "backlogQuotaMap" && len(rest) == 1 && q.method() == http.MethodGet:
		return h.topicPolicyGet(q, tn, "backlogQuotaMap")
	case op == "backlogQuota" && len(rest) == 1:
		return h.topicBacklogQuota(q, tn)
	case op == "offload" && len(rest) == 1:
		return h.topicOffload(q, tn)
	case op == "compaction" && len(rest) == 1:
		return h.topicCompaction(q, tn)
	}
	if pol, found := topicPolicies[op]; found && len(rest) == 1 {
		return h.topicPolicy(q, tn, op, pol)
	}
	return errNotFound
}

// requireTopic answers 404 unless tn is a partitioned topic or an existing
// topic.
func (h *Handler) requireTopic(q *request, tn broker.TopicName) error {
	n, exists, err := h.topicState(q, tn)
	if err != nil {
		return err
	}
	if n == 0 && !exists {
		return errTopicMissing
	}
	return nil
}

// forEachPartition runs fn on each partition of a partitioned topic, or on
// the topic itself.
func (h *Handler) forEachPartition(q *request, tn broker.TopicName, fn func(broker.TopicName) error) error {
	n, exists, err := h.topicState(q, tn)
	if err != nil {
		return err
	}
	if n == 0 && !exists {
		return errTopicMissing
	}
	if n == 0 {
		if err := fn(tn); err != nil {
			return err
		}
		return noContent(q)
	}
	for i := 0; i < n; i++ {
		if err := fn(tn.Partition(i)); err != nil && !errors.Is(err, broker.ErrNotFound) {
			return err
		}
	}
	return noContent(q)
}

// createTopic creates a non-partitioned topic. The broker reads the
// namespace's policies to open the topic anyway, so the namespace is checked
// (for the 404 that tells a missing tenant from a missing namespace) only
// when the creation failed: one metadata read fewer per creation.
func (h *Handler) createTopic(q *request, tn broker.TopicName) error {
	var props map[string]string
	if _, err := q.decode(&props); err != nil {
		return err
	}
	err := h.svc.CreateTopic(q.ctx, tn, props)
	if errors.Is(err, broker.ErrAlreadyExists) {
		return failf(http.StatusConflict, "This topic already exists")
	}
	if err != nil {
		if nerr := h.checkNamespace(q, tn.Tenant, tn.Namespace); nerr != nil {
			return nerr
		}
		return err
	}
	return noContent(q)
}

func (h *Handler) deleteTopic(q *request, tn broker.TopicName) error {
	n, exists, err := h.topicState(q, tn)
	if err != nil {
		return err
	}
	if n > 0 {
		return failf(http.StatusConflict, "Topic is partitioned; delete it with /partitions")
	}
	if !exists {
		return errTopicMissing
	}
	if err := h.svc.DeleteTopic(q.ctx, tn, q.queryBool("force")); err != nil {
		return err
	}
	h.res.DeleteTopicPolicies(q.ctx, tn)
	return noContent(q)
}

func (h *Handler) partitions(q *request, tn broker.TopicName) error {
	if tn.PartitionIndex() >= 0 {
		return failf(http.StatusPreconditionFailed, "Partitioned topic name should not contain '-partition-'")
	}
	switch q.method() {
	case http.MethodGet:
		if q.queryBool("checkAllowAutoCreation") {
			n, err := h.svc.PartitionsForLookup(q.ctx, tn.String())
			if err != nil {
				return err
			}
			return ok(q, map[string]int{"partitions": n})
		}
		if err := h.checkNamespace(q, tn.Tenant, tn.Namespace); err != nil {
			return err
		}
		props, _ := h.svc.TopicProperties(q.ctx, tn)
		n, err := h.res.Partitions(q.ctx, tn)
		if err != nil {
			return err
		}
		out := map[string]any{"partitions": n}
		if n > 0 && len(props) > 0 {
			out["properties"] = props
		}
		return ok(q, out)
	case http.MethodPut, http.MethodPost:
		if err := h.checkNamespace(q, tn.Tenant, tn.Namespace); err != nil {
			return err
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		var meta struct {
			Partitions int               `json:"partitions"`
			Properties map[string]string `json:"properties"`
		}
		ct, _, _ := mime.ParseMediaType(q.r.Header.Get("Content-Type"))
		if ct == "application/vnd.partitioned-topic-metadata+json" || strings.HasPrefix(string(b), "{") {
			if err := json.Unmarshal(b, &meta); err != nil {
				return failf(http.StatusBadRequest, "Invalid JSON body: %v", err)
			}
		} else if err := json.Unmarshal(b, &meta.Partitions); err != nil {
			return failf(http.StatusBadRequest, "Invalid number of partitions: %s", string(b))
		}
		if meta.Partitions <= 0 {
			return failf(http.StatusPreconditionFailed, "Number of partitions should be more than 0")
		}
		if q.method() == http.MethodPut {
			err := h.svc.CreatePartitionedTopic(q.ctx, tn, meta.Partitions, meta.Properties)
			if errors.Is(err, broker.ErrAlreadyExists) {
				return failf(http.StatusConflict, "This topic already exists")
			}
			if err != nil {
				return err
			}
			return noContent(q)
		}
		cur, err := h.res.Partitions(q.ctx, tn)
		if err != nil {
			return err
		}
		if cur == 0 {
			return failf(http.StatusNotFound, "Partitioned topic does not exist")
		}
		if meta.Partitions < cur {
			return failf(http.StatusPreconditionFailed, "The number of partitions can only be increased")
		}
		if err := h.res.UpdatePartitioned(q.ctx, tn, meta.Partitions); err != nil {
			return err
		}
		return noContent(q)
	case http.MethodDelete:
		if err := h.checkNamespace(q, tn.Tenant, tn.Namespace); err != nil {
			return err
		}
		err := h.svc.DeletePartitionedTopic(q.ctx, tn, q.queryBool("force"))
		if errors.Is(err, broker.ErrNotFound) {
			return failf(http.StatusNotFound, "Partitioned topic does not exist")
		}
		if err != nil {
			return err
		}
		h.res.DeleteTopicPolicies(q.ctx, tn)
		return noContent(q)
	}
	return errNotAllowed
}

func statsOptions(q *request) broker.StatsOptions {
	return broker.StatsOptions{ExcludePublishers: q.queryBool("excludePublishers"), ExcludeConsumers: q.queryBool("excludeConsumers")}
}

func (h *Handler) topicStats(q *request, tn broker.TopicName) error {
	n, exists, err := h.topicState(q, tn)
	if err != nil {
		return err
	}
	if n > 0 || !exists {
		return errTopicMissing
	}
	st, err := h.svc.TopicStats(q.ctx, tn, statsOptions(q))
	if err != nil {
		return err
	}
	return ok(q, st)
}

// partitionedTopicStats is Pulsar's PartitionedTopicStats.
type partitionedTopicStats struct {
	broker.TopicStats
	Metadata   map[string]int                `json:"metadata"`
	Partitions map[string]*broker.TopicStats `json:"partitions"`
}

func (h *Handler) partitionedStats(q *request, tn broker.TopicName) error {
	n, _, err := h.topicState(q, tn)
	if err != nil {
		return err
	}
	if n == 0 {
		return failf(http.StatusNotFound, "Partitioned topic does not exist")
	}
	out := partitionedTopicStats{
		TopicStats: broker.TopicStats{
			Publishers: []broker.PublisherStats{}, Subscriptions: map[string]broker.SubscriptionStats{},
			Replication: map[string]broker.ReplicatorStats{}, DeduplicationStatus: "Disabled",
		},
		Metadata:   map[string]int{"partitions": n},
		Partitions: map[string]*broker.TopicStats{},
	}
	opt := statsOptions(q)
	for i := 0; i < n; i++ {
		p := tn.Partition(i)
		st, err := h.svc.TopicStats(q.ctx, p, opt)
		if err != nil {
			if errors.Is(err, broker.ErrNotFound) {
				continue // partition not created yet
			}
			return err
		}
		if q.queryBool("perPartition") {
			out.Partitions[p.String()] = st
		}
		a := &out.TopicStats
		a.MsgInCounter += st.MsgInCounter
		a.BytesInCounter += st.BytesInCounter
		a.MsgOutCounter += st.MsgOutCounter
		a.BytesOutCounter += st.BytesOutCounter
		a.StorageSize += st.StorageSize
		a.BacklogSize += st.BacklogSize
		a.Publishers = append(a.Publishers, st.Publishers...)
		a.LastPublishTimestamp = max(a.LastPublishTimestamp, st.LastPublishTimestamp)
		for remote, r := range st.Replication {
			agg, seen := a.Replication[remote]
			agg.Connected = r.Connected && (agg.Connected || !seen) // every partition's replicator
			agg.MsgRateIn += r.MsgRateIn
			agg.MsgThroughputIn += r.MsgThroughputIn
			agg.MsgRateOut += r.MsgRateOut
			agg.MsgThroughputOut += r.MsgThroughputOut
			agg.MsgInCount += r.MsgInCount
			agg.BytesInCount += r.BytesInCount
			agg.MsgOutCount += r.MsgOutCount
			agg.BytesOutCount += r.BytesOutCount
			agg.ReplicationBacklog += r.ReplicationBacklog
			agg.ReplicationDelayInSeconds = max(agg.ReplicationDelayInSeconds, r.ReplicationDelayInSeconds)
			if agg.OutboundConnection == "" {
				agg.OutboundConnection, agg.OutboundConnectedSince = r.OutboundConnection, r.OutboundConnectedSince
			}
			if agg.InboundConnection == "" {
				agg.InboundConnection, agg.InboundConnectedSince = r.InboundConnection, r.InboundConnectedSince
			}
			a.Replication[remote] = agg
		}
		for name, s := range st.Subscriptions {
			agg, ok := a.Subscriptions[name]
			if !ok {
				agg = s
				agg.Consumers = append([]broker.ConsumerStats{}, s.Consumers...)
			} else {
				agg.MsgBacklog += s.MsgBacklog
				agg.MsgBacklogNoDelayed += s.MsgBacklogNoDelayed
				agg.MsgDelayed += s.MsgDelayed
				agg.UnackedMessages += s.UnackedMessages
				agg.BacklogSize += s.BacklogSize
				agg.MsgOutCounter += s.MsgOutCounter
				agg.BytesOutCounter += s.BytesOutCounter
				agg.MsgRateOut += s.MsgRateOut
				agg.MsgThroughputOut += s.MsgThroughputOut
				agg.Consumers = append(agg.Consumers, s.Consumers...)
			}
			a.Subscriptions[name] = agg
		}
	}
	out.TopicCreationTimeStamp = h.svc.TopicCreated(q.ctx, tn)
	return ok(q, out)
}

func (h *Handler) topicProperties(q *request, tn broker.TopicName) error {
	if err := h.requireTopic(q, tn); err != nil {
		return err
	}
	switch q.method() {
	case http.MethodGet:
		props, err := h.svc.TopicProperties(q.ctx, tn)
		if err != nil {
			return err
		}
		if props == nil {
			props = map[string]string{}
		}
		return ok(q, props)
	case http.MethodPut, http.MethodPost:
		var props map[string]string
		if err := q.mustDecode(&props); err != nil {
			return err
		}
		for k, v := range props {
			if k == "" || v == "" {
				return failf(http.StatusBadRequest, "Property keys and values must not be empty")
			}
		}
		if err := h.svc.UpdateTopicProperties(q.ctx, tn, props); err != nil {
			return err
		}
		return noContent(q)
	case http.MethodDelete:
		key := q.query("key")
		if key == "" {
			return failf(http.StatusBadRequest, "Query parameter key is required")
		}
		if err := h.svc.UpdateTopicProperties(q.ctx, tn, map[string]string{key: ""}); err != nil {
			return err
		}
		return noContent(q)
	}
	return errNotAllowed
}

func (h *Handler) listSubscriptions(q *request, tn broker.TopicName) error {
	n, exists, err := h.topicState(q, tn)
	if err != nil {
		return err
	}
	if n == 0 && !exists {
		return errTopicMissing
	}
	if n == 0 {
		subs, err := h.svc.TopicSubscriptions(q.ctx, tn)
		if err != nil {
			return err
		}
		return ok(q, nonNilStrings(subs))
	}
	seen := map[string]bool{}
	out := []string{}
	for i := 0; i < n; i++ {
		subs, err := h.svc.TopicSubscriptions(q.ctx, tn.Partition(i))
		if err != nil {
			if errors.Is(err, broker.ErrNotFound) {
				continue
			}
			return err
		}
		for _, s := range subs {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return ok(q, out)
}

// subscription serves {topic}/subscription/{sub}[/...].
func (h *Handler) subscription(q *request, tn broker.TopicName, sub string, rest []string) error {
	if sub == "" {
		return failf(http.StatusPreconditionFailed, "Subscription name must not be empty")
	}
	switch {
	case len(rest) == 0 && q.method() == http.MethodPut:
		var id *messageID
		if _, err := q.decode(&id); err != nil {
			return err
		}
		at := ledger.Latest
		if id != nil {
			switch {
			case id.LedgerID < 0 || id.EntryID < 0:
				at = ledger.Earliest
			case id.LedgerID == math.MaxInt64:
				at = ledger.Latest
			default:
				at = ledger.Position{LedgerID: id.LedgerID, EntryID: id.EntryID}
			}
		}
		n, exists, err := h.topicState(q, tn)
		if err != nil {
			return err
		}
		if n == 0 && !exists {
			if tn.Domain != broker.Persistent {
				return errTopicMissing
			}
			// Pulsar creates the topic when a subscription is created on it.
			if err := h.svc.CreateTopic(q.ctx, tn, nil); err != nil && !errors.Is(err, broker.ErrAlreadyExists) {
				return err
			}
		}
		if n == 0 {
			err = h.svc.CreateSubscription(q.ctx, tn, sub, at)
			if errors.Is(err, broker.ErrAlreadyExists) {
				return failf(http.StatusConflict, "Subscription already exists for topic")
			}
			if err != nil {
				return err
			}
			return noContent(q)
		}
		for i := 0; i < n; i++ {
			p := tn.Partition(i)
			if ok, _ := h.svc.TopicExists(q.ctx, p); !ok {
				if err := h.svc.CreateTopic(q.ctx, p, nil); err != nil && !errors.Is(err, broker.ErrAlreadyExists) {
					return err
				}
			}
			if err := h.svc.CreateSubscription(q.ctx, p, sub, at); err != nil && !errors.Is(err, broker.ErrAlreadyExists) {
				return err
			}
		}
		return noContent(q)
	case len(rest) == 0 && q.method() == http.MethodDelete:
		force := q.queryBool("force")
		return h.forEachPartition(q, tn, func(t broker.TopicName) error {
			return h.svc.DeleteSubscription(q.ctx, t, sub, force)
		})
	case len(rest) == 2 && rest[0] == "position" && q.method() == http.MethodGet:
		n, err := strconv.Atoi(rest[1])
		if err != nil || n < 1 {
			return failf(http.StatusBadRequest, "Invalid message position %q", rest[1])
		}
		if err := h.requireTopic(q, tn); err != nil {
			return err
		}
		entry, err := h.svc.PeekMessage(q.ctx, tn, sub, n)
		if err != nil {
			return err
		}
		return writeMessage(q, tn, entry)
	case q.method() != http.MethodPost:
		return errNotFound
	case len(rest) == 1 && rest[0] == "resetcursor":
		var id messageID
		if err := q.mustDecode(&id); err != nil {
			return err
		}
		target := ledger.Position{LedgerID: id.LedgerID, EntryID: id.EntryID}
		if id.LedgerID < 0 {
			target = ledger.Earliest
		}
		return h.forEachPartition(q, tn, func(t broker.TopicName) error {
			return h.svc.ResetSubscription(q.ctx, t, sub, target)
		})
	case len(rest) == 2 && rest[0] == "resetcursor":
		ts, err := strconv.ParseInt(rest[1], 10, 64)
		if err != nil {
			return failf(http.StatusBadRequest, "Invalid timestamp %q", rest[1])
		}
		return h.forEachPartition(q, tn, func(t broker.TopicName) error {
			return h.svc.ResetSubscriptionToTime(q.ctx, t, sub, ts)
		})
	case len(rest) == 2 && rest[0] == "skip":
		n, err := strconv.ParseInt(rest[1], 10, 64)
		if err != nil || n < 0 {
			return failf(http.StatusBadRequest, "Invalid number of messages %q", rest[1])
		}
		return h.forEachPartition(q, tn, func(t broker.TopicName) error {
			return h.svc.SkipMessages(q.ctx, t, sub, n)
		})
	case len(rest) == 1 && rest[0] == "skip_all":
		return h.forEachPartition(q, tn, func(t broker.TopicName) error {
			return h.svc.ClearBacklog(q.ctx, t, sub)
		})
	case len(rest) == 2 && rest[0] == "expireMessages":
		secs, err := strconv.ParseInt(rest[1], 10, 64)
		if err != nil || secs < 0 {
			return failf(http.StatusBadRequest, "Invalid expire time %q", rest[1])
		}
		return h.forEachPartition(q, tn, func(t broker.TopicName) error {
			return h.svc.ExpireMessages(q.ctx, t, sub, secs)
		})
	}
	return errNotFound
}
