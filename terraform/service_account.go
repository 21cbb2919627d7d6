package terraform

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

type serviceAccountResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*serviceAccountResource)(nil)
	_ resource.ResourceWithImportState = (*serviceAccountResource)(nil)
)

func newServiceAccountResource() resource.Resource { return &serviceAccountResource{} }

type serviceAccountModel struct {
	ID               types.String `tfsdk:"id"`
	Organization     types.String `tfsdk:"organization"`
	ServiceAccountID types.String `tfsdk:"service_account_id"`
	DisplayName      types.String `tfsdk:"display_name"`
	Description      types.String `tfsdk:"description"`
	UID              types.String `tfsdk:"uid"`
	Etag             types.String `tfsdk:"etag"`
	CreateTime       types.String `tfsdk:"create_time"`
	UpdateTime       types.String `tfsdk:"update_time"`
}

func (r *serviceAccountResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_service_account"
}

func (r *serviceAccountResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A service account: a machine identity of an organization, which authenticates with API keys (magnetar_api_key) and is granted roles with role bindings (magnetar_role_binding).",
		Attributes: map[string]schema.Attribute{
			"id":                 idAttribute(kindServiceAccount),
			"organization":       parentArgument("parent", kindOrganization, "Organization the service account belongs to"),
			"service_account_id": idArgument("service_account_id", controlPlaneID, "Id of the service account: 2 to 40 lower-case letters, digits and '-', starting with a letter and not ending with '-'."),
			"display_name":       displayNameArgument("Human-readable name."),
			"description":        displayNameArgument("What the service account is for."),
			"uid":                uidAttribute(),
			"etag":               etagAttribute(),
			"create_time":        createTimeAttribute(),
			"update_time":        updateTimeAttribute(),
		},
	}
}

func (m *serviceAccountModel) fill(sa *cpv1.ServiceAccount) {
	m.ID = types.StringValue(sa.GetName())
	parent, id := split(sa.GetName())
	m.Organization, m.ServiceAccountID = types.StringValue(parent), types.StringValue(id)
	m.DisplayName = types.StringValue(sa.GetDisplayName())
	m.Description = types.StringValue(sa.GetDescription())
	m.UID = types.StringValue(sa.GetUid())
	m.Etag = types.StringValue(sa.GetEtag())
	m.CreateTime = timeString(sa.GetCreateTime())
	m.UpdateTime = timeString(sa.GetUpdateTime())
}

func (r *serviceAccountResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan serviceAccountModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := r.client.ServiceAccounts.CreateServiceAccount(ctx, &cpv1.CreateServiceAccountRequest{
		Parent: plan.Organization.ValueString(), ServiceAccountId: plan.ServiceAccountID.ValueString(), RequestId: newRequestID(),
		ServiceAccount: &cpv1.ServiceAccount{DisplayName: plan.DisplayName.ValueString(), Description: plan.Description.ValueString()}})
	if err != nil {
		apiError(&resp.Diagnostics, "Create service account "+plan.ServiceAccountID.ValueString(), err)
		return
	}
	plan.fill(out)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *serviceAccountResource) get(ctx context.Context, name string) (*cpv1.ServiceAccount, error) {
	return r.client.ServiceAccounts.GetServiceAccount(ctx, &cpv1.GetServiceAccountRequest{Name: name})
}

func (r *serviceAccountResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[serviceAccountModel, *cpv1.ServiceAccount](ctx, req, resp, r.get)
}

func (r *serviceAccountResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state serviceAccountModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var m mask
	m.add(!plan.DisplayName.Equal(state.DisplayName), "display_name")
	m.add(!plan.Description.Equal(state.Description), "description")
	sa := &cpv1.ServiceAccount{Name: state.ID.ValueString(), DisplayName: plan.DisplayName.ValueString(), Description: plan.Description.ValueString()}
	out, err := updateFresh(ctx, state.Etag.ValueString(), etagOf(r.get, sa.Name), func(ctx context.Context, etag string) (*cpv1.ServiceAccount, error) {
		sa.Etag = etag
		return r.client.ServiceAccounts.UpdateServiceAccount(ctx, &cpv1.UpdateServiceAccountRequest{ServiceAccount: sa, UpdateMask: &fieldmaskpb.FieldMask{Paths: m}})
	})
	if err != nil {
		apiError(&resp.Diagnostics, "Update "+sa.Name, err)
		return
	}
	plan.fill(out)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *serviceAccountResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[serviceAccountModel, *cpv1.ServiceAccount](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.ServiceAccounts.DeleteServiceAccount(ctx, &cpv1.DeleteServiceAccountRequest{Name: name})
		return err
	})
}

func (r *serviceAccountResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindServiceAccount, req, resp)
}

func (m *serviceAccountModel) resourceName() string { return m.ID.ValueString() }
