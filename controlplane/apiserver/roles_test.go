package apiserver

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/policy/roles"
)

// Every role of policy/roles can be bound, and a binding of
// roles/billing.viewer lets its member read the organization's usage and
// nothing else.
func TestRoleBindingRoles(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	a := h.setup("acme")[0]
	ac := h.authCtx(a.key)
	for i, r := range roles.Names() {
		must[*cpv1.RoleBinding](t)(h.rbs.CreateRoleBinding(ac, &cpv1.CreateRoleBindingRequest{Parent: a.org, RoleBindingId: fmt.Sprintf("b%d", i),
			RoleBinding: &cpv1.RoleBinding{Role: r, Member: a.sa, Resource: a.org}}))
	}
	_, err := h.rbs.CreateRoleBinding(ac, &cpv1.CreateRoleBindingRequest{Parent: a.org, RoleBindingId: "root",
		RoleBinding: &cpv1.RoleBinding{Role: "roles/root", Member: a.sa, Resource: a.org}})
	wantCode(t, err, codes.InvalidArgument, "roles/billing.viewer")

	sa := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(ac, &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: "finance"}))
	must[*cpv1.RoleBinding](t)(h.rbs.CreateRoleBinding(ac, &cpv1.CreateRoleBindingRequest{Parent: a.org, RoleBindingId: "finance",
		RoleBinding: &cpv1.RoleBinding{Role: "roles/billing.viewer", Member: sa.Name, Resource: a.org}}))
	key := must[*cpv1.ApiKey](t)(h.sas.CreateApiKey(ac, &cpv1.CreateApiKeyRequest{Parent: sa.Name, ApiKeyId: "k1"}))
	fc := h.authCtx(key.Secret)
	must[*cpv1.ListUsageRecordsResponse](t)(cpv1.NewBillingClient(h.conn).ListUsageRecords(fc, &cpv1.ListUsageRecordsRequest{Parent: a.org}))
	_, err = h.clusters.ListClusters(fc, &cpv1.ListClustersRequest{Parent: a.org})
	wantCode(t, err, codes.PermissionDenied, "")
}

// A tenant's principal asking for an action reserved to operators is
// refused with PERMISSION_DENIED, also when the resource names another
// organization (which it cannot tell anything about); other actions on
// another organization's resources stay NOT_FOUND.
func TestOperatorOnlyActionsArePermissionDenied(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	ts := h.setup("alpha", "beta")
	a, b := ts[0], ts[1]
	ac := h.authCtx(a.key)
	_, err := h.orgs.CreateOrganization(ac, &cpv1.CreateOrganizationRequest{OrganizationId: "evil", Organization: &cpv1.Organization{}})
	wantCode(t, err, codes.PermissionDenied, "organizations.create is reserved to operators")
	_, err = h.orgs.CreateOrganization(ac, &cpv1.CreateOrganizationRequest{OrganizationId: "beta", Organization: &cpv1.Organization{}})
	wantCode(t, err, codes.PermissionDenied, "organizations.create is reserved to operators")
	_, err = h.orgs.DeleteOrganization(ac, &cpv1.DeleteOrganizationRequest{Name: b.org})
	wantCode(t, err, codes.PermissionDenied, "reserved to operators")
	_, err = h.orgs.DeleteOrganization(ac, &cpv1.DeleteOrganizationRequest{Name: "organizations/ghost"})
	wantCode(t, err, codes.PermissionDenied, "reserved to operators")
	_, err = h.orgs.GetOrganization(ac, &cpv1.GetOrganizationRequest{Name: b.org})
	wantCode(t, err, codes.NotFound, "")
}
