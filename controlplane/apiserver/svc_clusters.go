package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// ---- Regions ----

type regions struct {
	cpv1.UnimplementedRegionsServer
	s *Server
}

func (r regions) GetRegion(ctx context.Context, req *cpv1.GetRegionRequest) (*cpv1.Region, error) {
	m, err := r.s.get(ctx, kindRegion, req.GetName())
	out := as[*cpv1.Region](m)
	r.s.fillConsul(out)
	return out, err
}

func (r regions) ListRegions(ctx context.Context, req *cpv1.ListRegionsRequest) (*cpv1.ListRegionsResponse, error) {
	ms, next, err := r.s.list(ctx, kindRegion, "", req.GetPageSize(), req.GetPageToken())
	out := asAll[*cpv1.Region](ms)
	r.s.fillConsul(out...)
	return &cpv1.ListRegionsResponse{Regions: out, NextPageToken: next}, err
}

func (r regions) CreateRegion(ctx context.Context, req *cpv1.CreateRegionRequest) (*cpv1.Region, error) {
	reg := req.GetRegion()
	if reg == nil {
		reg = &cpv1.Region{}
	}
	reg.Status = nil // reported by the region's agent only
	obj, err := r.s.create(ctx, createReq{k: kindRegion, id: req.GetRegionId(), msg: reg, requestID: req.GetRequestId()})
	return decodeAs[*cpv1.Region](r.s, kindRegion, obj, err)
}

func (r regions) UpdateRegion(ctx context.Context, req *cpv1.UpdateRegionRequest) (*cpv1.Region, error) {
	m, err := r.s.update(ctx, kindRegion, nilIfNil(req.GetRegion()), req.GetUpdateMask(), nil, nil)
	return as[*cpv1.Region](m), err
}

func (r regions) DeleteRegion(ctx context.Context, req *cpv1.DeleteRegionRequest) (*emptypb.Empty, error) {
	return empty(r.s.remove(ctx, kindRegion, req.GetName(), req.GetEtag(), nil))
}

// ---- Clusters ----

type clusters struct {
	cpv1.UnimplementedClustersServer
	s *Server
}

const maxClusterNodes = 64

func validateSize(size *cpv1.ClusterSize) error {
	if n := size.GetBrokers(); n < 1 || n > maxClusterNodes {
		return invalid("cluster.size.brokers", "must be between 1 and %d", maxClusterNodes)
	}
	if n := size.GetBookies(); n < 1 || n > maxClusterNodes {
		return invalid("cluster.size.bookies", "must be between 1 and %d", maxClusterNodes)
	}
	return nil
}

// operationName is the name of a new operation; a create with a request_id
// gets a name derived from it, so a replay finds its operation.
func operationName(collection, requestID string) string {
	if requestID == "" {
		return kindOperation.collection + "/" + randomToken(10)
	}
	sum := sha256.Sum256([]byte(collection + "\x00" + requestID))
	return kindOperation.collection + "/" + hex.EncodeToString(sum[:10])
}

func (c clusters) GetCluster(ctx context.Context, req *cpv1.GetClusterRequest) (*cpv1.Cluster, error) {
	m, err := c.s.get(ctx, kindCluster, req.GetName())
	cl := as[*cpv1.Cluster](m)
	if cl != nil {
		c.s.explainWaiting(ctx, []*cpv1.Cluster{cl})
	}
	return cl, err
}

