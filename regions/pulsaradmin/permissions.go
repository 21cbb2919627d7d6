package pulsaradmin

import (
	"context"
	"net/http"
)

// ---- Namespace permissions (Pulsar's auth_policies) ----

// NamespacePermissions reads the roles granted on a namespace and their
// actions ("produce", "consume", ...).
func (c *Client) NamespacePermissions(ctx context.Context, tenant, ns string) (map[string][]string, error) {
	out := map[string][]string{}
	err := c.do(ctx, http.MethodGet, path("namespaces", tenant, ns, "permissions"), nil, &out)
	return out, err
}

// GrantNamespace grants role actions on a namespace, replacing what it had.
func (c *Client) GrantNamespace(ctx context.Context, tenant, ns, role string, actions []string) error {
	return c.do(ctx, http.MethodPost, path("namespaces", tenant, ns, "permissions", role), nonNil(actions), nil)
}

// RevokeNamespace revokes every action of role on a namespace.
func (c *Client) RevokeNamespace(ctx context.Context, tenant, ns, role string) error {
	return ignoreNotFound(c.do(ctx, http.MethodDelete, path("namespaces", tenant, ns, "permissions", role), nil, nil))
}
