package consul

import (
	"maps"
	"slices"
	"sort"

	"github.com/hashicorp/consul/api"
)

// plan is what one registrar pass changes in the Consul agent's services.
type plan struct {
	register   []*api.AgentServiceRegistration
	deregister []string // service IDs, sorted
}

// makePlan compares the desired registrations with current, the agent's
// services of this region (by ID). A desired service is registered when it
// is missing, differs, or is in force (its check was found missing). A
// current broker instance is deregistered only when its cluster is in
// deleted, or is in owned (the caller set it) without that instance: a
// scale-down. Instances of clusters the caller has not mentioned are left
// alone, so a restarted agent that has not yet set all its clusters
// removes nothing.
func makePlan(desired []*api.AgentServiceRegistration, current map[string]*api.AgentService,
	owned, deleted map[ClusterKey]bool, force map[string]bool) plan {
	var p plan
	want := make(map[string]bool, len(desired))
	for _, d := range desired {
		want[d.ID] = true
		if c, ok := current[d.ID]; !ok || force[d.ID] || !sameService(d, c) {
			p.register = append(p.register, d)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(current)) {
		c := current[id]
		if c.Service == AgentService || want[id] {
			continue
		}
		k := ClusterKey{c.Meta[MetaOrg], c.Meta[MetaCluster]}
		if k.Org == "" || k.Name == "" {
			continue
		}
		if deleted[k] || owned[k] {
			p.deregister = append(p.deregister, id)
		}
	}
	return p
}

// sameService reports whether the agent holds d as registered.
func sameService(d *api.AgentServiceRegistration, c *api.AgentService) bool {
	if d.Name != c.Service || d.Address != c.Address || d.Port != c.Port {
		return false
	}
	a, b := slices.Clone(d.Tags), slices.Clone(c.Tags)
	sort.Strings(a)
	sort.Strings(b)
	if !slices.Equal(a, b) {
		return false
	}
	// Consul returns an empty map for no meta.
	if len(d.Meta) != len(c.Meta) {
		return false
	}
	return maps.Equal(d.Meta, c.Meta)
}