func (c clusters) ListClusters(ctx context.Context, req *cpv1.ListClustersRequest) (*cpv1.ListClustersResponse, error) {
	ms, next, err := c.s.list(ctx, kindCluster, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	cls := asAll[*cpv1.Cluster](ms)
	c.s.explainWaiting(ctx, cls)
	return &cpv1.ListClustersResponse{Clusters: cls, NextPageToken: next}, err
}

// agentSilentAfter is how long a region may go without a heartbeat before
// the clusters waiting on its agent say so: three of the agents' default
// heartbeat periods.
const agentSilentAfter = 30 * time.Second

// explainWaiting fills the status message of clusters that wait on their
// region's agent (being created, updated or deleted) when that agent has
// never reported or has gone silent, so the caller learns why nothing
// happens. The message is computed on read, never stored.
func (s *Server) explainWaiting(ctx context.Context, cls []*cpv1.Cluster) {
	seen := map[string]string{}
	for _, cl := range cls {
		switch cl.State {
		case cpv1.Cluster_CREATING, cpv1.Cluster_UPDATING, cpv1.Cluster_DELETING:
		default:
			continue
		}
		if cl.StatusMessage != "" {
			continue
		}
		why, ok := seen[cl.Region]
		if !ok {
			why = s.agentSilence(ctx, cl.Region)
			seen[cl.Region] = why
		}
		cl.StatusMessage = why
	}
}

// agentSilence says why region's agent is not doing work, "" when it
// heartbeats.
func (s *Server) agentSilence(ctx context.Context, region string) string {
	obj, err := s.store.Get(ctx, kindRegion.collection, region)
	if err != nil {
		return ""
	}
	m, _, err := decode(kindRegion, obj)
	if err != nil {
		return ""
	}
	last := m.(*cpv1.Region).GetStatus().GetLastHeartbeat()
	id := strings.TrimPrefix(region, "regions/")
	if last == nil {
		return fmt.Sprintf("waiting for the agent of %s, which has never reported: run `magnetar agent --region %s ...` (or `magnetar up` with the region)", region, id)
	}
	if since := time.Since(last.AsTime()); since > agentSilentAfter {
		return fmt.Sprintf("waiting for the agent of %s: its last heartbeat was %s ago", region, since.Round(time.Second))
	}
	return ""
}

// CreateCluster stores the cluster as CREATING with a PENDING operation
// that the region agent's READY report completes.
func (c clusters) CreateCluster(ctx context.Context, req *cpv1.CreateClusterRequest) (*cpv1.Operation, error) {
	opName := operationName(kindCluster.collection, req.GetRequestId())
	if req.GetRequestId() != "" {
		// A replay is answered before admission: the first call was admitted.
		if op, err := c.s.replayedOperation(ctx, opName, req.GetParent()+"/clusters/"+req.GetClusterId()); op != nil || err != nil {
			return op, err
		}
	}
	cl := req.GetCluster()
	if cl == nil {
		cl = &cpv1.Cluster{}
	}
	if cl.Size == nil {
		cl.Size = &cpv1.ClusterSize{}
	}
	if cl.Size.Brokers == 0 {
		cl.Size.Brokers = 1
	}
	if cl.Size.Bookies == 0 {
		cl.Size.Bookies = 1
	}
	cl.State, cl.Operation = cpv1.Cluster_CREATING, opName
	cl.ServiceUrl, cl.AdminUrl, cl.StatusMessage = "", "", ""
	cl.TlsServiceUrl, cl.TlsAdminUrl, cl.CaCertificate = "", "", ""
	_, err := c.s.create(ctx, createReq{
		k: kindCluster, parent: req.GetParent(), id: req.GetClusterId(), msg: cl, requestID: req.GetRequestId(),
		attrs: map[string]any{"region": cl.GetRegion()},
		validate: func(resName) error {
			if _, err := kindRegion.parseName("cluster.region", cl.GetRegion()); err != nil {
				return err
			}
			if _, err := c.s.store.Get(ctx, kindRegion.collection, cl.GetRegion()); errors.Is(err, store.ErrNotFound) {
				return invalid("cluster.region", "%s does not exist", cl.GetRegion())
			} else if err != nil {
				return err
			}
			return validateSize(cl.Size)
		},
		extra: func(w store.Writer, obj store.Object) error {
			op := &cpv1.Operation{Name: opName, Type: "CreateCluster", Target: obj.Name, State: cpv1.Operation_PENDING}
			return createOperation(ctx, w, op, obj.Org)
		},
	})
	if err != nil {
		return nil, err
	}
	return c.s.readOperation(ctx, opName)
}

// replayedOperation returns the operation of an earlier create with the
// same request id, if the caller may see it; (nil, nil) when there is none.
func (s *Server) replayedOperation(ctx context.Context, opName, wantTarget string) (*cpv1.Operation, error) {
	obj, err := s.store.Get(ctx, kindOperation.collection, opName)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, s.toStatus(err, "")
	}
	if err := s.authorize(ctx, opTarget(obj, "get")); err != nil {
		return nil, err
	}
	m, rec, err := decode(kindOperation, obj)
	if err != nil {
		return nil, s.toStatus(err, opName)
	}
	op := m.(*cpv1.Operation)
	if op.GetTarget() != wantTarget {
		return nil, reusedRequestID(op.GetTarget())
	}
	if err := checkReplay(ctx, rec, op.GetTarget()); err != nil {
		return nil, err
	}
	return op, nil
}

