package agent

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/regions/pulsaradmin"
)

// adminTimeout bounds the admin calls of one resource.
const adminTimeout = 30 * time.Second

// resourceEntry is the agent's record of one Pulsar tenant, namespace or
// topic. Guarded by Agent.mu.
type resourceEntry struct {
	// change is the newest state the watch (or a report's answer) gave.
	change *cpv1.PulsarResourceChange
	// applied is the desired spec (output-only fields cleared) last applied
	// successfully, and appliedTo the admin URL it was applied to; nil and
	// "" when it must be applied (again).
	applied   proto.Message
	appliedTo string
	// failures counts consecutive failed attempts; notBefore is when the
	// next one may start.
	failures  int
	delay     time.Duration
	notBefore time.Time
	// Functions, sources and sinks: when their instances' status is read
	// next, and the wait after that while some instance does not run.
	nextStatus  time.Time
	statusDelay time.Duration
}

// resourceOf returns the resource of a change, its name and its depth
// (0 tenant, 1 namespace, 2 topic, function, source or sink); nil when the
// change carries none.
func resourceOf(ch *cpv1.PulsarResourceChange) (proto.Message, string, int) {
	switch r := ch.GetResource().(type) {
	case *cpv1.PulsarResourceChange_Tenant:
		return r.Tenant, r.Tenant.GetName(), 0
	case *cpv1.PulsarResourceChange_Namespace:
		return r.Namespace, r.Namespace.GetName(), 1
	case *cpv1.PulsarResourceChange_Topic:
		return r.Topic, r.Topic.GetName(), 2
	case *cpv1.PulsarResourceChange_Function:
		return r.Function, r.Function.GetName(), 2
	case *cpv1.PulsarResourceChange_Source:
		return r.Source, r.Source.GetName(), 2
	case *cpv1.PulsarResourceChange_Sink:
		return r.Sink, r.Sink.GetName(), 2
	}
	return nil, "", -1
}

// hasInstances says whether a change is of a function, source or sink,
// whose instances' status the agent reads and reports.
func hasInstances(ch *cpv1.PulsarResourceChange) bool {
	switch ch.GetResource().(type) {
	case *cpv1.PulsarResourceChange_Function, *cpv1.PulsarResourceChange_Source, *cpv1.PulsarResourceChange_Sink:
		return true
	}
	return false
}

// instanceStatusOf is the recorded status of a function, source or sink.
func instanceStatusOf(m proto.Message) *cpv1.FunctionInstanceStatus {
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("status")
	if fd == nil || !r.Has(fd) {
		return nil
	}
	is, _ := r.Get(fd).Message().Interface().(*cpv1.FunctionInstanceStatus)
	return is
}

// clusterOf is the cluster part ("organizations/o/clusters/c") of a Pulsar
// resource's name.
func clusterOf(name string) string {
	segs := strings.SplitN(name, "/", 5)
	if len(segs) < 4 {
		return ""
	}
	return strings.Join(segs[:4], "/")
}

// outputOnly are the fields of Tenant, Namespace and Topic the control
// plane sets; they are not part of the desired state.
var outputOnly = []protoreflect.Name{"state", "status_message", "status", "create_time", "update_time", "etag", "uid"}

// specOf is m without its output-only fields.
func specOf(m proto.Message) proto.Message {
	c := proto.Clone(m)
	r := c.ProtoReflect()
	for _, n := range outputOnly {
		if f := r.Descriptor().Fields().ByName(n); f != nil {
			r.Clear(f)
		}
	}
	return c
}

// statusOf reads a resource's state, status_message and etag.
func statusOf(m proto.Message) (cpv1.PulsarResourceState, string, string) {
	r := m.ProtoReflect()
	fs := r.Descriptor().Fields()
	return cpv1.PulsarResourceState(r.Get(fs.ByName("state")).Enum()),
		r.Get(fs.ByName("status_message")).String(), r.Get(fs.ByName("etag")).String()
}

// recordResources records the Pulsar changes of a watch answer. Called
// with a.mu held.
func (a *Agent) recordResources(changes []*cpv1.PulsarResourceChange) {
	for _, ch := range changes {
		m, name, _ := resourceOf(ch)
		if m == nil || name == "" {
			continue
		}
		e := a.resources[name]
		if e == nil {
			e = &resourceEntry{}
			a.resources[name] = e
		}
		if e.change != nil {
			prev, _, _ := resourceOf(e.change)
			if e.change.GetDeleted() != ch.GetDeleted() {
				e.applied, e.appliedTo = nil, ""
			}
			if e.change.GetDeleted() != ch.GetDeleted() || !proto.Equal(specOf(prev), specOf(m)) {
				// A new desired state: try it now, not after the old backoff.
				e.failures, e.delay, e.notBefore = 0, 0, time.Time{}
			}
		}
		e.change = ch
	}
}

