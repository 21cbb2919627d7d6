package terraform

import (
	"context"
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

type diagsT = diag.Diagnostics