func (s *Server) readOperation(ctx context.Context, name string) (*cpv1.Operation, error) {
	obj, err := s.store.Get(ctx, kindOperation.collection, name)
	if err != nil {
		return nil, s.toStatus(err, name)
	}
	m, _, err := decode(kindOperation, obj)
	return as[*cpv1.Operation](m), s.toStatus(err, name)
}

func createOperation(ctx context.Context, w store.Writer, op *cpv1.Operation, org string) error {
	data, err := record{RequestSHA256: requestFingerprint(ctx)}.encode(op)
	if err != nil {
		return err
	}
	_, err = w.Create(ctx, store.Object{Kind: kindOperation.collection, Name: op.Name, Org: org, Data: data}, "")
	return err
}

// finishOperation records an operation's end. An operation already done is
// left alone.
func finishOperation(ctx context.Context, w store.Writer, name string, state cpv1.Operation_State, code codes.Code, msg string, response proto.Message) error {
	return changeOperation(ctx, w, name, func(op *cpv1.Operation) error {
		op.State, op.Done, op.EndTime = state, true, timestamppb.Now()
		if code != codes.OK {
			op.Error = &cpv1.OperationError{Code: int32(code), Message: msg}
		}
		if response != nil {
			raw, err := protojson.Marshal(response)
			if err != nil {
				return err
			}
			st := &structpb.Struct{}
			if err := protojson.Unmarshal(raw, st); err != nil {
				return err
			}
			op.Response = st
		}
		return nil
	})
}

