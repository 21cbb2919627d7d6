package pulsaradmin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// pulsarNames splits a control-plane resource name
// "organizations/o/clusters/c/tenants/t[/namespaces/n[/topics/x]]" into
// its Pulsar parts ["t", "n", "x"].
func pulsarNames(name string, want int) ([]string, error) {
	segs := strings.Split(name, "/")
	keys := []string{"organizations", "clusters", "tenants", "namespaces", "topics"}
	if len(segs) != 2*(2+want) {
		return nil, fmt.Errorf("pulsaradmin: %q is not a %s name", name, strings.TrimSuffix(keys[1+want], "s"))
	}
	var out []string
	for i := 0; i < len(segs); i += 2 {
		if segs[i] != keys[i/2] || segs[i+1] == "" {
			return nil, fmt.Errorf("pulsaradmin: %q is not a %s name", name, strings.TrimSuffix(keys[1+want], "s"))
		}
		if i >= 4 {
			out = append(out, segs[i+1])
		}
	}
	return out, nil
}

// PoliciesOf maps the API's namespace policies to the admin calls' form;
// mapCluster turns a replication cluster's resource name into its Pulsar
// cluster name.
func PoliciesOf(p *cpv1.NamespacePolicies, mapCluster func(string) (string, error)) (NamespacePolicies, error) {
	var out NamespacePolicies
	if r := p.GetRetention(); r != nil {
		out.Retention = &Retention{TimeMinutes: int(r.GetTimeMinutes()), SizeMB: r.GetSizeMb()}
	}
	if p.MessageTtlSeconds != nil {
		out.MessageTTLSeconds = ptr(int(p.GetMessageTtlSeconds()))
	}
	if p.DeduplicationEnabled != nil {
		out.Deduplication = proto.Bool(p.GetDeduplicationEnabled())
	}
	if q := p.GetBacklogQuota(); q != nil {
		bq := &BacklogQuota{LimitBytes: q.GetLimitBytes(), Policy: "producer_request_hold"}
		switch q.GetPolicy() {
		case cpv1.NamespacePolicies_BacklogQuota_PRODUCER_EXCEPTION:
			bq.Policy = "producer_exception"
		case cpv1.NamespacePolicies_BacklogQuota_CONSUMER_BACKLOG_EVICTION:
			bq.Policy = "consumer_backlog_eviction"
		}
		out.BacklogQuota = bq
	}
	if a := p.GetAutoTopicCreation(); a != nil {
		at := &AutoTopicCreation{Allow: a.GetAllow()}
		switch a.GetType() {
		case cpv1.NamespacePolicies_AutoTopicCreation_PARTITIONED:
			at.Type = "partitioned"
			at.DefaultPartitions = ptr(int(a.GetDefaultPartitions()))
		case cpv1.NamespacePolicies_AutoTopicCreation_NON_PARTITIONED:
			at.Type = "non-partitioned"
		}
		out.AutoTopicCreation = at
	}
	if s := p.GetSchemaCompatibilityStrategy(); s != cpv1.NamespacePolicies_SCHEMA_COMPATIBILITY_STRATEGY_UNSPECIFIED {
		out.SchemaCompatibilityStrategy = s.String() // Pulsar's names are the same
	}
	out.Bundles = int(p.GetBundles())
	if rc := p.GetReplicationClusters(); len(rc) > 0 {
		for _, c := range rc {
			n, err := mapCluster(c)
			if err != nil {
				return out, fmt.Errorf("pulsaradmin: replication cluster %s: %w", c, err)
			}
			out.ReplicationClusters = append(out.ReplicationClusters, n)
		}
	}
	return out, nil
}

// TopicOf is the Pulsar name of an API topic.
func TopicOf(t *cpv1.Topic) (TopicName, error) {
	n, err := pulsarNames(t.GetName(), 3)
	if err != nil {
		return TopicName{}, err
	}
	return TopicName{Persistent: t.Persistent == nil || t.GetPersistent(), Tenant: n[0], Namespace: n[1], Topic: n[2]}, nil
}

