package apiserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// Pulsar tenants, namespaces and topics live under a cluster:
// organizations/{org}/clusters/{cluster}/tenants/{t}/namespaces/{ns}/topics/{topic}.
// Their standard methods are synchronous: they record the desired state
// with state PENDING; the region agent applies it and reports APPLIED or
// FAILED through ReportResourceStatus.

// Limits of the Pulsar resources' fields.
const (
	maxAdminRoles    = 64
	maxRoleLen       = 255
	maxBundles       = 1024
	maxPartitions    = 1024
	maxReplClusters  = 32
	pulsarNameDepths = 4 // name segments of the cluster prefix
)

// pulsarKinds are the Pulsar collections, shallowest first: tenants,
// namespaces, then the namespaces' children (topics, functions, sources,
// sinks; pulsarDepth tells the levels).
var pulsarKinds = []*kind{kindTenant, kindNamespace, kindTopic, kindFunction, kindSource, kindSink}

// namespaceChildren are the collections under a namespace.
var namespaceChildren = []*kind{kindTopic, kindFunction, kindSource, kindSink}

// pulsarDepth is the level of a Pulsar kind: 0 tenants, 1 namespaces, 2
// the namespaces' children.
func pulsarDepth(k *kind) int {
	switch k {
	case kindTenant:
		return 0
	case kindNamespace:
		return 1
	}
	return 2
}

// pulsarCollections are the store kinds of pulsarKinds.
func pulsarCollections() []string {
	out := make([]string, len(pulsarKinds))
	for i, k := range pulsarKinds {
		out[i] = k.collection
	}
	return out
}

// clusterOf is the cluster name a Pulsar resource name lies in.
func clusterOf(name string) string {
	segs := strings.SplitN(name, "/", pulsarNameDepths+1)
	if len(segs) < pulsarNameDepths {
		return ""
	}
	return strings.Join(segs[:pulsarNameDepths], "/")
}

// checkPulsarCluster refuses a create under a cluster that does not exist
// (NOT_FOUND) or is being deleted (FAILED_PRECONDITION).
func (s *Server) checkPulsarCluster(ctx context.Context, resource string) error {
	name := clusterOf(resource)
	obj, err := s.store.Get(ctx, kindCluster.collection, name)
	if err != nil {
		return s.toStatus(err, name)
	}
	m, _, err := decode(kindCluster, obj)
	if err != nil {
		return s.toStatus(err, name)
	}
	if m.(*cpv1.Cluster).GetState() == cpv1.Cluster_DELETING {
		return status.Errorf(codes.FailedPrecondition, "%s: cluster is being deleted", name)
	}
	return nil
}

// markPending resets the agent-owned status of a Pulsar resource whose
// desired state was written.
func markPending(m proto.Message) {
	setPulsarStatus(m, cpv1.PulsarResourceState_PENDING, "")
}

// setPulsarStatus sets state and status_message of a Tenant, Namespace,
// Topic, PulsarFunction, PulsarSource or PulsarSink and says whether they
// changed.
func setPulsarStatus(m proto.Message, st cpv1.PulsarResourceState, msg string) bool {
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	sf, mf := fields.ByName("state"), fields.ByName("status_message")
	changed := r.Get(sf).Enum() != protoreflect.EnumNumber(st) || r.Get(mf).String() != msg
	r.Set(sf, protoreflect.ValueOfEnum(protoreflect.EnumNumber(st)))
	r.Set(mf, protoreflect.ValueOfString(msg))
	return changed
}

// removeEmpty deletes a Pulsar resource after checking it has no children
// of the kinds children.
func (s *Server) removeEmpty(ctx context.Context, k *kind, children []*kind, name, etag string) error {
	return s.remove(ctx, k, name, etag, func(w store.Writer, _ proto.Message) error {
		for _, child := range children {
			n, err := w.Count(ctx, store.ListQuery{Kind: child.collection, Parent: name})
			if err != nil {
				return err
			}
			if n > 0 {
				return status.Errorf(codes.FailedPrecondition, "%s: has %d %s; delete them first", name, n, child.collection)
			}
		}
		return nil
	})
}

