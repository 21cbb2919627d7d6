package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// Runbooks. A failover moves a group's clients from its active cluster P
// to a member T in steps; each step is recorded in the operation before
// the next starts, so a control plane restarted mid-runbook resumes at the
// first step not done. Every step is idempotent: it writes desired state
// (fences, the active cluster) that is the same when written twice, or only
// reads.
//
//	check   T is READY and healthy; planned: P is healthy and P's backlog
//	        toward T is at most max_backlog.
//	fence   P's namespaces are fenced toward T (producers refused, sent to
//	        T) and the fence is applied; unplanned with P unreachable: the
//	        fence is recorded and applied when P returns.
//	drain   P's backlog toward T reaches 0 in a report taken after the
//	        fence (planned: RPO 0); unplanned: what is left is the RPO.
//	open    T's namespaces are unfenced and that is applied.
//	switch  the failover endpoint answers T; the other members are fenced
//	        toward T (ACTIVE_PASSIVE).
//	reopen  ACTIVE_ACTIVE only: P takes writes again.
//	verify  T reports its replication after the switch.
//
// A planned runbook that fails restores the fences of the group as they
// were with P active; nothing was switched.

const (
	opFailover = "FailoverReplicationGroup"
	opFailback = "FailbackReplicationGroup"
	opEvacuate = "EvacuateRegion"

	defaultMaxBacklog   = 100000
	defaultDrainTimeout = 60 * time.Second
	applyTimeout        = 30 * time.Second
	unplannedFenceWait  = 5 * time.Second
	reportFresh         = 10 * time.Second
	stepPoll            = 100 * time.Millisecond
)

// runbookParams are the request's drain knobs (Runbook.max_backlog and
// drain_timeout).
type runbookParams struct {
	maxBacklog   int64
	drainTimeout time.Duration
}

func failoverSteps(mode cpv1.ReplicationGroup_Mode) []*cpv1.RunbookStep {
	steps := []*cpv1.RunbookStep{
		{Id: "check", Description: "check the target is ready and healthy and, when planned, that the old cluster's backlog toward it is small"},
		{Id: "fence", Description: "fence the old cluster's namespaces: producers are refused with a retriable error naming the target"},
		{Id: "drain", Description: "wait until the old cluster has replicated everything to the target"},
		{Id: "open", Description: "let the target's namespaces take writes"},
		{Id: "switch", Description: "switch the failover endpoint to the target"},
	}
	if mode == cpv1.ReplicationGroup_ACTIVE_ACTIVE {
		steps = append(steps, &cpv1.RunbookStep{Id: "reopen", Description: "let the old cluster take writes again (active-active)"})
	}
	steps = append(steps, &cpv1.RunbookStep{Id: "verify", Description: "check the target reports its replication after the switch"})
	for _, st := range steps {
		st.State = cpv1.RunbookStep_PENDING
	}
	return steps
}

// nextMember is the first member after from (in member order, wrapping)
// that passes health checks and is not in avoidRegion; "" when none.
func (s *Server) nextMember(ctx context.Context, r store.Reader, rg *cpv1.ReplicationGroup, from, avoidRegion string) string {
	i := slices.Index(rg.Members, from)
	for k := 1; k <= len(rg.Members); k++ {
		m := rg.Members[(i+k)%len(rg.Members)]
		if m == from {
			continue
		}
		if avoidRegion != "" {
			if cl, err := s.loadCluster(ctx, r, m); err != nil || cl.Region == avoidRegion {
				continue
			}
		}
		if s.repl.healthy(m) {
			return m
		}
	}
	return ""
}

func (s *Server) loadCluster(ctx context.Context, r store.Reader, name string) (*cpv1.Cluster, error) {
	obj, err := r.Get(ctx, kindCluster.collection, name)
	if err != nil {
		return nil, err
	}
	m, _, err := decode(kindCluster, obj)
	if err != nil {
		return nil, err
	}
	return m.(*cpv1.Cluster), nil
}

