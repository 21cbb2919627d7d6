package terraform

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// Default timeouts of a cluster's operations.
const (
	defaultClusterCreate = 20 * time.Minute
	defaultClusterUpdate = 20 * time.Minute
	defaultClusterDelete = 20 * time.Minute
)

// maxClusterNodes is the API's limit on brokers and bookies.
const maxClusterNodes = 64

type clusterResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*clusterResource)(nil)
	_ resource.ResourceWithImportState = (*clusterResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*clusterResource)(nil)
)

func newClusterResource() resource.Resource { return &clusterResource{} }

// clusterData are the attributes the resource and the data source share.
type clusterData struct {
	ID                 types.String `tfsdk:"id"`
	Organization       types.String `tfsdk:"organization"`
	ClusterID          types.String `tfsdk:"cluster_id"`
	Region             types.String `tfsdk:"region"`
	DisplayName        types.String `tfsdk:"display_name"`
	Brokers            types.Int64  `tfsdk:"brokers"`
	Bookies            types.Int64  `tfsdk:"bookies"`
	DeletionProtection types.Bool   `tfsdk:"deletion_protection"`
	State              types.String `tfsdk:"state"`
	ServiceURL         types.String `tfsdk:"service_url"`
	AdminURL           types.String `tfsdk:"admin_url"`
	CACertificate      types.String `tfsdk:"ca_certificate"`
	StatusMessage      types.String `tfsdk:"status_message"`
	UID                types.String `tfsdk:"uid"`
	Etag               types.String `tfsdk:"etag"`
	CreateTime         types.String `tfsdk:"create_time"`
	UpdateTime         types.String `tfsdk:"update_time"`
}

type clusterModel struct {
	clusterData
	Timeouts timeouts.Value `tfsdk:"timeouts"`
}

func (r *clusterResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_cluster"
}

func (r *clusterResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	sizeRange := int64Range{lo: 1, hi: maxClusterNodes, msg: fmt.Sprintf("must be between 1 and %d", maxClusterNodes)}
	brokers, bookies := sizeRange, sizeRange
	brokers.field, bookies.field = "cluster.size.brokers", "cluster.size.bookies"
	resp.Schema = schema.Schema{
		Description: "A Pulsar cluster of an organization in one region, provisioned by the region's agent. Create, size changes and delete wait for the cluster's operation to finish, within the timeouts. While deletion_protection is true the cluster cannot be destroyed or replaced: the plan fails.",
		Attributes: map[string]schema.Attribute{
			"id":           idAttribute(kindCluster),
			"organization": parentArgument("parent", kindOrganization, "Organization that owns the cluster"),
			"cluster_id":   idArgument("cluster_id", controlPlaneID, "Id of the cluster: 2 to 40 lower-case letters, digits and '-', starting with a letter and not ending with '-'."),
			"region": schema.StringAttribute{Required: true, PlanModifiers: replace(),
				Description: "Region the cluster runs in (regions/{region}). Changing it replaces the cluster.",
				Validators:  []validator.String{nameValidator{field: "cluster.region", kind: kindRegion}}},
			"display_name": displayNameArgument("Human-readable name."),
			"brokers": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(1),
				Description: "Number of brokers, 1 to 64. Default 1.", Validators: []validator.Int64{brokers}},
			"bookies": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(1),
				Description: "Number of bookies, 1 to 64. Default 1.", Validators: []validator.Int64{bookies}},
			"deletion_protection": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				Description: "While true, destroying or replacing the cluster fails at plan time, and the API refuses to delete it. Default false."},
			"state":          schema.StringAttribute{Computed: true, Description: "CREATING, READY, UPDATING, DELETING or FAILED."},
			"service_url":    schema.StringAttribute{Computed: true, Description: "Pulsar binary-protocol URL for clients, once READY: pulsar+ssl://... when the data plane serves TLS (as managed clusters do), pulsar://... otherwise."},
			"admin_url":      schema.StringAttribute{Computed: true, Description: "Pulsar admin REST URL for clients, once READY: https://... when the data plane serves TLS."},
			"ca_certificate": schema.StringAttribute{Computed: true, Description: "PEM certificate of the CA that issued the brokers' certificates: the trust file of clients of service_url and admin_url. Empty when the data plane serves no TLS."},
			"status_message": schema.StringAttribute{Computed: true, Description: "Last status message from the region agent."},
			"uid":            uidAttribute(),
			"etag":           etagAttribute(),
			"create_time":    createTimeAttribute(),
			"update_time":    updateTimeAttribute(),
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
}

