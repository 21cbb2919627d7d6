package pulsaradmin

import (
	"context"
	"strings"
)

// ClusterURL is where a migrated namespace's clients are sent (Pulsar's
// ClusterUrl of the blue-green migration, PIP-188).
type ClusterURL struct {
	ServiceURL          string `json:"serviceUrl,omitempty"`
	ServiceURLTLS       string `json:"serviceUrlTls,omitempty"`
	BrokerServiceURL    string `json:"brokerServiceUrl,omitempty"`
	BrokerServiceURLTLS string `json:"brokerServiceUrlTls,omitempty"`
}

// SetNamespaceMigration fences the namespace ("tenant/ns") toward target:
// its brokers store no new message and send producers (and consumers
// that have drained) to target; nil lifts the fence. It uses the
// namespace's own target URL (a Magnetar extension of Pulsar's
// POST .../migration, which takes a boolean and the cluster's URL).
func (c *Client) SetNamespaceMigration(ctx context.Context, namespace string, target *ClusterURL) error {
	t, ns, _ := strings.Cut(namespace, "/")
	body := map[string]any{"migrated": target != nil}
	if target != nil {
		body["migratedClusterUrl"] = target
	}
	return c.do(ctx, "POST", path("namespaces", t, ns, "migration"), body, nil)
}