func (s *Server) loadGroup(ctx context.Context, r store.Reader, name string) (*cpv1.ReplicationGroup, store.Object, error) {
	obj, err := r.Get(ctx, kindReplicationGroup.collection, name)
	if err != nil {
		return nil, obj, err
	}
	m, _, err := decode(kindReplicationGroup, obj)
	if err != nil {
		return nil, obj, err
	}
	return m.(*cpv1.ReplicationGroup), obj, nil
}

// saveGroup writes rg back (w's transaction) and, when sync, the namespace
// resources that realize it.
func saveGroup(ctx context.Context, w store.Writer, obj store.Object, old, rg *cpv1.ReplicationGroup, sync bool) error {
	if sync {
		if _, err := syncGroupNamespaces(ctx, w, old, rg); err != nil {
			return err
		}
	}
	data, err := reencode(obj, rg)
	if err != nil {
		return err
	}
	obj.Data = data
	_, err = w.Update(ctx, obj, obj.Etag)
	return err
}

// steadyFences sets the fences of rg as they are with active taking writes.
func steadyFences(rg *cpv1.ReplicationGroup, active string) {
	for _, m := range rg.Members {
		to := ""
		if rg.Mode == cpv1.ReplicationGroup_ACTIVE_PASSIVE && m != active {
			to = active
		}
		memberStatus(rg, m).FencedTo = to
	}
}

// startFailover validates and records a failover runbook of one group in
// w's transaction; with validateOnly it only returns the plan.
func (s *Server) startFailover(ctx context.Context, w store.Writer, opType, group, to string, planned bool, p runbookParams, requestID string, validateOnly bool) (*cpv1.Operation, error) {
	rg, obj, err := s.loadGroup(ctx, w, group)
	if err != nil {
		return nil, err
	}
	if rg.Operation != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: operation %s is in progress", group, rg.Operation)
	}
	if rg.State == cpv1.ReplicationGroup_DELETING {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: is being deleted", group)
	}
	from := rg.ActiveCluster
	if to == "" {
		to = s.nextMember(ctx, w, rg, from, "")
		if to == "" {
			return nil, status.Errorf(codes.FailedPrecondition, "%s: no other member passes health checks", group)
		}
	}
	if !slices.Contains(rg.Members, to) {
		return nil, invalid("target_cluster", "%s is not a member of %s", to, group)
	}
	if to == from {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %s is already the active cluster", group, to)
	}
	if p.maxBacklog <= 0 {
		p.maxBacklog = defaultMaxBacklog
	}
	if p.drainTimeout <= 0 {
		p.drainTimeout = defaultDrainTimeout
	}
	r, _ := kindReplicationGroup.parseName("name", group)
	op := &cpv1.Operation{Type: opType, Target: group, State: cpv1.Operation_PENDING, Runbook: &cpv1.Runbook{
		Groups: []string{group}, FromCluster: from, ToCluster: to, Planned: planned,
		Steps: failoverSteps(rg.Mode), Report: &cpv1.RunbookReport{},
	}}
	op.Runbook.Steps[0].Detail, _ = s.checkFailover(ctx, w, rg, from, to, planned, p.maxBacklog)
	if validateOnly {
		if op.Runbook.Steps[0].Detail == "" {
			op.Runbook.Steps[0].Detail = "passes now"
		}
		return op, nil
	}
	op.Runbook.Steps[0].Detail = ""
	op.Name = operationName(opType, requestID)
	op.Runbook.MaxBacklog, op.Runbook.DrainTimeout = p.maxBacklog, durationpb.New(p.drainTimeout)
	if err := createOperation(ctx, w, op, r.org); err != nil {
		return nil, err
	}
	old := proto.Clone(rg).(*cpv1.ReplicationGroup)
	rg.Operation, rg.State = op.Name, cpv1.ReplicationGroup_FAILING_OVER
	if err := saveGroup(ctx, w, obj, old, rg, false); err != nil {
		return nil, err
	}
	return op, audit(ctx, w, r.org, group, requestID)
}

