package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/policy"
)

// admissionCodes maps a policy Decision.Code to a gRPC code.
var admissionCodes = map[string]codes.Code{
	"INVALID_ARGUMENT":    codes.InvalidArgument,
	"FAILED_PRECONDITION": codes.FailedPrecondition,
	"RESOURCE_EXHAUSTED":  codes.ResourceExhausted,
}

// target is what a call acts on, as the policy sees it.
type target struct {
	kind  *kind
	verb  string // "get", "list", "create", ...
	res   resName
	attrs map[string]any
}

// authorize asks the Authorizer whether the caller may take the action, and
// returns nil or the status error to answer. Denials are audited.
func (s *Server) authorize(ctx context.Context, t target) error {
	c := callerFrom(ctx)
	if c.name == "" {
		return unauthenticated("not authenticated")
	}
	p, err := s.policyPrincipal(ctx, c)
	if err != nil {
		return s.toStatus(err, "")
	}
	in := policy.Input{
		Principal: p,
		Action:    t.kind.collection + "." + t.verb,
		Resource: policy.Resource{
			Kind: t.kind.collection, Name: t.res.name, Parent: t.res.parent, Org: t.res.org,
			ID: t.res.id, Attributes: t.attrs,
		},
	}
	if t.res.org != "" {
		facts, err := s.orgFacts(ctx, t.res.org, in.Action == "clusters.create")
		if err != nil {
			return s.toStatus(err, "")
		}
		if isInstanceWrite(in.Action) {
			if err := s.functionFacts(ctx, &facts, t.res.name); err != nil {
				return s.toStatus(err, "")
			}
		}
		in.Org = facts
	}
	d, err := s.authz.Decide(ctx, in)
	if err != nil {
		s.log.Error("apiserver: policy decision failed", "action", in.Action, "err", err.Error())
		return status.Error(codes.Internal, "authorization unavailable")
	}
	s.metrics.decision(ctx, d)
	if d.Allow {
		return nil
	}
	reason := strings.Join(d.Reasons, "; ")
	var out error
	outcome := "denied"
	switch {
	case d.Denied && !d.OperatorOnly && !c.operator() && t.res.org != "" && t.res.org != c.org:
		// Another organization's resource: do not confirm it exists. An
		// action reserved to operators is refused whatever the resource,
		// which tells nothing about it: that is PERMISSION_DENIED.
		out = status.Errorf(codes.NotFound, "%s: not found", displayName(t))
	case d.Denied:
		if reason == "" {
			reason = "not allowed"
		}
		out = status.Errorf(codes.PermissionDenied, "%s on %s: %s", in.Action, displayName(t), reason)
	default:
		code, ok := admissionCodes[d.Code]
		if !ok {
			code = codes.FailedPrecondition
		}
		outcome = code.String()
		out = status.Error(code, reason)
	}
	detail, _ := json.Marshal(map[string]any{"action": in.Action, "reasons": d.Reasons})
	name := t.res.name
	if name == "" {
		name = t.res.parent
	}
	if aerr := s.store.AppendAudit(ctx, store.AuditEvent{
		Org: c.org, Principal: c.name, Method: methodName(ctx), Resource: name,
		Outcome: outcome, Detail: detail,
	}); aerr != nil {
		s.log.Warn("apiserver: audit of denied call failed", "err", aerr.Error())
	}
	return out
}

func displayName(t target) string {
	if t.res.name != "" {
		return t.res.name
	}
	if t.res.parent != "" {
		return t.res.parent + "/" + t.kind.collection
	}
	return t.kind.collection
}

// orgFacts loads what admission needs about org. Counting clusters and
// evaluating budgets cost queries, so only cluster creation asks for them;
// the function facts (functionFacts) are loaded for function, source and
// sink writes only.
func (s *Server) orgFacts(ctx context.Context, org string, count bool) (policy.OrgFacts, error) {
	f := policy.OrgFacts{Name: org}
	obj, err := s.store.Get(ctx, kindOrganization.collection, org)
	if errors.Is(err, store.ErrNotFound) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	m, _, err := decode(kindOrganization, obj)
	if err != nil {
		return f, err
	}
	o := m.(*cpv1.Organization)
	f.AllowedRegions = o.GetAllowedRegions()
	f.MaxClusters = int(o.GetMaxClusters())
	f.MaxFunctionInstances = int64(o.GetMaxFunctionInstances())
	f.MaxFunctionRAMBytes = o.GetMaxFunctionRamBytes()
	if count {
		n, err := s.store.Count(ctx, store.ListQuery{Kind: kindCluster.collection, Org: org})
		if err != nil {
			return f, err
		}
		f.ClusterCount = n
		if err := s.budgetFacts(ctx, &f); err != nil {
			return f, err
		}
	}
	return f, nil
}

// methodName is the RPC's short name ("CreateCluster").
func methodName(ctx context.Context) string {
	m, _ := grpc.Method(ctx)
	return m[strings.LastIndex(m, "/")+1:]
}

// audit appends the success event of a change inside its transaction.
func audit(ctx context.Context, w store.Writer, org, resource, requestID string) error {
	c := callerFrom(ctx)
	return w.AppendAudit(ctx, store.AuditEvent{
		Org: org, Principal: c.name, Method: methodName(ctx), Resource: resource,
		RequestID: requestID, Outcome: "ok",
	})
}
