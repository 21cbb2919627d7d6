package policy

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// Object keys of the input document, built once: they match Input's JSON
// names. Terms are immutable once built, so evaluations share them.
var (
	kPrincipal      = ast.StringTerm("principal")
	kAction         = ast.StringTerm("action")
	kResource       = ast.StringTerm("resource")
	kOrg            = ast.StringTerm("org")
	kName           = ast.StringTerm("name")
	kKind           = ast.StringTerm("kind")
	kBindings       = ast.StringTerm("bindings")
	kRole           = ast.StringTerm("role")
	kParent         = ast.StringTerm("parent")
	kID             = ast.StringTerm("id")
	kAttributes     = ast.StringTerm("attributes")
	kAllowedRegions = ast.StringTerm("allowed_regions")
	kMaxClusters    = ast.StringTerm("max_clusters")
	kClusterCount   = ast.StringTerm("cluster_count")
	kBudgetExceeded = ast.StringTerm("budget_exceeded")
	kBudgetMessage  = ast.StringTerm("budget_message")
	kMaxFnInstances = ast.StringTerm("max_function_instances")
	kMaxFnRAM       = ast.StringTerm("max_function_ram_bytes")
	kFnInstances    = ast.StringTerm("function_instances")
	kFnRAM          = ast.StringTerm("function_ram_bytes")
)

// inputValue converts in to the AST value the policies read as `input`,
// without a JSON round trip. It yields the same document as
// ast.InterfaceToValue would from in's JSON encoding (TestInputValueMatchesJSON
// checks this), except that attribute values of types other than JSON's own
// (string, bool, numbers, []any, map[string]any, []string) still go through
// JSON.
func inputValue(in *Input) ast.Value {
	bindings := make([]*ast.Term, len(in.Principal.Bindings))
	for i, b := range in.Principal.Bindings {
		bindings[i] = ast.ObjectTerm(
			ast.Item(kRole, ast.StringTerm(b.Role)),
			ast.Item(kResource, ast.StringTerm(b.Resource)),
		)
	}
	principal := ast.ObjectTerm(
		ast.Item(kName, ast.StringTerm(in.Principal.Name)),
		ast.Item(kKind, ast.StringTerm(in.Principal.Kind)),
		ast.Item(kOrg, ast.StringTerm(in.Principal.Org)),
		ast.Item(kBindings, nullOrArray(in.Principal.Bindings == nil, bindings)),
	)

	resItems := []*ast.Term{
		kKind, ast.StringTerm(in.Resource.Kind),
		kName, ast.StringTerm(in.Resource.Name),
		kParent, ast.StringTerm(in.Resource.Parent),
		kOrg, ast.StringTerm(in.Resource.Org),
		kID, ast.StringTerm(in.Resource.ID),
	}
	// Attributes is omitempty in JSON: absent when empty.
	if len(in.Resource.Attributes) > 0 {
		v, err := ast.InterfaceToValue(in.Resource.Attributes)
		if err != nil {
			// Only a value JSON cannot encode gets here (a channel, a
			// func); the policies then see no attributes and deny what
			// needs them.
			v = ast.NewObject()
		}
		resItems = append(resItems, kAttributes, ast.NewTerm(v))
	}
	resource := ast.ObjectTerm(pairs(resItems)...)

	regions := make([]*ast.Term, len(in.Org.AllowedRegions))
	for i, r := range in.Org.AllowedRegions {
		regions[i] = ast.StringTerm(r)
	}
	orgItems := [][2]*ast.Term{
		ast.Item(kName, ast.StringTerm(in.Org.Name)),
		ast.Item(kAllowedRegions, nullOrArray(in.Org.AllowedRegions == nil, regions)),
		ast.Item(kMaxClusters, ast.IntNumberTerm(in.Org.MaxClusters)),
		ast.Item(kClusterCount, ast.IntNumberTerm(in.Org.ClusterCount)),
	}
	for _, kv := range []struct {
		k *ast.Term
		v int64
	}{{kMaxFnInstances, in.Org.MaxFunctionInstances}, {kMaxFnRAM, in.Org.MaxFunctionRAMBytes},
		{kFnInstances, in.Org.FunctionInstances}, {kFnRAM, in.Org.FunctionRAMBytes}} {
		if kv.v != 0 { // omitempty, as the JSON form
			orgItems = append(orgItems, ast.Item(kv.k, ast.IntNumberTerm(int(kv.v))))
		}
	}
	if in.Org.BudgetExceeded { // omitempty, as the JSON form
		orgItems = append(orgItems, ast.Item(kBudgetExceeded, ast.BooleanTerm(true)))
	}
	if in.Org.BudgetMessage != "" {
		orgItems = append(orgItems, ast.Item(kBudgetMessage, ast.StringTerm(in.Org.BudgetMessage)))
	}
	org := ast.ObjectTerm(orgItems...)

	return ast.NewObject(
		ast.Item(kPrincipal, principal),
		ast.Item(kAction, ast.StringTerm(in.Action)),
		ast.Item(kResource, resource),
		ast.Item(kOrg, org),
	)
}

// nullOrArray mirrors encoding/json: a nil slice encodes as null.
func nullOrArray(isNil bool, elems []*ast.Term) *ast.Term {
	if isNil {
		return ast.NullTerm()
	}
	return ast.ArrayTerm(elems...)
}

func pairs(kv []*ast.Term) [][2]*ast.Term {
	out := make([][2]*ast.Term, len(kv)/2)
	for i := range out {
		out[i] = [2]*ast.Term{kv[2*i], kv[2*i+1]}
	}
	return out
}
