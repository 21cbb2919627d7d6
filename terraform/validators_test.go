package terraform

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

func validateString(v validator.String, s string) string {
	var resp validator.StringResponse
	v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("x"), ConfigValue: types.StringValue(s)}, &resp)
	if !resp.Diagnostics.HasError() {
		return ""
	}
	return resp.Diagnostics.Errors()[0].Detail()
}

func TestStringValidators(t *testing.T) {
	org := idValidator{field: "organization_id", pattern: controlPlaneID}
	tenant := idValidator{field: "tenant_id", pattern: pulsarID}
	key := idValidator{field: "api_key_id", pattern: looseID}
	cluster := nameValidator{field: "parent", kind: kindCluster}
	role := oneOfValidator{field: "role_binding.role", values: Roles}
	for _, tc := range []struct {
		v    validator.String
		in   string
		want string // "" means valid; otherwise a substring of the message
	}{
		{org, "acme", ""},
		{org, "a", "organization_id: must match ^[a-z][a-z0-9-]{0,38}[a-z0-9]$"},
		{org, "Acme", "must match"},
		{org, "acme-", "must match"},
		{org, strings.Repeat("a", 41), "must match"},
		{tenant, "Shop_1:x=y.z-", ""},
		{tenant, "shop/x", "tenant_id: must match"},
		{key, "k.1_a-b", ""},
		{key, "-k", "api_key_id: must match"},
		{cluster, "organizations/acme/clusters/dev", ""},
		{cluster, "acme/dev", `parent: "acme/dev" is not a clusters name (organizations/{organization}/clusters/{cluster})`},
		{role, "roles/viewer", ""},
		{role, "roles/root", "role_binding.role: must be one of roles/org.admin,"},
		{futureTime{}, "2030-01-02T03:04:05Z", ""},
		{futureTime{}, "tomorrow", "not an RFC 3339 time"},
	} {
		got := validateString(tc.v, tc.in)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%T(%q): %q, want %q", tc.v, tc.in, got, tc.want)
		}
	}
	// Unknown and null values are left to apply time.
	var resp validator.StringResponse
	org.ValidateString(context.Background(), validator.StringRequest{ConfigValue: types.StringUnknown()}, &resp)
	org.ValidateString(context.Background(), validator.StringRequest{ConfigValue: types.StringNull()}, &resp)
	if resp.Diagnostics.HasError() {
		t.Errorf("unknown or null value rejected: %v", resp.Diagnostics)
	}
}

func TestPartitionsOnlyGrow(t *testing.T) {
	for _, tc := range []struct {
		was, now int64
		want     string
	}{
		{2, 3, ""},
		{2, 2, ""},
		{0, 0, ""},
		{3, 2, "topic.partitions: can only be increased (now 3)"},
		{0, 4, "topic.partitions: a non-partitioned topic cannot be partitioned"},
	} {
		var resp planmodifier.Int64Response
		partitionsOnlyGrow{}.PlanModifyInt64(context.Background(), planmodifier.Int64Request{
			StateValue: types.Int64Value(tc.was), PlanValue: types.Int64Value(tc.now)}, &resp)
		got := ""
		if resp.Diagnostics.HasError() {
			got = resp.Diagnostics.Errors()[0].Detail()
		}
		if got != tc.want {
			t.Errorf("%d -> %d: %q, want %q", tc.was, tc.now, got, tc.want)
		}
	}
}

func TestFindKey(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/key"
	if err := writeKey(file, " mgk_from_file \n"); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvAPIKey, "")
	t.Setenv(EnvAPIKeyFile, "")
	if _, err := findKey("", ""); err == nil || !strings.Contains(err.Error(), EnvAPIKeyFile) {
		t.Fatalf("no key: %v", err)
	}
	if k, _ := findKey("attr", file); k != "attr" {
		t.Errorf("attribute first: %q", k)
	}
	if k, _ := findKey("", file); k != "mgk_from_file" {
		t.Errorf("attribute file: %q", k)
	}
	t.Setenv(EnvAPIKeyFile, file)
	if k, _ := findKey("", ""); k != "mgk_from_file" {
		t.Errorf("env file: %q", k)
	}
	t.Setenv(EnvAPIKey, "env")
	if k, _ := findKey("", ""); k != "env" {
		t.Errorf("env before env file: %q", k)
	}
	if err := writeKey(file, "\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := findKey("", file); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty file: %v", err)
	}
}

func TestPoliciesFromProto(t *testing.T) {
	if p := policiesFromProto(nil, false); p != nil {
		t.Errorf("no policies: %+v, want nil (null)", p)
	}
	if p := policiesFromProto(&cpv1.NamespacePolicies{}, true); p == nil || p.Retention != nil || !p.MessageTTLSeconds.IsNull() || !p.ReplicationClusters.IsNull() {
		t.Errorf("empty policies kept: %+v", p)
	}
	ttl, dedup := int32(0), false
	p := policiesFromProto(&cpv1.NamespacePolicies{
		Retention:         &cpv1.NamespacePolicies_Retention{TimeMinutes: -1, SizeMb: 0},
		MessageTtlSeconds: &ttl, DeduplicationEnabled: &dedup,
		BacklogQuota:      &cpv1.NamespacePolicies_BacklogQuota{LimitBytes: 10},
		AutoTopicCreation: &cpv1.NamespacePolicies_AutoTopicCreation{Allow: false},
	}, false)
	switch {
	case p == nil, p.Retention.TimeMinutes.ValueInt64() != -1, p.Retention.SizeMB.ValueInt64() != 0:
		t.Fatalf("retention: %+v", p)
	case p.MessageTTLSeconds.IsNull() || p.MessageTTLSeconds.ValueInt64() != 0:
		t.Errorf("a TTL of 0 (set) read as %v", p.MessageTTLSeconds)
	case p.DeduplicationEnabled.IsNull() || p.DeduplicationEnabled.ValueBool():
		t.Errorf("deduplication false (set) read as %v", p.DeduplicationEnabled)
	case p.BacklogQuota.Policy.ValueString() != "PRODUCER_REQUEST_HOLD":
		t.Errorf("unspecified backlog policy read as %v, want the API's default", p.BacklogQuota.Policy)
	case !p.AutoTopicCreation.Type.IsNull() || !p.AutoTopicCreation.DefaultPartitions.IsNull():
		t.Errorf("auto topic creation: %+v", p.AutoTopicCreation)
	case !p.SchemaCompatibilityStrategy.IsNull() || !p.Bundles.IsNull():
		t.Errorf("unset enum and bundles: %v %v", p.SchemaCompatibilityStrategy, p.Bundles)
	}
	// And back: the API message the provider sends has the same values.
	back := p.toProto(context.Background(), nil)
	if back.GetMessageTtlSeconds() != 0 || back.MessageTtlSeconds == nil || back.DeduplicationEnabled == nil || back.GetRetention().GetTimeMinutes() != -1 {
		t.Errorf("toProto: %v", back)
	}
}
