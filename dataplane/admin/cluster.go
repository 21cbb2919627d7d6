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

// clusters serves /admin/v2/clusters[/{c}].
func (h *Handler) clusters(q *request) error {
	switch {
	case q.is(http.MethodGet, 0):
		names, err := h.res.Clusters(q.ctx)
		if err != nil {
			return err
		}
		return ok(q, nonNilStrings(names))
	case len(q.seg) == 2 && q.seg[1] == "migrate":
		return h.clusterMigrate(q, q.seg[0])
	case len(q.seg) != 1:
		return errNotFound
	}
	name := q.seg[0]
	switch q.method() {
	case http.MethodGet:
		raw, err := h.res.ClusterRaw(q.ctx, name)
		if errors.Is(err, broker.ErrNotFound) {
			return failf(http.StatusNotFound, "Cluster does not exist")
		}
		if err != nil {
			return err
		}
		return okRaw(q, raw)
	case http.MethodPut, http.MethodPost:
		var data map[string]json.RawMessage
		if _, err := q.decode(&data); err != nil {
			return err
		}
		if data == nil {
			data = map[string]json.RawMessage{}
		}
		raw, _ := json.Marshal(data)
		err := h.res.PutClusterRaw(q.ctx, name, raw, q.method() == http.MethodPut)
		switch {
		case errors.Is(err, broker.ErrAlreadyExists):
			return failf(http.StatusConflict, "Cluster already exists")
		case errors.Is(err, broker.ErrNotFound):
			return failf(http.StatusNotFound, "Cluster does not exist")
		case err != nil:
			return err
		}
		return noContent(q)
	case http.MethodDelete:
		if err := h.res.DeleteCluster(q.ctx, name); err != nil {
			if errors.Is(err, broker.ErrNotFound) {
				return failf(http.StatusNotFound, "Cluster does not exist")
			}
			return err
		}
		return noContent(q)
	}
	return errNotAllowed
}

// tenants serves /admin/v2/tenants[/{t}].
func (h *Handler) tenants(q *request) error {
	switch {
	case q.is(http.MethodGet, 0) || (q.is(http.MethodGet, 1) && q.seg[0] == ""):
		names, err := h.res.Tenants(q.ctx)
		if err != nil {
			return err
		}
		return ok(q, nonNilStrings(names))
	case len(q.seg) != 1:
		return errNotFound
	}
	name := q.seg[0]
	switch q.method() {
	case http.MethodGet:
		info, err := h.res.GetTenant(q.ctx, name)
		if errors.Is(err, broker.ErrNotFound) {
			return errTenantMissing
		}
		if err != nil {
			return err
		}
		return ok(q, tenantJSON(info))
	case http.MethodPut, http.MethodPost:
		var info broker.TenantInfo
		if _, err := q.decode(&info); err != nil {
			return err
		}
		if err := h.checkClusters(q, info.AllowedClusters); err != nil {
			return err
		}
		var err error
		if q.method() == http.MethodPut {
			if !validName(name) {
				return failf(http.StatusPreconditionFailed, "Tenant name is not valid")
			}
			err = h.res.CreateTenant(q.ctx, name, info)
			if errors.Is(err, broker.ErrAlreadyExists) {
				return failf(http.StatusConflict, "Tenant already exists")
			}
		} else {
			err = h.res.UpdateTenant(q.ctx, name, info)
			if errors.Is(err, broker.ErrNotFound) {
				return errTenantMissing
			}
		}
		if err != nil {
			return err
		}
		return noContent(q)
	case http.MethodDelete:
		if _, err := h.res.GetTenant(q.ctx, name); errors.Is(err, broker.ErrNotFound) {
			return errTenantMissing
		}
		if q.queryBool("force") {
			nss, err := h.res.Namespaces(q.ctx, name)
			if err != nil {
				return err
			}
			for _, ns := range nss {
				if err := h.deleteNamespace(q, name, strings.TrimPrefix(ns, name+"/"), true); err != nil {
					return err
				}
			}
		}
		err := h.res.DeleteTenant(q.ctx, name)
		if errors.Is(err, broker.ErrNotEmpty) {
			return failf(http.StatusConflict, "The tenant still has active namespaces")
		}
		if err != nil {
			return err
		}
		return noContent(q)
	}
	return errNotAllowed
}

func tenantJSON(info broker.TenantInfo) broker.TenantInfo {
	info.AdminRoles = nonNilStrings(info.AdminRoles)
	info.AllowedClusters = nonNilStrings(info.AllowedClusters)
	return info
}

