package policy

// Input is what every decision is made on. The API server builds it per
// call; the Rego policies read it as `input`. JSON names are the policy's
// vocabulary and part of its contract: change them only with the policies.
type Input struct {
	Principal Principal `json:"principal"`
	// Action is "<collection>.<verb>": "clusters.create", "clusters.get",
	// "clusters.list", "clusters.update", "clusters.delete",
	// "organizations.get", "apiKeys.create", "roleBindings.create",
	// "regions.create", "namespaces.update", "topics.produce", ...
	Action   string   `json:"action"`
	Resource Resource `json:"resource"`
	// Org holds facts about the organization the resource belongs to that
	// admission rules need; zero for operator-level resources.
	Org OrgFacts `json:"org"`
}

// Principal is the authenticated caller.
type Principal struct {
	// Name is the resource name: "organizations/acme/serviceAccounts/ci",
	// "users/alice@example.com", or "operators/bootstrap".
	Name string `json:"name"`
	// Kind is "user", "service_account" or "operator". Operators run the
	// service: they register regions and may act on every organization.
	Kind string `json:"kind"`
	// Org is the resource name of the organization the principal belongs
	// to ("organizations/acme"; "" for operators).
	Org string `json:"org"`
	// Bindings are the principal's role bindings.
	Bindings []Binding `json:"bindings"`
}

// Binding grants Role on Resource and everything under it. Role is one of
// policy/roles (roles.All).
type Binding struct {
	Role string `json:"role"`
	// Resource is a resource name the role applies to: an organization, a
	// cluster ("organizations/acme/clusters/prod") or a Pulsar namespace
	// ("organizations/acme/clusters/prod/tenants/t/namespaces/ns").
	Resource string `json:"resource"`
}

// Resource is what the action is on. For create, Name is the name the new
// resource will have; for list, Name is the collection's parent (or Name is
// empty and Parent is set). Authorization checks Name, or Parent when Name
// is empty, against the principal's bindings.
type Resource struct {
	Kind   string `json:"kind"`   // collection id: "clusters"
	Name   string `json:"name"`   // full resource name
	Parent string `json:"parent"` // parent resource name
	Org    string `json:"org"`    // owning organization's resource name ("organizations/acme"), "" for global resources
	ID     string `json:"id"`     // last segment of Name: checked by naming rules on create
	// Attributes are the request's fields that admission rules look at,
	// e.g. {"region": "regions/us-east"} for a cluster.
	Attributes map[string]any `json:"attributes,omitempty"`
}

// OrgFacts are the owning organization's settings and current usage.
type OrgFacts struct {
	Name string `json:"name"`
	// AllowedRegions lists region names ("regions/us-east") the
	// organization may place clusters in; empty means every region.
	AllowedRegions []string `json:"allowed_regions"`
	// MaxClusters overrides the service default when > 0.
	MaxClusters int `json:"max_clusters"`
	// ClusterCount is how many clusters the organization has now.
	ClusterCount int `json:"cluster_count"`
	// MaxFunctionInstances and MaxFunctionRAMBytes override the service
	// defaults of the function limits when > 0.
	MaxFunctionInstances int64 `json:"max_function_instances,omitempty"`
	MaxFunctionRAMBytes  int64 `json:"max_function_ram_bytes,omitempty"`
	// FunctionInstances and FunctionRAMBytes are what the organization's
	// functions, sources and sinks other than the one written use: the sum
	// of their parallelism and of parallelism x RAM per instance. Set for
	// the create and update of functions, sources and sinks, whose own
	// demand is Resource.Attributes "instances" and "ram_bytes".
	FunctionInstances int64 `json:"function_instances,omitempty"`
	FunctionRAMBytes  int64 `json:"function_ram_bytes,omitempty"`
	// BudgetExceeded: an enforcing budget's amount is reached this month;
	// BudgetMessage says which and by how much.
	BudgetExceeded bool   `json:"budget_exceeded,omitempty"`
	BudgetMessage  string `json:"budget_message,omitempty"`
}

// Decision is the outcome. When Allow is false, Reasons says why in words a
// tenant may see (naming the offending field for admission rules, e.g.
// "cluster_id: must match ^[a-z][a-z0-9-]{0,38}[a-z0-9]$"). Reasons are
// sorted.
type Decision struct {
	Allow bool `json:"allow"`
	// Denied is true when authorization (who may do what) failed, as
	// opposed to an admission rule (what may be done). The API maps it
	// to PERMISSION_DENIED (or NOT_FOUND when the caller may not see the
	// resource at all); admission failures map to INVALID_ARGUMENT or
	// FAILED_PRECONDITION / RESOURCE_EXHAUSTED as Code says.
	Denied bool `json:"denied"`
	// Code is set for admission failures only: "INVALID_ARGUMENT",
	// "FAILED_PRECONDITION" or "RESOURCE_EXHAUSTED" (the most severe, in
	// that order, when several rules fail).
	Code    string   `json:"code,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	// OperatorOnly is set on a denial of an action reserved to operators
	// ("organizations.create", "regions.create", ...) to a principal that is
	// not one. Such a denial does not depend on the resource, so it reveals
	// nothing about it: the API answers PERMISSION_DENIED even for a
	// resource of another organization.
	OperatorOnly bool `json:"operator_only,omitempty"`
}
