package admin

// Migration (write fencing for a planned failover, PIP-188; the broker's
// side is dataplane/broker/migration.go):
//
//	POST /admin/v2/namespaces/{t}/{ns}/migration   true | false |
//	     {"migrated":true,"migratedClusterUrl":{...},"migratedClusterName":"b"}
//	GET  /admin/v2/namespaces/{t}/{ns}/migration   the namespace's state
//	POST /admin/v2/clusters/{c}/migrate?migrated=true|false   {ClusterUrl}
//
// A bare boolean is Pulsar's updateMigrationState: the namespace goes to
// the cluster record's migratedClusterUrl, which must then be set. The
// object form is Magnetar's: the namespace carries its own target, which
// wins over the cluster's.

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// parseMigration reads a namespace migration body: a JSON boolean or a
// migration object.
func parseMigration(b []byte) (broker.MigrationState, error) {
	var st broker.MigrationState
	switch s := string(b); {
	case s == "true" || s == `"true"`:
		st.Migrated = true
		return st, nil
	case s == "false" || s == `"false"`:
		return st, nil
	case len(b) > 0 && b[0] == '{':
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var obj struct {
			Migrated *bool             `json:"migrated"`
			URL      broker.ClusterURL `json:"migratedClusterUrl"`
			Cluster  string            `json:"migratedClusterName"`
		}
		if err := dec.Decode(&obj); err != nil {
			return st, failf(http.StatusBadRequest, "Invalid migration state: %v", err)
		}
		if obj.Migrated == nil {
			return st, failf(http.StatusBadRequest, `Invalid migration state: "migrated" (true or false) is required`)
		}
		st = broker.MigrationState{Migrated: *obj.Migrated, URL: obj.URL, Cluster: obj.Cluster}
		return st, nil
	}
	return st, failf(http.StatusBadRequest,
		`Invalid migration state %q: want true, false or {"migrated":true,"migratedClusterUrl":{"brokerServiceUrl":"pulsar://..."}}`, b)
}

// namespaceMigration serves /admin/v2/namespaces/{t}/{ns}/migration.
func (h *Handler) namespaceMigration(q *request, tenant, ns string) error {
	switch q.method() {
	case http.MethodGet:
		fields, err := h.namespaceFields(q, tenant, ns)
		if err != nil {
			return err
		}
		return ok(q, broker.ReadMigration(fields))
	case http.MethodPost, http.MethodPut:
	default:
		return errNotAllowed
	}
	b, err := q.body()
	if err != nil {
		return err
	}
	st, err := parseMigration(b)
	if err != nil {
		return err
	}
	if err := h.checkNamespace(q, tenant, ns); err != nil {
		return err
	}
	if st.Migrated {
		if err := h.checkMigrationTarget(q, &st); err != nil {
			return err
		}
	}
	if err := h.updateNamespace(q, tenant, ns, func(f map[string]json.RawMessage) error {
		broker.WriteMigration(f, st)
		return nil
	}); err != nil {
		return err
	}
	return noContent(q)
}

// checkMigrationTarget validates a namespace's target: its own URL, or
// this cluster's migration URL when it gives none; a named target cluster
// must be registered.
func (h *Handler) checkMigrationTarget(q *request, st *broker.MigrationState) error {
	if st.Cluster != "" {
		if _, err := h.res.GetCluster(q.ctx, st.Cluster); errors.Is(err, broker.ErrNotFound) {
			return failf(http.StatusBadRequest, "Invalid migration state: cluster %s does not exist", st.Cluster)
		} else if err != nil {
			return err
		}
	}
	if !st.URL.Empty() {
		if err := st.URL.Validate(); err != nil {
			return failf(http.StatusBadRequest, "Invalid migratedClusterUrl: %v", err)
		}
		return nil
	}
	local := h.svc.Config().ClusterName
	raw, err := h.res.ClusterRaw(q.ctx, local)
	if err != nil && !errors.Is(err, broker.ErrNotFound) {
		return err
	}
	var fields map[string]json.RawMessage
	json.Unmarshal(raw, &fields)
	if broker.ReadMigration(fields).URL.Empty() {
		return failf(http.StatusBadRequest,
			"Invalid migration state: no migratedClusterUrl given and cluster %s has none (POST /admin/v2/clusters/%s/migrate)", local, local)
	}
	return nil
}

// clusterMigrate serves POST /admin/v2/clusters/{c}/migrate.
func (h *Handler) clusterMigrate(q *request, name string) error {
	if q.method() != http.MethodPost {
		return errNotAllowed
	}
	st := broker.MigrationState{Migrated: true}
	switch v := q.query("migrated"); v {
	case "", "true":
	case "false":
		st.Migrated = false
	default:
		return failf(http.StatusBadRequest, "Invalid migrated parameter %q: want true or false", v)
	}
	b, err := q.body()
	if err != nil {
		return err
	}
	if len(b) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st.URL); err != nil {
			return failf(http.StatusBadRequest, "Invalid cluster URL: %v", err)
		}
	}
	if st.Migrated {
		if st.URL.Empty() {
			return failf(http.StatusBadRequest, "Invalid cluster URL: a body with brokerServiceUrl is required to migrate")
		}
		if err := st.URL.Validate(); err != nil {
			return failf(http.StatusBadRequest, "Invalid cluster URL: %v", err)
		}
	}
	raw, err := h.res.ClusterRaw(q.ctx, name)
	if errors.Is(err, broker.ErrNotFound) {
		return failf(http.StatusNotFound, "Cluster does not exist")
	}
	if err != nil {
		return err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	broker.WriteMigration(fields, st)
	if !st.Migrated {
		fields["migrated"] = json.RawMessage("false") // as Pulsar's ClusterData shows it
	}
	out, _ := json.Marshal(fields)
	if err := h.res.PutClusterRaw(q.ctx, name, out, false); err != nil {
		return err
	}
	return noContent(q)
}
