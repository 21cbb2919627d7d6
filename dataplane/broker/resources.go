package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Metadata-store layout of tenants, namespaces and partitioned topics
// (Pulsar's paths):
//
//	/admin/clusters/<cluster>                                  ClusterData
//	/admin/policies/<tenant>                                   TenantInfo
//	/admin/policies/<tenant>/<namespace>                       Policies
//	/admin/partitioned-topics/<tenant>/<ns>/<domain>/<topic>   {"partitions":N}
//
// Topic local names are path-escaped (url.PathEscape) in keys, so a name
// holding '/' stays one segment.
const (
	clustersPath    = "/admin/clusters"
	policiesPath    = "/admin/policies"
	partitionedPath = "/admin/partitioned-topics"
)

// Errors of the resource layer; the admin API maps them to HTTP statuses.
var (
	ErrNotFound      = errors.New("broker: not found")
	ErrAlreadyExists = errors.New("broker: already exists")
	ErrNotEmpty      = errors.New("broker: not empty")
	ErrConflict      = errors.New("broker: concurrent modification")
)

// ClusterData describes a cluster: its URLs and, for a remote cluster,
// how this cluster's replicators reach and authenticate with it (the
// fields of Pulsar's ClusterData that replication reads).
type ClusterData struct {
	ServiceURL       string `json:"serviceUrl,omitempty"`
	ServiceURLTLS    string `json:"serviceUrlTls,omitempty"`
	BrokerServiceURL string `json:"brokerServiceUrl,omitempty"`
	BrokerServiceTLS string `json:"brokerServiceUrlTls,omitempty"`
	// AuthenticationPlugin and AuthenticationParameters: the client
	// authentication replicators use (the token plugin,
	// org.apache.pulsar.client.impl.auth.AuthenticationToken, with
	// "token:<jwt>" or "file:<path>"; or AuthenticationTls with the
	// certificate files below).
	AuthenticationPlugin     string `json:"authenticationPlugin,omitempty"`
	AuthenticationParameters string `json:"authenticationParameters,omitempty"`
	// BrokerClientTLSEnabled makes replicators use BrokerServiceTLS.
	BrokerClientTLSEnabled     bool     `json:"brokerClientTlsEnabled,omitempty"`
	TLSAllowInsecureConnection bool     `json:"tlsAllowInsecureConnection,omitempty"`
	BrokerClientTrustCertsFile string   `json:"brokerClientTrustCertsFilePath,omitempty"`
	BrokerClientCertFile       string   `json:"brokerClientCertificateFilePath,omitempty"`
	BrokerClientKeyFile        string   `json:"brokerClientKeyFilePath,omitempty"`
	PeerClusterNames           []string `json:"peerClusterNames,omitempty"`
	// ProxyServiceURL, when set, carries every replicator connection to
	// the cluster, each CONNECT naming its broker (proxy_to_broker_url), as
	// with Pulsar's proxyServiceUrl and proxyProtocol SNI.
	ProxyServiceURL string `json:"proxyServiceUrl,omitempty"`
	ProxyProtocol   string `json:"proxyProtocol,omitempty"`
}

// TenantInfo is a tenant's record.
type TenantInfo struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

// RetentionPolicies bound how much acknowledged data is kept.
type RetentionPolicies struct {
	RetentionTimeInMinutes int   `json:"retentionTimeInMinutes"`
	RetentionSizeInMB      int64 `json:"retentionSizeInMB"`
}

// AutoTopicCreation overrides the broker's automatic topic creation.
type AutoTopicCreation struct {
	Allow             bool   `json:"allowAutoTopicCreation"`
	TopicType         string `json:"topicType"` // "non-partitioned" or "partitioned"
	DefaultPartitions int    `json:"defaultNumPartitions,omitempty"`
}

// Policies is a namespace's record. Fields the broker does not interpret
// yet are kept in Other so the admin API round-trips them.
type Policies struct {
	ReplicationClusters         []string                   `json:"replication_clusters,omitempty"`
	MessageTTLInSeconds         *int                       `json:"message_ttl_in_seconds,omitempty"`
	Retention                   *RetentionPolicies         `json:"retention_policies,omitempty"`
	DeduplicationEnabled        *bool                      `json:"deduplicationEnabled,omitempty"`
	AutoTopicCreation           *AutoTopicCreation         `json:"autoTopicCreationOverride,omitempty"`
	SchemaCompatibilityStrategy string                     `json:"schema_compatibility_strategy,omitempty"`
	Bundles                     *BundlesData               `json:"bundles,omitempty"`
	Other                       map[string]json.RawMessage `json:"-"`
}

