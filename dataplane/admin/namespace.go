package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// valueKind is the JSON shape of a namespace or topic policy value.
type valueKind int

const (
	kindInt valueKind = iota
	kindBool
	kindString
	kindObject
	kindList
)

// nsPolicy is a namespace policy served as a plain value:
// GET .../{ns}/{name}, POST or PUT to set, DELETE to remove.
type nsPolicy struct {
	field    string          // Pulsar's JSON field in Policies
	kind     valueKind       //
	unset    json.RawMessage // GET answer when unset (nil: 204)
	minValue *int64          // for kindInt
	invalid  string          // reason when below minValue
	// probe, when set, makes the field a map keyed by cluster name (as
	// Pulsar stores publishMaxMessageRate, topicDispatchRate, ...): the
	// REST value is this cluster's entry. probe is a field of the value,
	// which tells a bare value stored before the map was used.
	probe string
}

func minZero(reason string) (*int64, string) { z := int64(0); return &z, reason }

var nsPolicies = func() map[string]nsPolicy {
	nonNeg := func(field, reason string) nsPolicy {
		m, r := minZero(reason)
		return nsPolicy{field: field, kind: kindInt, minValue: m, invalid: r}
	}
	return map[string]nsPolicy{
		"messageTTL":                            nonNeg("message_ttl_in_seconds", "Invalid value for message TTL"),
		"retention":                             {field: "retention_policies", kind: kindObject},
		"deduplication":                         {field: "deduplicationEnabled", kind: kindBool},
		"schemaValidationEnforced":              {field: "schema_validation_enforced", kind: kindBool, unset: json.RawMessage("false")},
		"schemaAutoUpdateCompatibilityStrategy": {field: "schema_auto_update_compatibility_strategy", kind: kindString, unset: json.RawMessage(`"Full"`)},
		"schemaCompatibilityStrategy":           {field: "schema_compatibility_strategy", kind: kindString, unset: json.RawMessage(`"UNDEFINED"`)},
		"offloadDeletionLagMs":                  {field: "offload_deletion_lag_ms", kind: kindInt},
		"maxConsumersPerSubscription":           nonNeg("max_consumers_per_subscription", "maxConsumersPerSubscription must be 0 or more"),
		"offloadThreshold":                      {field: "offload_threshold", kind: kindInt},
		"offloadThresholdInSeconds":             nonNeg("offload_threshold_in_seconds", "Invalid value for offloadThresholdInSecond"),
		"maxConsumersPerTopic":                  nonNeg("max_consumers_per_topic", "maxConsumersPerTopic must be 0 or more"),
		"compactionThreshold":                   nonNeg("compaction_threshold", "compactionThreshold must be 0 or more"),
		"maxProducersPerTopic":                  nonNeg("max_producers_per_topic", "maxProducersPerTopic must be 0 or more"),
		"maxUnackedMessagesPerConsumer":         nonNeg("max_unacked_messages_per_consumer", "maxUnackedMessagesPerConsumer must be 0 or more"),
		"maxUnackedMessagesPerSubscription":     nonNeg("max_unacked_messages_per_subscription", "maxUnackedMessagesPerSubscription must be 0 or more"),
		"maxSubscriptionsPerTopic":              nonNeg("max_subscriptions_per_topic", "maxSubscriptionsPerTopic must be 0 or more"),
		"maxTopicsPerNamespace":                 nonNeg("max_topics_per_namespace", "maxTopicsPerNamespace must be 0 or more"),
		"subscriptionExpirationTime":            nonNeg("subscription_expiration_time_minutes", "Invalid value for subscription expiration time"),
		"deduplicationSnapshotInterval":         nonNeg("deduplicationSnapshotIntervalSeconds", "Invalid value for deduplicationSnapshotInterval"),
		"replication":                           {field: "replication_clusters", kind: kindList, unset: json.RawMessage("[]")},
		"antiAffinity":                          {field: "antiAffinityGroup", kind: kindString},
		"persistence":                           {field: "persistence", kind: kindObject},
		"subscriptionAuthMode":                  {field: "subscription_auth_mode", kind: kindString, unset: json.RawMessage(`"None"`)},
		"encryptionRequired":                    {field: "encryption_required", kind: kindBool, unset: json.RawMessage("false")},
		"replicatorDispatchRate":                {field: "replicatorDispatchRate", kind: kindObject, probe: "dispatchThrottlingRateInMsg"},
		"subscriptionDispatchRate":              {field: "subscriptionDispatchRate", kind: kindObject, probe: "dispatchThrottlingRateInMsg"},
		"subscribeRate":                         {field: "clusterSubscribeRate", kind: kindObject, probe: "subscribeThrottlingRatePerConsumer"},
		"dispatchRate":                          {field: "topicDispatchRate", kind: kindObject, probe: "dispatchThrottlingRateInMsg"},
		"publishRate":                           {field: "publishMaxMessageRate", kind: kindObject, probe: "publishThrottlingRateInMsg"},
		"isAllowAutoUpdateSchema":               {field: "is_allow_auto_update_schema", kind: kindBool, unset: json.RawMessage("true")},
		"inactiveTopicPolicies":                 {field: "inactive_topic_policies", kind: kindObject},
		"delayedDelivery":                       {field: "delayed_delivery_policies", kind: kindObject},
		"offloadPolicies":                       {field: "offload_policies", kind: kindObject},
		"autoSubscriptionCreation":              {field: "autoSubscriptionCreationOverride", kind: kindObject},
		"subscriptionTypesEnabled":              {field: "subscription_types_enabled", kind: kindList},
		"resourcegroup":                         {field: "resource_group_name", kind: kindString},
		"entryFilters":                          {field: "entryFilters", kind: kindObject},
		"allowedClusters":                       {field: "allowed_clusters", kind: kindList},
	}
}()

