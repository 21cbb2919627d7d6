package pulsaradmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// Retention is Pulsar's RetentionPolicies; -1 means unlimited.
type Retention struct {
	TimeMinutes int   `json:"retentionTimeInMinutes"`
	SizeMB      int64 `json:"retentionSizeInMB"`
}

// BacklogQuota is the namespace's destination_storage backlog quota.
type BacklogQuota struct {
	// LimitBytes is the backlog size limit; -1 means unlimited.
	LimitBytes int64 `json:"limitSize"`
	// Policy is "producer_request_hold", "producer_exception" or
	// "consumer_backlog_eviction".
	Policy string `json:"policy"`
}

// AutoTopicCreation is Pulsar's AutoTopicCreationOverride.
type AutoTopicCreation struct {
	Allow bool `json:"allowAutoTopicCreation"`
	// Type is "partitioned" or "non-partitioned".
	Type string `json:"topicType,omitempty"`
	// DefaultPartitions is set for "partitioned" only.
	DefaultPartitions *int `json:"defaultNumPartitions,omitempty"`
}

func (a AutoTopicCreation) equal(b AutoTopicCreation) bool {
	if a.Allow != b.Allow {
		return false
	}
	if !a.Allow {
		return true // type and partitions mean nothing when not allowed
	}
	pa, pb := 0, 0
	if a.DefaultPartitions != nil {
		pa = *a.DefaultPartitions
	}
	if b.DefaultPartitions != nil {
		pb = *b.DefaultPartitions
	}
	return a.Type == b.Type && pa == pb
}

// NamespacePolicies are the policies EnsureNamespace manages. A nil
// pointer, an empty string or a nil slice leaves that policy as the data
// plane has it.
type NamespacePolicies struct {
	Retention         *Retention
	MessageTTLSeconds *int
	Deduplication     *bool
	BacklogQuota      *BacklogQuota
	AutoTopicCreation *AutoTopicCreation
	// SchemaCompatibilityStrategy is Pulsar's name: "FULL", "BACKWARD", ...
	SchemaCompatibilityStrategy string
	// Bundles is the number of bundles at creation (0: the data plane's
	// default). Bundles are split, never re-counted, afterwards, so it is
	// not compared on an existing namespace.
	Bundles int
	// ReplicationClusters are Pulsar cluster names.
	ReplicationClusters []string
}

// policiesJSON is the part of Pulsar's Policies document we read.
type policiesJSON struct {
	Retention          *Retention                 `json:"retention_policies"`
	MessageTTL         *int                       `json:"message_ttl_in_seconds"`
	Deduplication      *bool                      `json:"deduplicationEnabled"`
	BacklogQuotaMap    map[string]json.RawMessage `json:"backlog_quota_map"`
	AutoTopicCreation  *AutoTopicCreation         `json:"autoTopicCreationOverride"`
	SchemaCompat       string                     `json:"schema_compatibility_strategy"`
	ReplicationCluster []string                   `json:"replication_clusters"`
	Bundles            *struct {
		NumBundles int `json:"numBundles"`
	} `json:"bundles"`
}

// GetNamespacePolicies reads a namespace's policies as the data plane has
// them; ErrNotFound when the namespace (or tenant) does not exist.
func (c *Client) GetNamespacePolicies(ctx context.Context, tenant, ns string) (NamespacePolicies, error) {
	var pj policiesJSON
	if err := c.do(ctx, http.MethodGet, path("namespaces", tenant, ns), nil, &pj); err != nil {
		return NamespacePolicies{}, err
	}
	p := NamespacePolicies{
		Retention: pj.Retention, MessageTTLSeconds: pj.MessageTTL, Deduplication: pj.Deduplication,
		AutoTopicCreation: pj.AutoTopicCreation, ReplicationClusters: pj.ReplicationCluster,
	}
	if pj.SchemaCompat != "UNDEFINED" {
		p.SchemaCompatibilityStrategy = pj.SchemaCompat
	}
	if pj.Bundles != nil {
		p.Bundles = pj.Bundles.NumBundles
	}
	if raw, ok := pj.BacklogQuotaMap["destination_storage"]; ok {
		var q struct {
			Limit     *int64 `json:"limit"`
			LimitSize *int64 `json:"limitSize"`
			Policy    string `json:"policy"`
		}
		if err := json.Unmarshal(raw, &q); err != nil {
			return p, fmt.Errorf("pulsaradmin: namespace %s/%s: backlog quota: %w", tenant, ns, err)
		}
		bq := &BacklogQuota{LimitBytes: -1, Policy: q.Policy}
		if q.LimitSize != nil {
			bq.LimitBytes = *q.LimitSize
		} else if q.Limit != nil {
			bq.LimitBytes = *q.Limit
		}
		p.BacklogQuota = bq
	}
	return p, nil
}