func paramsOf(op *cpv1.Operation) runbookParams {
	return runbookParams{maxBacklog: op.GetRunbook().GetMaxBacklog(), drainTimeout: op.GetRunbook().GetDrainTimeout().AsDuration()}
}

// checkFailover returns why a failover from -> to cannot start now, or "";
// noReport is set when the only reason is that the old cluster's
// replication report is missing or stale.
func (s *Server) checkFailover(ctx context.Context, r store.Reader, rg *cpv1.ReplicationGroup, from, to string, planned bool, maxBacklog int64) (why string, noReport bool) {
	cl, err := s.loadCluster(ctx, r, to)
	if err != nil {
		return fmt.Sprintf("target %s: %v", to, err), false
	}
	if cl.State != cpv1.Cluster_READY || cl.ServiceUrl == "" {
		return fmt.Sprintf("target %s is %s", to, cl.State), false
	}
	if !s.repl.healthy(to) {
		return fmt.Sprintf("target %s fails health checks (%s)", to, s.repl.healthDetail(to)), false
	}
	if !planned {
		return "", false
	}
	if !s.repl.healthy(from) {
		return fmt.Sprintf("planned failover: the active cluster %s fails health checks (%s); run an unplanned failover or an evacuation", from, s.repl.healthDetail(from)), false
	}
	n, at, ok := s.repl.backlog(from, to, rg.Namespaces)
	if !ok || time.Since(at) > reportFresh {
		return "planned failover: no recent replication report from " + from, true
	}
	if n > maxBacklog {
		return fmt.Sprintf("planned failover: %s has %d entries not yet replicated to %s (at most %d)", from, n, to, maxBacklog), false
	}
	return "", false
}

func (g replicationGroups) FailoverReplicationGroup(ctx context.Context, req *cpv1.FailoverReplicationGroupRequest) (*cpv1.Operation, error) {
	return g.s.failoverCall(ctx, opFailover, req.GetName(), req.GetTargetCluster(), req.GetPlanned(),
		runbookParams{maxBacklog: req.GetMaxBacklog(), drainTimeout: req.GetDrainTimeout().AsDuration()}, req.GetRequestId(), req.GetValidateOnly())
}

