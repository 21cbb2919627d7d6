package cli

import (
	"fmt"
	"strings"
)

// kind describes how a resource type is named: the collection ids of its
// full resource name (AIP-122) and the placeholders of its short path.
type kind struct {
	collections  []string // e.g. organizations, clusters
	placeholders []string // e.g. ORG, CLUSTER
}

var (
	kindOrg       = kind{[]string{"organizations"}, []string{"ORG"}}
	kindRegion    = kind{[]string{"regions"}, []string{"REGION"}}
	kindOperation = kind{[]string{"operations"}, []string{"OPERATION"}}
	kindUser      = kind{[]string{"organizations", "users"}, []string{"ORG", "USER"}}
	kindSA        = kind{[]string{"organizations", "serviceAccounts"}, []string{"ORG", "SA"}}
	kindAPIKey    = kind{[]string{"organizations", "serviceAccounts", "apiKeys"}, []string{"ORG", "SA", "KEY"}}
	kindBinding   = kind{[]string{"organizations", "roleBindings"}, []string{"ORG", "BINDING"}}
	kindCluster   = kind{[]string{"organizations", "clusters"}, []string{"ORG", "CLUSTER"}}
	kindTenant    = kind{[]string{"organizations", "clusters", "tenants"}, []string{"ORG", "CLUSTER", "TENANT"}}
	kindNamespace = kind{[]string{"organizations", "clusters", "tenants", "namespaces"}, []string{"ORG", "CLUSTER", "TENANT", "NS"}}
	kindTopic     = kind{[]string{"organizations", "clusters", "tenants", "namespaces", "topics"}, []string{"ORG", "CLUSTER", "TENANT", "NS", "TOPIC"}}
)

// short is the short path of k, e.g. "ORG/CLUSTER".
func (k kind) short() string { return strings.Join(k.placeholders, "/") }

// long is the full-name pattern of k, e.g. "organizations/ORG/clusters/CLUSTER".
func (k kind) long() string {
	parts := make([]string, 0, 2*len(k.collections))
	for i, c := range k.collections {
		parts = append(parts, c, k.placeholders[i])
	}
	return strings.Join(parts, "/")
}

// parent is the kind one level up; only for kinds with more than one level.
func (k kind) parent() kind {
	n := len(k.collections) - 1
	return kind{k.collections[:n], k.placeholders[:n]}
}

// resolve turns positional arguments into k's full resource name. The
// arguments are joined with "/" and read either as a short path of ids
// ("acme/dev", or "acme" "dev") or as a full name
// ("organizations/acme/clusters/dev").
func (k kind) resolve(args []string) (string, error) {
	joined := strings.Trim(strings.Join(args, "/"), "/")
	parts := strings.Split(joined, "/")
	if len(parts) == 2*len(k.collections) && parts[0] == k.collections[0] {
		for i, c := range k.collections {
			if parts[2*i] != c || parts[2*i+1] == "" {
				return "", k.badName(joined)
			}
		}
		return joined, nil
	}
	if len(parts) != len(k.collections) {
		return "", k.badName(joined)
	}
	full := make([]string, 0, 2*len(parts))
	for i, id := range parts {
		if id == "" {
			return "", k.badName(joined)
		}
		full = append(full, k.collections[i], id)
	}
	return strings.Join(full, "/"), nil
}

// resolveChild resolves the name of a resource to create and splits it into
// its parent's name ("" for top-level kinds) and its id.
func (k kind) resolveChild(args []string) (parent, id string, err error) {
	name, err := k.resolve(args)
	if err != nil {
		return "", "", err
	}
	i := strings.LastIndex(name, "/")
	j := strings.LastIndex(name[:i], "/")
	if j < 0 {
		return "", name[i+1:], nil
	}
	return name[:j], name[i+1:], nil
}

func (k kind) badName(got string) error {
	return fmt.Errorf("invalid resource %q: want %s or %s", got, k.short(), k.long())
}

// shortName strips the collection ids from a full resource name:
// "organizations/acme/clusters/dev" becomes "acme/dev". Names it does not
// recognize are returned unchanged.
func shortName(name string) string {
	parts := strings.Split(name, "/")
	if len(parts)%2 != 0 {
		return name
	}
	ids := make([]string, 0, len(parts)/2)
	for i := 1; i < len(parts); i += 2 {
		ids = append(ids, parts[i])
	}
	return strings.Join(ids, "/")
}

// qualify prefixes id with "collection/" unless it already has it.
func qualify(collection, id string) string {
	if id == "" || strings.HasPrefix(id, collection+"/") {
		return id
	}
	return collection + "/" + id
}