// BundlesData is a namespace's bundle boundaries, as Pulsar's admin API
// shows them ("0x00000000", ..., "0xffffffff").
type BundlesData struct {
	Boundaries []string `json:"boundaries"`
	NumBundles int      `json:"numBundles"`
}

// Resources reads and writes tenants, namespaces and partitioned-topic
// metadata in the metadata store.
type Resources struct {
	md metadata.Store
	// onNamespace, when set (by the Service, before use), learns every
	// namespace record this Resources wrote: its policies and new version,
	// or nil policies when it deleted the record.
	onNamespace func(name string, p *Policies, v metadata.Version)
}

// NewResources returns the resource layer over md.
func NewResources(md metadata.Store) *Resources { return &Resources{md: md} }

func (r *Resources) getJSON(ctx context.Context, key string, v any) (metadata.Version, error) {
	kv, err := r.md.Get(ctx, key)
	if errors.Is(err, metadata.ErrNotFound) {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(kv.Value, v); err != nil {
		return 0, fmt.Errorf("corrupt record %s: %w", key, err)
	}
	return kv.Version, nil
}

func (r *Resources) createJSON(ctx context.Context, key string, v any) error {
	_, err := r.createJSONVersion(ctx, key, v)
	return err
}

func (r *Resources) createJSONVersion(ctx context.Context, key string, v any) (metadata.Version, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	ver, err := r.md.Create(ctx, key, b)
	if errors.Is(err, metadata.ErrExists) {
		return 0, fmt.Errorf("%w: %s", ErrAlreadyExists, key)
	}
	return ver, err
}

func (r *Resources) putJSON(ctx context.Context, key string, v any, expected metadata.Version) error {
	_, err := r.putJSONVersion(ctx, key, v, expected)
	return err
}

func (r *Resources) putJSONVersion(ctx context.Context, key string, v any, expected metadata.Version) (metadata.Version, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	ver, err := r.md.Put(ctx, key, b, expected)
	if errors.Is(err, metadata.ErrBadVersion) {
		return 0, fmt.Errorf("%w: %s", ErrConflict, key)
	}
	return ver, err
}

// namespaceWritten tells onNamespace about a namespace record written.
func (r *Resources) namespaceWritten(tenant, ns string, p *Policies, v metadata.Version) {
	if r.onNamespace != nil {
		r.onNamespace(tenant+"/"+ns, p, v)
	}
}

func (r *Resources) delete(ctx context.Context, key string) error {
	err := r.md.Delete(ctx, key, metadata.AnyVersion)
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return err
}

// Clusters.

func (r *Resources) CreateCluster(ctx context.Context, name string, c ClusterData) error {
	return r.createJSON(ctx, clustersPath+"/"+name, c)
}
func (r *Resources) UpdateCluster(ctx context.Context, name string, c ClusterData) error {
	return r.putJSON(ctx, clustersPath+"/"+name, c, metadata.AnyVersion)
}
func (r *Resources) GetCluster(ctx context.Context, name string) (ClusterData, error) {
	var c ClusterData
	_, err := r.getJSON(ctx, clustersPath+"/"+name, &c)
	return c, err
}
func (r *Resources) DeleteCluster(ctx context.Context, name string) error {
	return r.delete(ctx, clustersPath+"/"+name)
}
func (r *Resources) Clusters(ctx context.Context) ([]string, error) {
	return r.md.Children(ctx, clustersPath)
}

// Tenants.

func tenantKey(t string) string { return policiesPath + "/" + t }

func (r *Resources) CreateTenant(ctx context.Context, name string, info TenantInfo) error {
	if err := validName(name); err != nil {
		return err
	}
	return r.createJSON(ctx, tenantKey(name), info)
}
func (r *Resources) UpdateTenant(ctx context.Context, name string, info TenantInfo) error {
	if _, err := r.GetTenant(ctx, name); err != nil {
		return err
	}
	return r.putJSON(ctx, tenantKey(name), info, metadata.AnyVersion)
}
func (r *Resources) GetTenant(ctx context.Context, name string) (TenantInfo, error) {
	var t TenantInfo
	_, err := r.getJSON(ctx, tenantKey(name), &t)
	return t, err
}
func (r *Resources) Tenants(ctx context.Context) ([]string, error) {
	return r.md.Children(ctx, policiesPath)
}

// DeleteTenant removes a tenant that has no namespaces.
func (r *Resources) DeleteTenant(ctx context.Context, name string) error {
	ns, err := r.Namespaces(ctx, name)
	if err != nil {
		return err
	}
	if len(ns) > 0 {
		return fmt.Errorf("%w: tenant %s has namespaces", ErrNotEmpty, name)
	}
	return r.delete(ctx, tenantKey(name))
}

// Namespaces.

func namespaceKey(tenant, ns string) string { return policiesPath + "/" + tenant + "/" + ns }

// CreateNamespace creates tenant/ns with policies; the tenant must exist.
func (r *Resources) CreateNamespace(ctx context.Context, tenant, ns string, p Policies) error {
	if err := validName(ns); err != nil {
		return err
	}
	if _, err := r.GetTenant(ctx, tenant); err != nil {
		return err
	}
	v, err := r.createJSONVersion(ctx, namespaceKey(tenant, ns), p)
	if err == nil {
		r.namespaceWritten(tenant, ns, &p, v)
	}
	return err
}

// GetNamespace returns a namespace's policies and version.
func (r *Resources) GetNamespace(ctx context.Context, tenant, ns string) (Policies, metadata.Version, error) {
	var p Policies
	v, err := r.getJSON(ctx, namespaceKey(tenant, ns), &p)
	return p, v, err
}

// UpdateNamespace applies fn to the namespace's policies by compare-and-set,
// retrying on concurrent changes.
func (r *Resources) UpdateNamespace(ctx context.Context, tenant, ns string, fn func(*Policies) error) error {
	for {
		p, v, err := r.GetNamespace(ctx, tenant, ns)
		if err != nil {
			return err
		}
		if err := fn(&p); err != nil {
			return err
		}
		nv, err := r.putJSONVersion(ctx, namespaceKey(tenant, ns), p, v)
		if err == nil {
			r.namespaceWritten(tenant, ns, &p, nv)
		}
		if !errors.Is(err, ErrConflict) {
			return err
		}
	}
}

func (r *Resources) DeleteNamespace(ctx context.Context, tenant, ns string) error {
	err := r.delete(ctx, namespaceKey(tenant, ns))
	if err == nil && r.onNamespace != nil {
		// The store's revision now is at or after the deletion's.
		if rev, rerr := r.md.Revision(ctx); rerr == nil {
			r.namespaceWritten(tenant, ns, nil, metadata.Version(rev))
		}
	}
	return err
}

// Namespaces lists the namespaces of a tenant as "tenant/ns".
func (r *Resources) Namespaces(ctx context.Context, tenant string) ([]string, error) {
	names, err := r.md.Children(ctx, tenantKey(tenant))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = tenant + "/" + n
	}
	return out, nil
}