// applyOrder sorts changes like WatchDesiredState does: deletions deepest
// first, then the others shallowest first; by name within a group.
func applyOrder(a, b *cpv1.PulsarResourceChange) int {
	if a.GetDeleted() != b.GetDeleted() {
		if a.GetDeleted() {
			return -1
		}
		return 1
	}
	_, na, da := resourceOf(a)
	_, nb, db := resourceOf(b)
	if da != db {
		if a.GetDeleted() {
			return cmp.Compare(db, da)
		}
		return cmp.Compare(da, db)
	}
	return strings.Compare(na, nb)
}

// reconcileResources applies every Pulsar resource that needs it once and
// reports whether some are still pending (a cluster not ready yet, or a
// failure waiting for its retry).
func (a *Agent) reconcileResources(ctx context.Context) (unsettled bool) {
	type item struct {
		name     string
		ch       *cpv1.PulsarResourceChange
		adminURL string
	}
	now := time.Now()
	var todo []item
	a.mu.Lock()
	if !a.synced {
		a.mu.Unlock()
		return false
	}
	for name, e := range a.resources {
		cl := a.desired[clusterOf(name)]
		if cl == nil || cl.deleted {
			// The cluster is gone and so are its resources.
			delete(a.resources, name)
			continue
		}
		if cl.cluster.GetState() == cpv1.Cluster_DELETING {
			continue // the control plane deletes them with the cluster
		}
		if !a.needsWork(e, cl.adminURL, now) {
			continue
		}
		if cl.adminURL == "" || now.Before(e.notBefore) {
			unsettled = true
			continue
		}
		todo = append(todo, item{name: name, ch: e.change, adminURL: cl.adminURL})
	}
	a.mu.Unlock()
	slices.SortFunc(todo, func(x, y item) int { return applyOrder(x.ch, y.ch) })

	// blocked holds resources not settled in this pass: their children
	// (creates) or parents (deletions) wait for the next one.
	var blocked []string
	waits := func(it item) bool {
		for _, b := range blocked {
			if (!it.ch.GetDeleted() && strings.HasPrefix(it.name, b+"/")) ||
				(it.ch.GetDeleted() && strings.HasPrefix(b, it.name+"/")) {
				return true
			}
		}
		return false
	}
	for _, it := range todo {
		if ctx.Err() != nil {
			return true
		}
		if waits(it) {
			unsettled = true
			continue
		}
		if !a.applyResource(ctx, it.name, it.ch, it.adminURL) {
			unsettled = true
			blocked = append(blocked, it.name)
		}
	}
	return unsettled
}

// needsWork says whether e must be applied or reported on: functions,
// sources and sinks also when their instances' status is due. Called with
// a.mu held.
func (a *Agent) needsWork(e *resourceEntry, adminURL string, now time.Time) bool {
	if e.change.GetDeleted() {
		return true // the entry is dropped once removed
	}
	m, _, _ := resourceOf(e.change)
	if e.applied == nil || (adminURL != "" && e.appliedTo != adminURL) || !proto.Equal(e.applied, specOf(m)) {
		return true
	}
	if hasInstances(e.change) && !now.Before(e.nextStatus) {
		return true
	}
	st, msg, _ := statusOf(m)
	return st != cpv1.PulsarResourceState_APPLIED || msg != ""
}