// clusterValue returns cluster's entry of a per-cluster policy map (or
// the bare value an earlier version stored).
func clusterValue(raw json.RawMessage, cluster, probe string) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	if _, bare := m[probe]; bare {
		return raw, true
	}
	v, ok := m[cluster]
	return v, ok
}

// setField sets (val nil: removes) a namespace policy field; a per-cluster
// one only in cluster's entry.
func setField(f map[string]json.RawMessage, p nsPolicy, cluster string, val json.RawMessage) error {
	if p.probe == "" {
		if val == nil {
			delete(f, p.field)
		} else {
			f[p.field] = val
		}
		return nil
	}
	m := map[string]json.RawMessage{}
	if raw, ok := f[p.field]; ok {
		if json.Unmarshal(raw, &m) != nil || m[p.probe] != nil {
			m = map[string]json.RawMessage{} // a bare value: replaced
		}
	}
	if val == nil {
		delete(m, cluster)
	} else {
		m[cluster] = val
	}
	if len(m) == 0 {
		delete(f, p.field)
		return nil
	}
	b, err := json.Marshal(m)
	f[p.field] = b
	return err
}

// parseValue checks a policy value against its kind and returns it as
// canonical JSON. Booleans and strings may arrive bare or quoted.
func parseValue(kind valueKind, b []byte) (json.RawMessage, error) {
	bad := func() error { return failf(http.StatusBadRequest, "Invalid value: %s", strings.TrimSpace(string(b))) }
	s := strings.TrimSpace(string(b))
	switch kind {
	case kindInt:
		n, err := strconv.ParseInt(strings.Trim(s, `"`), 10, 64)
		if err != nil {
			return nil, bad()
		}
		return json.RawMessage(strconv.FormatInt(n, 10)), nil
	case kindBool:
		v, err := strconv.ParseBool(strings.Trim(s, `"`))
		if err != nil {
			return nil, bad()
		}
		return json.RawMessage(strconv.FormatBool(v)), nil
	case kindString:
		var str string
		if json.Unmarshal(b, &str) != nil {
			str = s
		}
		out, _ := json.Marshal(str)
		return out, nil
	case kindObject:
		var m map[string]any
		if json.Unmarshal(b, &m) != nil || m == nil {
			return nil, bad()
		}
		return json.RawMessage(s), nil
	case kindList:
		var l []any
		if json.Unmarshal(b, &l) != nil {
			return nil, bad()
		}
		return json.RawMessage(s), nil
	}
	return nil, bad()
}