func (g replicationGroups) FailbackReplicationGroup(ctx context.Context, req *cpv1.FailbackReplicationGroupRequest) (*cpv1.Operation, error) {
	rg, err := g.GetReplicationGroup(ctx, &cpv1.GetReplicationGroupRequest{Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	home := rg.Primary
	if home == "" {
		home = rg.Members[0]
	}
	return g.s.failoverCall(ctx, opFailback, req.GetName(), home, true,
		runbookParams{maxBacklog: req.GetMaxBacklog(), drainTimeout: req.GetDrainTimeout().AsDuration()}, req.GetRequestId(), req.GetValidateOnly())
}

func (s *Server) failoverCall(ctx context.Context, opType, name, to string, planned bool, p runbookParams, requestID string, validateOnly bool) (*cpv1.Operation, error) {
	r, err := kindReplicationGroup.parseName("name", name)
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, target{kind: kindReplicationGroup, verb: "update", res: r}); err != nil {
		return nil, err
	}
	if requestID != "" && !validateOnly {
		if op, err := s.replayedOperation(ctx, operationName(opType, requestID), name); op != nil || err != nil {
			return op, err
		}
	}
	var op *cpv1.Operation
	do := func(w store.Writer) error {
		var err error
		op, err = s.startFailover(ctx, w, opType, name, to, planned, p, requestID, validateOnly)
		return err
	}
	if validateOnly {
		err = do(s.store)
	} else {
		err = s.tx(ctx, do)
	}
	if err != nil {
		return nil, s.toStatus(err, name)
	}
	if validateOnly {
		return op, nil
	}
	s.repl.kick()
	return s.readOperation(ctx, op.Name)
}

// EvacuateRegion starts a failover of every group of the organization whose
// active cluster is in the region, to its next healthy member outside it:
// planned where the active cluster still passes health checks, unplanned
// where it does not. The evacuation's steps name the failovers.
func (g replicationGroups) EvacuateRegion(ctx context.Context, req *cpv1.EvacuateRegionRequest) (*cpv1.Operation, error) {
	s := g.s
	pr, err := kindOrganization.parseName("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if _, err := kindRegion.parseName("region", req.GetRegion()); err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, target{kind: kindReplicationGroup, verb: "update", res: resName{name: pr.name + "/replicationGroups", parent: pr.name, org: pr.org}}); err != nil {
		return nil, err
	}
	opName := operationName(opEvacuate, req.GetRequestId())
	if req.GetRequestId() != "" && !req.GetValidateOnly() {
		if op, err := s.replayedOperation(ctx, opName, pr.name); op != nil || err != nil {
			return op, err
		}
	}
	ev := &cpv1.Operation{Name: opName, Type: opEvacuate, Target: pr.name, State: cpv1.Operation_PENDING,
		Runbook: &cpv1.Runbook{Region: req.GetRegion(), Report: &cpv1.RunbookReport{}}}
	do := func(w store.Writer) error {
		objs, _, err := w.List(ctx, store.ListQuery{Kind: kindReplicationGroup.collection, Parent: pr.name, PageSize: 1000})
		if err != nil {
			return err
		}
		for _, obj := range objs {
			m, _, err := decode(kindReplicationGroup, obj)
			if err != nil {
				return err
			}
			rg := m.(*cpv1.ReplicationGroup)
			cl, err := s.loadCluster(ctx, w, rg.ActiveCluster)
			if err != nil || cl.Region != req.GetRegion() {
				continue
			}
			step := &cpv1.RunbookStep{Id: rg.Name, State: cpv1.RunbookStep_PENDING}
			ev.Runbook.Groups = append(ev.Runbook.Groups, rg.Name)
			ev.Runbook.Steps = append(ev.Runbook.Steps, step)
			to := s.nextMember(ctx, w, rg, rg.ActiveCluster, req.GetRegion())
			if to == "" {
				step.State, step.Detail = cpv1.RunbookStep_FAILED, "no member outside the region passes health checks"
				continue
			}
			planned := s.repl.healthy(rg.ActiveCluster)
			step.Description = fmt.Sprintf("fail %s over from %s to %s (%s)", rg.Name, rg.ActiveCluster, to, map[bool]string{true: "planned", false: "unplanned"}[planned])
			child, err := s.startFailover(ctx, w, opFailover, rg.Name, to, planned,
				runbookParams{drainTimeout: req.GetDrainTimeout().AsDuration()}, "", req.GetValidateOnly())
			if err != nil {
				step.State, step.Detail = cpv1.RunbookStep_FAILED, status.Convert(err).Message()
				continue
			}
			if req.GetValidateOnly() {
				step.Detail = child.GetRunbook().GetSteps()[0].GetDetail()
			} else {
				step.Detail = child.Name
			}
		}
		if req.GetValidateOnly() {
			return nil
		}
		if err := createOperation(ctx, w, ev, pr.org); err != nil {
			return err
		}
		return audit(ctx, w, pr.org, pr.name, req.GetRequestId())
	}
	if req.GetValidateOnly() {
		err = do(s.store)
	} else {
		err = s.tx(ctx, do)
	}
	if err != nil {
		return nil, s.toStatus(err, pr.name)
	}
	if req.GetValidateOnly() {
		ev.Name = ""
		return ev, nil
	}
	s.repl.kick()
	return s.readOperation(ctx, opName)
}

// ---- execution ----

// errStepWait means the step is not finished; run it again shortly.
var errStepWait = errors.New("runbook: step waiting")

// runRunbook executes op until it is done, the server stops or a store
// error; the monitor starts it again for an operation not done.
func (s *Server) runRunbook(ctx context.Context, opName string) {
	for ctx.Err() == nil {
		op, err := s.readOperation(ctx, opName)
		if err != nil || op.Done {
			return
		}
		var next bool
		if op.Type == opEvacuate {
			next, err = s.stepEvacuation(ctx, op)
		} else {
			next, err = s.stepFailover(ctx, op)
		}
		if err != nil {
			s.log.Warn("apiserver: runbook step failed; retrying", "operation", opName, "err", err)
			next = false
		}
		if !next {
			select {
			case <-ctx.Done():
				return
			case <-time.After(stepPoll):
			}
		}
	}
}

// stepEvacuation waits for the evacuation's failovers.
func (s *Server) stepEvacuation(ctx context.Context, ev *cpv1.Operation) (bool, error) {
	done, failed := true, 0
	for _, st := range ev.Runbook.Steps {
		if st.State == cpv1.RunbookStep_FAILED {
			failed++
			continue
		}
		child, err := s.readOperation(ctx, st.Detail)
		if err != nil {
			return false, err
		}
		switch {
		case !child.Done:
			done = false
			st.State = cpv1.RunbookStep_RUNNING
		case child.State == cpv1.Operation_SUCCEEDED:
			st.State, st.EndTime = cpv1.RunbookStep_DONE, child.EndTime
		default:
			st.State, st.EndTime = cpv1.RunbookStep_FAILED, child.EndTime
			failed++
		}
	}
	return false, s.tx(ctx, func(w store.Writer) error {
		return changeOperation(ctx, w, ev.Name, func(op *cpv1.Operation) error {
			op.Runbook.Steps = ev.Runbook.Steps
			if !done {
				op.State = cpv1.Operation_RUNNING
				return nil
			}
			op.State, op.Done, op.EndTime = cpv1.Operation_SUCCEEDED, true, timestamppb.Now()
			if failed > 0 {
				op.State = cpv1.Operation_FAILED
				op.Error = &cpv1.OperationError{Code: int32(codes.Aborted), Message: fmt.Sprintf("%d of %d failovers failed", failed, len(ev.Runbook.Steps))}
			}
			return nil
		})
	})
}

// stepFailover runs the first unfinished step of a failover once and
// records the outcome; it reports whether to go on at once.
func (s *Server) stepFailover(ctx context.Context, op *cpv1.Operation) (bool, error) {
	rb := op.Runbook
	var st *cpv1.RunbookStep
	for _, x := range rb.Steps {
		if x.State != cpv1.RunbookStep_DONE && x.State != cpv1.RunbookStep_SKIPPED {
			st = x
			break
		}
	}
	if st == nil {
		return false, s.finishRunbook(ctx, op, codes.OK, "")
	}
	if st.StartTime == nil {
		st.StartTime = timestamppb.Now()
	}
	p := paramsOf(op)
	from, to := rb.FromCluster, rb.ToCluster
	started := st.StartTime.AsTime()
	waited := time.Since(started)
	var res stepResult
	var err error
	switch st.Id {
	case "check":
		rg, _, lerr := s.loadGroup(ctx, s.store, op.Target)
		if lerr != nil {
			return false, lerr
		}
		if why, noReport := s.checkFailover(ctx, s.store, rg, from, to, rb.Planned, p.maxBacklog); why != "" {
			if noReport && waited < reportFresh {
				// The old cluster's agent reports every 500 ms: a runbook
				// started just after another, or just after the agent
				// started, waits for its next report.
				err = errStepWait
			} else {
				res = stepResult{fail: why}
			}
		} else {
			res = stepResult{state: cpv1.RunbookStep_DONE, detail: fmt.Sprintf("target %s healthy", to)}
			rb.ReplicatedAtStart, _, _ = s.repl.replicated(from, to, rg.Namespaces)
			if rb.Planned {
				n, _, _ := s.repl.backlog(from, to, rg.Namespaces)
				res.detail += fmt.Sprintf("; %s has %d entries to replicate to it (at most %d)", from, n, p.maxBacklog)
			}
		}
	case "fence":
		res, err = s.fenceStep(ctx, op, waited)
	case "drain":
		res, err = s.drainStep(ctx, op, p, waited)
	case "open":
		res, err = s.setFenceStep(ctx, op, to, "", waited, "target's namespaces take writes")
	case "switch":
		res, err = s.switchStep(ctx, op)
	case "reopen":
		res, err = s.setFenceStep(ctx, op, from, "", waited, "old cluster takes writes again")
	case "verify":
		rg, _, lerr := s.loadGroup(ctx, s.store, op.Target)
		if lerr != nil {
			return false, lerr
		}
		sw := rb.GetReport().GetSwitchTime().AsTime()
		n, at, ok := s.repl.backlog(to, "", rg.Namespaces)
		switch {
		case ok && at.After(sw):
			res = stepResult{state: cpv1.RunbookStep_DONE, detail: fmt.Sprintf("%s reports its replication: %d entries to replicate to the other members", to, n)}
		case waited > applyTimeout:
			res = stepResult{state: cpv1.RunbookStep_SKIPPED, detail: fmt.Sprintf("no replication report from %s since the switch", to)}
		default:
			err = errStepWait
		}
	default:
		res = stepResult{fail: "unknown step " + st.Id}
	}
	if errors.Is(err, errStepWait) {
		if st.State != cpv1.RunbookStep_RUNNING {
			st.State = cpv1.RunbookStep_RUNNING
			return false, s.saveRunbook(ctx, op)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if res.fail != "" {
		st.State, st.Detail, st.EndTime = cpv1.RunbookStep_FAILED, res.fail, timestamppb.Now()
		if rb.Planned {
			if err := s.restoreFences(ctx, op); err != nil {
				return false, err
			}
		}
		if err := s.saveRunbook(ctx, op); err != nil {
			return false, err
		}
		return false, s.finishRunbook(ctx, op, codes.FailedPrecondition, st.Id+": "+res.fail)
	}
	st.State, st.Detail, st.EndTime = res.state, res.detail, timestamppb.Now()
	return true, s.saveRunbook(ctx, op)
}

type stepResult struct {
	state  cpv1.RunbookStep_State
	detail string
	fail   string // non-empty: the step failed
}

// saveRunbook records op's runbook (steps and report).
func (s *Server) saveRunbook(ctx context.Context, op *cpv1.Operation) error {
	return s.tx(ctx, func(w store.Writer) error {
		return changeOperation(ctx, w, op.Name, func(stored *cpv1.Operation) error {
			stored.Runbook = op.Runbook
			stored.State = cpv1.Operation_RUNNING
			return nil
		})
	})
}

// fenceApplied reports whether every namespace of rg in cluster is applied
// with the fence fencedTo.
func (s *Server) fenceApplied(ctx context.Context, rg *cpv1.ReplicationGroup, cluster, fencedTo string) (bool, string, error) {
	for _, nsName := range rg.Namespaces {
		name := namespaceResource(cluster, nsName)
		obj, err := s.store.Get(ctx, kindNamespace.collection, name)
		if err != nil {
			return false, "", err
		}
		m, _, err := decode(kindNamespace, obj)
		if err != nil {
			return false, "", err
		}
		ns := m.(*cpv1.Namespace)
		if ns.FencedTo != fencedTo || ns.State != cpv1.PulsarResourceState_APPLIED {
			return false, fmt.Sprintf("%s is %s %s", name, ns.State, ns.StatusMessage), nil
		}
	}
	return true, "", nil
}

// writeFence sets cluster's fence in rg and its namespaces (idempotent).
func (s *Server) writeFence(ctx context.Context, group, cluster, to string) (*cpv1.ReplicationGroup, error) {
	var out *cpv1.ReplicationGroup
	err := s.tx(ctx, func(w store.Writer) error {
		rg, obj, err := s.loadGroup(ctx, w, group)
		if err != nil {
			return err
		}
		out = rg
		if to == fencedTo(rg, cluster) {
			// Namespaces may still need the write (a crash between the
			// two): syncing is idempotent.
			_, err := syncGroupNamespaces(ctx, w, rg, rg)
			return err
		}
		old := proto.Clone(rg).(*cpv1.ReplicationGroup)
		memberStatus(rg, cluster).FencedTo = to
		return saveGroup(ctx, w, obj, old, rg, true)
	})
	return out, err
}

func (s *Server) fenceStep(ctx context.Context, op *cpv1.Operation, waited time.Duration) (stepResult, error) {
	rb := op.Runbook
	rg, err := s.writeFence(ctx, op.Target, rb.FromCluster, rb.ToCluster)
	if err != nil {
		return stepResult{}, err
	}
	ok, why, err := s.fenceApplied(ctx, rg, rb.FromCluster, rb.ToCluster)
	if err != nil {
		return stepResult{}, err
	}
	if ok {
		rb.Report.WritesStoppedTime = timestamppb.Now()
		return stepResult{state: cpv1.RunbookStep_DONE, detail: fmt.Sprintf("%s refuses writes, producers are sent to %s", rb.FromCluster, rb.ToCluster)}, nil
	}
	if !rb.Planned && (!s.repl.healthy(rb.FromCluster) || waited > unplannedFenceWait) {
		rb.Report.WritesStoppedTime = timestamppb.New(s.repl.unhealthySince(rb.FromCluster))
		return stepResult{state: cpv1.RunbookStep_SKIPPED, detail: fmt.Sprintf("%s is unreachable (%s); the fence is applied when it returns", rb.FromCluster, s.repl.healthDetail(rb.FromCluster))}, nil
	}
	if waited > applyTimeout {
		return stepResult{fail: fmt.Sprintf("the fence was not applied in %s: %s", applyTimeout, why)}, nil
	}
	return stepResult{}, errStepWait
}

func (s *Server) drainStep(ctx context.Context, op *cpv1.Operation, p runbookParams, waited time.Duration) (stepResult, error) {
	rb := op.Runbook
	rg, _, err := s.loadGroup(ctx, s.store, op.Target)
	if err != nil {
		return stepResult{}, err
	}
	fenced := rb.Steps[1].State == cpv1.RunbookStep_DONE
	n, at, ok := s.repl.backlog(rb.FromCluster, rb.ToCluster, rg.Namespaces)
	if !fenced {
		rb.Report.RpoMessages = n
		age := "no report"
		if ok {
			rb.Report.RpoAsOf = timestamppb.New(at)
			age = fmt.Sprintf("reported %s before the switch", time.Since(at).Round(time.Millisecond))
		}
		return stepResult{state: cpv1.RunbookStep_SKIPPED, detail: fmt.Sprintf("%s is unreachable: %d entries not replicated to %s (%s) are the RPO; they replicate when it returns", rb.FromCluster, n, rb.ToCluster, age)}, nil
	}
	stopped := rb.Report.GetWritesStoppedTime().AsTime()
	if ok && at.After(stopped) {
		if rb.Report.DrainedMessages == 0 && n > 0 {
			rb.Report.DrainedMessages = n
		}
		if n == 0 {
			return stepResult{state: cpv1.RunbookStep_DONE, detail: fmt.Sprintf("%s has replicated everything to %s (%d entries drained after the fence)", rb.FromCluster, rb.ToCluster, rb.Report.DrainedMessages)}, nil
		}
	}
	if waited > p.drainTimeout {
		if rb.Planned {
			return stepResult{fail: fmt.Sprintf("%s still has %d entries to replicate to %s after %s", rb.FromCluster, n, rb.ToCluster, p.drainTimeout)}, nil
		}
		rb.Report.RpoMessages = n
		if ok {
			rb.Report.RpoAsOf = timestamppb.New(at)
		}
		return stepResult{state: cpv1.RunbookStep_SKIPPED, detail: fmt.Sprintf("%d entries still not replicated after %s are the RPO", n, p.drainTimeout)}, nil
	}
	return stepResult{}, errStepWait
}

// setFenceStep sets cluster's fence and waits until it is applied.
func (s *Server) setFenceStep(ctx context.Context, op *cpv1.Operation, cluster, fencedTo string, waited time.Duration, what string) (stepResult, error) {
	rg, err := s.writeFence(ctx, op.Target, cluster, fencedTo)
	if err != nil {
		return stepResult{}, err
	}
	ok, why, err := s.fenceApplied(ctx, rg, cluster, fencedTo)
	if err != nil {
		return stepResult{}, err
	}
	if ok {
		return stepResult{state: cpv1.RunbookStep_DONE, detail: what}, nil
	}
	if waited > applyTimeout {
		if cluster == op.Runbook.FromCluster && !op.Runbook.Planned {
			return stepResult{state: cpv1.RunbookStep_SKIPPED, detail: why}, nil
		}
		return stepResult{fail: fmt.Sprintf("not applied in %s: %s", applyTimeout, why)}, nil
	}
	return stepResult{}, errStepWait
}

func (s *Server) switchStep(ctx context.Context, op *cpv1.Operation) (stepResult, error) {
	rb := op.Runbook
	err := s.tx(ctx, func(w store.Writer) error {
		rg, obj, err := s.loadGroup(ctx, w, op.Target)
		if err != nil {
			return err
		}
		if n, _, ok := s.repl.replicated(rb.FromCluster, rb.ToCluster, rg.Namespaces); ok {
			// A counter below its start value restarted with a broker: what
			// it counted before is lost, what it counts since is not.
			if n >= rb.ReplicatedAtStart {
				n -= rb.ReplicatedAtStart
			}
			rb.Report.MessagesReplicated = n
		}
		old := proto.Clone(rg).(*cpv1.ReplicationGroup)
		rg.ActiveCluster = rb.ToCluster
		steadyFences(rg, rb.ToCluster)
		if rg.Mode == cpv1.ReplicationGroup_ACTIVE_ACTIVE {
			memberStatus(rg, rb.FromCluster).FencedTo = rb.ToCluster // until reopen
		}
		return saveGroup(ctx, w, obj, old, rg, true)
	})
	if err != nil {
		return stepResult{}, err
	}
	now := time.Now()
	rb.Report.SwitchTime = timestamppb.New(now)
	if ws := rb.Report.GetWritesStoppedTime(); ws != nil {
		rb.Report.Rto = durationpb.New(now.Sub(ws.AsTime()))
	}
	return stepResult{state: cpv1.RunbookStep_DONE, detail: fmt.Sprintf("the failover endpoint answers %s", rb.ToCluster)}, nil
}

// restoreFences puts back the fences of the group with the old cluster
// active, after a planned runbook failed before switching.
func (s *Server) restoreFences(ctx context.Context, op *cpv1.Operation) error {
	return s.tx(ctx, func(w store.Writer) error {
		rg, obj, err := s.loadGroup(ctx, w, op.Target)
		if err != nil {
			return err
		}
		if rg.ActiveCluster != op.Runbook.FromCluster {
			return nil // already switched: nothing to restore
		}
		old := proto.Clone(rg).(*cpv1.ReplicationGroup)
		steadyFences(rg, rg.ActiveCluster)
		return saveGroup(ctx, w, obj, old, rg, true)
	})
}

// finishRunbook ends a failover runbook and frees its group.
func (s *Server) finishRunbook(ctx context.Context, op *cpv1.Operation, code codes.Code, msg string) error {
	return s.tx(ctx, func(w store.Writer) error {
		rg, obj, err := s.loadGroup(ctx, w, op.Target)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if rg != nil && rg.Operation == op.Name {
			old := proto.Clone(rg).(*cpv1.ReplicationGroup)
			rg.Operation, rg.State = "", cpv1.ReplicationGroup_READY
			if err := saveGroup(ctx, w, obj, old, rg, false); err != nil {
				return err
			}
		}
		state := cpv1.Operation_SUCCEEDED
		if code != codes.OK {
			state = cpv1.Operation_FAILED
		}
		if err := changeOperation(ctx, w, op.Name, func(stored *cpv1.Operation) error {
			stored.Runbook = op.Runbook
			return nil
		}); err != nil {
			return err
		}
		var resp proto.Message
		if rg != nil && code == codes.OK {
			rg.Etag = ""
			resp = rg
		}
		return finishOperation(ctx, w, op.Name, state, code, msg, resp)
	})
}