// Partitioned topics.

func partitionedKey(t TopicName) string {
	b := t.Base()
	return partitionedPath + "/" + b.Tenant + "/" + b.Namespace + "/" + string(b.Domain) + "/" + url.PathEscape(b.Local)
}

type partitionedMetadata struct {
	Partitions int               `json:"partitions"`
	Properties map[string]string `json:"properties,omitempty"`
}

// Partitions returns the partition count of a partitioned topic, or 0 when
// the topic is not partitioned.
func (r *Resources) Partitions(ctx context.Context, t TopicName) (int, error) {
	var m partitionedMetadata
	_, err := r.getJSON(ctx, partitionedKey(t), &m)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	return m.Partitions, err
}

// CreatePartitioned records a partitioned topic with n partitions.
func (r *Resources) CreatePartitioned(ctx context.Context, t TopicName, n int, props map[string]string) error {
	if n <= 0 {
		return fmt.Errorf("number of partitions must be more than 0")
	}
	return r.createJSON(ctx, partitionedKey(t), partitionedMetadata{Partitions: n, Properties: props})
}

// UpdatePartitioned grows a partitioned topic (partitions never shrink).
func (r *Resources) UpdatePartitioned(ctx context.Context, t TopicName, n int) error {
	var m partitionedMetadata
	v, err := r.getJSON(ctx, partitionedKey(t), &m)
	if err != nil {
		return err
	}
	if n < m.Partitions {
		return fmt.Errorf("the number of partitions can only grow: %d -> %d", m.Partitions, n)
	}
	m.Partitions = n
	return r.putJSON(ctx, partitionedKey(t), m, v)
}