// checkNamespace answers 404 for an unknown tenant or namespace.
func (h *Handler) checkNamespace(q *request, tenant, ns string) error {
	_, _, err := h.res.GetNamespace(q.ctx, tenant, ns)
	if errors.Is(err, broker.ErrNotFound) {
		if _, terr := h.res.GetTenant(q.ctx, tenant); errors.Is(terr, broker.ErrNotFound) {
			return errTenantMissing
		}
		return errNsMissing
	}
	return err
}

// updateNamespace edits a namespace's policy fields, answering 404 for an
// unknown tenant or namespace.
func (h *Handler) updateNamespace(q *request, tenant, ns string, fn func(map[string]json.RawMessage) error) error {
	if err := h.checkNamespace(q, tenant, ns); err != nil {
		return err
	}
	err := h.res.UpdateNamespaceFields(q.ctx, tenant, ns, fn)
	if errors.Is(err, broker.ErrNotFound) {
		return errNsMissing
	}
	return err
}

func (h *Handler) namespaceFields(q *request, tenant, ns string) (map[string]json.RawMessage, error) {
	if err := h.checkNamespace(q, tenant, ns); err != nil {
		return nil, err
	}
	p, _, err := h.res.GetNamespace(q.ctx, tenant, ns)
	if err != nil {
		return nil, err
	}
	return broker.NamespaceFields(p)
}

// namespaces serves /admin/v2/namespaces/...
func (h *Handler) namespaces(q *request) error {
	if len(q.seg) == 1 {
		if q.method() != http.MethodGet {
			return errNotAllowed
		}
		if _, err := h.res.GetTenant(q.ctx, q.seg[0]); errors.Is(err, broker.ErrNotFound) {
			return errTenantMissing
		}
		nss, err := h.res.Namespaces(q.ctx, q.seg[0])
		if err != nil {
			return err
		}
		return ok(q, nonNilStrings(nss))
	}
	if len(q.seg) < 2 {
		return errNotFound
	}
	tenant, ns := q.seg[0], q.seg[1]
	rest := q.rest(2)
	if len(rest) == 0 {
		switch q.method() {
		case http.MethodPut:
			return h.createNamespace(q, tenant, ns)
		case http.MethodGet:
			fields, err := h.namespaceFields(q, tenant, ns)
			if err != nil {
				return err
			}
			return ok(q, fields)
		case http.MethodDelete:
			if err := h.checkNamespace(q, tenant, ns); err != nil {
				return err
			}
			if err := h.deleteNamespace(q, tenant, ns, q.queryBool("force")); err != nil {
				return err
			}
			return noContent(q)
		}
		return errNotAllowed
	}
	name := rest[0]
	if p, found := nsPolicies[name]; found && len(rest) == 1 {
		return h.namespacePolicy(q, tenant, ns, p)
	}
	switch {
	case name == "resourcegroup" && len(rest) == 2 && (q.method() == http.MethodPost || q.method() == http.MethodPut):
		return h.setNamespaceResourceGroup(q, tenant, ns, rest[1])
	case name == "topics" && len(rest) == 1 && q.method() == http.MethodGet:
		if err := h.checkNamespace(q, tenant, ns); err != nil {
			return err
		}
		topics, err := h.svc.TopicsOfNamespace(q.ctx, tenant, ns, q.query("mode"))
		if err != nil {
			return err
		}
		return ok(q, nonNilStrings(topics))
	case name == "persistence" && len(rest) == 2 && rest[1] == "bookieAffinity":
		return h.namespacePolicy(q, tenant, ns, nsPolicy{field: "bookieAffinityGroup", kind: kindObject})
	case name == "migration" && len(rest) == 1:
		return h.namespaceMigration(q, tenant, ns)
	case name == "autoTopicCreation" && len(rest) == 1:
		return h.autoTopicCreation(q, tenant, ns)
	case name == "backlogQuotaMap" && len(rest) == 1 && q.method() == http.MethodGet:
		fields, err := h.namespaceFields(q, tenant, ns)
		if err != nil {
			return err
		}
		if raw, ok := fields["backlog_quota_map"]; ok {
			return okRaw(q, raw)
		}
		return ok(q, map[string]any{})
	case name == "backlogQuota" && len(rest) == 1:
		return h.namespaceBacklogQuota(q, tenant, ns)
	case name == "properties" && len(rest) == 1:
		return h.namespaceProperties(q, tenant, ns)
	case name == "permissions":
		return h.namespacePermissions(q, tenant, ns, rest[1:])
	case name == "bundles" && len(rest) == 1:
		return h.namespaceBundles(q, tenant, ns)
	case isBundleName(name) && len(rest) == 2 && (rest[1] == "unload" || rest[1] == "split"):
		return h.bundleOp(q, tenant, ns, name, rest[1])
	case name == "unload" && len(rest) == 1:
		if q.method() != http.MethodPut {
			return errNotAllowed
		}
		return h.unloadNamespace(q, tenant, ns)
	case name == "clearBacklog" || (len(rest) >= 2 && rest[1] == "clearBacklog"):
		return h.namespaceSubscriptionOp(q, tenant, ns, rest, "clearBacklog")
	case name == "unsubscribe" || (len(rest) >= 2 && rest[1] == "unsubscribe"):
		return h.namespaceSubscriptionOp(q, tenant, ns, rest, "unsubscribe")
	}
	return errNotFound
}