func (m *clusterData) fill(c *cpv1.Cluster) {
	m.ID = types.StringValue(c.GetName())
	parent, id := split(c.GetName())
	m.Organization, m.ClusterID = types.StringValue(parent), types.StringValue(id)
	m.Region = types.StringValue(c.GetRegion())
	m.DisplayName = types.StringValue(c.GetDisplayName())
	m.Brokers = types.Int64Value(int64(c.GetSize().GetBrokers()))
	m.Bookies = types.Int64Value(int64(c.GetSize().GetBookies()))
	m.DeletionProtection = types.BoolValue(c.GetDeletionProtection())
	m.State = types.StringValue(c.GetState().String())
	m.ServiceURL = types.StringValue(c.GetServiceUrl())
	m.AdminURL = types.StringValue(c.GetAdminUrl())
	m.CACertificate = types.StringValue(c.GetCaCertificate())
	m.StatusMessage = types.StringValue(c.GetStatusMessage())
	m.UID = types.StringValue(c.GetUid())
	m.Etag = types.StringValue(c.GetEtag())
	m.CreateTime = timeString(c.GetCreateTime())
	m.UpdateTime = timeString(c.GetUpdateTime())
}

func (r *clusterResource) get(ctx context.Context, name string) (*cpv1.Cluster, error) {
	return r.client.Clusters.GetCluster(ctx, &cpv1.GetClusterRequest{Name: name})
}

// ModifyPlan refuses, at plan time, to destroy or replace a cluster whose
// deletion_protection is true, with the API's message.
func (r *clusterResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.State.Raw.IsNull() {
		return // create
	}
	var state clusterModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !req.Plan.Raw.IsNull() && len(resp.RequiresReplace) == 0 {
		r.keepStatus(ctx, state, req, resp)
	}
	if !state.DeletionProtection.ValueBool() {
		return
	}
	what := ""
	switch {
	case req.Plan.Raw.IsNull():
		what = "destroy"
	case len(resp.RequiresReplace) > 0:
		what = "replace"
	default:
		return
	}
	resp.Diagnostics.AddError("Cluster is protected from deletion",
		fmt.Sprintf("cannot %s %s: cluster.deletion_protection: is true; set it to false before deleting the cluster", what, state.ID.ValueString()))
}

// keepStatus plans the agent-reported attributes as they are when an
// update leaves the size of a READY cluster alone: such an update is
// done by the API at once and the data plane does not change, so the plan
// shows only what the configuration changes.
func (r *clusterResource) keepStatus(ctx context.Context, state clusterModel, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var plan clusterModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || state.State.ValueString() != cpv1.Cluster_READY.String() ||
		!plan.Brokers.Equal(state.Brokers) || !plan.Bookies.Equal(state.Bookies) {
		return
	}
	for name, v := range map[string]types.String{"state": state.State, "service_url": state.ServiceURL,
		"admin_url": state.AdminURL, "ca_certificate": state.CACertificate, "status_message": state.StatusMessage} {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, pathOf(name), v)...)
	}
}

