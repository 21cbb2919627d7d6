package policy

import (
	"context"
	"fmt"
	"sort"

	"github.com/open-policy-agent/opa/v1/rego"
)

const (
	queryPulsarAllow   = "data.magnetar.pulsar.allow"
	queryPulsarReasons = "data.magnetar.pulsar.reasons"
)

// PulsarInput asks the data-plane policy (rego/pulsar.rego) whether Role
// may take Action on Resource, given the facts of that resource.
type PulsarInput struct {
	Role     string
	Action   string // "produce", "consume", "lookup", "tenant_admin", "superuser"
	Resource string // the topic, namespace or tenant asked about, for reasons

	Superusers      []string
	TenantAdmins    []string
	NamespaceGrants map[string][]string // role pattern -> actions
	TopicGrants     map[string][]string
	Subscription    string
	// SubscriptionRoles, when non-nil, are the only roles allowed on
	// Subscription (besides tenant admins).
	SubscriptionRoles    []string
	SubscriptionAuthMode string // "None" (default) or "Prefix"
}

func (in *PulsarInput) value() map[string]any {
	strs := func(s []string) []any {
		out := make([]any, len(s))
		for i, v := range s {
			out[i] = v
		}
		return out
	}
	grants := func(m map[string][]string) map[string]any {
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[k] = strs(v)
		}
		return out
	}
	v := map[string]any{
		"role":                   in.Role,
		"action":                 in.Action,
		"resource":               in.Resource,
		"superusers":             strs(in.Superusers),
		"tenant_admins":          strs(in.TenantAdmins),
		"namespace_grants":       grants(in.NamespaceGrants),
		"topic_grants":           grants(in.TopicGrants),
		"subscription":           in.Subscription,
		"subscription_auth_mode": in.SubscriptionAuthMode,
	}
	if in.SubscriptionRoles != nil {
		v["subscription_roles"] = strs(in.SubscriptionRoles)
	}
	return v
}

// DecidePulsar evaluates the data-plane policy. A denial carries the
// reasons to tell the client. On error the Decision is a denial and the
// error wraps ErrEvaluation (fail closed).
func (e *Engine) DecidePulsar(ctx context.Context, in PulsarInput) (Decision, error) {
	input := in.value()
	rs, err := e.pulsarAllow.Eval(ctx, rego.EvalInput(input))
	if err != nil {
		return Decision{Denied: true}, fmt.Errorf("%w: pulsar authz: %w", ErrEvaluation, err)
	}
	allowed, ok := firstBool(rs)
	if !ok {
		return Decision{Denied: true}, fmt.Errorf("%w: pulsar authz: allow is not a boolean", ErrEvaluation)
	}
	if allowed {
		return Decision{Allow: true}, nil
	}
	d := Decision{Denied: true}
	rs, err = e.pulsarReasons.Eval(ctx, rego.EvalInput(input))
	if err != nil {
		return d, fmt.Errorf("%w: pulsar authz reasons: %w", ErrEvaluation, err)
	}
	for _, r := range firstArray(rs) {
		if s, ok := r.(string); ok {
			d.Reasons = append(d.Reasons, s)
		}
	}
	if len(d.Reasons) == 0 {
		d.Reasons = []string{"permission denied"}
	}
	sort.Strings(d.Reasons)
	return d, nil
}
