package terraform

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// byNameDataSource reads one resource by its full name into the model M
// of the matching resource: its schema is the resource's, every attribute
// computed except id, which names the resource to read.
type byNameDataSource[M any] struct {
	configured
	suffix string // type name after "magnetar_"
	kind   kind
	res    func() resource.Resource
	// read fetches name into m; a NOT_FOUND is reported as an error.
	read func(ctx context.Context, c *Client, name string, m *M) error
}

func (d *byNameDataSource[M]) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_" + d.suffix
}

func (d *byNameDataSource[M]) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.configure(req.ProviderData, &resp.Diagnostics)
}

func (d *byNameDataSource[M]) Schema(ctx context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	var rs resource.SchemaResponse
	d.res().Schema(ctx, resource.SchemaRequest{}, &rs)
	attrs := make(map[string]dschema.Attribute, len(rs.Schema.Attributes))
	for name, a := range rs.Schema.Attributes {
		attrs[name] = computedAttribute(a)
	}
	attrs["id"] = dschema.StringAttribute{Required: true,
		Description: "Full resource name of the " + d.suffix + " to read, " + d.kind.pattern() + ".",
		Validators:  []validator.String{nameValidator{field: "name", kind: d.kind}}}
	resp.Schema = dschema.Schema{Description: "Reads an existing " + d.suffix + " by name. " + rs.Schema.Description, Attributes: attrs}
}