func (h *Handler) createNamespace(q *request, tenant, ns string) error {
	if _, err := h.res.GetTenant(q.ctx, tenant); errors.Is(err, broker.ErrNotFound) {
		return errTenantMissing
	}
	if !validName(ns) {
		return failf(http.StatusPreconditionFailed, "Namespace name is not valid")
	}
	var p broker.Policies
	if _, err := q.decode(&p); err != nil {
		return err
	}
	if len(p.ReplicationClusters) == 0 {
		p.ReplicationClusters = []string{h.svc.Config().ClusterName}
	} else if err := h.checkClusters(q, p.ReplicationClusters); err != nil {
		return err
	}
	err := h.res.CreateNamespace(q.ctx, tenant, ns, p)
	if errors.Is(err, broker.ErrAlreadyExists) {
		return failf(http.StatusConflict, "Namespace already exists")
	}
	if err != nil {
		return err
	}
	return noContent(q)
}

// deleteNamespace deletes a namespace; with topics it answers 409 unless
// force, which deletes them first.
func (h *Handler) deleteNamespace(q *request, tenant, ns string, force bool) error {
	topics, err := h.svc.TopicsOfNamespace(q.ctx, tenant, ns, "ALL")
	if err != nil {
		return err
	}
	parts, err := h.res.PartitionedTopics(q.ctx, tenant, ns, broker.Persistent)
	if err != nil {
		return err
	}
	npParts, err := h.res.PartitionedTopics(q.ctx, tenant, ns, broker.NonPersistent)
	if err != nil {
		return err
	}
	parts = append(parts, npParts...)
	if (len(topics) > 0 || len(parts) > 0) && !force {
		return failf(http.StatusConflict, "Cannot delete non empty namespace")
	}
	for _, p := range parts {
		if err := h.svc.DeletePartitionedTopic(q.ctx, p, true); err != nil && !errors.Is(err, broker.ErrNotFound) {
			return err
		}
		h.res.DeleteTopicPolicies(q.ctx, p)
	}
	for _, t := range topics {
		tn, err := broker.ParseTopicName(t)
		if err != nil {
			continue
		}
		if err := h.svc.DeleteTopic(q.ctx, tn, true); err != nil && !errors.Is(err, broker.ErrNotFound) {
			return err
		}
		h.res.DeleteTopicPolicies(q.ctx, tn)
	}
	err = h.res.DeleteNamespace(q.ctx, tenant, ns)
	if errors.Is(err, broker.ErrNotFound) {
		return errNsMissing
	}
	return err
}