// Apply makes the data plane match desired, a *Tenant, *Namespace, *Topic,
// *PulsarFunction, *PulsarSource or *PulsarSink of api/controlplane/v1: tenants get the data plane's cluster as
// their allowed cluster (and keep the registered peers they were allowed). It returns the admin calls it made (nothing when
// the data plane already matched).
func Apply(ctx context.Context, c *Client, desired proto.Message) ([]string, error) {
	switch d := desired.(type) {
	case *cpv1.Tenant:
		n, err := pulsarNames(d.GetName(), 1)
		if err != nil {
			return nil, err
		}
		cluster, err := c.localCluster(ctx)
		if err != nil {
			return nil, err
		}
		// Replication peers the tenant's namespaces were allowed
		// (AllowClusters) stay allowed.
		allowed := []string{cluster}
		admins := slices.Clone(d.GetAdminRoles())
		if cur, err := c.GetTenant(ctx, n[0]); err == nil {
			if known, err := c.Clusters(ctx); err == nil {
				for _, a := range cur.AllowedClusters {
					if a != cluster && slices.Contains(known, a) {
						allowed = append(allowed, a)
					}
				}
			}
			// Admin roles another owner manages (WithKeptAdminRoles) stay.
			for _, r := range cur.AdminRoles {
				if c.keepAdmin != nil && c.keepAdmin(r) && !slices.Contains(admins, r) {
					admins = append(admins, r)
				}
			}
		}
		return c.EnsureTenant(ctx, n[0], TenantInfo{AdminRoles: admins, AllowedClusters: allowed})
	case *cpv1.Namespace:
		n, err := pulsarNames(d.GetName(), 2)
		if err != nil {
			return nil, err
		}
		p, err := PoliciesOf(d.GetPolicies(), c.replCluster)
		if err != nil {
			return nil, err
		}
		if len(p.ReplicationClusters) > 0 {
			// The API's list names the clusters replicated to; Pulsar's
			// includes the namespace's own (a cluster missing from it
			// deletes the namespace's topics).
			local, err := c.localCluster(ctx)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(p.ReplicationClusters, local) {
				p.ReplicationClusters = append([]string{local}, p.ReplicationClusters...)
			}
		}
		return c.EnsureNamespace(ctx, n[0], n[1], p)
	case *cpv1.Topic:
		t, err := TopicOf(d)
		if err != nil {
			return nil, err
		}
		return c.EnsureTopic(ctx, t, int(d.GetPartitions()))
	case *cpv1.PulsarFunction:
		return c.EnsureFunction(ctx, d)
	case *cpv1.PulsarSource:
		return c.EnsureSource(ctx, d)
	case *cpv1.PulsarSink:
		return c.EnsureSink(ctx, d)
	}
	return nil, fmt.Errorf("pulsaradmin: cannot apply a %T", desired)
}

// Remove deletes a *Tenant, *Namespace, *Topic, *PulsarFunction,
// *PulsarSource or *PulsarSink from the data plane; one already gone is
// not an error. Topics are deleted with force, and so are
// namespaces (with the topics producers created in them automatically:
// the namespace owns them); tenants are not, so a namespace the control
// plane does not know about keeps its tenant (Pulsar answers 409).
func Remove(ctx context.Context, c *Client, resource proto.Message) error {
	switch d := resource.(type) {
	case *cpv1.Tenant:
		n, err := pulsarNames(d.GetName(), 1)
		if err != nil {
			return err
		}
		return c.DeleteTenant(ctx, n[0])
	case *cpv1.Namespace:
		n, err := pulsarNames(d.GetName(), 2)
		if err != nil {
			return err
		}
		return c.DeleteNamespace(ctx, n[0], n[1], true)
	case *cpv1.Topic:
		t, err := TopicOf(d)
		if err != nil {
			return err
		}
		return c.DeleteTopic(ctx, t, true)
	case *cpv1.PulsarFunction:
		return c.removeComponent(ctx, d.GetName(), "functions")
	case *cpv1.PulsarSource:
		return c.removeComponent(ctx, d.GetName(), "sources")
	case *cpv1.PulsarSink:
		return c.removeComponent(ctx, d.GetName(), "sinks")
	}
	return fmt.Errorf("pulsaradmin: cannot remove a %T", resource)
}

// ApplyChange applies one change from WatchDesiredState: Remove for a
// deletion, Apply otherwise.
func ApplyChange(ctx context.Context, c *Client, ch *cpv1.PulsarResourceChange) ([]string, error) {
	var m proto.Message
	switch r := ch.GetResource().(type) {
	case *cpv1.PulsarResourceChange_Tenant:
		m = r.Tenant
	case *cpv1.PulsarResourceChange_Namespace:
		m = r.Namespace
	case *cpv1.PulsarResourceChange_Topic:
		m = r.Topic
	case *cpv1.PulsarResourceChange_Function:
		m = r.Function
	case *cpv1.PulsarResourceChange_Source:
		m = r.Source
	case *cpv1.PulsarResourceChange_Sink:
		m = r.Sink
	default:
		return nil, fmt.Errorf("pulsaradmin: change without a resource")
	}
	if ch.GetDeleted() {
		return nil, Remove(ctx, c, m)
	}
	return Apply(ctx, c, m)
}
