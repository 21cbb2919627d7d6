package terraform

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/policy/roles"
)

type roleBindingResource struct{ configured }

var (
	_ resource.ResourceWithConfigure      = (*roleBindingResource)(nil)
	_ resource.ResourceWithImportState    = (*roleBindingResource)(nil)
	_ resource.ResourceWithValidateConfig = (*roleBindingResource)(nil)
)

func newRoleBindingResource() resource.Resource { return &roleBindingResource{} }

// Roles are the roles the API binds (policy/roles).
var Roles = roles.Names()

type roleBindingModel struct {
	ID            types.String `tfsdk:"id"`
	Organization  types.String `tfsdk:"organization"`
	RoleBindingID types.String `tfsdk:"role_binding_id"`
	Role          types.String `tfsdk:"role"`
	Member        types.String `tfsdk:"member"`
	Resource      types.String `tfsdk:"resource"`
	UID           types.String `tfsdk:"uid"`
	Etag          types.String `tfsdk:"etag"`
	CreateTime    types.String `tfsdk:"create_time"`
}

func (r *roleBindingResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_role_binding"
}

func (r *roleBindingResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Grants a role to a principal (a user or service account of the organization) on a resource and everything under it. Role bindings are immutable: any change replaces the binding.",
		Attributes: map[string]schema.Attribute{
			"id":              idAttribute(kindRoleBinding),
			"organization":    parentArgument("parent", kindOrganization, "Organization the binding belongs to"),
			"role_binding_id": idArgument("role_binding_id", looseID, "Id of the binding: 1 to 63 lower-case letters, digits, '.', '_' and '-', starting with a letter or digit."),
			"role": schema.StringAttribute{Required: true, PlanModifiers: replace(),
				Description: "Role granted: " + strings.Join(Roles, ", ") + ".",
				Validators:  []validator.String{oneOfValidator{field: "role_binding.role", values: Roles}}},
			"member": schema.StringAttribute{Required: true, PlanModifiers: replace(),
				Description: "Principal granted the role, a resource name under the organization, e.g. organizations/acme/serviceAccounts/ci."},
			"resource": schema.StringAttribute{Required: true, PlanModifiers: replace(),
				Description: "Resource the role applies to: the organization or a resource under it, e.g. organizations/acme/clusters/dev."},
			"uid":         uidAttribute(),
			"etag":        etagAttribute(),
			"create_time": createTimeAttribute(),
		},
	}
}

// ValidateConfig repeats the API's checks of member and resource against
// the organization when all three are known.
func (r *roleBindingResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m roleBindingModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Organization.IsUnknown() || m.Organization.IsNull() {
		return
	}
	org := m.Organization.ValueString()
	if v := m.Member; !v.IsUnknown() && !v.IsNull() && !strings.HasPrefix(v.ValueString(), org+"/") {
		resp.Diagnostics.AddAttributeError(pathOf("member"), "Invalid member", "role_binding.member: must be a principal of "+org)
	}
	if v := m.Resource; !v.IsUnknown() && !v.IsNull() && v.ValueString() != org && !strings.HasPrefix(v.ValueString(), org+"/") {
		resp.Diagnostics.AddAttributeError(pathOf("resource"), "Invalid resource", "role_binding.resource: must be "+org+" or a resource under it")
	}
}

func (m *roleBindingModel) fill(b *cpv1.RoleBinding) {
	m.ID = types.StringValue(b.GetName())
	parent, id := split(b.GetName())
	m.Organization, m.RoleBindingID = types.StringValue(parent), types.StringValue(id)
	m.Role, m.Member, m.Resource = types.StringValue(b.GetRole()), types.StringValue(b.GetMember()), types.StringValue(b.GetResource())
	m.UID = types.StringValue(b.GetUid())
	m.Etag = types.StringValue(b.GetEtag())
	m.CreateTime = timeString(b.GetCreateTime())
}

func (r *roleBindingResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan roleBindingModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := r.client.RoleBindings.CreateRoleBinding(ctx, &cpv1.CreateRoleBindingRequest{Parent: plan.Organization.ValueString(),
		RoleBindingId: plan.RoleBindingID.ValueString(), RequestId: newRequestID(),
		RoleBinding: &cpv1.RoleBinding{Role: plan.Role.ValueString(), Member: plan.Member.ValueString(), Resource: plan.Resource.ValueString()}})
	if err != nil {
		apiError(&resp.Diagnostics, "Create role binding "+plan.RoleBindingID.ValueString(), err)
		return
	}
	plan.fill(out)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *roleBindingResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[roleBindingModel, *cpv1.RoleBinding](ctx, req, resp, func(ctx context.Context, name string) (*cpv1.RoleBinding, error) {
		return r.client.RoleBindings.GetRoleBinding(ctx, &cpv1.GetRoleBindingRequest{Name: name})
	})
}

// Update is never called with a change: every argument replaces the binding.
func (r *roleBindingResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan roleBindingModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *roleBindingResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[roleBindingModel, *cpv1.RoleBinding](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.RoleBindings.DeleteRoleBinding(ctx, &cpv1.DeleteRoleBindingRequest{Name: name})
		return err
	})
}

func (r *roleBindingResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindRoleBinding, req, resp)
}

func (m *roleBindingModel) resourceName() string { return m.ID.ValueString() }
