package terraform

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

func pathOf(name string) path.Path { return path.Root(name) }

// codeName is the canonical upper-case name of a gRPC code, as the API
// and the CLI print it: INVALID_ARGUMENT for codes.InvalidArgument.
func codeName(c codes.Code) string {
	s := c.String()
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// Attributes every resource has.

func idAttribute(k kind) schema.StringAttribute {
	return schema.StringAttribute{Computed: true,
		Description:   "Full resource name, " + k.pattern() + "; what other resources reference and what import takes.",
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
}

func uidAttribute() schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: "Server-assigned unique id.",
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
}

func etagAttribute() schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: "Version of the resource as last read; sent back on update and delete."}
}

func createTimeAttribute() schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: "When the resource was created (RFC 3339).",
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
}

func updateTimeAttribute() schema.StringAttribute {
	return schema.StringAttribute{Computed: true, Description: "When the resource was last changed (RFC 3339)."}
}

// idArgument is the id of a new resource: required, validated with the
// API's rule, and changing it replaces the resource.
func idArgument(field string, pattern *regexp.Regexp, desc string) schema.StringAttribute {
	return schema.StringAttribute{Required: true, Description: desc + " Changing it replaces the resource.",
		Validators:    []validator.String{idValidator{field: field, pattern: pattern}},
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}}
}

// parentArgument references the parent resource by full name.
func parentArgument(field string, k kind, desc string) schema.StringAttribute {
	return schema.StringAttribute{Required: true, Description: desc + " (" + k.pattern() + "). Changing it replaces the resource.",
		Validators:    []validator.String{nameValidator{field: field, kind: k}},
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}}
}

// displayNameArgument is an optional display name; unset means empty.
func displayNameArgument(desc string) schema.StringAttribute {
	return schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(""), Description: desc}
}

// stringListArgument is an optional list of strings; unset means empty.
func stringListArgument(desc string, v ...validator.List) schema.ListAttribute {
	return schema.ListAttribute{ElementType: types.StringType, Optional: true, Computed: true,
		Default: listdefault.StaticValue(types.ListValueMust(types.StringType, []attr.Value{})), Description: desc, Validators: v}
}

func timeString(ts *timestamppb.Timestamp) types.String {
	if ts == nil || !ts.IsValid() || ts.AsTime().IsZero() {
		return types.StringValue("")
	}
	return types.StringValue(ts.AsTime().UTC().Format(time.RFC3339Nano))
}

func stringList(ss []string) types.List {
	vs := make([]attr.Value, len(ss))
	for i, s := range ss {
		vs[i] = types.StringValue(s)
	}
	return types.ListValueMust(types.StringType, vs)
}

func listStrings(ctx context.Context, l types.List, diags *diag.Diagnostics) []string {
	if l.IsNull() || l.IsUnknown() {
		return nil
	}
	var out []string
	diags.Append(l.ElementsAs(ctx, &out, false)...)
	return out
}

// importByName implements ImportState: the id is a full resource name of
// k or its short path; it becomes the id attribute, which Read uses.
func importByName(ctx context.Context, k kind, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	name, err := k.resolve(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import id", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), name)...)
}

// mask collects the update_mask paths of the attributes that changed.
type mask []string

func (m *mask) add(changed bool, p string) {
	if changed {
		*m = append(*m, p)
	}
}

// stateSetter is the Set of a response's state.
type stateSetter interface {
	Set(context.Context, any) diag.Diagnostics
}

// apiModel is a resource's model: M filled from the API's message P, and
// named by its id attribute.
type apiModel[M any, P any] interface {
	*M
	resourceName() string
	fill(P)
}

// readResource is the Read of a resource: it gets the resource named by
// the state's id and stores what the API answers; a resource the API no
// longer has is removed from the state, so the next plan creates it again.
func readResource[M any, P any, PM apiModel[M, P]](ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse,
	get func(context.Context, string) (P, error)) {
	var m M
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := PM(&m).resourceName()
	out, err := get(ctx, name)
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		apiError(&resp.Diagnostics, "Read "+name, err)
		return
	}
	PM(&m).fill(out)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// deleteResource is the Delete of a resource: del with the state's id; a
// resource already gone is deleted.
func deleteResource[M any, P any, PM apiModel[M, P]](ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse,
	del func(ctx context.Context, name string) error) {
	var m M
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := PM(&m).resourceName()
	if err := del(ctx, name); err != nil && !isNotFound(err) {
		apiError(&resp.Diagnostics, "Delete "+name, err)
	}
}

// pulsarResource is a Tenant, Namespace or Topic as the API returns it.
type pulsarResource interface {
	GetState() cpv1.PulsarResourceState
	GetStatusMessage() string
}

// waitAndStore waits until the region agent has applied the Pulsar
// resource name and stores it in st; one not applied within the limit
// (the resource's create or update timeout, default defaultApplied) is
// stored too (the agent keeps trying), with an error.
func waitAndStore[M any, P pulsarResource, PM apiModel[M, P]](ctx context.Context, name string,
	limit func(context.Context, time.Duration) (time.Duration, diag.Diagnostics), m *M,
	get func(context.Context, string) (P, error), st stateSetter, diags *diag.Diagnostics) {
	d, ds := limit(ctx, defaultApplied)
	if diags.Append(ds...); ds.HasError() {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	out, err := waitApplied(wctx, name, func(ctx context.Context) (P, error) { return get(ctx, name) })
	if err == nil || errors.Is(err, errNotApplied) {
		PM(m).fill(out)
		diags.Append(st.Set(ctx, m)...)
	}
	if err != nil {
		diags.AddError("Apply "+name, err.Error())
	}
}

// etagOf re-reads the etag of the resource name with get, for updateFresh.
func etagOf[P interface{ GetEtag() string }](get func(context.Context, string) (P, error), name string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		r, err := get(ctx, name)
		if err != nil {
			return "", err
		}
		return r.GetEtag(), nil
	}
}