// applyResource applies one change to the data plane at adminURL and
// reports the outcome; it returns whether the resource is settled.
func (a *Agent) applyResource(ctx context.Context, name string, ch *cpv1.PulsarResourceChange, adminURL string) bool {
	log := a.log.With("resource", name)
	m, _, _ := resourceOf(ch)
	spec := specOf(m)

	a.mu.Lock()
	e := a.resources[name]
	upToDate := e != nil && !ch.GetDeleted() && e.appliedTo == adminURL && proto.Equal(e.applied, spec)
	a.mu.Unlock()

	var applyErr error
	if !upToDate {
		client, err := a.admin(adminURL)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, adminTimeout)
			var calls []string
			calls, err = a.preparePeers(actx, client, ch)
			if err == nil {
				var more []string
				more, err = pulsaradmin.ApplyChange(actx, client, ch)
				calls = append(calls, more...)
			}
			if err == nil {
				var did string
				did, err = a.applyFence(actx, client, ch)
				if did != "" {
					calls = append(calls, did)
				}
			}
			cancel()
			if err == nil && len(calls) > 0 {
				log.Info("agent: applied", "calls", strings.Join(calls, ","))
			}
		}
		applyErr = err
		if ctx.Err() != nil {
			return false
		}
	}

	// Functions, sources and sinks: what their instances do. Until every
	// instance runs the resource is not settled, and the status is read
	// again after a growing wait (up to maxBackoff); then every
	// ReconcileInterval.
	var inst *cpv1.FunctionInstanceStatus
	running := true
	if applyErr == nil && !ch.GetDeleted() && hasInstances(ch) {
		client, err := a.admin(adminURL)
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, adminTimeout)
			inst, err = pulsaradmin.InstanceStatus(sctx, client, m)
			cancel()
		}
		if err != nil {
			log.Debug("agent: reading the instances' status failed", "err", err)
			inst = nil
		}
		running = inst != nil && inst.GetNumRunning() >= inst.GetNumInstances() && inst.GetFirstError() == nil
		a.mu.Lock()
		if e := a.resources[name]; e != nil && e.change == ch {
			if running {
				e.statusDelay = 0
				e.nextStatus = time.Now().Add(a.cfg.ReconcileInterval)
			} else {
				e.statusDelay = backoff(e.statusDelay)
				e.nextStatus = time.Now().Add(e.statusDelay)
			}
		}
		a.mu.Unlock()
	}

	a.mu.Lock()
	e = a.resources[name]
	current := e != nil && e.change == ch
	if current {
		if applyErr != nil {
			e.applied, e.appliedTo = nil, ""
			e.failures++
			e.delay = backoff(e.delay)
			e.notBefore = time.Now().Add(e.delay)
		} else {
			e.applied, e.appliedTo, e.failures, e.delay, e.notBefore = spec, adminURL, 0, 0, time.Time{}
			if ch.GetDeleted() {
				delete(a.resources, name)
			}
		}
	}
	a.mu.Unlock()

	if ch.GetDeleted() {
		if applyErr != nil {
			log.Warn("agent: removing from the data plane failed; retrying", "err", applyErr)
			return false
		}
		log.Info("agent: removed from the data plane")
		return true
	}

	req := &cpv1.ReportResourceStatusRequest{Name: name, State: cpv1.PulsarResourceState_APPLIED, ObservedRevision: ch.GetRevision()}
	if applyErr != nil {
		req.State, req.Message = cpv1.PulsarResourceState_FAILED, applyErr.Error()
		log.Warn("agent: applying failed; retrying", "err", applyErr)
	}
	st, msg, etag := statusOf(m)
	req.ObservedEtag = etag
	req.InstanceStatus = inst
	if st == req.State && msg == req.Message && (inst == nil || proto.Equal(inst, instanceStatusOf(m))) {
		return applyErr == nil && running // the record already says so
	}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	out, err := a.rpc.ReportResourceStatus(cctx, req)
	cancel()
	switch status.Code(err) {
	case codes.OK:
		a.mu.Lock()
		if e := a.resources[name]; e != nil && e.change == ch && out != nil {
			e.change = out
		}
		a.mu.Unlock()
		log.Info("agent: reported", "state", req.State.String(), "message", req.Message)
		return applyErr == nil && running
	case codes.Aborted, codes.NotFound:
		// Changed or deleted since: the watch brings the newer state.
		return applyErr == nil && running
	default:
		if ctx.Err() == nil {
			log.Warn("agent: report failed", "state", req.State.String(), "err", err)
		}
		// Report again on the next pass; the apply itself is recorded.
		a.mu.Lock()
		if e := a.resources[name]; e != nil && e.change == ch && applyErr == nil {
			e.notBefore = time.Now().Add(minBackoff)
		}
		a.mu.Unlock()
		return false
	}
}

// admin returns the cached admin client of adminURL.
func (a *Agent) admin(adminURL string) (*pulsaradmin.Client, error) {
	if c := a.admins[adminURL]; c != nil {
		return c, nil
	}
	opts := append([]pulsaradmin.Option{pulsaradmin.WithHTTPClient(&http.Client{Timeout: pulsaradmin.DefaultTimeout, Transport: a.adminTransport})},
		a.cfg.AdminOptions...)
	var local string
	a.mu.Lock()
	for n, e := range a.desired {
		if e.adminURL == adminURL {
			local = n
		}
	}
	a.mu.Unlock()
	opts = append(opts, a.adminAuth(local)...)
	if a.tokens != nil {
		// The tenant admins role bindings give (dataplaneauth.go) stay
		// when a tenant is applied.
		opts = append(opts, pulsaradmin.WithKeptAdminRoles(managedRole))
	}
	if fn := a.cfg.PulsarClusterName; fn != nil {
		if local != "" {
			opts = append(opts, pulsaradmin.WithClusterName(fn(local)))
		}
		opts = append(opts, pulsaradmin.WithReplicationClusterMapper(func(c string) (string, error) { return fn(c), nil }))
	}
	c, err := pulsaradmin.New(adminURL, opts...)
	if err != nil {
		return nil, err
	}
	a.admins[adminURL] = c
	return c, nil
}