func (r *clusterResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan clusterModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Create(ctx, defaultClusterCreate)
	if resp.Diagnostics.Append(diags...); diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cl := &cpv1.Cluster{Region: plan.Region.ValueString(), DisplayName: plan.DisplayName.ValueString(),
		DeletionProtection: plan.DeletionProtection.ValueBool(),
		Size:               &cpv1.ClusterSize{Brokers: int32(plan.Brokers.ValueInt64()), Bookies: int32(plan.Bookies.ValueInt64())}}
	op, err := r.client.Clusters.CreateCluster(ctx, &cpv1.CreateClusterRequest{Parent: plan.Organization.ValueString(),
		ClusterId: plan.ClusterID.ValueString(), Cluster: cl, RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create cluster "+plan.ClusterID.ValueString(), err)
		return
	}
	name := op.GetTarget()
	_, waitErr := r.client.waitOperation(ctx, op)
	r.settle(ctx, name, &plan, &resp.State, &resp.Diagnostics)
	if waitErr != nil {
		// The cluster exists: its state is saved above, so Terraform marks
		// it tainted and replaces it on the next apply.
		resp.Diagnostics.AddError("Create cluster "+name, waitErr.Error())
	}
}

// settle reads the cluster after an operation and stores it in st.
func (r *clusterResource) settle(ctx context.Context, name string, m *clusterModel, st interface {
	Set(context.Context, any) diag.Diagnostics
}, diags *diag.Diagnostics) {
	rctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.Background(), r.client.cfg.RequestTimeout)
		defer cancel()
	}
	c, err := r.get(rctx, name)
	if err != nil {
		apiError(diags, "Read "+name, err)
		return
	}
	planned := m.clusterData
	m.fill(c)
	// Agent-reported attributes the plan promised (keepStatus) stay as
	// planned: an agent report landing during the apply shows up at the
	// next refresh instead of as an inconsistent result.
	for _, f := range []struct{ got, want *types.String }{{&m.State, &planned.State}, {&m.ServiceURL, &planned.ServiceURL},
		{&m.AdminURL, &planned.AdminURL}, {&m.CACertificate, &planned.CACertificate}, {&m.StatusMessage, &planned.StatusMessage}} {
		if !f.want.IsUnknown() && !f.want.IsNull() {
			*f.got = *f.want
		}
	}
	diags.Append(st.Set(ctx, m)...)
}

func (r *clusterResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[clusterModel, *cpv1.Cluster](ctx, req, resp, r.get)
}

func (r *clusterResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state clusterModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := plan.Timeouts.Update(ctx, defaultClusterUpdate)
	if resp.Diagnostics.Append(diags...); diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var m mask
	m.add(!plan.DisplayName.Equal(state.DisplayName), "display_name")
	m.add(!plan.Brokers.Equal(state.Brokers), "size.brokers")
	m.add(!plan.Bookies.Equal(state.Bookies), "size.bookies")
	m.add(!plan.DeletionProtection.Equal(state.DeletionProtection), "deletion_protection")
	name := state.ID.ValueString()
	if len(m) > 0 {
		cl := &cpv1.Cluster{Name: name, DisplayName: plan.DisplayName.ValueString(), DeletionProtection: plan.DeletionProtection.ValueBool(),
			Size: &cpv1.ClusterSize{Brokers: int32(plan.Brokers.ValueInt64()), Bookies: int32(plan.Bookies.ValueInt64())}}
		op, err := updateFresh(ctx, state.Etag.ValueString(), func(ctx context.Context) (string, error) {
			c, err := r.get(ctx, name)
			return c.GetEtag(), err
		}, func(ctx context.Context, etag string) (*cpv1.Operation, error) {
			cl.Etag = etag
			return r.client.Clusters.UpdateCluster(ctx, &cpv1.UpdateClusterRequest{Cluster: cl, UpdateMask: &fieldmaskpb.FieldMask{Paths: m}})
		})
		if err != nil {
			apiError(&resp.Diagnostics, "Update "+name, err)
			return
		}
		if _, err := r.client.waitOperation(ctx, op); err != nil {
			r.settle(ctx, name, &plan, &resp.State, &resp.Diagnostics)
			resp.Diagnostics.AddError("Update "+name, err.Error())
			return
		}
	}
	r.settle(ctx, name, &plan, &resp.State, &resp.Diagnostics)
}

func (r *clusterResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state clusterModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	limit, diags := state.Timeouts.Delete(ctx, defaultClusterDelete)
	if resp.Diagnostics.Append(diags...); diags.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	name := state.ID.ValueString()
	op, err := r.client.Clusters.DeleteCluster(ctx, &cpv1.DeleteClusterRequest{Name: name})
	if isNotFound(err) {
		return
	}
	if err != nil {
		apiError(&resp.Diagnostics, "Delete "+name, err)
		return
	}
	if _, err := r.client.waitOperation(ctx, op); err != nil {
		resp.Diagnostics.AddError("Delete "+name, err.Error())
	}
}

func (r *clusterResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindCluster, req, resp)
}

func (m *clusterData) resourceName() string { return m.ID.ValueString() }
