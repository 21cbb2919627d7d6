package apiserver

import (
	"context"
	"encoding/pem"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// Replication groups. A group's desired state is materialized into the
// Tenant and Namespace resources of its members inside the transaction that
// changes the group (syncGroupNamespaces): every member gets the group's
// namespaces with replication clusters set to the members, the group's name
// in replication_group and, for fenced members, fenced_to. The region
// agents apply those resources like any other; the replication monitor
// (replmonitor.go) completes the group's operations once they are applied
// and runs the runbooks (runbook.go).

var kindReplicationGroup = &kind{collection: "replicationGroups", field: "replication_group", parent: "organizations",
	newMsg: func() proto.Message { return &cpv1.ReplicationGroup{} },
	updatable: append([]string{"display_name", "members", "namespaces", "replicated_subscriptions", "failover_policy"},
		leafPaths("failover_policy", (&cpv1.FailoverPolicy{}).ProtoReflect().Descriptor())...),
	outputOnly: []string{"active_cluster", "status", "operation", "state", "ca_bundle"}}

const (
	maxGroupMembers        = 8
	maxGroupNamespaces     = 100
	defaultFailoverDelay   = 10 * time.Second
	defaultSwitchBackDelay = 60 * time.Second
)

type replicationGroups struct {
	cpv1.UnimplementedReplicationGroupsServer
	s *Server
}

func (g replicationGroups) GetReplicationGroup(ctx context.Context, req *cpv1.GetReplicationGroupRequest) (*cpv1.ReplicationGroup, error) {
	m, err := g.s.get(ctx, kindReplicationGroup, req.GetName())
	if err != nil {
		return nil, err
	}
	rg := m.(*cpv1.ReplicationGroup)
	g.s.repl.fillStatus(rg)
	if err := g.s.fillCABundle(ctx, rg); err != nil {
		return nil, g.s.toStatus(err, rg.Name)
	}
	return rg, nil
}

func (g replicationGroups) ListReplicationGroups(ctx context.Context, req *cpv1.ListReplicationGroupsRequest) (*cpv1.ListReplicationGroupsResponse, error) {
	ms, next, err := g.s.list(ctx, kindReplicationGroup, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := asAll[*cpv1.ReplicationGroup](ms)
	for _, rg := range out {
		g.s.repl.fillStatus(rg)
		if err := g.s.fillCABundle(ctx, rg); err != nil {
			return nil, g.s.toStatus(err, rg.Name)
		}
	}
	return &cpv1.ListReplicationGroupsResponse{ReplicationGroups: out, NextPageToken: next}, nil
}

// fillCABundle sets rg.CaBundle: every certificate of its members'
// ca_certificate, once each, in member order (a member not found, or
// serving no TLS, adds none).
func (s *Server) fillCABundle(ctx context.Context, rg *cpv1.ReplicationGroup) error {
	var bundle []byte
	seen := map[string]bool{}
	for _, m := range rg.Members {
		obj, err := s.store.Get(ctx, kindCluster.collection, m)
		if errors.Is(err, store.ErrNotFound) {
			continue
		} else if err != nil {
			return err
		}
		cm, _, err := decode(kindCluster, obj)
		if err != nil {
			return err
		}
		rest := []byte(cm.(*cpv1.Cluster).CaCertificate)
		for {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if b.Type != "CERTIFICATE" || seen[string(b.Bytes)] {
				continue
			}
			seen[string(b.Bytes)] = true
			bundle = append(bundle, pem.EncodeToMemory(&pem.Block{Type: b.Type, Bytes: b.Bytes})...)
		}
	}
	rg.CaBundle = string(bundle)
	return nil
}

// validateGroup checks a group's members and namespaces; org is the
// group's organization.
func (s *Server) validateGroup(ctx context.Context, r store.Reader, rg *cpv1.ReplicationGroup, org string) error {
	f := "replication_group."
	if len(rg.Members) < 2 {
		return invalid(f+"members", "at least 2 clusters are required")
	}
	if len(rg.Members) > maxGroupMembers {
		return invalid(f+"members", "at most %d clusters", maxGroupMembers)
	}
	regions := map[string]bool{}
	for i, m := range rg.Members {
		field := f + "members[" + strconv.Itoa(i) + "]"
		cr, err := kindCluster.parseName(field, m)
		if err != nil {
			return err
		}
		if cr.org != org {
			return invalid(field, "%s is not a cluster of %s", m, org)
		}
		if slices.Index(rg.Members, m) != i {
			return invalid(field, "%s is listed twice", m)
		}
		obj, err := r.Get(ctx, kindCluster.collection, m)
		if errors.Is(err, store.ErrNotFound) {
			return invalid(field, "%s does not exist", m)
		} else if err != nil {
			return err
		}
		cm, _, err := decode(kindCluster, obj)
		if err != nil {
			return err
		}
		cl := cm.(*cpv1.Cluster)
		if cl.State == cpv1.Cluster_DELETING {
			return status.Errorf(codes.FailedPrecondition, "%s: cluster is being deleted", m)
		}
		regions[cl.Region] = true
	}
	if len(regions) < 2 {
		return invalid(f+"members", "must be in at least 2 regions")
	}
	if len(rg.Namespaces) > maxGroupNamespaces {
		return invalid(f+"namespaces", "at most %d namespaces", maxGroupNamespaces)
	}
	for i, ns := range rg.Namespaces {
		field := f + "namespaces[" + strconv.Itoa(i) + "]"
		t, n, ok := strings.Cut(ns, "/")
		if !ok || !pulsarIDPattern.MatchString(t) || !pulsarIDPattern.MatchString(n) || strings.Contains(n, "/") {
			return invalid(field, "%q is not a Pulsar namespace (tenant/namespace)", ns)
		}
		if slices.Index(rg.Namespaces, ns) != i {
			return invalid(field, "%s is listed twice", ns)
		}
	}
	fp := rg.GetFailoverPolicy()
	for _, d := range []struct {
		name string
		v    interface{ AsDuration() time.Duration }
		set  bool
	}{{"failover_delay", fp.GetFailoverDelay(), fp.GetFailoverDelay() != nil}, {"switch_back_delay", fp.GetSwitchBackDelay(), fp.GetSwitchBackDelay() != nil}} {
		if d.set && (d.v.AsDuration() < 0 || d.v.AsDuration() > 24*time.Hour) {
			return invalid(f+"failover_policy."+d.name, "must be between 0s and 24h")
		}
	}
	return nil
}

// memberStatus returns rg's status entry of cluster, adding it if missing.
func memberStatus(rg *cpv1.ReplicationGroup, cluster string) *cpv1.MemberStatus {
	if rg.Status == nil {
		rg.Status = &cpv1.ReplicationGroupStatus{}
	}
	for _, m := range rg.Status.Members {
		if m.Cluster == cluster {
			return m
		}
	}
	m := &cpv1.MemberStatus{Cluster: cluster}
	rg.Status.Members = append(rg.Status.Members, m)
	return m
}

// sortStatus puts rg's status entries in the order of rg.Members, the
// failover order.
func sortStatus(rg *cpv1.ReplicationGroup) {
	if rg.Status == nil {
		return
	}
	slices.SortStableFunc(rg.Status.Members, func(a, b *cpv1.MemberStatus) int {
		return slices.Index(rg.Members, a.Cluster) - slices.Index(rg.Members, b.Cluster)
	})
}

// fencedTo is where cluster's producers are sent while it is fenced; "" when
// it is not.
func fencedTo(rg *cpv1.ReplicationGroup, cluster string) string {
	for _, m := range rg.GetStatus().GetMembers() {
		if m.Cluster == cluster {
			return m.FencedTo
		}
	}
	return ""
}

// pruneStatus drops status entries of clusters that are no longer members.
func pruneStatus(rg *cpv1.ReplicationGroup) {
	if rg.Status == nil {
		return
	}
	rg.Status.Members = slices.DeleteFunc(rg.Status.Members, func(m *cpv1.MemberStatus) bool {
		return !slices.Contains(rg.Members, m.Cluster)
	})
}

// syncGroupNamespaces writes the Tenant and Namespace resources that
// realize rg (nil: the group is being deleted) in w's transaction. old is
// the group as it was before (nil on create): namespaces it managed that rg
// no longer covers are released (replication only to their own cluster).
// It reports whether any resource changed.
func syncGroupNamespaces(ctx context.Context, w store.Writer, old, rg *cpv1.ReplicationGroup) (bool, error) {
	changed := false
	want := map[string]*cpv1.ReplicationGroup{} // namespace resource name -> group
	var members []string
	if rg != nil {
		members = slices.Clone(rg.Members)
		for _, m := range rg.Members {
			for _, ns := range rg.Namespaces {
				want[namespaceResource(m, ns)] = rg
			}
		}
	}
	// Create or update what rg covers, in a stable order.
	var names []string
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		cl := clusterOf(name)
		tenant := name[:strings.Index(name, "/namespaces/")]
		if _, err := w.Get(ctx, kindTenant.collection, tenant); errors.Is(err, store.ErrNotFound) {
			t := &cpv1.Tenant{}
			markPending(t)
			data, err := encode(t, "")
			if err != nil {
				return false, err
			}
			tr, _ := kindTenant.parseName("name", tenant)
			if _, err := w.Create(ctx, store.Object{Kind: kindTenant.collection, Name: tenant, Parent: tr.parent, Org: tr.org, UID: randomToken(8), Data: data}, ""); err != nil {
				return false, err
			}
			changed = true
		} else if err != nil {
			return false, err
		}
		desired := func(ns *cpv1.Namespace) {
			if ns.Policies == nil {
				ns.Policies = &cpv1.NamespacePolicies{}
			}
			ns.Policies.ReplicationClusters = members
			ns.ReplicationGroup = rg.Name
			ns.FencedTo = fencedTo(rg, cl)
		}
		obj, err := w.Get(ctx, kindNamespace.collection, name)
		if errors.Is(err, store.ErrNotFound) {
			ns := &cpv1.Namespace{}
			desired(ns)
			markPending(ns)
			data, err := encode(ns, "")
			if err != nil {
				return false, err
			}
			nr, _ := kindNamespace.parseName("name", name)
			if _, err := w.Create(ctx, store.Object{Kind: kindNamespace.collection, Name: name, Parent: nr.parent, Org: nr.org, UID: randomToken(8), Data: data}, ""); err != nil {
				return false, err
			}
			changed = true
			continue
		} else if err != nil {
			return false, err
		}
		m, rec, err := decode(kindNamespace, obj)
		if err != nil {
			return false, err
		}
		ns := m.(*cpv1.Namespace)
		if ns.ReplicationGroup != "" && ns.ReplicationGroup != rg.Name {
			return false, status.Errorf(codes.FailedPrecondition, "%s: already in replication group %s", name, ns.ReplicationGroup)
		}
		before := proto.Clone(ns)
		desired(ns)
		if proto.Equal(before, ns) {
			continue
		}
		markPending(ns)
		if obj.Data, err = rec.encode(ns); err != nil {
			return false, err
		}
		if _, err := w.Update(ctx, obj, obj.Etag); err != nil {
			return false, err
		}
		changed = true
	}
	// Release what old covered and rg does not.
	if old != nil {
		for _, m := range old.Members {
			for _, nsName := range old.Namespaces {
				name := namespaceResource(m, nsName)
				if want[name] != nil {
					continue
				}
				obj, err := w.Get(ctx, kindNamespace.collection, name)
				if errors.Is(err, store.ErrNotFound) {
					continue
				} else if err != nil {
					return false, err
				}
				nm, rec, err := decode(kindNamespace, obj)
				if err != nil {
					return false, err
				}
				ns := nm.(*cpv1.Namespace)
				if ns.ReplicationGroup != old.Name {
					continue
				}
				ns.ReplicationGroup, ns.FencedTo = "", ""
				if ns.Policies == nil {
					ns.Policies = &cpv1.NamespacePolicies{}
				}
				ns.Policies.ReplicationClusters = nil // only its own cluster
				markPending(ns)
				if obj.Data, err = rec.encode(ns); err != nil {
					return false, err
				}
				if _, err := w.Update(ctx, obj, obj.Etag); err != nil {
					return false, err
				}
				changed = true
			}
		}
	}
	return changed, nil
}

// namespaceResource is the Namespace resource name of the Pulsar namespace
// "tenant/ns" in cluster.
func namespaceResource(cluster, ns string) string {
	t, n, _ := strings.Cut(ns, "/")
	return cluster + "/tenants/" + t + "/namespaces/" + n
}

// groupApplied reports whether every namespace resource of rg (or, for a
// deleted group, of old) is applied as the group wants it, and names the
// first one that is not.
func groupApplied(ctx context.Context, r store.Reader, rg *cpv1.ReplicationGroup) (bool, string, error) {
	for _, m := range rg.Members {
		for _, nsName := range rg.Namespaces {
			name := namespaceResource(m, nsName)
			obj, err := r.Get(ctx, kindNamespace.collection, name)
			if errors.Is(err, store.ErrNotFound) {
				return false, name + " does not exist", nil
			} else if err != nil {
				return false, "", err
			}
			nm, _, err := decode(kindNamespace, obj)
			if err != nil {
				return false, "", err
			}
			ns := nm.(*cpv1.Namespace)
			if ns.State != cpv1.PulsarResourceState_APPLIED {
				msg := name + " is " + ns.State.String()
				if ns.StatusMessage != "" {
					msg += ": " + ns.StatusMessage
				}
				return false, msg, nil
			}
		}
	}
	return true, "", nil
}

func (g replicationGroups) CreateReplicationGroup(ctx context.Context, req *cpv1.CreateReplicationGroupRequest) (*cpv1.Operation, error) {
	opName := operationName(kindReplicationGroup.collection, req.GetRequestId())
	if req.GetRequestId() != "" {
		if op, err := g.s.replayedOperation(ctx, opName, req.GetParent()+"/replicationGroups/"+req.GetReplicationGroupId()); op != nil || err != nil {
			return op, err
		}
	}
	rg := req.GetReplicationGroup()
	if rg == nil {
		rg = &cpv1.ReplicationGroup{}
	}
	rg.ActiveCluster, rg.Status, rg.Operation, rg.State, rg.CaBundle = "", nil, opName, cpv1.ReplicationGroup_CREATING, ""
	if rg.Mode == cpv1.ReplicationGroup_MODE_UNSPECIFIED {
		rg.Mode = cpv1.ReplicationGroup_ACTIVE_PASSIVE
	}
	if rg.FailoverPolicy == nil {
		rg.FailoverPolicy = &cpv1.FailoverPolicy{}
	}
	if rg.FailoverPolicy.Mode == cpv1.FailoverPolicy_MODE_UNSPECIFIED {
		rg.FailoverPolicy.Mode = cpv1.FailoverPolicy_MANUAL
	}
	_, err := g.s.create(ctx, createReq{
		k: kindReplicationGroup, parent: req.GetParent(), id: req.GetReplicationGroupId(), msg: rg, requestID: req.GetRequestId(),
		validate: func(r resName) error {
			if err := g.s.validateGroup(ctx, g.s.store, rg, r.org); err != nil {
				return err
			}
			switch rg.Mode {
			case cpv1.ReplicationGroup_ACTIVE_PASSIVE:
				if rg.Primary == "" {
					rg.Primary = rg.Members[0]
				}
				if !slices.Contains(rg.Members, rg.Primary) {
					return invalid("replication_group.primary", "%s is not a member", rg.Primary)
				}
				rg.ActiveCluster = rg.Primary
			case cpv1.ReplicationGroup_ACTIVE_ACTIVE:
				if rg.Primary != "" {
					return invalid("replication_group.primary", "must be empty for ACTIVE_ACTIVE")
				}
				rg.ActiveCluster = rg.Members[0]
			default:
				return invalid("replication_group.mode", "unknown value %d", rg.Mode)
			}
			// The status lists the members in their failover order.
			for _, m := range rg.Members {
				ms := memberStatus(rg, m)
				if rg.Mode == cpv1.ReplicationGroup_ACTIVE_PASSIVE && m != rg.Primary {
					ms.FencedTo = rg.Primary
				}
			}
			return nil
		},
		extra: func(w store.Writer, obj store.Object) error {
			rg.Name = obj.Name
			if _, err := syncGroupNamespaces(ctx, w, nil, rg); err != nil {
				return err
			}
			op := &cpv1.Operation{Name: opName, Type: "CreateReplicationGroup", Target: obj.Name, State: cpv1.Operation_PENDING}
			return createOperation(ctx, w, op, obj.Org)
		},
	})
	if err != nil {
		return nil, err
	}
	return g.s.readOperation(ctx, opName)
}

func (g replicationGroups) UpdateReplicationGroup(ctx context.Context, req *cpv1.UpdateReplicationGroupRequest) (*cpv1.Operation, error) {
	opName := operationName("", "")
	_, err := g.s.update(ctx, kindReplicationGroup, nilIfNil(req.GetReplicationGroup()), req.GetUpdateMask(), nil, func(w store.Writer, old, merged proto.Message) error {
		o, m := old.(*cpv1.ReplicationGroup), merged.(*cpv1.ReplicationGroup)
		if o.Operation != "" {
			return status.Errorf(codes.FailedPrecondition, "replication group: operation %s is in progress", o.Operation)
		}
		r, _ := kindReplicationGroup.parseName("name", o.Name)
		if err := g.s.validateGroup(ctx, w, m, r.org); err != nil {
			return err
		}
		if !slices.Contains(m.Members, m.ActiveCluster) {
			return status.Errorf(codes.FailedPrecondition, "replication_group.members: the active cluster %s cannot be removed; fail over first", m.ActiveCluster)
		}
		if m.Primary != "" && !slices.Contains(m.Members, m.Primary) {
			return status.Errorf(codes.FailedPrecondition, "replication_group.members: the primary %s cannot be removed", m.Primary)
		}
		pruneStatus(m)
		for _, c := range m.Members {
			ms := memberStatus(m, c)
			if m.Mode == cpv1.ReplicationGroup_ACTIVE_PASSIVE && c != m.ActiveCluster && ms.FencedTo == "" {
				ms.FencedTo = m.ActiveCluster // a new passive member
			}
		}
		sortStatus(m)
		op := &cpv1.Operation{Name: opName, Type: "UpdateReplicationGroup", Target: o.Name, State: cpv1.Operation_PENDING}
		changed, err := syncGroupNamespaces(ctx, w, o, m)
		if err != nil {
			return err
		}
		if changed {
			m.State, m.Operation = cpv1.ReplicationGroup_UPDATING, opName
		} else {
			op.State, op.Done, op.EndTime = cpv1.Operation_SUCCEEDED, true, timestamppb.Now()
		}
		return createOperation(ctx, w, op, r.org)
	})
	if err != nil {
		return nil, err
	}
	return g.s.readOperation(ctx, opName)
}

// DeleteReplicationGroup releases the group's namespaces (each replicates
// only to its own cluster again) and marks the group DELETING; the monitor
// removes it once the members have applied that.
func (g replicationGroups) DeleteReplicationGroup(ctx context.Context, req *cpv1.DeleteReplicationGroupRequest) (*cpv1.Operation, error) {
	r, err := kindReplicationGroup.parseName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if err := g.s.authorize(ctx, target{kind: kindReplicationGroup, verb: "delete", res: r}); err != nil {
		return nil, err
	}
	opName := operationName("", "")
	err = g.s.tx(ctx, func(w store.Writer) error {
		obj, err := w.Get(ctx, kindReplicationGroup.collection, r.name)
		if err != nil {
			return err
		}
		if req.GetEtag() != "" && req.GetEtag() != obj.Etag {
			return store.ErrEtagMismatch
		}
		m, rec, err := decode(kindReplicationGroup, obj)
		if err != nil {
			return err
		}
		rg := m.(*cpv1.ReplicationGroup)
		if rg.State == cpv1.ReplicationGroup_DELETING {
			opName = rg.Operation
			return nil
		}
		if rg.Operation != "" {
			return status.Errorf(codes.FailedPrecondition, "replication group: operation %s is in progress", rg.Operation)
		}
		if _, err := syncGroupNamespaces(ctx, w, rg, nil); err != nil {
			return err
		}
		rg.State, rg.Operation = cpv1.ReplicationGroup_DELETING, opName
		if obj.Data, err = rec.encode(rg); err != nil {
			return err
		}
		if _, err := w.Update(ctx, obj, obj.Etag); err != nil {
			return err
		}
		op := &cpv1.Operation{Name: opName, Type: "DeleteReplicationGroup", Target: r.name, State: cpv1.Operation_PENDING}
		if err := createOperation(ctx, w, op, r.org); err != nil {
			return err
		}
		return audit(ctx, w, r.org, r.name, "")
	})
	if err != nil {
		return nil, g.s.toStatus(err, r.name)
	}
	return g.s.readOperation(ctx, opName)
}

// GetFailoverTarget answers the cluster the group's clients should use:
// the active cluster's Pulsar URL over TLS when it serves TLS, its plain
// URL otherwise. Trust files and credentials live on the clients, so the
// TLS and authentication fields stay empty: a client keeps the trust file
// (the group's ca_bundle) and the authentication (a token for the
// organization's audience) it was configured with.
func (g replicationGroups) GetFailoverTarget(ctx context.Context, req *cpv1.GetFailoverTargetRequest) (*cpv1.FailoverTarget, error) {
	m, err := g.s.get(ctx, kindReplicationGroup, req.GetName())
	if err != nil {
		return nil, err
	}
	rg := m.(*cpv1.ReplicationGroup)
	obj, err := g.s.store.Get(ctx, kindCluster.collection, rg.ActiveCluster)
	if err != nil {
		return nil, g.s.toStatus(err, rg.ActiveCluster)
	}
	cm, _, err := decode(kindCluster, obj)
	if err != nil {
		return nil, g.s.toStatus(err, rg.ActiveCluster)
	}
	cl := cm.(*cpv1.Cluster)
	if cl.ServiceUrl == "" {
		return nil, status.Errorf(codes.Unavailable, "%s: the active cluster %s has no service URL yet (%s)", rg.Name, cl.Name, cl.State)
	}
	if cl.TlsServiceUrl != "" {
		return &cpv1.FailoverTarget{ServiceUrl: cl.TlsServiceUrl}, nil
	}
	return &cpv1.FailoverTarget{ServiceUrl: cl.ServiceUrl}, nil
}

// ReportReplicationStatus records an agent's replication observation. It
// is telemetry: kept in memory (replStatus), refreshed every second, never
// stored.
func (a regionAgent) ReportReplicationStatus(ctx context.Context, req *cpv1.ReportReplicationStatusRequest) (*cpv1.ReportReplicationStatusResponse, error) {
	r, err := kindCluster.parseName("cluster", req.GetCluster())
	if err != nil {
		return nil, err
	}
	if err := a.s.authorize(ctx, target{kind: kindCluster, verb: "reportStatus", res: r}); err != nil {
		return nil, err
	}
	a.s.repl.record(r.name, req.GetNamespaces(), time.Now())
	return &cpv1.ReportReplicationStatusResponse{}, nil
}
