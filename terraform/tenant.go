package terraform

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// defaultApplied is how long a create or update of a Pulsar tenant,
// namespace or topic waits for the region agent to apply it, unless its
// timeouts block says otherwise.
const defaultApplied = 5 * time.Minute

// Pulsar resource attributes set by the region agent.

func pulsarStateAttribute() schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: "Where the resource stands in the data plane as the region agent last reported it: PENDING, APPLIED or FAILED. Create and update wait for APPLIED, within the timeouts block (create, update; default 5m)."}
}

func pulsarStatusAttribute() schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: "Last message from the region agent, e.g. why applying failed."}
}

type tenantResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*tenantResource)(nil)
	_ resource.ResourceWithImportState = (*tenantResource)(nil)
)

func newTenantResource() resource.Resource { return &tenantResource{} }

// tenantData are the attributes the resource and the data source share.
type tenantData struct {
	ID            types.String `tfsdk:"id"`
	Cluster       types.String `tfsdk:"cluster"`
	TenantID      types.String `tfsdk:"tenant_id"`
	AdminRoles    types.List   `tfsdk:"admin_roles"`
	State         types.String `tfsdk:"state"`
	StatusMessage types.String `tfsdk:"status_message"`
	UID           types.String `tfsdk:"uid"`
	Etag          types.String `tfsdk:"etag"`
	CreateTime    types.String `tfsdk:"create_time"`
	UpdateTime    types.String `tfsdk:"update_time"`
}

type tenantModel struct {
	tenantData
	Timeouts timeouts.Value `tfsdk:"timeouts"`
}

func (r *tenantResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pulsar_tenant"
}

func (r *tenantResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A Pulsar tenant in a cluster. Its allowed clusters are implied: the cluster it lives in. The control plane records it and the cluster's region agent applies it to the data plane; create and update wait until it is applied. A tenant can only be deleted once it has no namespaces.",
		Attributes: map[string]schema.Attribute{
			"id":        idAttribute(kindTenant),
			"cluster":   parentArgument("parent", kindCluster, "Cluster the tenant lives in"),
			"tenant_id": idArgument("tenant_id", pulsarID, "Pulsar tenant name: 1 to 255 letters, digits, '_', '-', '=', ':' and '.'."),
			"admin_roles": stringListArgument(fmt.Sprintf("Pulsar roles (token subjects) that administer the tenant in the data plane; at most %d, each 1 to %d characters without surrounding spaces.", maxAdminRoles, maxRoleLen),
				adminRoles{}),
			"state":          pulsarStateAttribute(),
			"status_message": pulsarStatusAttribute(),
			"uid":            uidAttribute(),
			"etag":           etagAttribute(),
			"create_time":    createTimeAttribute(),
			"update_time":    updateTimeAttribute(),
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true}),
		},
	}
}

func (m *tenantData) fill(t *cpv1.Tenant) {
	m.ID = types.StringValue(t.GetName())
	parent, id := split(t.GetName())
	m.Cluster, m.TenantID = types.StringValue(parent), types.StringValue(id)
	m.AdminRoles = stringList(t.GetAdminRoles())
	m.State = types.StringValue(t.GetState().String())
	m.StatusMessage = types.StringValue(t.GetStatusMessage())
	m.UID = types.StringValue(t.GetUid())
	m.Etag = types.StringValue(t.GetEtag())
	m.CreateTime = timeString(t.GetCreateTime())
	m.UpdateTime = timeString(t.GetUpdateTime())
}

func (r *tenantResource) get(ctx context.Context, name string) (*cpv1.Tenant, error) {
	return r.client.Tenants.GetTenant(ctx, &cpv1.GetTenantRequest{Name: name})
}

func (r *tenantResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan tenantModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t := &cpv1.Tenant{AdminRoles: listStrings(ctx, plan.AdminRoles, &resp.Diagnostics)}
	out, err := r.client.Tenants.CreateTenant(ctx, &cpv1.CreateTenantRequest{Parent: plan.Cluster.ValueString(),
		TenantId: plan.TenantID.ValueString(), Tenant: t, RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create Pulsar tenant "+plan.TenantID.ValueString(), err)
		return
	}
	waitAndStore(ctx, out.GetName(), plan.Timeouts.Create, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *tenantResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[tenantModel, *cpv1.Tenant](ctx, req, resp, r.get)
}

func (r *tenantResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state tenantModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.ID.ValueString()
	t := &cpv1.Tenant{Name: name, AdminRoles: listStrings(ctx, plan.AdminRoles, &resp.Diagnostics)}
	_, err := updateFresh(ctx, state.Etag.ValueString(), etagOf(r.get, name), func(ctx context.Context, etag string) (*cpv1.Tenant, error) {
		t.Etag = etag
		return r.client.Tenants.UpdateTenant(ctx, &cpv1.UpdateTenantRequest{Tenant: t, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"admin_roles"}}})
	})
	if err != nil {
		apiError(&resp.Diagnostics, "Update "+name, err)
		return
	}
	waitAndStore(ctx, name, plan.Timeouts.Update, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *tenantResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[tenantModel, *cpv1.Tenant](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.Tenants.DeleteTenant(ctx, &cpv1.DeleteTenantRequest{Name: name})
		return err
	})
}

func (r *tenantResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindTenant, req, resp)
}

func (m *tenantData) resourceName() string { return m.ID.ValueString() }

// Limits of a tenant's admin roles (controlplane/apiserver).
const (
	maxAdminRoles = 64
	maxRoleLen    = 255
)

// adminRoles checks a tenant's admin roles with the API's messages.
type adminRoles struct{}

func (adminRoles) Description(context.Context) string {
	return fmt.Sprintf("at most %d roles of 1 to %d characters without surrounding spaces", maxAdminRoles, maxRoleLen)
}

func (v adminRoles) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (adminRoles) ValidateList(_ context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	elems := req.ConfigValue.Elements()
	if len(elems) > maxAdminRoles {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid admin_roles", fmt.Sprintf("tenant.admin_roles: at most %d roles", maxAdminRoles))
		return
	}
	for i, e := range elems {
		s, ok := e.(types.String)
		if !ok || s.IsNull() || s.IsUnknown() {
			continue
		}
		if r := s.ValueString(); r == "" || len(r) > maxRoleLen || strings.TrimSpace(r) != r {
			resp.Diagnostics.AddAttributeError(req.Path.AtListIndex(i), "Invalid admin_roles",
				fmt.Sprintf("tenant.admin_roles[%d]: must be 1 to %d characters without surrounding spaces", i, maxRoleLen))
		}
	}
}
