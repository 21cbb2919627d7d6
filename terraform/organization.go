package terraform

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

type organizationResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*organizationResource)(nil)
	_ resource.ResourceWithImportState = (*organizationResource)(nil)
)

func newOrganizationResource() resource.Resource { return &organizationResource{} }

type organizationModel struct {
	ID             types.String `tfsdk:"id"`
	OrganizationID types.String `tfsdk:"organization_id"`
	DisplayName    types.String `tfsdk:"display_name"`
	AllowedRegions types.List   `tfsdk:"allowed_regions"`
	MaxClusters    types.Int64  `tfsdk:"max_clusters"`
	UID            types.String `tfsdk:"uid"`
	Etag           types.String `tfsdk:"etag"`
	CreateTime     types.String `tfsdk:"create_time"`
	UpdateTime     types.String `tfsdk:"update_time"`
}

func (r *organizationResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_organization"
}

func (r *organizationResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An organization: a tenant of the service, under which every other resource lives. Creating and deleting organizations, and setting allowed_regions and max_clusters, takes an operator's API key; an organization can only be deleted once it has no clusters, service accounts, users or role bindings.",
		Attributes: map[string]schema.Attribute{
			"id":              idAttribute(kindOrganization),
			"organization_id": idArgument("organization_id", controlPlaneID, "Id of the organization, the last segment of its name: 2 to 40 lower-case letters, digits and '-', starting with a letter and not ending with '-'."),
			"display_name":    displayNameArgument("Human-readable name."),
			"allowed_regions": stringListArgument("Regions (regions/{region}) the organization may place clusters in; empty means every region.",
				listOfNames{field: "organization.allowed_regions", kind: kindRegion}),
			"max_clusters": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				Description: "Maximum number of clusters; 0 means the service default.",
				Validators:  []validator.Int64{int64Range{field: "organization.max_clusters", lo: 0, hi: 1 << 31, msg: "must not be negative"}}},
			"uid":         uidAttribute(),
			"etag":        etagAttribute(),
			"create_time": createTimeAttribute(),
			"update_time": updateTimeAttribute(),
		},
	}
}

func (m *organizationModel) fill(o *cpv1.Organization) {
	m.ID = types.StringValue(o.GetName())
	_, id := split(o.GetName())
	m.OrganizationID = types.StringValue(id)
	m.DisplayName = types.StringValue(o.GetDisplayName())
	m.AllowedRegions = stringList(o.GetAllowedRegions())
	m.MaxClusters = types.Int64Value(int64(o.GetMaxClusters()))
	m.UID = types.StringValue(o.GetUid())
	m.Etag = types.StringValue(o.GetEtag())
	m.CreateTime = timeString(o.GetCreateTime())
	m.UpdateTime = timeString(o.GetUpdateTime())
}

func (r *organizationResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan organizationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	org := &cpv1.Organization{DisplayName: plan.DisplayName.ValueString(),
		AllowedRegions: listStrings(ctx, plan.AllowedRegions, &resp.Diagnostics), MaxClusters: int32(plan.MaxClusters.ValueInt64())}
	out, err := r.client.Organizations.CreateOrganization(ctx, &cpv1.CreateOrganizationRequest{
		OrganizationId: plan.OrganizationID.ValueString(), Organization: org, RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create organization "+plan.OrganizationID.ValueString(), err)
		return
	}
	plan.fill(out)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *organizationResource) get(ctx context.Context, name string) (*cpv1.Organization, error) {
	return r.client.Organizations.GetOrganization(ctx, &cpv1.GetOrganizationRequest{Name: name})
}

func (r *organizationResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[organizationModel, *cpv1.Organization](ctx, req, resp, r.get)
}

func (r *organizationResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state organizationModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var m mask
	m.add(!plan.DisplayName.Equal(state.DisplayName), "display_name")
	m.add(!plan.AllowedRegions.Equal(state.AllowedRegions), "allowed_regions")
	m.add(!plan.MaxClusters.Equal(state.MaxClusters), "max_clusters")
	org := &cpv1.Organization{Name: state.ID.ValueString(), DisplayName: plan.DisplayName.ValueString(),
		AllowedRegions: listStrings(ctx, plan.AllowedRegions, &resp.Diagnostics), MaxClusters: int32(plan.MaxClusters.ValueInt64())}
	out, err := updateFresh(ctx, state.Etag.ValueString(), etagOf(r.get, org.Name), func(ctx context.Context, etag string) (*cpv1.Organization, error) {
		org.Etag = etag
		return r.client.Organizations.UpdateOrganization(ctx, &cpv1.UpdateOrganizationRequest{Organization: org, UpdateMask: &fieldmaskpb.FieldMask{Paths: m}})
	})
	if err != nil {
		apiError(&resp.Diagnostics, "Update "+org.Name, err)
		return
	}
	plan.fill(out)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *organizationResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[organizationModel, *cpv1.Organization](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.Organizations.DeleteOrganization(ctx, &cpv1.DeleteOrganizationRequest{Name: name})
		return err
	})
}

func (r *organizationResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindOrganization, req, resp)
}

func (m *organizationModel) resourceName() string { return m.ID.ValueString() }
