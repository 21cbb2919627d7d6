package broker

// Resource groups (Pulsar's /admin/v2/resourcegroups): named publish and
// dispatch rates a namespace joins with its resource_group_name policy.
// Records live at
//
//	/admin/resourcegroups/<name>   {"publishRateInMsgs":N, "publishRateInBytes":N,
//	                                "dispatchRateInMsgs":N, "dispatchRateInBytes":N}
//
// (Pulsar's path and field names; fields the broker does not interpret
// round-trip). Each broker holds one set of buckets per group, shared by
// every topic of the group's namespaces loaded on it: the group's rate is
// per broker, as Pulsar's is before its usage reports rebalance quotas
// between brokers (Magnetar does not rebalance them). Tenant-level groups
// are not supported.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

const resourceGroupsPath = "/admin/resourcegroups"

// ResourceGroup is a resource group's rates; 0 or less is no limit.
type ResourceGroup struct {
	PublishRateInMsgs   int64 `json:"publishRateInMsgs"`
	PublishRateInBytes  int64 `json:"publishRateInBytes"`
	DispatchRateInMsgs  int64 `json:"dispatchRateInMsgs"`
	DispatchRateInBytes int64 `json:"dispatchRateInBytes"`
}

// resourceGroup is a group's buckets on this broker.
type resourceGroup struct {
	mu       sync.Mutex
	publish  rateBuckets
	dispatch rateBuckets
}

func (g *resourceGroup) buckets() (publish, dispatch rateBuckets) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.publish, g.dispatch
}

// resourceGroups is the broker's groups by name.
type resourceGroups struct {
	mu     sync.Mutex
	groups map[string]*resourceGroup
}

func (r *resourceGroups) get(name string) *resourceGroup {
	if name == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.groups[name]
}

// set re-rates (or creates, or with nil cfg removes) a group.
func (r *resourceGroups) set(name string, cfg *ResourceGroup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cfg == nil {
		delete(r.groups, name)
		return
	}
	g := r.groups[name]
	if g == nil {
		g = &resourceGroup{}
		if r.groups == nil {
			r.groups = map[string]*resourceGroup{}
		}
		r.groups[name] = g
	}
	now := nanotime()
	g.mu.Lock()
	g.publish = rebucket(g.publish, rateSpec{msgs: cfg.PublishRateInMsgs, bytes: cfg.PublishRateInBytes, period: time.Second}, now)
	g.dispatch = rebucket(g.dispatch, rateSpec{msgs: cfg.DispatchRateInMsgs, bytes: cfg.DispatchRateInBytes, period: time.Second}, now)
	g.mu.Unlock()
}

// onResourceGroupChange applies a group's new record (nil: deleted) and
// refreshes the topics in it.
func (s *Service) onResourceGroupChange(key string, val []byte) {
	name, ok := strings.CutPrefix(key, resourceGroupsPath+"/")
	if !ok || strings.Contains(name, "/") {
		return
	}
	if val == nil {
		s.rgs.set(name, nil)
	} else {
		var cfg ResourceGroup
		if err := json.Unmarshal(val, &cfg); err != nil {
			s.log.Warn("resource group unreadable", "name", name, "err", err)
			return
		}
		s.rgs.set(name, &cfg)
	}
	s.refreshTopicLimits(func(t *Topic) bool { return t.limits().resourceGroup == name })
}

// ErrResourceGroupInUse is returned when deleting a resource group a
// namespace still names.
var ErrResourceGroupInUse = errors.New("broker: resource group is in use")

func resourceGroupKey(name string) string { return resourceGroupsPath + "/" + name }

// ResourceGroups lists the resource groups' names, sorted.
func (r *Resources) ResourceGroups(ctx context.Context) ([]string, error) {
	return r.md.Children(ctx, resourceGroupsPath)
}

// ResourceGroupRaw returns a resource group's record (ErrNotFound).
func (r *Resources) ResourceGroupRaw(ctx context.Context, name string) (json.RawMessage, error) {
	var raw json.RawMessage
	_, err := r.getJSON(ctx, resourceGroupKey(name), &raw)
	return raw, err
}

// PutResourceGroup creates or replaces a resource group's record.
func (r *Resources) PutResourceGroup(ctx context.Context, name string, raw json.RawMessage) error {
	return r.putJSON(ctx, resourceGroupKey(name), raw, metadata.AnyVersion)
}

// DeleteResourceGroup deletes a resource group no namespace names
// (ErrNotFound, ErrResourceGroupInUse).
func (r *Resources) DeleteResourceGroup(ctx context.Context, name string) error {
	if _, err := r.ResourceGroupRaw(ctx, name); err != nil {
		return err
	}
	tenants, err := r.Tenants(ctx)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		nss, err := r.Namespaces(ctx, t)
		if err != nil {
			return err
		}
		for _, ns := range nss {
			p, _, err := r.GetNamespace(ctx, t, strings.TrimPrefix(ns, t+"/"))
			if err != nil {
				continue
			}
			var rg string
			json.Unmarshal(p.Other["resource_group_name"], &rg)
			if rg == name {
				return fmt.Errorf("%w: ResourceGroup %s is referenced by namespace %s", ErrResourceGroupInUse, name, ns)
			}
		}
	}
	return r.delete(ctx, resourceGroupKey(name))
}