// createPulsar creates a Pulsar resource as PENDING.
func (s *Server) createPulsar(ctx context.Context, k *kind, parent, id, requestID string, msg proto.Message, validate func(r resName) error) (store.Object, error) {
	markPending(msg)
	return s.create(ctx, createReq{
		k: k, parent: parent, id: id, msg: msg, requestID: requestID,
		validate: func(r resName) error {
			if err := validate(r); err != nil {
				return err
			}
			return s.checkPulsarCluster(ctx, r.name)
		},
	})
}

// ---- Tenants ----

type tenants struct {
	cpv1.UnimplementedTenantsServer
	s *Server
}

func validateTenant(t *cpv1.Tenant) error {
	if len(t.GetAdminRoles()) > maxAdminRoles {
		return invalid("tenant.admin_roles", "at most %d roles", maxAdminRoles)
	}
	for i, r := range t.GetAdminRoles() {
		if r == "" || len(r) > maxRoleLen || strings.TrimSpace(r) != r {
			return invalid(fmt.Sprintf("tenant.admin_roles[%d]", i), "must be 1 to %d characters without surrounding spaces", maxRoleLen)
		}
	}
	return nil
}

func (t tenants) GetTenant(ctx context.Context, req *cpv1.GetTenantRequest) (*cpv1.Tenant, error) {
	m, err := t.s.get(ctx, kindTenant, req.GetName())
	return as[*cpv1.Tenant](m), err
}