func (h *Handler) namespacePolicy(q *request, tenant, ns string, p nsPolicy) error {
	switch q.method() {
	case http.MethodGet:
		fields, err := h.namespaceFields(q, tenant, ns)
		if err != nil {
			return err
		}
		raw, ok := fields[p.field]
		if p.probe != "" {
			raw, ok = clusterValue(raw, h.svc.Config().ClusterName, p.probe)
		}
		if !ok {
			raw = p.unset
		}
		return okRaw(q, raw)
	case http.MethodPost, http.MethodPut:
		b, err := q.body()
		if err != nil {
			return err
		}
		if len(b) == 0 && p.kind == kindBool {
			b = []byte("true")
		}
		val, err := parseValue(p.kind, b)
		if err != nil {
			return err
		}
		if p.minValue != nil {
			n, _ := strconv.ParseInt(string(val), 10, 64)
			if n < *p.minValue {
				return failf(http.StatusPreconditionFailed, "%s", p.invalid)
			}
		}
		if p.field == "replication_clusters" {
			var cl []string
			json.Unmarshal(val, &cl)
			if err := h.checkClusters(q, cl); err != nil {
				return err
			}
		}
		if err := h.updateNamespace(q, tenant, ns, func(f map[string]json.RawMessage) error {
			return setField(f, p, h.svc.Config().ClusterName, val)
		}); err != nil {
			return err
		}
		return noContent(q)
	case http.MethodDelete:
		if err := h.updateNamespace(q, tenant, ns, func(f map[string]json.RawMessage) error {
			return setField(f, p, h.svc.Config().ClusterName, nil)
		}); err != nil {
			return err
		}
		return noContent(q)
	}
	return errNotAllowed
}

func (h *Handler) autoTopicCreation(q *request, tenant, ns string) error {
	const field = "autoTopicCreationOverride"
	switch q.method() {
	case http.MethodGet:
		fields, err := h.namespaceFields(q, tenant, ns)
		if err != nil {
			return err
		}
		return okRaw(q, fields[field])
	case http.MethodDelete:
		return h.deleteNamespaceField(q, tenant, ns, field)
	case http.MethodPost, http.MethodPut:
		if err := h.checkNamespace(q, tenant, ns); err != nil {
			return err
		}
		var cfg struct {
			Allow      bool   `json:"allowAutoTopicCreation"`
			Type       string `json:"topicType"`
			Partitions *int   `json:"defaultNumPartitions"`
		}
		if err := q.mustDecode(&cfg); err != nil {
			return err
		}
		const prefix = "Invalid configuration for autoTopicCreationOverride. the detail is "
		if cfg.Allow {
			switch cfg.Type {
			case "partitioned":
				if cfg.Partitions == nil {
					return failf(http.StatusBadRequest, prefix+"[defaultNumPartitions] cannot be null when the type is partitioned.")
				}
				if *cfg.Partitions < 1 {
					return failf(http.StatusBadRequest, prefix+"[defaultNumPartitions] cannot be less than 1 for partition type.")
				}
			case "non-partitioned":
				if cfg.Partitions != nil {
					return failf(http.StatusBadRequest, prefix+"[defaultNumPartitions] is not allowed to be set when the type is non-partition.")
				}
			default:
				return failf(http.StatusBadRequest, prefix+"[topicType] must be partitioned or non-partitioned.")
			}
		}
		ov := broker.AutoTopicCreation{Allow: cfg.Allow, TopicType: cfg.Type}
		if cfg.Partitions != nil {
			ov.DefaultPartitions = *cfg.Partitions
		}
		if err := h.res.UpdateNamespace(q.ctx, tenant, ns, func(p *broker.Policies) error {
			p.AutoTopicCreation = &ov
			return nil
		}); err != nil {
			return err
		}
		return noContent(q)
	}
	return errNotAllowed
}

// backlogQuota is Pulsar's BacklogQuota; "limit" is the legacy size field
// and may arrive as a string.
type backlogQuota struct {
	LimitSize int64  `json:"limitSize"`
	LimitTime int64  `json:"limitTime"`
	Policy    string `json:"policy"`
}

func parseBacklogQuota(q *request) (backlogQuota, error) {
	var in map[string]json.RawMessage
	if err := q.mustDecode(&in); err != nil {
		return backlogQuota{}, err
	}
	num := func(k string) (int64, bool, error) {
		raw, ok := in[k]
		if !ok || string(raw) == "null" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(strings.Trim(string(raw), `"`), 10, 64)
		if err != nil {
			return 0, false, failf(http.StatusBadRequest, "Invalid value for backlog quota %s", k)
		}
		return n, true, nil
	}
	var bq backlogQuota
	var err error
	var ok bool
	if bq.LimitSize, ok, err = num("limitSize"); err != nil {
		return bq, err
	}
	if !ok {
		if bq.LimitSize, _, err = num("limit"); err != nil {
			return bq, err
		}
	}
	if bq.LimitTime, _, err = num("limitTime"); err != nil {
		return bq, err
	}
	if raw, has := in["policy"]; has {
		json.Unmarshal(raw, &bq.Policy)
	}
	switch bq.Policy {
	case "":
		bq.Policy = "producer_request_hold"
	case "producer_request_hold", "producer_exception", "consumer_backlog_eviction":
	default:
		return bq, failf(http.StatusBadRequest, "Invalid backlog quota policy %q", bq.Policy)
	}
	return bq, nil
}