// bundlesData is Pulsar's BundlesData for n even bundles over the 32-bit
// hash range, with boundaries as Pulsar writes them ("0x00000000").
func bundlesData(n int) map[string]any {
	const top = uint64(1) << 32
	step := top / uint64(n)
	bs := make([]string, n+1)
	for i := range n {
		bs[i] = fmt.Sprintf("0x%08x", uint64(i)*step)
	}
	bs[n] = "0xffffffff"
	return map[string]any{"numBundles": n, "boundaries": bs}
}

// EnsureNamespace creates the namespace if it is absent (with p.Bundles
// bundles), then sets each policy of p that differs from the data plane's.
// It returns what it did, e.g. ["createNamespace", "retention",
// "messageTTL"]; nothing when the namespace already matches.
func (c *Client) EnsureNamespace(ctx context.Context, tenant, ns string, p NamespacePolicies) ([]string, error) {
	var done []string
	cur, err := c.GetNamespacePolicies(ctx, tenant, ns)
	if errors.Is(err, ErrNotFound) {
		body := map[string]any{}
		if p.Bundles > 0 {
			body["bundles"] = bundlesData(p.Bundles)
		}
		err = c.do(ctx, http.MethodPut, path("namespaces", tenant, ns), body, nil)
		if err != nil && !errors.Is(err, ErrConflict) {
			return nil, err
		}
		if err == nil {
			done = append(done, "createNamespace")
		}
		cur, err = c.GetNamespacePolicies(ctx, tenant, ns)
	}
	if err != nil {
		return done, err
	}
	set := func(name, method string, body any, query string) error {
		p := path("namespaces", tenant, ns, name) + query
		if err := c.do(ctx, method, p, body, nil); err != nil {
			return err
		}
		done = append(done, name)
		return nil
	}
	if w := p.Retention; w != nil && (cur.Retention == nil || *cur.Retention != *w) {
		if err := set("retention", http.MethodPost, w, ""); err != nil {
			return done, err
		}
	}
	if w := p.MessageTTLSeconds; w != nil && (cur.MessageTTLSeconds == nil || *cur.MessageTTLSeconds != *w) {
		if err := set("messageTTL", http.MethodPost, *w, ""); err != nil {
			return done, err
		}
	}
	if w := p.Deduplication; w != nil && (cur.Deduplication == nil || *cur.Deduplication != *w) {
		if err := set("deduplication", http.MethodPost, *w, ""); err != nil {
			return done, err
		}
	}
	if w := p.BacklogQuota; w != nil {
		want := *w
		if want.Policy == "" {
			want.Policy = "producer_request_hold"
		}
		if cur.BacklogQuota == nil || *cur.BacklogQuota != want {
			q := "?" + url.Values{"backlogQuotaType": {"destination_storage"}}.Encode()
			if err := set("backlogQuota", http.MethodPost, want, q); err != nil {
				return done, err
			}
		}
	}
	if w := p.AutoTopicCreation; w != nil && (cur.AutoTopicCreation == nil || !cur.AutoTopicCreation.equal(*w)) {
		if err := set("autoTopicCreation", http.MethodPost, w, ""); err != nil {
			return done, err
		}
	}
	if w := p.SchemaCompatibilityStrategy; w != "" && w != cur.SchemaCompatibilityStrategy {
		if err := set("schemaCompatibilityStrategy", http.MethodPut, w, ""); err != nil {
			return done, err
		}
	}
	if w := p.ReplicationClusters; w != nil && !sameSet(w, cur.ReplicationClusters) {
		if err := set("replication", http.MethodPost, nonNil(w), ""); err != nil {
			return done, err
		}
	}
	return done, nil
}

// DeleteNamespace deletes a namespace; a missing namespace is not an
// error. Without force Pulsar refuses (409) while the namespace has
// topics; with force it deletes them first.
func (c *Client) DeleteNamespace(ctx context.Context, tenant, ns string, force bool) error {
	q := ""
	if force {
		q = "?force=true"
	}
	return ignoreNotFound(c.do(ctx, http.MethodDelete, path("namespaces", tenant, ns)+q, nil, nil))
}
