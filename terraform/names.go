package terraform

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The API's id rules, as the control plane checks them on create: the
// admission policy's pattern for organizations, clusters and service
// accounts (policy/rego/admission.rego), the API server's for API keys and
// role bindings, and Pulsar's for tenants, namespaces and topics.
var (
	controlPlaneID = regexp.MustCompile(`^[a-z][a-z0-9-]{0,38}[a-z0-9]$`)
	looseID        = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	pulsarID       = regexp.MustCompile(`^[A-Za-z0-9_=:.-]{1,255}$`)
)

// idValidator checks a new resource's id with the API's pattern and
// message ("organization_id: must match ^...$").
type idValidator struct {
	field   string // the API's request field, e.g. organization_id
	pattern *regexp.Regexp
}

func (v idValidator) Description(context.Context) string {
	return "must match " + v.pattern.String()
}

func (v idValidator) MarkdownDescription(ctx context.Context) string {
	return "must match `" + v.pattern.String() + "`"
}

func (v idValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if !v.pattern.MatchString(req.ConfigValue.ValueString()) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.field,
			fmt.Sprintf("%s: must match %s", v.field, v.pattern))
	}
}

// kind names one resource type: the collection ids of its full resource
// name, e.g. organizations, clusters for "organizations/{org}/clusters/{cluster}".
type kind []string

var (
	kindOrganization   = kind{"organizations"}
	kindServiceAccount = kind{"organizations", "serviceAccounts"}
	kindAPIKey         = kind{"organizations", "serviceAccounts", "apiKeys"}
	kindRoleBinding    = kind{"organizations", "roleBindings"}
	kindRegion         = kind{"regions"}
	kindCluster        = kind{"organizations", "clusters"}
	kindTenant         = kind{"organizations", "clusters", "tenants"}
	kindNamespace      = kind{"organizations", "clusters", "tenants", "namespaces"}
	kindTopic          = kind{"organizations", "clusters", "tenants", "namespaces", "topics"}
	kindFunction       = kind{"organizations", "clusters", "tenants", "namespaces", "functions"}
	kindSource         = kind{"organizations", "clusters", "tenants", "namespaces", "sources"}
	kindSink           = kind{"organizations", "clusters", "tenants", "namespaces", "sinks"}
)

// pattern is the full-name pattern, e.g. organizations/{organization}/clusters/{cluster}.
func (k kind) pattern() string {
	var b strings.Builder
	for i, c := range k {
		if i > 0 {
			b.WriteByte('/')
		}
		fmt.Fprintf(&b, "%s/{%s}", c, strings.TrimSuffix(c, "s"))
	}
	return b.String()
}

// matches reports whether name is a full resource name of k.
func (k kind) matches(name string) bool {
	segs := strings.Split(name, "/")
	if len(segs) != 2*len(k) {
		return false
	}
	for i, c := range k {
		if segs[2*i] != c || segs[2*i+1] == "" {
			return false
		}
	}
	return true
}

// resolve reads an import id: a full resource name of k, or the short
// path of its ids ("acme/dev" for organizations/acme/clusters/dev).
func (k kind) resolve(id string) (string, error) {
	if k.matches(id) {
		return id, nil
	}
	ids := strings.Split(id, "/")
	if len(ids) == len(k) {
		parts := make([]string, 0, 2*len(k))
		for i, c := range k {
			if ids[i] == "" {
				break
			}
			parts = append(parts, c, ids[i])
		}
		if len(parts) == 2*len(k) {
			return strings.Join(parts, "/"), nil
		}
	}
	short := make([]string, len(k))
	for i, c := range k {
		short[i] = strings.ToUpper(strings.TrimSuffix(c, "s"))
	}
	return "", fmt.Errorf("%q is not a resource name of the form %s or %s", id, k.pattern(), strings.Join(short, "/"))
}

// split returns the parent name and the last id of a full name.
func split(name string) (parent, id string) {
	i := strings.LastIndex(name, "/")
	j := strings.LastIndex(name[:max(i, 0)], "/")
	if j < 0 {
		return "", name[i+1:]
	}
	return name[:j], name[i+1:]
}

// nameValidator checks that a reference to another resource is a full
// resource name of its kind, with the API's message.
type nameValidator struct {
	field string // the API's request field, e.g. parent
	kind  kind
}

func (v nameValidator) Description(context.Context) string {
	return "a resource name " + v.kind.pattern()
}

func (v nameValidator) MarkdownDescription(ctx context.Context) string {
	return "a resource name `" + v.kind.pattern() + "`"
}

func (v nameValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if name := req.ConfigValue.ValueString(); !v.kind.matches(name) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.field,
			fmt.Sprintf("%s: %q is not a %s name (%s)", v.field, name, v.kind[len(v.kind)-1], v.kind.pattern()))
	}
}

// oneOfValidator checks a string against a fixed set, with the API's
// message ("role_binding.role: must be one of ...").
type oneOfValidator struct {
	field  string
	values []string
}

func (v oneOfValidator) Description(context.Context) string {
	return "one of " + strings.Join(v.values, ", ")
}

func (v oneOfValidator) MarkdownDescription(context.Context) string {
	return "one of `" + strings.Join(v.values, "`, `") + "`"
}

func (v oneOfValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	got := req.ConfigValue.ValueString()
	for _, s := range v.values {
		if s == got {
			return
		}
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.field,
		fmt.Sprintf("%s: must be one of %s", v.field, strings.Join(v.values, ", ")))
}

// int64Range checks an integer against [lo, hi] with the API's message.
type int64Range struct {
	field  string
	lo, hi int64
	msg    string // e.g. "must be between 1 and 64"
}

func (v int64Range) Description(context.Context) string { return v.msg }

func (v int64Range) MarkdownDescription(context.Context) string { return v.msg }

func (v int64Range) ValidateInt64(_ context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if n := req.ConfigValue.ValueInt64(); n < v.lo || n > v.hi {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.field, v.field+": "+v.msg)
	}
}

// listOfNames checks that every element of a list is a full resource name
// of kind.
type listOfNames struct {
	field string
	kind  kind
}

func (v listOfNames) Description(context.Context) string {
	return "resource names " + v.kind.pattern()
}

func (v listOfNames) MarkdownDescription(context.Context) string {
	return "resource names `" + v.kind.pattern() + "`"
}

func (v listOfNames) ValidateList(ctx context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	for i, e := range req.ConfigValue.Elements() {
		s, ok := e.(types.String)
		if !ok || s.IsUnknown() || s.IsNull() {
			continue
		}
		if !v.kind.matches(s.ValueString()) {
			resp.Diagnostics.AddAttributeError(req.Path.AtListIndex(i), "Invalid "+v.field,
				fmt.Sprintf("%s[%d]: %q is not a %s name (%s)", v.field, i, s.ValueString(), v.kind[len(v.kind)-1], v.kind.pattern()))
		}
	}
}