// DeletePartitioned removes a partitioned topic's record.
func (r *Resources) DeletePartitioned(ctx context.Context, t TopicName) error {
	return r.delete(ctx, partitionedKey(t))
}

// PartitionedTopics lists the partitioned topics of a namespace in a domain.
func (r *Resources) PartitionedTopics(ctx context.Context, tenant, ns string, d Domain) ([]TopicName, error) {
	names, err := r.md.Children(ctx, partitionedPath+"/"+tenant+"/"+ns+"/"+string(d))
	if err != nil {
		return nil, err
	}
	out := make([]TopicName, 0, len(names))
	for _, n := range names {
		local, err := url.PathUnescape(n)
		if err != nil {
			continue
		}
		out = append(out, TopicName{Domain: d, Tenant: tenant, Namespace: ns, Local: local})
	}
	return out, nil
}

// policiesKnown has Policies' interpreted fields, for (un)marshaling.
type policiesKnown struct {
	ReplicationClusters         []string           `json:"replication_clusters,omitempty"`
	MessageTTLInSeconds         *int               `json:"message_ttl_in_seconds,omitempty"`
	Retention                   *RetentionPolicies `json:"retention_policies,omitempty"`
	DeduplicationEnabled        *bool              `json:"deduplicationEnabled,omitempty"`
	AutoTopicCreation           *AutoTopicCreation `json:"autoTopicCreationOverride,omitempty"`
	SchemaCompatibilityStrategy string             `json:"schema_compatibility_strategy,omitempty"`
	Bundles                     *BundlesData       `json:"bundles,omitempty"`
}

// MarshalJSON writes the interpreted fields and every field kept in Other.
func (p Policies) MarshalJSON() ([]byte, error) {
	known, err := json.Marshal(policiesKnown{p.ReplicationClusters, p.MessageTTLInSeconds, p.Retention,
		p.DeduplicationEnabled, p.AutoTopicCreation, p.SchemaCompatibilityStrategy, p.Bundles})
	if err != nil || len(p.Other) == 0 {
		return known, err
	}
	m := map[string]json.RawMessage{}
	for k, v := range p.Other {
		m[k] = v
	}
	if err := json.Unmarshal(known, &m); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the interpreted fields and keeps the rest in Other.
func (p *Policies) UnmarshalJSON(b []byte) error {
	var k policiesKnown
	if err := json.Unmarshal(b, &k); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	for _, f := range []string{"replication_clusters", "message_ttl_in_seconds", "retention_policies",
		"deduplicationEnabled", "autoTopicCreationOverride", "schema_compatibility_strategy", "bundles"} {
		delete(all, f)
	}
	*p = Policies{k.ReplicationClusters, k.MessageTTLInSeconds, k.Retention, k.DeduplicationEnabled,
		k.AutoTopicCreation, k.SchemaCompatibilityStrategy, k.Bundles, nil}
	if len(all) > 0 {
		p.Other = all
	}
	return nil
}

// Bootstrap creates, when absent, the cluster record, the tenant "public"
// and the namespace "public/default" that Pulsar clients expect. Every
// broker and standalone runs it at start; it is idempotent.
func Bootstrap(ctx context.Context, r *Resources, cluster string, cd ClusterData) error {
	ignoreExists := func(err error) error {
		if errors.Is(err, ErrAlreadyExists) {
			return nil
		}
		return err
	}
	return errors.Join(
		ignoreExists(r.CreateCluster(ctx, cluster, cd)),
		ignoreExists(r.CreateTenant(ctx, "public", TenantInfo{AllowedClusters: []string{cluster}})),
		ignoreExists(r.CreateNamespace(ctx, "public", "default", Policies{ReplicationClusters: []string{cluster}})),
	)
}
