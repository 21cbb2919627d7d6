package pulsaradmin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ClusterURL is where a migrated namespace's clients are sent (Pulsar's
// ClusterUrl), and optionally the target cluster's name there.
type ClusterURL struct {
	ServiceURL          string `json:"serviceUrl,omitempty"`
	ServiceURLTLS       string `json:"serviceUrlTls,omitempty"`
	BrokerServiceURL    string `json:"brokerServiceUrl,omitempty"`
	BrokerServiceURLTLS string `json:"brokerServiceUrlTls,omitempty"`
	// Cluster names the target among the data plane's cluster records
	// (optional: the data plane finds it by broker URL). Replication
	// toward it is what a fenced topic waits for before moving producers.
	Cluster string `json:"-"`
}

// MigrationState is a namespace's migration setting as the data plane
// reports it.
type MigrationState struct {
	Migrated bool       `json:"migrated"`
	URL      ClusterURL `json:"migratedClusterUrl"`
	Cluster  string     `json:"migratedClusterName,omitempty"`
}

// splitNamespace checks "tenant/ns".
func splitNamespace(namespace string) (string, string, error) {
	tenant, ns, ok := strings.Cut(namespace, "/")
	if !ok || tenant == "" || ns == "" || strings.Contains(ns, "/") {
		return "", "", fmt.Errorf("pulsaradmin: namespace %q: want tenant/namespace", namespace)
	}
	return tenant, ns, nil
}

// SetNamespaceMigration fences the namespace's writes and sends its
// clients to target (planned failover); nil clears the fence and reopens
// writes here. The data plane applies it to every loaded topic within
// its policy watch's delay.
func (c *Client) SetNamespaceMigration(ctx context.Context, namespace string, target *ClusterURL) error {
	tenant, ns, err := splitNamespace(namespace)
	if err != nil {
		return err
	}
	var body any = false
	if target != nil {
		body = struct {
			Migrated bool        `json:"migrated"`
			URL      *ClusterURL `json:"migratedClusterUrl"`
			Cluster  string      `json:"migratedClusterName,omitempty"`
		}{true, target, target.Cluster}
	}
	return c.do(ctx, http.MethodPost, path("namespaces", tenant, ns, "migration"), body, nil)
}

// NamespaceMigration returns the namespace's migration setting.
func (c *Client) NamespaceMigration(ctx context.Context, namespace string) (MigrationState, error) {
	var st MigrationState
	tenant, ns, err := splitNamespace(namespace)
	if err != nil {
		return st, err
	}
	err = c.do(ctx, http.MethodGet, path("namespaces", tenant, ns, "migration"), nil, &st)
	st.URL.Cluster = st.Cluster
	return st, err
}

// NamespaceReplicationBacklog sums, over every persistent topic and
// partition of the namespace, the entries not yet replicated to
// remoteCluster (topic stats' replication.<remote>.replicationBacklog).
// Zero after a fence means the remote holds everything stored here.
func (c *Client) NamespaceReplicationBacklog(ctx context.Context, namespace, remoteCluster string) (int64, error) {
	tenant, ns, err := splitNamespace(namespace)
	if err != nil {
		return 0, err
	}
	if remoteCluster == "" {
		return 0, fmt.Errorf("pulsaradmin: replication backlog of %s: remote cluster is required", namespace)
	}
	var topics []string
	if err := c.do(ctx, http.MethodGet, path("namespaces", tenant, ns, "topics"), nil, &topics); err != nil {
		return 0, err
	}
	var total int64
	for _, full := range topics {
		local, ok := strings.CutPrefix(full, "persistent://"+tenant+"/"+ns+"/")
		if !ok {
			continue
		}
		var st struct {
			Replication map[string]struct {
				Backlog int64 `json:"replicationBacklog"`
			} `json:"replication"`
		}
		if err := c.do(ctx, http.MethodGet, path("persistent", tenant, ns, local, "stats"), nil, &st); err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // deleted meanwhile
			}
			return 0, err
		}
		total += st.Replication[remoteCluster].Backlog
	}
	return total, nil
}
