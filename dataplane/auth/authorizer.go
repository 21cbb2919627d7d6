package auth

import (
	"context"
	"errors"
	"strings"

	"github.com/magnetar-dev/magnetar/policy"
)

// Action is what a role asks to do.
type Action string

// The actions the broker authorizes.
const (
	ActionProduce     Action = "produce"
	ActionConsume     Action = "consume"
	ActionLookup      Action = "lookup"
	ActionTenantAdmin Action = "tenant_admin"
	ActionSuperuser   Action = "superuser"
)

// ErrUnauthorized is wrapped by every denial.
var ErrUnauthorized = errors.New("not authorized")

// DeniedError is a denial with the reasons the client is told, and the
// request it answers (for the broker's log and metrics; Error does not
// repeat them).
type DeniedError struct {
	Reasons  []string
	Role     string
	Action   Action
	Resource string
}

func (e *DeniedError) Error() string { return "not authorized: " + strings.Join(e.Reasons, "; ") }

// Unwrap makes errors.Is(err, ErrUnauthorized) hold.
func (e *DeniedError) Unwrap() error { return ErrUnauthorized }

// Request is one authorization question with the facts of its resource,
// collected by the caller from the tenant and namespace records.
type Request struct {
	Role     string
	Action   Action
	Resource string // topic, namespace or tenant name, for the reasons

	TenantAdmins    []string
	NamespaceGrants map[string][]string
	TopicGrants     map[string][]string
	Subscription    string
	// SubscriptionRoles: nil, the subscription is open to whoever may
	// consume; else the roles allowed on it.
	SubscriptionRoles    []string
	SubscriptionAuthMode string
}

// Authorizer decides Requests with the policy engine.
type Authorizer struct {
	engine     *policy.Engine
	superusers []string
}

// NewAuthorizer returns an Authorizer. superusers are Pulsar's
// superUserRoles: every action on every resource. A superuser role ending
// in "*" admits every role it prefixes ("operators:*").
func NewAuthorizer(engine *policy.Engine, superusers []string) *Authorizer {
	return &Authorizer{engine: engine, superusers: append([]string(nil), superusers...)}
}

// IsSuperuser says whether role is a configured superuser, without Rego
// (the admin API asks it to skip collecting facts).
func (a *Authorizer) IsSuperuser(role string) bool {
	for _, s := range a.superusers {
		if s == role {
			return true
		}
		if prefix, ok := strings.CutSuffix(s, "*"); ok && strings.HasPrefix(role, prefix) {
			return true
		}
	}
	return false
}

// Authorize returns nil when r is allowed, a *DeniedError when it is not,
// and an error wrapping policy.ErrEvaluation (to be treated as a denial)
// when the policy could not be evaluated.
func (a *Authorizer) Authorize(ctx context.Context, r Request) error {
	d, err := a.engine.DecidePulsar(ctx, policy.PulsarInput{
		Role: r.Role, Action: string(r.Action), Resource: r.Resource,
		Superusers: a.superusers, TenantAdmins: r.TenantAdmins,
		NamespaceGrants: r.NamespaceGrants, TopicGrants: r.TopicGrants,
		Subscription: r.Subscription, SubscriptionRoles: r.SubscriptionRoles,
		SubscriptionAuthMode: r.SubscriptionAuthMode,
	})
	if err != nil {
		return err
	}
	if d.Allow {
		return nil
	}
	return &DeniedError{Reasons: d.Reasons, Role: r.Role, Action: r.Action, Resource: r.Resource}
}