func backlogQuotaType(q *request) (string, error) {
	t := q.query("backlogQuotaType")
	switch t {
	case "":
		return "destination_storage", nil
	case "destination_storage", "message_age":
		return t, nil
	}
	return "", failf(http.StatusBadRequest, "Invalid backlogQuotaType %q", t)
}

// setQuota edits a backlog-quota map held as JSON (nil bq: remove).
func setQuota(raw json.RawMessage, typ string, bq *backlogQuota) (json.RawMessage, error) {
	m := map[string]backlogQuota{}
	if len(raw) > 0 {
		json.Unmarshal(raw, &m)
	}
	if bq == nil {
		delete(m, typ)
	} else {
		m[typ] = *bq
	}
	if len(m) == 0 {
		return nil, nil
	}
	return json.Marshal(m)
}

// backlogQuotaRequest reads a backlog-quota set (POST/PUT: the quota) or
// removal (DELETE: nil) and its backlogQuotaType.
func backlogQuotaRequest(q *request) (string, *backlogQuota, error) {
	typ, err := backlogQuotaType(q)
	if err != nil {
		return "", nil, err
	}
	switch q.method() {
	case http.MethodPost, http.MethodPut:
		v, err := parseBacklogQuota(q)
		if err != nil {
			return "", nil, err
		}
		return typ, &v, nil
	case http.MethodDelete:
		return typ, nil, nil
	}
	return "", nil, errNotAllowed
}

func (h *Handler) namespaceBacklogQuota(q *request, tenant, ns string) error {
	typ, bq, err := backlogQuotaRequest(q)
	if err != nil {
		return err
	}
	if err := h.updateNamespace(q, tenant, ns, func(f map[string]json.RawMessage) error {
		next, err := setQuota(f["backlog_quota_map"], typ, bq)
		if err != nil {
			return err
		}
		if next == nil {
			delete(f, "backlog_quota_map")
		} else {
			f["backlog_quota_map"] = next
		}
		return nil
	}); err != nil {
		return err
	}
	return noContent(q)
}

func (h *Handler) namespaceProperties(q *request, tenant, ns string) error {
	const field = "properties"
	switch q.method() {
	case http.MethodGet:
		fields, err := h.namespaceFields(q, tenant, ns)
		if err != nil {
			return err
		}
		if raw, ok := fields[field]; ok {
			return okRaw(q, raw)
		}
		return ok(q, map[string]string{})
	case http.MethodPut, http.MethodPost:
		var props map[string]string
		if err := q.mustDecode(&props); err != nil {
			return err
		}
		if err := h.updateNamespace(q, tenant, ns, func(f map[string]json.RawMessage) error {
			cur := map[string]string{}
			if raw, ok := f[field]; ok {
				json.Unmarshal(raw, &cur)
			}
			for k, v := range props {
				cur[k] = v
			}
			b, err := json.Marshal(cur)
			f[field] = b
			return err
		}); err != nil {
			return err
		}
		return noContent(q)
	case http.MethodDelete:
		return h.deleteNamespaceField(q, tenant, ns, field)
	}
	return errNotAllowed
}

// authPolicies is Pulsar's AuthPolicies, as the broker reads it.
type authPolicies = broker.AuthPolicies

func readAuth(f map[string]json.RawMessage) authPolicies {
	return broker.ParseAuthPolicies(f["auth_policies"])
}

