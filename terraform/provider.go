package terraform

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/grpc/status"
)

// Environment variables the provider reads when its configuration leaves
// the matching attribute out (the same as the magnetar CLI's).
const (
	EnvEndpoint   = "MAGNETAR_ENDPOINT"
	EnvAPIKey     = "MAGNETAR_API_KEY"
	EnvAPIKeyFile = "MAGNETAR_API_KEY_FILE"
)

// TypeName is the provider's type name: resources are magnetar_*.
const TypeName = "magnetar"

// New returns a constructor of the provider, as providerserver.Serve and
// terraform-plugin-testing take it. version is reported to Terraform.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &magnetarProvider{version: version} }
}

type magnetarProvider struct {
	version string
}

var _ provider.Provider = (*magnetarProvider)(nil)

type providerModel struct {
	Endpoint       types.String `tfsdk:"endpoint"`
	APIKey         types.String `tfsdk:"api_key"`
	APIKeyFile     types.String `tfsdk:"api_key_file"`
	RequestTimeout types.String `tfsdk:"request_timeout"`
	MaxRetries     types.Int64  `tfsdk:"max_retries"`
}

func (p *magnetarProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = TypeName
	resp.Version = p.version
}

func (p *magnetarProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Manages a Magnetar estate (organizations, identities, clusters and their Pulsar tenants, namespaces and topics) through the control-plane API.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{Optional: true,
				Description: "Control-plane API address: host:port (plaintext gRPC), http://host:port or https://host:port (TLS). Default: $" + EnvEndpoint + ", else " + DefaultEndpoint + "."},
			"api_key": schema.StringAttribute{Optional: true, Sensitive: true,
				Description: "API key sent with every call. Default: $" + EnvAPIKey + ". One of api_key, api_key_file, $" + EnvAPIKey + " or $" + EnvAPIKeyFile + " is required, looked at in that order."},
			"api_key_file": schema.StringAttribute{Optional: true,
				Description: "File holding the API key, e.g. the bootstrap.key of `magnetar up`. Default: $" + EnvAPIKeyFile + "."},
			"request_timeout": schema.StringAttribute{Optional: true,
				Description: "Time limit of each API call attempt, a Go duration such as \"30s\". Default \"30s\". Waiting for clusters is bounded by the resources' timeouts instead."},
			"max_retries": schema.Int64Attribute{Optional: true,
				Description: fmt.Sprintf("How often a call answered UNAVAILABLE or RESOURCE_EXHAUSTED (HTTP 503 or 429) is retried, with exponential backoff from 200ms to 5s. Default %d; 0 means the default, -1 none.", DefaultMaxRetries)},
		},
	}
}

func (p *magnetarProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, v := range map[string]interface{ IsUnknown() bool }{"endpoint": m.Endpoint, "api_key": m.APIKey,
		"api_key_file": m.APIKeyFile, "request_timeout": m.RequestTimeout, "max_retries": m.MaxRetries} {
		if v.IsUnknown() {
			resp.Diagnostics.AddError("Unknown provider configuration", name+" must be known when the provider is configured; it cannot depend on a resource of this configuration.")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	cfg := ClientConfig{Endpoint: firstNonEmpty(m.Endpoint.ValueString(), os.Getenv(EnvEndpoint)), MaxRetries: int(m.MaxRetries.ValueInt64())}
	if s := m.RequestTimeout.ValueString(); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			resp.Diagnostics.AddAttributeError(pathOf("request_timeout"), "Invalid request_timeout", fmt.Sprintf("%q is not a positive Go duration such as \"30s\"", s))
			return
		}
		cfg.RequestTimeout = d
	}
	key, err := findKey(m.APIKey.ValueString(), m.APIKeyFile.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("No Magnetar API key", err.Error())
		return
	}
	cfg.APIKey = key
	c, err := NewClient(cfg)
	if err != nil {
		resp.Diagnostics.AddError("Invalid provider configuration", err.Error())
		return
	}
	resp.ResourceData = c
	resp.DataSourceData = c
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// findKey finds the API key: attribute, attribute file, env, env file.
func findKey(key, file string) (string, error) {
	if key != "" {
		return key, nil
	}
	if file == "" {
		if k := os.Getenv(EnvAPIKey); k != "" {
			return k, nil
		}
		file = os.Getenv(EnvAPIKeyFile)
	}
	if file == "" {
		return "", fmt.Errorf("set api_key or api_key_file in the provider block, or $%s or $%s", EnvAPIKey, EnvAPIKeyFile)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read API key: %w", err)
	}
	k := strings.TrimSpace(string(raw))
	if k == "" {
		return "", fmt.Errorf("read API key: %s is empty", file)
	}
	return k, nil
}

func (p *magnetarProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		newOrganizationResource, newServiceAccountResource, newAPIKeyResource, newRoleBindingResource,
		newClusterResource, newTenantResource, newNamespaceResource, newTopicResource,
		newFunctionResource, newSourceResource, newSinkResource,
	}
}

func (p *magnetarProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		newRegionsDataSource, newOrganizationDataSource, newServiceAccountDataSource, newAPIKeyDataSource,
		newRoleBindingDataSource, newClusterDataSource,
		newTenantDataSource, newNamespaceDataSource, newTopicDataSource,
	}
}

// configured is embedded by every resource and data source: it takes the
// Client that the provider's Configure built.
type configured struct {
	client *Client
}

func (c *configured) configure(data any, diags *diag.Diagnostics) {
	if data == nil {
		return // the provider is not configured yet (validation)
	}
	cl, ok := data.(*Client)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("want *terraform.Client, got %T", data))
		return
	}
	c.client = cl
}

func (c *configured) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c.configure(req.ProviderData, &resp.Diagnostics)
}

// apiError adds err from the API as an error diagnostic: what was being
// done, then the API's code and message.
func apiError(diags *diag.Diagnostics, what string, err error) {
	if st, ok := status.FromError(err); ok {
		diags.AddError(what, codeName(st.Code())+": "+st.Message())
		return
	}
	diags.AddError(what, err.Error())
}

// Address is the provider's source address. Configurations name it in
// required_providers (source = "magnetar-dev/magnetar"); with dev_overrides
// the locally built binary answers for it.
const Address = "registry.terraform.io/magnetar-dev/magnetar"
