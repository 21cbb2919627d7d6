// Package roles is the list of roles a role binding can grant in the
// control plane: the API server accepts these and no others, the Rego
// policies (policy/rego/authz.rego) give each of them its permissions, the
// CLI and the Terraform provider name them in their help and plan-time
// validation, and docs/security.md describes them. A test in policy checks
// that the policies and the documentation use exactly this list.
//
// The package has no dependencies, so clients (the CLI, the Terraform
// provider) can import it without the policy engine. It holds only
// immutable data.
package roles

import "slices"

// Role is one grantable role.
type Role struct {
	// Name is the role's resource name, "roles/<id>".
	Name string
	// Summary says in one line what the role grants.
	Summary string
}

// All are the roles, in the order help texts list them.
var All = []Role{
	{"roles/org.admin", "every action in the organization (bound on the organization)"},
	{"roles/cluster.admin", "clusters and everything in them; bound on the organization, creating clusters too"},
	{"roles/viewer", "get and list of the resource and everything under it"},
	{"roles/billing.viewer", "usage, invoices and their CSV export, credit notes (bound on the organization)"},
	{"roles/pulsar.producer", "produce on the topics under the resource; read them and their cluster"},
	{"roles/pulsar.consumer", "consume on the topics under the resource; read them and their cluster"},
}

// Names returns the roles' names in the order of All.
func Names() []string {
	out := make([]string, len(All))
	for i, r := range All {
		out[i] = r.Name
	}
	return out
}

// Known says whether name is a role of All.
func Known(name string) bool {
	return slices.ContainsFunc(All, func(r Role) bool { return r.Name == name })
}
