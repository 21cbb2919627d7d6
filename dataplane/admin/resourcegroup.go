package admin

// Resource groups: /admin/v2/resourcegroups (list) and
// /admin/v2/resourcegroups/{name} (GET, PUT to create or update, DELETE),
// with Pulsar's body {"publishRateInMsgs", "publishRateInBytes",
// "dispatchRateInMsgs", "dispatchRateInBytes"}; a namespace joins one with
// POST /admin/v2/namespaces/{t}/{ns}/resourcegroup/{name}, leaves with
// DELETE .../resourcegroup and GET .../resourcegroup names it. The broker
// enforces the rates (dataplane/broker/resourcegroup.go). Tenant-level
// resource groups are not supported.

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

func (h *Handler) resourceGroups(q *request) error {
	switch {
	case len(q.seg) == 0 && q.method() == http.MethodGet:
		names, err := h.res.ResourceGroups(q.ctx)
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
		raw, err := h.res.ResourceGroupRaw(q.ctx, name)
		if errors.Is(err, broker.ErrNotFound) {
			return failf(http.StatusNotFound, "ResourceGroup does not exist")
		}
		if err != nil {
			return err
		}
		return okRaw(q, raw)
	case http.MethodPut:
		if !validName(name) {
			return failf(http.StatusPreconditionFailed, "ResourceGroup name is not valid")
		}
		b, err := q.body()
		if err != nil {
			return err
		}
		var fields map[string]json.RawMessage
		if len(b) > 0 && json.Unmarshal(b, &fields) != nil {
			return failf(http.StatusBadRequest, "Invalid ResourceGroup: %s", string(b))
		}
		var rg broker.ResourceGroup
		if len(b) > 0 && json.Unmarshal(b, &rg) != nil {
			return failf(http.StatusBadRequest, "Invalid ResourceGroup: %s", string(b))
		}
		// Keep every field the client sent (newer Pulsar versions add
		// replication rates) and show the four rates always, as Pulsar does.
		if fields == nil {
			fields = map[string]json.RawMessage{}
		}
		for k, v := range map[string]int64{"publishRateInMsgs": rg.PublishRateInMsgs, "publishRateInBytes": rg.PublishRateInBytes,
			"dispatchRateInMsgs": rg.DispatchRateInMsgs, "dispatchRateInBytes": rg.DispatchRateInBytes} {
			if _, set := fields[k]; !set {
				fields[k], _ = json.Marshal(v)
			}
		}
		raw, err := json.Marshal(fields)
		if err != nil {
			return err
		}
		if err := h.res.PutResourceGroup(q.ctx, name, raw); err != nil {
			return err
		}
		return noContent(q)
	case http.MethodDelete:
		err := h.res.DeleteResourceGroup(q.ctx, name)
		switch {
		case errors.Is(err, broker.ErrNotFound):
			return failf(http.StatusNotFound, "ResourceGroup does not exist")
		case errors.Is(err, broker.ErrResourceGroupInUse):
			return failf(http.StatusConflict, "ResourceGroup is in use")
		case err != nil:
			return err
		}
		return noContent(q)
	}
	return errNotAllowed
}

// setNamespaceResourceGroup serves POST .../{ns}/resourcegroup/{name}.
func (h *Handler) setNamespaceResourceGroup(q *request, tenant, ns, name string) error {
	if _, err := h.res.ResourceGroupRaw(q.ctx, name); errors.Is(err, broker.ErrNotFound) {
		return failf(http.StatusPreconditionFailed, "ResourceGroup does not exist")
	} else if err != nil {
		return err
	}
	val, _ := json.Marshal(name)
	if err := h.updateNamespace(q, tenant, ns, func(f map[string]json.RawMessage) error {
		f["resource_group_name"] = val
		return nil
	}); err != nil {
		return err
	}
	return noContent(q)
}