func (h *Handler) namespacePermissions(q *request, tenant, ns string, rest []string) error {
	edit := func(fn func(*authPolicies)) error {
		if err := h.updateNamespace(q, tenant, ns, func(f map[string]json.RawMessage) error {
			a := readAuth(f)
			fn(&a)
			b, err := json.Marshal(a)
			f["auth_policies"] = b
			return err
		}); err != nil {
			return err
		}
		return noContent(q)
	}
	switch {
	case len(rest) == 0 && q.method() == http.MethodGet:
		fields, err := h.namespaceFields(q, tenant, ns)
		if err != nil {
			return err
		}
		return ok(q, readAuth(fields).NamespaceAuth)
	case len(rest) == 1 && rest[0] == "subscription" && q.method() == http.MethodGet:
		fields, err := h.namespaceFields(q, tenant, ns)
		if err != nil {
			return err
		}
		return ok(q, readAuth(fields).SubAuthRoles)
	case len(rest) == 1 && q.method() == http.MethodPost:
		var actions []string
		if err := q.mustDecode(&actions); err != nil {
			return err
		}
		for _, a := range actions {
			if !slices.Contains([]string{"produce", "consume", "functions", "sources", "sinks", "packages"}, a) {
				return failf(http.StatusBadRequest, "Invalid auth action %q", a)
			}
		}
		role := rest[0]
		return edit(func(a *authPolicies) { a.NamespaceAuth[role] = actions })
	case len(rest) == 1 && q.method() == http.MethodDelete:
		role := rest[0]
		return edit(func(a *authPolicies) { delete(a.NamespaceAuth, role) })
	case len(rest) == 2 && rest[0] == "subscription" && q.method() == http.MethodPost:
		var roles []string
		if err := q.mustDecode(&roles); err != nil {
			return err
		}
		sub := rest[1]
		return edit(func(a *authPolicies) {
			cur := a.SubAuthRoles[sub]
			for _, r := range roles {
				if !slices.Contains(cur, r) {
					cur = append(cur, r)
				}
			}
			a.SubAuthRoles[sub] = cur
		})
	case len(rest) == 2 && q.method() == http.MethodDelete:
		sub, role := rest[0], rest[1]
		return edit(func(a *authPolicies) {
			cur := slices.DeleteFunc(a.SubAuthRoles[sub], func(r string) bool { return r == role })
			if len(cur) == 0 {
				delete(a.SubAuthRoles, sub)
			} else {
				a.SubAuthRoles[sub] = cur
			}
		})
	}
	return errNotFound
}

// namespaceSubscriptionOp serves clearBacklog and unsubscribe over every
// topic of a namespace: .../{op}[/{sub}] and .../{bundle}/{op}[/{sub}].
func (h *Handler) namespaceSubscriptionOp(q *request, tenant, ns string, rest []string, op string) error {
	if q.method() != http.MethodPost {
		return errNotAllowed
	}
	if rest[0] != op {
		rest = rest[1:]
	}
	sub := ""
	if len(rest) == 2 {
		sub = rest[1]
	} else if len(rest) != 1 {
		return errNotFound
	}
	if op == "unsubscribe" && sub == "" {
		return errNotFound
	}
	if err := h.checkNamespace(q, tenant, ns); err != nil {
		return err
	}
	topics, err := h.svc.TopicsOfNamespace(q.ctx, tenant, ns, "PERSISTENT")
	if err != nil {
		return err
	}
	for _, t := range topics {
		tn, err := broker.ParseTopicName(t)
		if err != nil {
			continue
		}
		subs := []string{sub}
		if sub == "" {
			if subs, err = h.svc.TopicSubscriptions(q.ctx, tn); err != nil {
				continue
			}
		}
		for _, s := range subs {
			if op == "clearBacklog" {
				err = h.svc.ClearBacklog(q.ctx, tn, s)
			} else {
				err = h.svc.DeleteSubscription(q.ctx, tn, s, false)
			}
			if err != nil && !errors.Is(err, broker.ErrNotFound) {
				return err
			}
		}
	}
	return noContent(q)
}

// deleteNamespaceField removes one policy field of a namespace.
func (h *Handler) deleteNamespaceField(q *request, tenant, ns, field string) error {
	if err := h.updateNamespace(q, tenant, ns, func(f map[string]json.RawMessage) error {
		delete(f, field)
		return nil
	}); err != nil {
		return err
	}
	return noContent(q)
}