// checkClusters answers 412 when a named cluster does not exist.
func (h *Handler) checkClusters(q *request, names []string) error {
	if len(names) == 0 {
		return nil
	}
	known, err := h.res.Clusters(q.ctx)
	if err != nil {
		return err
	}
	for _, c := range names {
		if !slices.Contains(known, c) {
			return failf(http.StatusPreconditionFailed, "Clusters do not exist")
		}
	}
	return nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// dynamicConfigNames are the broker settings that may be changed at run
// time through /admin/v2/brokers/configuration (stored, not yet applied).
var dynamicConfigNames = []string{
	"allowAutoSubscriptionCreation", "allowAutoTopicCreation", "allowAutoTopicCreationType",
	"defaultNumPartitions", "maxMessageSize", "maxUnackedMessagesPerConsumer",
	"maxUnackedMessagesPerSubscription", "maxProducersPerTopic", "maxConsumersPerTopic",
	"backlogQuotaCheckIntervalInSeconds", "brokerDeleteInactiveTopicsEnabled",
	"dispatchThrottlingRatePerTopicInMsg", "dispatchThrottlingRatePerTopicInByte",
	"subscriptionExpirationTimeMinutes", "ttlDurationDefaultInSeconds",
}

func (h *Handler) dynamicConfig(q *request) (map[string]string, error) {
	return h.res.DynamicConfig(q.ctx)
}

func (h *Handler) updateDynamicConfig(q *request, fn func(map[string]string)) error {
	return h.res.UpdateDynamicConfig(q.ctx, fn)
}

// validName checks a tenant, namespace or cluster name as Pulsar does:
// letters, digits and -_=:. only.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("-_=:.", r):
		default:
			return false
		}
	}
	return true
}

// brokers serves /admin/v2/brokers/...
func (h *Handler) brokers(q *request) error {
	cfg := h.svc.Config()
	switch {
	case q.is(http.MethodGet, 0) || (q.is(http.MethodGet, 1) && q.seg[0] == cfg.ClusterName):
		return h.brokerList(q)
	case q.is(http.MethodGet, 3) && q.seg[0] == cfg.ClusterName && q.seg[2] == "ownedNamespaces":
		return h.ownedNamespaces(q, q.seg[1])
	case q.is(http.MethodGet, 1) && q.seg[0] == "health":
		q.w.Header().Set("Content-Type", "text/plain")
		q.w.WriteHeader(http.StatusOK)
		q.w.Write([]byte("ok"))
		return nil
	case q.is(http.MethodGet, 1) && q.seg[0] == "leaderBroker":
		l, err := h.svc.LeaderBroker(q.ctx)
		if err != nil {
			return failf(http.StatusServiceUnavailable, "no leader broker elected yet")
		}
		return ok(q, map[string]string{"serviceUrl": l.WebServiceURL, "brokerId": webHostPort(l.WebServiceURL)})
	case q.is(http.MethodGet, 1) && q.seg[0] == "version":
		return ok(q, "magnetar")
	case q.is(http.MethodGet, 1) && q.seg[0] == "ready":
		return ok(q, "ok")
	case q.is(http.MethodGet, 1) && q.seg[0] == "configuration":
		return ok(q, dynamicConfigNames)
	case q.is(http.MethodGet, 2) && q.at(0, "configuration") && q.seg[1] == "values":
		vals, err := h.dynamicConfig(q)
		if err != nil {
			return err
		}
		return ok(q, vals)
	case q.is(http.MethodGet, 2) && q.at(0, "configuration") && q.seg[1] == "runtime":
		vals, err := h.dynamicConfig(q)
		if err != nil {
			return err
		}
		runtime := map[string]string{
			"clusterName":              cfg.ClusterName,
			"advertisedAddress":        cfg.AdvertisedAddr,
			"webServiceUrl":            h.cfg.WebServiceURL,
			"maxMessageSize":           strconv.Itoa(cfg.MaxMessageSize),
			"allowAutoTopicCreation":   strconv.FormatBool(!cfg.DisableAutoTopicCreation),
			"keepAliveIntervalSeconds": strconv.Itoa(int(cfg.KeepAliveInterval.Seconds())),
		}
		for k, v := range vals {
			runtime[k] = v
		}
		return ok(q, runtime)
	case q.is(http.MethodGet, 1) && q.seg[0] == "internal-configuration":
		return ok(q, map[string]any{"metadataStoreUrl": "etcd", "configurationMetadataStoreUrl": "etcd"})
	case q.is(http.MethodPost, 3) && q.at(0, "configuration"):
		name, value := q.seg[1], q.seg[2]
		if !slices.Contains(dynamicConfigNames, name) {
			return failf(http.StatusPreconditionFailed, " Can't update non-dynamic configuration")
		}
		if err := h.updateDynamicConfig(q, func(m map[string]string) { m[name] = value }); err != nil {
			return err
		}
		q.w.WriteHeader(http.StatusOK)
		return nil
	case q.is(http.MethodDelete, 2) && q.at(0, "configuration"):
		name := q.seg[1]
		if !slices.Contains(dynamicConfigNames, name) {
			return failf(http.StatusPreconditionFailed, " Can't delete non-dynamic configuration")
		}
		if err := h.updateDynamicConfig(q, func(m map[string]string) { delete(m, name) }); err != nil {
			return err
		}
		return noContent(q)
	case q.is(http.MethodGet, 1):
		if q.seg[0] != cfg.ClusterName {
			return failf(http.StatusNotFound, "Cluster does not exist")
		}
		return ok(q, []string{h.webHostPort()})
	}
	return errNotFound
}