func (t tenants) ListTenants(ctx context.Context, req *cpv1.ListTenantsRequest) (*cpv1.ListTenantsResponse, error) {
	ms, next, err := t.s.list(ctx, kindTenant, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListTenantsResponse{Tenants: asAll[*cpv1.Tenant](ms), NextPageToken: next}, err
}

func (t tenants) CreateTenant(ctx context.Context, req *cpv1.CreateTenantRequest) (*cpv1.Tenant, error) {
	tn := req.GetTenant()
	if tn == nil {
		tn = &cpv1.Tenant{}
	}
	obj, err := t.s.createPulsar(ctx, kindTenant, req.GetParent(), req.GetTenantId(), req.GetRequestId(), tn,
		func(resName) error { return validateTenant(tn) })
	return decodeAs[*cpv1.Tenant](t.s, kindTenant, obj, err)
}

func (t tenants) UpdateTenant(ctx context.Context, req *cpv1.UpdateTenantRequest) (*cpv1.Tenant, error) {
	m, err := t.s.update(ctx, kindTenant, nilIfNil(req.GetTenant()), req.GetUpdateMask(), nil, func(_ store.Writer, _, merged proto.Message) error {
		if err := validateTenant(merged.(*cpv1.Tenant)); err != nil {
			return err
		}
		markPending(merged)
		return nil
	})
	return as[*cpv1.Tenant](m), err
}

func (t tenants) DeleteTenant(ctx context.Context, req *cpv1.DeleteTenantRequest) (*emptypb.Empty, error) {
	return empty(t.s.removeEmpty(ctx, kindTenant, []*kind{kindNamespace}, req.GetName(), req.GetEtag()))
}

// ---- Namespaces ----

type namespaces struct {
	cpv1.UnimplementedNamespacesServer
	s *Server
}

// validatePolicies checks a namespace's policies; org is the namespace's
// organization (replication clusters must be in it).
func validatePolicies(p *cpv1.NamespacePolicies, org string) error {
	const f = "namespace.policies."
	if r := p.GetRetention(); r != nil {
		if r.GetTimeMinutes() < -1 {
			return invalid(f+"retention.time_minutes", "must be -1 (unlimited) or more")
		}
		if r.GetSizeMb() < -1 {
			return invalid(f+"retention.size_mb", "must be -1 (unlimited) or more")
		}
	}
	if p.MessageTtlSeconds != nil && p.GetMessageTtlSeconds() < 0 {
		return invalid(f+"message_ttl_seconds", "must not be negative")
	}
	if q := p.GetBacklogQuota(); q != nil {
		if q.GetLimitBytes() < -1 {
			return invalid(f+"backlog_quota.limit_bytes", "must be -1 (unlimited) or more")
		}
		if _, ok := cpv1.NamespacePolicies_BacklogQuota_Policy_name[int32(q.GetPolicy())]; !ok {
			return invalid(f+"backlog_quota.policy", "unknown value %d", q.GetPolicy())
		}
	}
	if a := p.GetAutoTopicCreation(); a != nil && a.GetAllow() {
		switch a.GetType() {
		case cpv1.NamespacePolicies_AutoTopicCreation_PARTITIONED:
			if n := a.GetDefaultPartitions(); n < 1 || n > maxPartitions {
				return invalid(f+"auto_topic_creation.default_partitions", "must be between 1 and %d for PARTITIONED", maxPartitions)
			}
		case cpv1.NamespacePolicies_AutoTopicCreation_NON_PARTITIONED:
			if a.GetDefaultPartitions() != 0 {
				return invalid(f+"auto_topic_creation.default_partitions", "must be 0 for NON_PARTITIONED")
			}
		default:
			return invalid(f+"auto_topic_creation.type", "required (NON_PARTITIONED or PARTITIONED) when allow is true")
		}
	}
	if _, ok := cpv1.NamespacePolicies_SchemaCompatibilityStrategy_name[int32(p.GetSchemaCompatibilityStrategy())]; !ok {
		return invalid(f+"schema_compatibility_strategy", "unknown value %d", p.GetSchemaCompatibilityStrategy())
	}
	if n := p.GetBundles(); n < 0 || n > maxBundles {
		return invalid(f+"bundles", "must be between 0 (default) and %d", maxBundles)
	}
	if len(p.GetReplicationClusters()) > maxReplClusters {
		return invalid(f+"replication_clusters", "at most %d clusters", maxReplClusters)
	}
	seen := map[string]bool{}
	for i, c := range p.GetReplicationClusters() {
		field := fmt.Sprintf("%sreplication_clusters[%d]", f, i)
		r, err := kindCluster.parseName(field, c)
		if err != nil {
			return err
		}
		if r.org != org {
			return invalid(field, "%s is not a cluster of %s", c, org)
		}
		if seen[c] {
			return invalid(field, "%s is listed twice", c)
		}
		seen[c] = true
	}
	return nil
}

func (n namespaces) GetNamespace(ctx context.Context, req *cpv1.GetNamespaceRequest) (*cpv1.Namespace, error) {
	m, err := n.s.get(ctx, kindNamespace, req.GetName())
	return as[*cpv1.Namespace](m), err
}

func (n namespaces) ListNamespaces(ctx context.Context, req *cpv1.ListNamespacesRequest) (*cpv1.ListNamespacesResponse, error) {
	ms, next, err := n.s.list(ctx, kindNamespace, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListNamespacesResponse{Namespaces: asAll[*cpv1.Namespace](ms), NextPageToken: next}, err
}

func (n namespaces) CreateNamespace(ctx context.Context, req *cpv1.CreateNamespaceRequest) (*cpv1.Namespace, error) {
	ns := req.GetNamespace()
	if ns == nil {
		ns = &cpv1.Namespace{}
	}
	if ns.Policies == nil {
		ns.Policies = &cpv1.NamespacePolicies{}
	}
	obj, err := n.s.createPulsar(ctx, kindNamespace, req.GetParent(), req.GetNamespaceId(), req.GetRequestId(), ns,
		func(r resName) error { return validatePolicies(ns.Policies, r.org) })
	return decodeAs[*cpv1.Namespace](n.s, kindNamespace, obj, err)
}

func (n namespaces) UpdateNamespace(ctx context.Context, req *cpv1.UpdateNamespaceRequest) (*cpv1.Namespace, error) {
	m, err := n.s.update(ctx, kindNamespace, nilIfNil(req.GetNamespace()), req.GetUpdateMask(), nil, func(_ store.Writer, old, merged proto.Message) error {
		o, m := old.(*cpv1.Namespace), merged.(*cpv1.Namespace)
		if m.Policies == nil {
			m.Policies = &cpv1.NamespacePolicies{}
		}
		if m.GetPolicies().GetBundles() != o.GetPolicies().GetBundles() {
			return invalid("namespace.policies.bundles", "cannot be changed after creation")
		}
		if o.ReplicationGroup != "" && !slices.Equal(m.GetPolicies().GetReplicationClusters(), o.GetPolicies().GetReplicationClusters()) {
			return status.Errorf(codes.FailedPrecondition, "namespace.policies.replication_clusters: managed by replication group %s; change its members instead", o.ReplicationGroup)
		}
		r, _ := kindNamespace.parseName("namespace.name", o.GetName())
		if err := validatePolicies(m.Policies, r.org); err != nil {
			return err
		}
		markPending(m)
		return nil
	})
	return as[*cpv1.Namespace](m), err
}

func (n namespaces) DeleteNamespace(ctx context.Context, req *cpv1.DeleteNamespaceRequest) (*emptypb.Empty, error) {
	return empty(n.s.removeEmpty(ctx, kindNamespace, namespaceChildren, req.GetName(), req.GetEtag()))
}

// ---- Topics ----

type topics struct {
	cpv1.UnimplementedTopicsServer
	s *Server
}

func (t topics) GetTopic(ctx context.Context, req *cpv1.GetTopicRequest) (*cpv1.Topic, error) {
	m, err := t.s.get(ctx, kindTopic, req.GetName())
	return as[*cpv1.Topic](m), err
}

func (t topics) ListTopics(ctx context.Context, req *cpv1.ListTopicsRequest) (*cpv1.ListTopicsResponse, error) {
	ms, next, err := t.s.list(ctx, kindTopic, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListTopicsResponse{Topics: asAll[*cpv1.Topic](ms), NextPageToken: next}, err
}

func validatePartitions(n int32) error {
	if n < 0 || n > maxPartitions {
		return invalid("topic.partitions", "must be between 0 (non-partitioned) and %d", maxPartitions)
	}
	return nil
}

func (t topics) CreateTopic(ctx context.Context, req *cpv1.CreateTopicRequest) (*cpv1.Topic, error) {
	tp := req.GetTopic()
	if tp == nil {
		tp = &cpv1.Topic{}
	}
	if tp.Persistent == nil {
		tp.Persistent = proto.Bool(true)
	}
	obj, err := t.s.createPulsar(ctx, kindTopic, req.GetParent(), req.GetTopicId(), req.GetRequestId(), tp,
		func(resName) error { return validatePartitions(tp.GetPartitions()) })
	return decodeAs[*cpv1.Topic](t.s, kindTopic, obj, err)
}

func (t topics) UpdateTopic(ctx context.Context, req *cpv1.UpdateTopicRequest) (*cpv1.Topic, error) {
	m, err := t.s.update(ctx, kindTopic, nilIfNil(req.GetTopic()), req.GetUpdateMask(), nil, func(_ store.Writer, old, merged proto.Message) error {
		o, m := old.(*cpv1.Topic), merged.(*cpv1.Topic)
		if err := validatePartitions(m.GetPartitions()); err != nil {
			return err
		}
		switch {
		case o.GetPartitions() == 0 && m.GetPartitions() > 0:
			return invalid("topic.partitions", "a non-partitioned topic cannot be partitioned")
		case m.GetPartitions() < o.GetPartitions():
			return invalid("topic.partitions", "can only be increased (now %d)", o.GetPartitions())
		}
		markPending(m)
		return nil
	})
	return as[*cpv1.Topic](m), err
}

func (t topics) DeleteTopic(ctx context.Context, req *cpv1.DeleteTopicRequest) (*emptypb.Empty, error) {
	return empty(t.s.removeEmpty(ctx, kindTopic, nil, req.GetName(), req.GetEtag()))
}

// ---- Region agents ----

// pulsarKindOf finds the Pulsar kind of a resource name by its shape.
func pulsarKindOf(field, name string) (*kind, resName, error) {
	for _, k := range pulsarKinds {
		if r, err := k.parseName(field, name); err == nil {
			return k, r, nil
		}
	}
	if name == "" {
		return nil, resName{}, invalid(field, "required")
	}
	return nil, resName{}, invalid(field, "%q is not a tenant, namespace, topic, function, source or sink name", name)
}

// pulsarChange wraps a Tenant, Namespace, Topic, PulsarFunction,
// PulsarSource or PulsarSink.
func pulsarChange(m proto.Message, deleted bool, rev int64) *cpv1.PulsarResourceChange {
	c := &cpv1.PulsarResourceChange{Deleted: deleted, Revision: rev}
	switch v := m.(type) {
	case *cpv1.Tenant:
		c.Resource = &cpv1.PulsarResourceChange_Tenant{Tenant: v}
	case *cpv1.Namespace:
		c.Resource = &cpv1.PulsarResourceChange_Namespace{Namespace: v}
	case *cpv1.Topic:
		c.Resource = &cpv1.PulsarResourceChange_Topic{Topic: v}
	case *cpv1.PulsarFunction:
		c.Resource = &cpv1.PulsarResourceChange_Function{Function: v}
	case *cpv1.PulsarSource:
		c.Resource = &cpv1.PulsarResourceChange_Source{Source: v}
	case *cpv1.PulsarSink:
		c.Resource = &cpv1.PulsarResourceChange_Sink{Sink: v}
	}
	return c
}

func pulsarChangeName(c *cpv1.PulsarResourceChange) (string, int) {
	switch r := c.GetResource().(type) {
	case *cpv1.PulsarResourceChange_Tenant:
		return r.Tenant.GetName(), 0
	case *cpv1.PulsarResourceChange_Namespace:
		return r.Namespace.GetName(), 1
	case *cpv1.PulsarResourceChange_Topic:
		return r.Topic.GetName(), 2
	case *cpv1.PulsarResourceChange_Function:
		return r.Function.GetName(), 2
	case *cpv1.PulsarResourceChange_Source:
		return r.Source.GetName(), 2
	case *cpv1.PulsarResourceChange_Sink:
		return r.Sink.GetName(), 2
	}
	return "", 2
}

// sortPulsarChanges orders changes so that applying them in order is
// valid: deletions deepest first, then the others shallowest first, each
// group in revision order.
func sortPulsarChanges(cs []*cpv1.PulsarResourceChange) {
	slices.SortStableFunc(cs, func(a, b *cpv1.PulsarResourceChange) int {
		if a.Deleted != b.Deleted {
			if a.Deleted {
				return -1
			}
			return 1
		}
		_, da := pulsarChangeName(a)
		_, db := pulsarChangeName(b)
		if da != db {
			if a.Deleted {
				return cmp.Compare(db, da)
			}
			return cmp.Compare(da, db)
		}
		return cmp.Compare(a.Revision, b.Revision)
	})
}

// regionOfCluster resolves (and caches in seen) the region of a cluster;
// "" when the cluster no longer exists.
func (s *Server) regionOfCluster(ctx context.Context, cluster string, seen map[string]string) (string, error) {
	if r, ok := seen[cluster]; ok {
		return r, nil
	}
	obj, err := s.store.Get(ctx, kindCluster.collection, cluster)
	if errors.Is(err, store.ErrNotFound) {
		seen[cluster] = ""
		return "", nil
	}
	if err != nil {
		return "", err
	}
	m, _, err := decode(kindCluster, obj)
	if err != nil {
		return "", err
	}
	seen[cluster] = m.(*cpv1.Cluster).GetRegion()
	return seen[cluster], nil
}

// ReportResourceStatus records the region agent's result of applying a
// Pulsar resource. A report that changes nothing writes nothing, so the
// agent's re-application of its own reported resource settles.
func (a regionAgent) ReportResourceStatus(ctx context.Context, req *cpv1.ReportResourceStatusRequest) (*cpv1.PulsarResourceChange, error) {
	k, r, err := pulsarKindOf("name", req.GetName())
	if err != nil {
		return nil, err
	}
	st := req.GetState()
	switch st {
	case cpv1.PulsarResourceState_PENDING, cpv1.PulsarResourceState_APPLIED, cpv1.PulsarResourceState_FAILED:
	case cpv1.PulsarResourceState_PULSAR_RESOURCE_STATE_UNSPECIFIED:
		return nil, invalid("state", "required")
	default:
		return nil, invalid("state", "unknown value %d", st)
	}
	if err := a.s.authorize(ctx, target{kind: k, verb: "reportStatus", res: r}); err != nil {
		return nil, err
	}
	var out *cpv1.PulsarResourceChange
	err = a.s.tx(ctx, func(w store.Writer) error {
		obj, err := w.Get(ctx, k.collection, r.name)
		if err != nil {
			return err
		}
		if req.GetObservedEtag() != "" && req.GetObservedEtag() != obj.Etag {
			return store.ErrEtagMismatch
		}
		m, rec, err := decode(k, obj)
		if err != nil {
			return err
		}
		changed := setPulsarStatus(m, st, req.GetMessage())
		if is := req.GetInstanceStatus(); is != nil && setInstanceStatus(m, is) {
			changed = true
		}
		if !changed {
			out = pulsarChange(m, false, obj.Revision)
			return nil
		}
		if obj.Data, err = rec.encode(m); err != nil {
			return err
		}
		updated, err := w.Update(ctx, obj, obj.Etag)
		if err != nil {
			return err
		}
		um, _, err := decode(k, updated)
		if err != nil {
			return err
		}
		out = pulsarChange(um, false, updated.Revision)
		return audit(ctx, w, r.org, r.name, "")
	})
	if err != nil {
		return nil, a.s.toStatus(err, r.name)
	}
	return out, nil
}

// deletePulsarResources removes every tenant, namespace, topic, function,
// source and sink of a cluster whose data plane is gone, deepest first,
// inside w's transaction.
func deletePulsarResources(ctx context.Context, w store.Writer, cluster string) error {
	type named struct {
		k    *kind
		name string
	}
	parents := []string{cluster}
	var levels [][]named
	for _, ks := range [][]*kind{{kindTenant}, {kindNamespace}, namespaceChildren} {
		var level []named
		for _, k := range ks {
			for _, p := range parents {
				token := ""
				for {
					objs, next, err := w.List(ctx, store.ListQuery{Kind: k.collection, Parent: p, PageSize: 1000, PageToken: token})
					if err != nil {
						return err
					}
					for _, o := range objs {
						level = append(level, named{k, o.Name})
					}
					if next == "" {
						break
					}
					token = next
				}
			}
		}
		levels = append(levels, level)
		parents = parents[:0:0]
		for _, n := range level {
			parents = append(parents, n.name)
		}
	}
	for i := len(levels) - 1; i >= 0; i-- {
		for _, n := range levels[i] {
			if err := w.Delete(ctx, n.k.collection, n.name, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
	}
	return nil
}

// addPulsarChange keeps ch in out (newest per name) when its resource lies
// in a cluster of region.
func (s *Server) addPulsarChange(ctx context.Context, region string, ch store.Change, out map[string]*cpv1.PulsarResourceChange, regionOf map[string]string) error {
	i := slices.IndexFunc(pulsarKinds, func(k *kind) bool { return k.collection == ch.Kind })
	if i < 0 {
		return nil
	}
	reg, err := s.regionOfCluster(ctx, clusterOf(ch.Name), regionOf)
	if err != nil || reg != region {
		return err
	}
	m, _, err := decode(pulsarKinds[i], ch.Object)
	if err != nil {
		return err
	}
	out[ch.Name] = pulsarChange(m, ch.Deleted, ch.Revision)
	return nil
}
