package terraform

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

type apiKeyResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*apiKeyResource)(nil)
	_ resource.ResourceWithImportState = (*apiKeyResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*apiKeyResource)(nil)
)

func newAPIKeyResource() resource.Resource { return &apiKeyResource{} }

type apiKeyModel struct {
	ID             types.String `tfsdk:"id"`
	ServiceAccount types.String `tfsdk:"service_account"`
	APIKeyID       types.String `tfsdk:"api_key_id"`
	DisplayName    types.String `tfsdk:"display_name"`
	ExpireTime     types.String `tfsdk:"expire_time"`
	Secret         types.String `tfsdk:"secret"`
	State          types.String `tfsdk:"state"`
	RevokeTime     types.String `tfsdk:"revoke_time"`
	UID            types.String `tfsdk:"uid"`
	Etag           types.String `tfsdk:"etag"`
	CreateTime     types.String `tfsdk:"create_time"`
}

func (r *apiKeyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_api_key"
}

func replace() []planmodifier.String {
	return []planmodifier.String{stringplanmodifier.RequiresReplace()}
}

func (r *apiKeyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An API key of a service account. The secret is returned once, when the key is created, and kept only in the Terraform state (sensitive); the service stores a hash of it. Keys cannot be changed: any change replaces the key, and so does a key found revoked or expired. Destroying the resource deletes the key.",
		Attributes: map[string]schema.Attribute{
			"id":              idAttribute(kindAPIKey),
			"service_account": parentArgument("parent", kindServiceAccount, "Service account the key authenticates as"),
			"api_key_id":      idArgument("api_key_id", looseID, "Id of the key: 1 to 63 lower-case letters, digits, '.', '_' and '-', starting with a letter or digit."),
			"display_name": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				Description: "Human-readable name. Changing it replaces the key.", PlanModifiers: replace()},
			"expire_time": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				Description:   "When the key stops working (RFC 3339, in the future); empty means never. Changing it replaces the key.",
				PlanModifiers: replace(), Validators: []validator.String{futureTime{}}},
			"secret": schema.StringAttribute{Computed: true, Sensitive: true,
				Description:   "The key itself (mgk_...), to send as \"authorization: Bearer <secret>\". Known only to the Terraform run that created the key; empty after import.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"state":       schema.StringAttribute{Computed: true, Description: "ACTIVE, REVOKED or EXPIRED."},
			"revoke_time": schema.StringAttribute{Computed: true, Description: "When the key was revoked (RFC 3339); empty unless REVOKED."},
			"uid": schema.StringAttribute{Computed: true, Description: "Public part of the key; the secret begins with mgk_<uid>_.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
			"etag":        etagAttribute(),
			"create_time": createTimeAttribute(),
		},
	}
}

func (m *apiKeyModel) fill(k *cpv1.ApiKey) {
	m.ID = types.StringValue(k.GetName())
	parent, id := split(k.GetName())
	m.ServiceAccount, m.APIKeyID = types.StringValue(parent), types.StringValue(id)
	m.DisplayName = types.StringValue(k.GetDisplayName())
	m.ExpireTime = timeString(k.GetExpireTime())
	if s := k.GetSecret(); s != "" {
		m.Secret = types.StringValue(s)
	} else if m.Secret.IsNull() || m.Secret.IsUnknown() {
		m.Secret = types.StringValue("")
	}
	m.State = types.StringValue(k.GetState().String())
	m.RevokeTime = timeString(k.GetRevokeTime())
	m.UID = types.StringValue(k.GetUid())
	m.Etag = types.StringValue(k.GetEtag())
	m.CreateTime = timeString(k.GetCreateTime())
}

func (r *apiKeyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan apiKeyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	key := &cpv1.ApiKey{DisplayName: plan.DisplayName.ValueString()}
	if s := plan.ExpireTime.ValueString(); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			resp.Diagnostics.AddAttributeError(pathOf("expire_time"), "Invalid expire_time", err.Error())
			return
		}
		key.ExpireTime = timestamppb.New(t)
	}
	out, err := r.client.ServiceAccounts.CreateApiKey(ctx, &cpv1.CreateApiKeyRequest{Parent: plan.ServiceAccount.ValueString(),
		ApiKeyId: plan.APIKeyID.ValueString(), ApiKey: key, RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create API key "+plan.APIKeyID.ValueString(), err)
		return
	}
	exp := plan.ExpireTime
	plan.fill(out)
	if exp.ValueString() != "" {
		plan.ExpireTime = exp // as written: the API may print the same instant differently
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *apiKeyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state apiKeyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := r.client.ServiceAccounts.GetApiKey(ctx, &cpv1.GetApiKeyRequest{Name: state.ID.ValueString()})
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		apiError(&resp.Diagnostics, "Read "+state.ID.ValueString(), err)
		return
	}
	exp := state.ExpireTime
	state.fill(out)
	if sameInstant(exp.ValueString(), state.ExpireTime.ValueString()) {
		state.ExpireTime = exp
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// ModifyPlan replaces a key that was revoked or has expired: it no
// longer authenticates, so the configuration's key is not there.
func (r *apiKeyResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() {
		return
	}
	var st types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, pathOf("state"), &st)...)
	if s := st.ValueString(); s == cpv1.ApiKey_REVOKED.String() || s == cpv1.ApiKey_EXPIRED.String() {
		// Terraform replaces only for attributes whose planned value
		// differs: plan the state a new key has.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, pathOf("state"), cpv1.ApiKey_ACTIVE.String())...)
		resp.RequiresReplace = append(resp.RequiresReplace, pathOf("state"))
	}
}

// Update is never called with a change: every argument replaces the key.
func (r *apiKeyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan apiKeyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *apiKeyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[apiKeyModel, *cpv1.ApiKey](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.ServiceAccounts.DeleteApiKey(ctx, &cpv1.DeleteApiKeyRequest{Name: name})
		return err
	})
}

func (r *apiKeyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindAPIKey, req, resp)
}

func sameInstant(a, b string) bool {
	ta, err1 := time.Parse(time.RFC3339, a)
	tb, err2 := time.Parse(time.RFC3339, b)
	return err1 == nil && err2 == nil && ta.Equal(tb)
}

// futureTime checks the format of an RFC 3339 time. That it lies in the
// future is left to the API at create: a plan-time check would fail every
// plan once the key has expired.
type futureTime struct{}

func (futureTime) Description(context.Context) string { return "an RFC 3339 time in the future" }

func (futureTime) MarkdownDescription(context.Context) string {
	return "an RFC 3339 time in the future"
}

func (futureTime) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || req.ConfigValue.ValueString() == "" {
		return
	}
	if _, err := time.Parse(time.RFC3339, req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid expire_time", fmt.Sprintf("api_key.expire_time: %q is not an RFC 3339 time", req.ConfigValue.ValueString()))
	}
}

func (m *apiKeyModel) resourceName() string { return m.ID.ValueString() }