func (d *byNameDataSource[M]) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var id types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, pathOf("id"), &id)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var m M
	if err := d.read(ctx, d.client, id.ValueString(), &m); err != nil {
		apiError(&resp.Diagnostics, "Read "+id.ValueString(), err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// computedAttribute turns a resource attribute into a computed data source
// attribute with the same type and description.
func computedAttribute(a rschema.Attribute) dschema.Attribute {
	switch a := a.(type) {
	case rschema.StringAttribute:
		return dschema.StringAttribute{Computed: true, Sensitive: a.Sensitive, Description: a.Description}
	case rschema.Int64Attribute:
		return dschema.Int64Attribute{Computed: true, Description: a.Description}
	case rschema.BoolAttribute:
		return dschema.BoolAttribute{Computed: true, Description: a.Description}
	case rschema.ListAttribute:
		return dschema.ListAttribute{Computed: true, ElementType: a.ElementType, Description: a.Description}
	case rschema.SingleNestedAttribute:
		attrs := make(map[string]dschema.Attribute, len(a.Attributes))
		for n, c := range a.Attributes {
			attrs[n] = computedAttribute(c)
		}
		return dschema.SingleNestedAttribute{Computed: true, Attributes: attrs, Description: a.Description}
	}
	panic(fmt.Sprintf("terraform: no data source form of %T", a)) // a schema bug, caught by the docs test
}

func newOrganizationDataSource() datasource.DataSource {
	return &byNameDataSource[organizationModel]{suffix: "organization", kind: kindOrganization, res: newOrganizationResource,
		read: func(ctx context.Context, c *Client, name string, m *organizationModel) error {
			o, err := c.Organizations.GetOrganization(ctx, &cpv1.GetOrganizationRequest{Name: name})
			if err == nil {
				m.fill(o)
			}
			return err
		}}
}

func newServiceAccountDataSource() datasource.DataSource {
	return &byNameDataSource[serviceAccountModel]{suffix: "service_account", kind: kindServiceAccount, res: newServiceAccountResource,
		read: func(ctx context.Context, c *Client, name string, m *serviceAccountModel) error {
			o, err := c.ServiceAccounts.GetServiceAccount(ctx, &cpv1.GetServiceAccountRequest{Name: name})
			if err == nil {
				m.fill(o)
			}
			return err
		}}
}

func newAPIKeyDataSource() datasource.DataSource {
	return &byNameDataSource[apiKeyModel]{suffix: "api_key", kind: kindAPIKey, res: newAPIKeyResource,
		read: func(ctx context.Context, c *Client, name string, m *apiKeyModel) error {
			o, err := c.ServiceAccounts.GetApiKey(ctx, &cpv1.GetApiKeyRequest{Name: name})
			if err == nil {
				m.fill(o) // the API never returns a secret here: it reads as ""
			}
			return err
		}}
}

func newRoleBindingDataSource() datasource.DataSource {
	return &byNameDataSource[roleBindingModel]{suffix: "role_binding", kind: kindRoleBinding, res: newRoleBindingResource,
		read: func(ctx context.Context, c *Client, name string, m *roleBindingModel) error {
			o, err := c.RoleBindings.GetRoleBinding(ctx, &cpv1.GetRoleBindingRequest{Name: name})
			if err == nil {
				m.fill(o)
			}
			return err
		}}
}

func newClusterDataSource() datasource.DataSource {
	return &byNameDataSource[clusterData]{suffix: "cluster", kind: kindCluster, res: newClusterResource,
		read: func(ctx context.Context, c *Client, name string, m *clusterData) error {
			o, err := c.Clusters.GetCluster(ctx, &cpv1.GetClusterRequest{Name: name})
			if err == nil {
				m.fill(o)
			}
			return err
		}}
}

func newTenantDataSource() datasource.DataSource {
	return &byNameDataSource[tenantData]{suffix: "pulsar_tenant", kind: kindTenant, res: newTenantResource,
		read: func(ctx context.Context, c *Client, name string, m *tenantData) error {
			o, err := c.Tenants.GetTenant(ctx, &cpv1.GetTenantRequest{Name: name})
			if err == nil {
				m.fill(o)
			}
			return err
		}}
}

func newNamespaceDataSource() datasource.DataSource {
	return &byNameDataSource[namespaceData]{suffix: "pulsar_namespace", kind: kindNamespace, res: newNamespaceResource,
		read: func(ctx context.Context, c *Client, name string, m *namespaceData) error {
			o, err := c.Namespaces.GetNamespace(ctx, &cpv1.GetNamespaceRequest{Name: name})
			if err == nil {
				m.fill(o)
			}
			return err
		}}
}

func newTopicDataSource() datasource.DataSource {
	return &byNameDataSource[topicData]{suffix: "pulsar_topic", kind: kindTopic, res: newTopicResource,
		read: func(ctx context.Context, c *Client, name string, m *topicData) error {
			o, err := c.Topics.GetTopic(ctx, &cpv1.GetTopicRequest{Name: name})
			if err == nil {
				m.fill(o)
			}
			return err
		}}
}

// regionsDataSource lists every region.
type regionsDataSource struct{ configured }

func newRegionsDataSource() datasource.DataSource { return &regionsDataSource{} }

type regionModel struct {
	Name          types.String `tfsdk:"name"`
	DisplayName   types.String `tfsdk:"display_name"`
	State         types.String `tfsdk:"state"`
	LastHeartbeat types.String `tfsdk:"last_heartbeat"`
}

type regionsModel struct {
	Regions []regionModel `tfsdk:"regions"`
}

func (d *regionsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_regions"
}

func (d *regionsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.configure(req.ProviderData, &resp.Diagnostics)
}

func (d *regionsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = dschema.Schema{
		Description: "Lists the regions clusters can be placed in, with their health as their agents last reported it.",
		Attributes: map[string]dschema.Attribute{
			"regions": dschema.ListNestedAttribute{Computed: true, Description: "Every region, in the API's order.",
				NestedObject: dschema.NestedAttributeObject{Attributes: map[string]dschema.Attribute{
					"name":           dschema.StringAttribute{Computed: true, Description: "Resource name, regions/{region}: the value of a cluster's region."},
					"display_name":   dschema.StringAttribute{Computed: true, Description: "Human-readable name."},
					"state":          dschema.StringAttribute{Computed: true, Description: "HEALTHY, DEGRADED, UNAVAILABLE or STATE_UNSPECIFIED (no report yet)."},
					"last_heartbeat": dschema.StringAttribute{Computed: true, Description: "When the region's agent last reported (RFC 3339)."},
				}}},
		},
	}
}

func (d *regionsDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	m := regionsModel{Regions: []regionModel{}}
	token := ""
	for {
		page, err := d.client.Regions.ListRegions(ctx, &cpv1.ListRegionsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			apiError(&resp.Diagnostics, "List regions", err)
			return
		}
		for _, r := range page.GetRegions() {
			m.Regions = append(m.Regions, regionModel{Name: types.StringValue(r.GetName()), DisplayName: types.StringValue(r.GetDisplayName()),
				State: types.StringValue(r.GetStatus().GetState().String()), LastHeartbeat: timeString(r.GetStatus().GetLastHeartbeat())})
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
