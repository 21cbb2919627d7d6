package broker

// Raw policy records for the admin REST API: cluster records kept whole
// (fields the broker does not interpret round-trip), namespace policies
// edited as JSON fields, and topic-level policies.
//
// Topic policies live in the metadata store, one record per base topic and
// scope (partitions share their topic's policies):
//
//	/admin/topic-policies/<tenant>/<ns>/<domain>/<escaped local>          local scope
//	/admin/topic-policies/<tenant>/<ns>/<domain>/<escaped local>/global   global scope
//
// each a JSON object keyed by the policy's REST name ("messageTTL",
// "retention", "backlogQuotaMap", ...).

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

const topicPoliciesPath = "/admin/topic-policies"

// ClusterRaw returns a cluster's stored record as JSON.
func (r *Resources) ClusterRaw(ctx context.Context, name string) (json.RawMessage, error) {
	var raw json.RawMessage
	_, err := r.getJSON(ctx, clustersPath+"/"+name, &raw)
	return raw, err
}

// PutClusterRaw stores a cluster's record; with create it must not exist,
// otherwise it must.
func (r *Resources) PutClusterRaw(ctx context.Context, name string, raw json.RawMessage, create bool) error {
	if create {
		return r.createJSON(ctx, clustersPath+"/"+name, raw)
	}
	if _, err := r.ClusterRaw(ctx, name); err != nil {
		return err
	}
	return r.putJSON(ctx, clustersPath+"/"+name, raw, metadata.AnyVersion)
}

// UpdateNamespaceFields applies fn to the namespace's policies seen as a
// JSON object keyed by Pulsar's field names, by compare-and-set.
func (r *Resources) UpdateNamespaceFields(ctx context.Context, tenant, ns string, fn func(map[string]json.RawMessage) error) error {
	return r.UpdateNamespace(ctx, tenant, ns, func(p *Policies) error {
		fields, err := NamespaceFields(*p)
		if err != nil {
			return err
		}
		if err := fn(fields); err != nil {
			return err
		}
		b, err := json.Marshal(fields)
		if err != nil {
			return err
		}
		var next Policies
		if err := json.Unmarshal(b, &next); err != nil {
			return err
		}
		*p = next
		return nil
	})
}

// NamespaceFields returns policies as a JSON object keyed by field name.
func NamespaceFields(p Policies) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	return fields, nil
}

func topicPoliciesKey(t TopicName, global bool) string {
	b := t.Base()
	k := topicPoliciesPath + "/" + b.Tenant + "/" + b.Namespace + "/" + string(b.Domain) + "/" + url.PathEscape(b.Local)
	if global {
		k += "/global"
	}
	return k
}

// TopicPolicies returns the topic-level policies of t's base topic in one
// scope (empty when none are set).
func (r *Resources) TopicPolicies(ctx context.Context, t TopicName, global bool) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	_, err := r.getJSON(ctx, topicPoliciesKey(t, global), &m)
	if errors.Is(err, ErrNotFound) {
		return map[string]json.RawMessage{}, nil
	}
	return m, err
}

// UpdateTopicPolicies applies fn to t's topic-level policies by
// compare-and-set.
func (r *Resources) UpdateTopicPolicies(ctx context.Context, t TopicName, global bool, fn func(map[string]json.RawMessage) error) error {
	key := topicPoliciesKey(t, global)
	for {
		m := map[string]json.RawMessage{}
		v, err := r.getJSON(ctx, key, &m)
		if errors.Is(err, ErrNotFound) {
			v, err = metadata.NotExists, nil
		}
		if err != nil {
			return err
		}
		if err := fn(m); err != nil {
			return err
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = r.md.Put(ctx, key, b, v)
		if err == nil {
			return nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) && !errors.Is(err, metadata.ErrExists) {
			return err
		}
	}
}

// DeleteTopicPolicies removes t's topic-level policies (both scopes).
func (r *Resources) DeleteTopicPolicies(ctx context.Context, t TopicName) {
	r.md.Delete(ctx, topicPoliciesKey(t, false), metadata.AnyVersion)
	r.md.Delete(ctx, topicPoliciesKey(t, true), metadata.AnyVersion)
}

// dynamicConfigPath holds the broker's dynamic configuration (Pulsar's
// /admin/configuration): a JSON object of name -> value.
const dynamicConfigPath = "/admin/configuration"

// DynamicConfig returns the dynamic configuration values set.
func (r *Resources) DynamicConfig(ctx context.Context) (map[string]string, error) {
	m := map[string]string{}
	_, err := r.getJSON(ctx, dynamicConfigPath, &m)
	if errors.Is(err, ErrNotFound) {
		return map[string]string{}, nil
	}
	return m, err
}

// UpdateDynamicConfig applies fn to the dynamic configuration by
// compare-and-set.
func (r *Resources) UpdateDynamicConfig(ctx context.Context, fn func(map[string]string)) error {
	for {
		m := map[string]string{}
		v, err := r.getJSON(ctx, dynamicConfigPath, &m)
		if errors.Is(err, ErrNotFound) {
			v, err = metadata.NotExists, nil
		}
		if err != nil {
			return err
		}
		fn(m)
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = r.md.Put(ctx, dynamicConfigPath, b, v)
		if err == nil {
			return nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) && !errors.Is(err, metadata.ErrExists) {
			return err
		}
	}
}
