package cli_test

import (
	"strings"
	"testing"
)

// "runbook plan KIND" takes the flags of "runbook KIND" (evacuate: --org and
// --region in both), without --no-wait, which only the runbooks have.
func TestRunbookPlanFlags(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	contains(t, "plan evacuate", cp.ok(t, key, "runbook", "plan", "evacuate", "--org", "acme", "--region", "local-a"),
		"evacuate local-a (0 groups)")
	for _, args := range [][]string{
		{"runbook", "plan", "evacuate", "--group", "acme", "--region", "local-a"},
		{"runbook", "plan", "failover", "--group", "acme/orders", "--no-wait"},
		{"runbook", "failback", "--group", "acme/orders", "--to", "dr"},
	} {
		r := cp.as(t, key, args...)
		if r.err == nil || !strings.Contains(r.err.Error(), "unknown flag") {
			t.Errorf("magnetar %s: %v, want an unknown flag", strings.Join(args, " "), r.err)
		}
	}
	r := cp.as(t, key, "runbook", "plan", "evacuate", "--region", "local-a")
	if r.err == nil || !strings.Contains(r.err.Error(), "--org and --region are required") {
		t.Errorf("plan evacuate without --org: %v", r.err)
	}
	contains(t, "evacuate", cp.ok(t, key, "runbook", "evacuate", "--org", "acme", "--region", "local-a"), "evacuate local-a (0 groups)")
}

// roles/billing.viewer is granted like every other role.
func TestRoleBindingBillingViewer(t *testing.T) {
	cp := startControlPlane(t)
	key := cp.setupOrg(t)
	contains(t, "rolebinding create", cp.ok(t, key, "rolebinding", "create", "acme", "--role", "billing.viewer",
		"--member", "organizations/acme/serviceAccounts/ci"), "roles/billing.viewer")
}
