package admin

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// topicPolicy is a topic-level policy: stored per base topic under its REST
// name; GET ?applied=true falls back to the namespace policy (nsField) and
// then to the broker default (def).
type topicPolicy struct {
	kind    valueKind
	nsField string
	def     json.RawMessage
}

var topicPolicies = map[string]topicPolicy{
	"messageTTL":                          {kind: kindInt, nsField: "message_ttl_in_seconds", def: json.RawMessage("0")},
	"retention":                           {kind: kindObject, nsField: "retention_policies", def: json.RawMessage(`{"retentionTimeInMinutes":0,"retentionSizeInMB":0}`)},
	"maxProducers":                        {kind: kindInt, nsField: "max_producers_per_topic", def: json.RawMessage("0")},
	"maxConsumers":                        {kind: kindInt, nsField: "max_consumers_per_topic", def: json.RawMessage("0")},
	"maxUnackedMessagesOnConsumer":        {kind: kindInt, nsField: "max_unacked_messages_per_consumer", def: json.RawMessage("50000")},
	"maxUnackedMessagesOnSubscription":    {kind: kindInt, nsField: "max_unacked_messages_per_subscription", def: json.RawMessage("200000")},
	"persistence":                         {kind: kindObject, nsField: "persistence"},
	"delayedDelivery":                     {kind: kindObject, nsField: "delayed_delivery_policies"},
	"dispatchRate":                        {kind: kindObject, nsField: "topicDispatchRate"},
	"publishRate":                         {kind: kindObject, nsField: "publishMaxMessageRate"},
	"deduplicationEnabled":                {kind: kindBool, nsField: "deduplicationEnabled", def: json.RawMessage("false")},
	"compactionThreshold":                 {kind: kindInt, nsField: "compaction_threshold", def: json.RawMessage("0")},
	"inactiveTopicPolicies":               {kind: kindObject, nsField: "inactive_topic_policies"},
	"replication":                         {kind: kindList, nsField: "replication_clusters"},
	"subscribeRate":                       {kind: kindObject, nsField: "clusterSubscribeRate"},
	"subscriptionDispatchRate":            {kind: kindObject, nsField: "subscriptionDispatchRate"},
	"maxConsumersPerSubscription":         {kind: kindInt, nsField: "max_consumers_per_subscription", def: json.RawMessage("0")},
	"maxMessageSize":                      {kind: kindInt},
	"maxSubscriptionsPerTopic":            {kind: kindInt, nsField: "max_subscriptions_per_topic", def: json.RawMessage("0")},
	"schemaValidationEnforced":            {kind: kindBool, nsField: "schema_validation_enforced", def: json.RawMessage("false")},
	"deduplicationSnapshotInterval":       {kind: kindInt, nsField: "deduplicationSnapshotIntervalSeconds"},
	"replicatorDispatchRate":              {kind: kindObject, nsField: "replicatorDispatchRate"},
	"offloadPolicies":                     {kind: kindObject, nsField: "offload_policies"},
	"autoSubscriptionCreation":            {kind: kindObject, nsField: "autoSubscriptionCreationOverride"},
	"schemaCompatibilityStrategy":         {kind: kindString, nsField: "schema_compatibility_strategy", def: json.RawMessage(`"FULL"`)},
	"subscriptionTypesEnabled":            {kind: kindList, nsField: "subscription_types_enabled"},
	"entryFilters":                        {kind: kindObject, nsField: "entryFilters"},
	"dispatcherPauseOnAckStatePersistent": {kind: kindBool, nsField: "dispatcherPauseOnAckStatePersistentEnabled", def: json.RawMessage("false")},
	"backlogQuotaMap":                     {kind: kindObject, nsField: "backlog_quota_map"},
}

func isUnset(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null" || string(raw) == `"UNDEFINED"`
}

// topicPolicyGet answers GET of a topic policy.
func (h *Handler) topicPolicyGet(q *request, tn broker.TopicName, name string) error {
	if err := h.requireTopic(q, tn); err != nil {
		return err
	}
	pol := topicPolicies[name]
	global := q.queryBool("isGlobal")
	m, err := h.res.TopicPolicies(q.ctx, tn, global)
	if err != nil {
		return err
	}
	raw := m[name]
	if isUnset(raw) && !global {
		// A global value applies where no local one is set.
		if g, err := h.res.TopicPolicies(q.ctx, tn, true); err == nil {
			raw = g[name]
		}
	}
	if isUnset(raw) && q.queryBool("applied") {
		if pol.nsField != "" {
			fields, err := h.namespaceFields(q, tn.Tenant, tn.Namespace)
			if err != nil {
				return err
			}
			raw = fields[pol.nsField]
		}
		if isUnset(raw) {
			raw = pol.def
		}
	}
	if isUnset(raw) {
		return noContent(q)
	}
	return okRaw(q, raw)
}

func (h *Handler) topicPolicy(q *request, tn broker.TopicName, name string, pol topicPolicy) error {
	if q.method() == http.MethodGet {
		return h.topicPolicyGet(q, tn, name)
	}
	if err := h.requireTopic(q, tn); err != nil {
		return err
	}
	global := q.queryBool("isGlobal")
	var val json.RawMessage
	switch q.method() {
	case http.MethodPost, http.MethodPut:
		if name == "backlogQuotaMap" {
			return errNotAllowed
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		if name == "messageTTL" && q.query("messageTTL") != "" {
			b = []byte(q.query("messageTTL"))
		}
		if len(b) == 0 && pol.kind == kindBool {
			b = []byte("true")
		}
		if val, err = parseValue(pol.kind, b); err != nil {
			return err
		}
		if pol.kind == kindInt {
			if n, _ := strconv.ParseInt(string(val), 10, 64); n < 0 && name != "messageTTL" {
				return failf(http.StatusPreconditionFailed, "%s must be 0 or more", name)
			} else if n < 0 {
				return failf(http.StatusPreconditionFailed, "Invalid value for message TTL")
			}
		}
	case http.MethodDelete:
	default:
		return errNotAllowed
	}
	if err := h.res.UpdateTopicPolicies(q.ctx, tn, global, func(m map[string]json.RawMessage) error {
		if val == nil {
			delete(m, name)
		} else {
			m[name] = val
		}
		return nil
	}); err != nil {
		return err
	}
	return noContent(q)
}

func (h *Handler) topicBacklogQuota(q *request, tn broker.TopicName) error {
	if err := h.requireTopic(q, tn); err != nil {
		return err
	}
	typ, bq, err := backlogQuotaRequest(q)
	if err != nil {
		return err
	}
	if err := h.res.UpdateTopicPolicies(q.ctx, tn, q.queryBool("isGlobal"), func(m map[string]json.RawMessage) error {
		next, err := setQuota(m["backlogQuotaMap"], typ, bq)
		if err != nil {
			return err
		}
		if next == nil {
			delete(m, "backlogQuotaMap")
		} else {
			m["backlogQuotaMap"] = next
		}
		return nil
	}); err != nil {
		return err
	}
	return noContent(q)
}