func changeOperation(ctx context.Context, w store.Writer, name string, fn func(op *cpv1.Operation) error) error {
	if name == "" {
		return nil
	}
	obj, err := w.Get(ctx, kindOperation.collection, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	m, _, err := decode(kindOperation, obj)
	if err != nil {
		return err
	}
	op := m.(*cpv1.Operation)
	if op.Done {
		return nil
	}
	if err := fn(op); err != nil {
		return err
	}
	if obj.Data, err = reencode(obj, op); err != nil {
		return err
	}
	_, err = w.Update(ctx, obj, obj.Etag)
	return err
}

// UpdateCluster changes display_name, deletion_protection and size. A size
// change goes to the region agent (UPDATING, PENDING operation); other
// changes are done at once (the operation is returned done).
func (c clusters) UpdateCluster(ctx context.Context, req *cpv1.UpdateClusterRequest) (*cpv1.Operation, error) {
	opName := operationName("", "")
	_, err := c.s.update(ctx, kindCluster, nilIfNil(req.GetCluster()), req.GetUpdateMask(), nil, func(w store.Writer, old, merged proto.Message) error {
		o, m := old.(*cpv1.Cluster), merged.(*cpv1.Cluster)
		if o.State == cpv1.Cluster_DELETING {
			return status.Error(codes.FailedPrecondition, "cluster: is being deleted")
		}
		if err := validateSize(m.Size); err != nil {
			return err
		}
		op := &cpv1.Operation{Name: opName, Type: "UpdateCluster", Target: o.Name, State: cpv1.Operation_PENDING}
		if !proto.Equal(o.Size, m.Size) {
			if o.Operation != "" {
				return status.Errorf(codes.FailedPrecondition, "cluster: operation %s is in progress", o.Operation)
			}
			m.State, m.Operation = cpv1.Cluster_UPDATING, opName
		} else {
			resp := proto.Clone(m).(*cpv1.Cluster)
			resp.Etag = ""
			op.State, op.Done, op.EndTime = cpv1.Operation_SUCCEEDED, true, timestamppb.Now()
			raw, _ := protojson.Marshal(resp)
			op.Response = &structpb.Struct{}
			if err := protojson.Unmarshal(raw, op.Response); err != nil {
				return err
			}
		}
		r, _ := kindCluster.parseName("name", o.Name)
		return createOperation(ctx, w, op, r.org)
	})
	if err != nil {
		return nil, err
	}
	return c.s.readOperation(ctx, opName)
}

// DeleteCluster marks the cluster DELETING; the region agent's DELETED
// report removes it and completes the operation.
func (c clusters) DeleteCluster(ctx context.Context, req *cpv1.DeleteClusterRequest) (*cpv1.Operation, error) {
	r, err := kindCluster.parseName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if err := c.s.authorize(ctx, target{kind: kindCluster, verb: "delete", res: r}); err != nil {
		return nil, err
	}
	opName := operationName("", "")
	err = c.s.tx(ctx, func(w store.Writer) error {
		obj, err := w.Get(ctx, kindCluster.collection, r.name)
		if err != nil {
			return err
		}
		if req.GetEtag() != "" && req.GetEtag() != obj.Etag {
			return store.ErrEtagMismatch
		}
		m, rec, err := decode(kindCluster, obj)
		if err != nil {
			return err
		}
		cl := m.(*cpv1.Cluster)
		if cl.DeletionProtection {
			return status.Error(codes.FailedPrecondition, "cluster.deletion_protection: is true; set it to false before deleting the cluster")
		}
		if cl.State == cpv1.Cluster_DELETING && cl.Operation != "" {
			opName = cl.Operation // already being deleted
			return nil
		}
		if err := finishOperation(ctx, w, cl.Operation, cpv1.Operation_CANCELLED, codes.Canceled, "superseded by DeleteCluster", nil); err != nil {
			return err
		}
		cl.State, cl.Operation = cpv1.Cluster_DELETING, opName
		if obj.Data, err = rec.encode(cl); err != nil {
			return err
		}
		if _, err := w.Update(ctx, obj, obj.Etag); err != nil {
			return err
		}
		op := &cpv1.Operation{Name: opName, Type: "DeleteCluster", Target: r.name, State: cpv1.Operation_PENDING}
		if err := createOperation(ctx, w, op, r.org); err != nil {
			return err
		}
		return audit(ctx, w, r.org, r.name, "")
	})
	if err != nil {
		return nil, c.s.toStatus(err, r.name)
	}
	return c.s.readOperation(ctx, opName)
}

// ---- Operations ----

type operations struct {
	cpv1.UnimplementedOperationsServer
	s *Server
}

// opTarget presents an operation to the policy as a resource of its
// organization: "<org>/operations/<id>".
func opTarget(obj store.Object, verb string) target {
	r, _ := kindOperation.parseName("name", obj.Name)
	if obj.Org != "" {
		r.name, r.parent, r.org = obj.Org+"/"+obj.Name, obj.Org, obj.Org
	}
	return target{kind: kindOperation, verb: verb, res: r}
}

// loadOperation reads and authorizes an operation.
func (s *Server) loadOperation(ctx context.Context, name, verb string) (store.Object, *cpv1.Operation, error) {
	if _, err := kindOperation.parseName("name", name); err != nil {
		return store.Object{}, nil, err
	}
	obj, err := s.store.Get(ctx, kindOperation.collection, name)
	if err != nil {
		return obj, nil, s.toStatus(err, name)
	}
	if err := s.authorize(ctx, opTarget(obj, verb)); err != nil {
		return obj, nil, err
	}
	m, _, err := decode(kindOperation, obj)
	return obj, as[*cpv1.Operation](m), s.toStatus(err, name)
}

func (o operations) GetOperation(ctx context.Context, req *cpv1.GetOperationRequest) (*cpv1.Operation, error) {
	_, op, err := o.s.loadOperation(ctx, req.GetName(), "get")
	return op, err
}

func (o operations) ListOperations(ctx context.Context, req *cpv1.ListOperationsRequest) (*cpv1.ListOperationsResponse, error) {
	c := callerFrom(ctx)
	org := req.GetOrganization()
	if org == "" && !c.operator() {
		org = c.org
	}
	var res resName
	if org != "" {
		r, err := kindOrganization.parseName("organization", org)
		if err != nil {
			return nil, err
		}
		res = resName{parent: r.name, org: r.org}
	}
	if err := checkPageSize(req.GetPageSize()); err != nil {
		return nil, err
	}
	if err := o.s.authorize(ctx, target{kind: kindOperation, verb: "list", res: res}); err != nil {
		return nil, err
	}
	objs, next, err := o.s.store.List(ctx, store.ListQuery{Kind: kindOperation.collection, Org: org, PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, o.s.toStatus(err, "")
	}
	resp := &cpv1.ListOperationsResponse{NextPageToken: next}
	for _, obj := range objs {
		m, _, err := decode(kindOperation, obj)
		if err != nil {
			return nil, o.s.toStatus(err, obj.Name)
		}
		op := m.(*cpv1.Operation)
		if (req.GetTarget() == "" || op.Target == req.GetTarget()) && (req.GetState() == 0 || op.State == req.GetState()) {
			resp.Operations = append(resp.Operations, op)
		}
	}
	return resp, nil
}

const (
	defaultWait = 60 * time.Second
	maxWait     = 10 * time.Minute
	pollEvery   = time.Second // catches writes by other control-plane replicas
)

func waitTimeout(field string, d *durationpb.Duration, def, max time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	if !d.IsValid() || d.AsDuration() < 0 {
		return 0, invalid(field, "must be a non-negative duration")
	}
	t := d.AsDuration()
	if t == 0 {
		return def, nil
	}
	return min(t, max), nil
}

func (o operations) WaitOperation(ctx context.Context, req *cpv1.WaitOperationRequest) (*cpv1.Operation, error) {
	timeout, err := waitTimeout("timeout", req.GetTimeout(), defaultWait, maxWait)
	if err != nil {
		return nil, err
	}
	if _, _, err := o.s.loadOperation(ctx, req.GetName(), "wait"); err != nil {
		return nil, err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		wake := o.s.changed.wait()
		op, err := o.s.readOperation(ctx, req.GetName())
		if err != nil || op.Done {
			return op, err
		}
		select {
		case <-wake:
		case <-time.After(pollEvery):
		case <-timer.C:
			return op, nil
		case <-o.s.stopping:
			return op, nil
		case <-ctx.Done():
			return nil, o.s.toStatus(ctx.Err(), "")
		}
	}
}

// CancelOperation cancels a pending create or update; cancelling a
// cluster's creation marks the cluster for deletion. Deletions cannot be
// cancelled; a done operation is returned unchanged.
func (o operations) CancelOperation(ctx context.Context, req *cpv1.CancelOperationRequest) (*cpv1.Operation, error) {
	obj, op, err := o.s.loadOperation(ctx, req.GetName(), "cancel")
	if err != nil || op.Done {
		return op, err
	}
	if op.Type == "DeleteCluster" {
		return nil, status.Error(codes.FailedPrecondition, "operation: a deletion cannot be cancelled")
	}
	err = o.s.tx(ctx, func(w store.Writer) error {
		if err := finishOperation(ctx, w, op.Name, cpv1.Operation_CANCELLED, codes.Canceled, "cancelled by "+callerFrom(ctx).name, nil); err != nil {
			return err
		}
		cobj, err := w.Get(ctx, kindCluster.collection, op.Target)
		if err == nil {
			m, rec, err := decode(kindCluster, cobj)
			if err != nil {
				return err
			}
			cl := m.(*cpv1.Cluster)
			if cl.Operation == op.Name {
				cl.Operation = ""
				if op.Type == "CreateCluster" {
					cl.State = cpv1.Cluster_DELETING
				}
				if cobj.Data, err = rec.encode(cl); err != nil {
					return err
				}
				if _, err := w.Update(ctx, cobj, cobj.Etag); err != nil {
					return err
				}
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return audit(ctx, w, obj.Org, op.Name, "")
	})
	if err != nil {
		return nil, o.s.toStatus(err, op.Name)
	}
	return o.s.readOperation(ctx, op.Name)
}

// ---- Region agents ----

type regionAgent struct {
	cpv1.UnimplementedRegionAgentServer
	s *Server
}

const (
	defaultWatch = 30 * time.Second
	maxWatch     = 5 * time.Minute
	watchBatch   = 500
)

// WatchDesiredState follows the store's change log of clusters and of
// their Pulsar tenants, namespaces and topics, keeping the region's and the
// newest entry per resource. Status reports change
// clusters too, so an agent also sees the effect of its own reports; it
// reconciles on the desired fields (size, state DELETING, deletion).
// after_revision 0 replays the whole log.
func (a regionAgent) WatchDesiredState(ctx context.Context, req *cpv1.WatchDesiredStateRequest) (*cpv1.WatchDesiredStateResponse, error) {
	r, err := kindRegion.parseName("region", req.GetRegion())
	if err != nil {
		return nil, err
	}
	timeout, err := waitTimeout("timeout", req.GetTimeout(), defaultWatch, maxWatch)
	if err != nil {
		return nil, err
	}
	if req.GetAfterRevision() < 0 {
		return nil, invalid("after_revision", "must not be negative")
	}
	if err := a.s.authorize(ctx, target{kind: kindRegion, verb: "watchDesiredState", res: r}); err != nil {
		return nil, err
	}
	if _, err := a.s.store.Get(ctx, kindRegion.collection, r.name); err != nil {
		return nil, a.s.toStatus(err, r.name)
	}
	after := req.GetAfterRevision()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		wake := a.s.changed.wait()
		changes, err := a.s.store.Changes(ctx, after, watchBatch, append([]string{kindCluster.collection}, pulsarCollections()...)...)
		if err != nil {
			return nil, a.s.toStatus(err, "")
		}
		resp := &cpv1.WatchDesiredStateResponse{}
		index, peerIndex := map[string]int{}, map[string]int{}
		pulsar := map[string]*cpv1.PulsarResourceChange{}
		regionOf := map[string]string{}
		for _, ch := range changes {
			after = ch.Revision
			if ch.Kind != kindCluster.collection {
				if err := a.s.addPulsarChange(ctx, r.name, ch, pulsar, regionOf); err != nil {
					return nil, a.s.toStatus(err, ch.Name)
				}
				continue
			}
			m, _, err := decode(kindCluster, ch.Object)
			if err != nil {
				return nil, a.s.toStatus(err, ch.Name)
			}
			cl := m.(*cpv1.Cluster)
			cc := &cpv1.ClusterChange{Cluster: cl, Deleted: ch.Deleted, Revision: ch.Revision}
			if cl.Region != r.name {
				// A peer: namespaces here may replicate to it.
				if i, ok := peerIndex[ch.Name]; ok {
					resp.PeerChanges[i] = cc
				} else {
					peerIndex[ch.Name] = len(resp.PeerChanges)
					resp.PeerChanges = append(resp.PeerChanges, cc)
				}
				continue
			}
			if i, ok := index[ch.Name]; ok {
				resp.Changes[i] = cc
			} else {
				index[ch.Name] = len(resp.Changes)
				resp.Changes = append(resp.Changes, cc)
			}
		}
		for _, pc := range pulsar {
			resp.PulsarChanges = append(resp.PulsarChanges, pc)
		}
		sortPulsarChanges(resp.PulsarChanges)
		resp.Revision = after
		if len(resp.Changes) > 0 || len(resp.PulsarChanges) > 0 || len(resp.PeerChanges) > 0 || len(changes) == watchBatch {
			return resp, nil
		}
		select {
		case <-wake:
		case <-time.After(pollEvery):
		case <-timer.C:
			return resp, nil
		case <-a.s.stopping:
			return resp, nil
		case <-ctx.Done():
			return nil, a.s.toStatus(ctx.Err(), "")
		}
	}
}

// ReportClusterStatus applies what a region agent observed and completes
// the cluster's operation.
func (a regionAgent) ReportClusterStatus(ctx context.Context, req *cpv1.ReportClusterStatusRequest) (*cpv1.Cluster, error) {
	r, err := kindCluster.parseName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if req.GetState() == cpv1.ReportClusterStatusRequest_STATE_UNSPECIFIED {
		return nil, invalid("state", "required")
	}
	if err := a.s.authorize(ctx, target{kind: kindCluster, verb: "reportStatus", res: r}); err != nil {
		return nil, err
	}
	var out *cpv1.Cluster
	err = a.s.tx(ctx, func(w store.Writer) error {
		obj, err := w.Get(ctx, kindCluster.collection, r.name)
		if err != nil {
			return err
		}
		m, rec, err := decode(kindCluster, obj)
		if err != nil {
			return err
		}
		cl := m.(*cpv1.Cluster)
		cl.StatusMessage = req.GetMessage()
		opName := cl.Operation
		var finish func(updated *cpv1.Cluster) error
		switch req.GetState() {
		case cpv1.ReportClusterStatusRequest_PROGRESSING:
			finish = func(*cpv1.Cluster) error {
				return changeOperation(ctx, w, opName, func(op *cpv1.Operation) error {
					op.State = cpv1.Operation_RUNNING
					return nil
				})
			}
		case cpv1.ReportClusterStatusRequest_READY:
			if cl.State != cpv1.Cluster_DELETING {
				cl.State, cl.Operation = cpv1.Cluster_READY, ""
				cl.ServiceUrl, cl.AdminUrl = req.GetServiceUrl(), req.GetAdminUrl()
				cl.TlsServiceUrl, cl.TlsAdminUrl, cl.CaCertificate = req.GetTlsServiceUrl(), req.GetTlsAdminUrl(), req.GetCaCertificate()
				finish = func(updated *cpv1.Cluster) error {
					return finishOperation(ctx, w, opName, cpv1.Operation_SUCCEEDED, codes.OK, "", updated)
				}
			}
		case cpv1.ReportClusterStatusRequest_FAILED:
			cl.State, cl.Operation = cpv1.Cluster_FAILED, ""
			finish = func(*cpv1.Cluster) error {
				return finishOperation(ctx, w, opName, cpv1.Operation_FAILED, codes.Internal, "region agent: "+req.GetMessage(), nil)
			}
		case cpv1.ReportClusterStatusRequest_DELETED:
			if cl.State != cpv1.Cluster_DELETING {
				return status.Error(codes.FailedPrecondition, "state: cluster is not being deleted")
			}
			if err := deletePulsarResources(ctx, w, r.name); err != nil {
				return err
			}
			if err := w.Delete(ctx, kindCluster.collection, r.name, obj.Etag); err != nil {
				return err
			}
			if err := finishOperation(ctx, w, opName, cpv1.Operation_SUCCEEDED, codes.OK, "", nil); err != nil {
				return err
			}
			cl.Operation = ""
			out = cl
			return audit(ctx, w, r.org, r.name, "")
		default:
			return invalid("state", "unknown value %d", req.GetState())
		}
		if obj.Data, err = rec.encode(cl); err != nil {
			return err
		}
		updated, err := w.Update(ctx, obj, obj.Etag)
		if err != nil {
			return err
		}
		um, _, err := decode(kindCluster, updated)
		if err != nil {
			return err
		}
		out = um.(*cpv1.Cluster)
		if finish != nil {
			if err := finish(out); err != nil {
				return err
			}
		}
		return audit(ctx, w, r.org, r.name, "")
	})
	if err != nil {
		return nil, a.s.toStatus(err, r.name)
	}
	return out, nil
}

// Heartbeat records a region's health. Heartbeats are not audited: they
// change only the status the agent owns, and would flood the log.
func (a regionAgent) Heartbeat(ctx context.Context, req *cpv1.HeartbeatRequest) (*cpv1.Region, error) {
	r, err := kindRegion.parseName("region", req.GetRegion())
	if err != nil {
		return nil, err
	}
	if err := a.s.authorize(ctx, target{kind: kindRegion, verb: "heartbeat", res: r}); err != nil {
		return nil, err
	}
	var out *cpv1.Region
	err = a.s.tx(ctx, func(w store.Writer) error {
		obj, err := w.Get(ctx, kindRegion.collection, r.name)
		if err != nil {
			return err
		}
		m, rec, err := decode(kindRegion, obj)
		if err != nil {
			return err
		}
		reg := m.(*cpv1.Region)
		reg.Status = &cpv1.RegionStatus{State: req.GetStatus().GetState(), Message: req.GetStatus().GetMessage(), LastHeartbeat: timestamppb.Now()}
		if obj.Data, err = rec.encode(reg); err != nil {
			return err
		}
		updated, err := w.Update(ctx, obj, obj.Etag)
		if err != nil {
			return err
		}
		um, _, err := decode(kindRegion, updated)
		out = as[*cpv1.Region](um)
		return err
	})
	return out, a.s.toStatus(err, r.name)
}
