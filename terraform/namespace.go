package terraform

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// Limits of namespace policies (controlplane/apiserver).
const (
	maxBundles      = 1024
	maxPartitions   = 1024
	maxReplClusters = 32
)

type namespaceResource struct{ configured }

var (
	_ resource.ResourceWithConfigure      = (*namespaceResource)(nil)
	_ resource.ResourceWithImportState    = (*namespaceResource)(nil)
	_ resource.ResourceWithValidateConfig = (*namespaceResource)(nil)
)

func newNamespaceResource() resource.Resource { return &namespaceResource{} }

// namespaceData are the attributes the resource and the data source share.
type namespaceData struct {
	ID            types.String       `tfsdk:"id"`
	Tenant        types.String       `tfsdk:"tenant"`
	NamespaceID   types.String       `tfsdk:"namespace_id"`
	Policies      *namespacePolicies `tfsdk:"policies"`
	State         types.String       `tfsdk:"state"`
	StatusMessage types.String       `tfsdk:"status_message"`
	UID           types.String       `tfsdk:"uid"`
	Etag          types.String       `tfsdk:"etag"`
	CreateTime    types.String       `tfsdk:"create_time"`
	UpdateTime    types.String       `tfsdk:"update_time"`
}

type namespaceModel struct {
	namespaceData
	Timeouts timeouts.Value `tfsdk:"timeouts"`
}

// namespacePolicies mirrors cpv1.NamespacePolicies; a null attribute is a
// policy the namespace does not manage.
type namespacePolicies struct {
	Retention                   *retentionModel    `tfsdk:"retention"`
	MessageTTLSeconds           types.Int64        `tfsdk:"message_ttl_seconds"`
	DeduplicationEnabled        types.Bool         `tfsdk:"deduplication_enabled"`
	BacklogQuota                *backlogQuotaModel `tfsdk:"backlog_quota"`
	AutoTopicCreation           *autoTopicModel    `tfsdk:"auto_topic_creation"`
	SchemaCompatibilityStrategy types.String       `tfsdk:"schema_compatibility_strategy"`
	Bundles                     types.Int64        `tfsdk:"bundles"`
	ReplicationClusters         types.List         `tfsdk:"replication_clusters"`
}

type retentionModel struct {
	TimeMinutes types.Int64 `tfsdk:"time_minutes"`
	SizeMB      types.Int64 `tfsdk:"size_mb"`
}

type backlogQuotaModel struct {
	LimitBytes types.Int64  `tfsdk:"limit_bytes"`
	Policy     types.String `tfsdk:"policy"`
}

type autoTopicModel struct {
	Allow             types.Bool   `tfsdk:"allow"`
	Type              types.String `tfsdk:"type"`
	DefaultPartitions types.Int64  `tfsdk:"default_partitions"`
}

// enumNames lists the names of an enum's values other than the zero one.
func enumNames(m map[int32]string) []string {
	out := make([]string, 0, len(m))
	for i := int32(1); i < int32(len(m)); i++ {
		out = append(out, m[i])
	}
	return out
}

var (
	backlogPolicies    = enumNames(cpv1.NamespacePolicies_BacklogQuota_Policy_name)
	topicTypes         = enumNames(cpv1.NamespacePolicies_AutoTopicCreation_TopicType_name)
	schemaStrategies   = enumNames(cpv1.NamespacePolicies_SchemaCompatibilityStrategy_name)
	unlimitedOrMore    = "must be -1 (unlimited) or more"
	maxInt32           = int64(1<<31 - 1)
	maxInt64           = int64(1<<63 - 1)
	namespaceFieldBase = "namespace.policies."
)

func (r *namespaceResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pulsar_namespace"
}

func (r *namespaceResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	f := namespaceFieldBase
	resp.Schema = schema.Schema{
		Description: "A Pulsar namespace in a tenant, with its policies. A policy left out is not managed: the data plane keeps its own value. The region agent applies the namespace to the data plane; create and update wait until it is applied. A namespace can only be deleted once it has no topics.",
		Attributes: map[string]schema.Attribute{
			"id":           idAttribute(kindNamespace),
			"tenant":       parentArgument("parent", kindTenant, "Tenant the namespace belongs to"),
			"namespace_id": idArgument("namespace_id", pulsarID, "Pulsar namespace name: 1 to 255 letters, digits, '_', '-', '=', ':' and '.'."),
			"policies": schema.SingleNestedAttribute{Optional: true, Description: "Policies of the namespace.",
				Attributes: map[string]schema.Attribute{
					"retention": schema.SingleNestedAttribute{Optional: true,
						Description: "How long and how much acknowledged data is kept. -1 means unlimited; 0 and 0 keep nothing after acknowledgement.",
						Attributes: map[string]schema.Attribute{
							"time_minutes": schema.Int64Attribute{Required: true, Description: "Minutes; -1 unlimited.",
								Validators: []validator.Int64{int64Range{field: f + "retention.time_minutes", lo: -1, hi: maxInt32, msg: unlimitedOrMore}}},
							"size_mb": schema.Int64Attribute{Required: true, Description: "Megabytes; -1 unlimited.",
								Validators: []validator.Int64{int64Range{field: f + "retention.size_mb", lo: -1, hi: maxInt64, msg: unlimitedOrMore}}},
						}},
					"message_ttl_seconds": schema.Int64Attribute{Optional: true,
						Description: "Unacknowledged messages older than this are acknowledged automatically; 0 disables expiry.",
						Validators:  []validator.Int64{int64Range{field: f + "message_ttl_seconds", lo: 0, hi: maxInt32, msg: "must not be negative"}}},
					"deduplication_enabled": schema.BoolAttribute{Optional: true, Description: "Whether the brokers drop messages a producer sends twice."},
					"backlog_quota": schema.SingleNestedAttribute{Optional: true,
						Description: "What happens when a subscription's backlog exceeds a size.",
						Attributes: map[string]schema.Attribute{
							"limit_bytes": schema.Int64Attribute{Required: true, Description: "Backlog size limit in bytes; -1 unlimited.",
								Validators: []validator.Int64{int64Range{field: f + "backlog_quota.limit_bytes", lo: -1, hi: maxInt64, msg: unlimitedOrMore}}},
							"policy": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("PRODUCER_REQUEST_HOLD"),
								Description: "One of " + strings.Join(backlogPolicies, ", ") + ". Default PRODUCER_REQUEST_HOLD.",
								Validators:  []validator.String{oneOfValidator{field: f + "backlog_quota.policy", values: backlogPolicies}}},
						}},
					"auto_topic_creation": schema.SingleNestedAttribute{Optional: true,
						Description: "Whether producers and consumers may create topics by using them.",
						Attributes: map[string]schema.Attribute{
							"allow": schema.BoolAttribute{Required: true, Description: "Allow automatic topic creation."},
							"type": schema.StringAttribute{Optional: true, Description: "NON_PARTITIONED or PARTITIONED; required when allow is true.",
								Validators: []validator.String{oneOfValidator{field: f + "auto_topic_creation.type", values: topicTypes}}},
							"default_partitions": schema.Int64Attribute{Optional: true,
								Description: fmt.Sprintf("Partitions of an automatically created partitioned topic, 1 to %d; only for PARTITIONED.", maxPartitions),
								Validators:  []validator.Int64{int64Range{field: f + "auto_topic_creation.default_partitions", lo: 1, hi: maxPartitions, msg: fmt.Sprintf("must be between 1 and %d for PARTITIONED", maxPartitions)}}},
						}},
					"schema_compatibility_strategy": schema.StringAttribute{Optional: true,
						Description: "Pulsar's schema compatibility strategy: " + strings.Join(schemaStrategies, ", ") + ".",
						Validators:  []validator.String{oneOfValidator{field: f + "schema_compatibility_strategy", values: schemaStrategies}}},
					"bundles": schema.Int64Attribute{Optional: true,
						Description:   fmt.Sprintf("Number of bundles the namespace's hash range is split into when it is created, 1 to %d; unset means the data plane's default. Changing it replaces the namespace.", maxBundles),
						Validators:    []validator.Int64{int64Range{field: f + "bundles", lo: 1, hi: maxBundles, msg: fmt.Sprintf("must be between 1 and %d", maxBundles)}},
						PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()}},
					"replication_clusters": schema.ListAttribute{ElementType: types.StringType, Optional: true,
						Description: fmt.Sprintf("Clusters (organizations/{organization}/clusters/{cluster}) of the same organization the namespace's messages are replicated to; at most %d.", maxReplClusters),
						Validators:  []validator.List{listOfNames{field: f + "replication_clusters", kind: kindCluster}, listSize{field: f + "replication_clusters", lo: 1, hi: maxReplClusters}}},
				}},
			"state":          pulsarStateAttribute(),
			"status_message": pulsarStatusAttribute(),
			"uid":            uidAttribute(),
			"etag":           etagAttribute(),
			"create_time":    createTimeAttribute(),
			"update_time":    updateTimeAttribute(),
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true}),
		},
	}
}

// ValidateConfig repeats the API's rules that tie policies together, with
// its messages.
func (r *namespaceResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m namespaceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Policies == nil || m.Policies.AutoTopicCreation == nil {
		return
	}
	a := m.Policies.AutoTopicCreation
	if a.Allow.IsUnknown() || a.Type.IsUnknown() || a.DefaultPartitions.IsUnknown() || !a.Allow.ValueBool() {
		return // the API checks type and partitions only when allow is true
	}
	f := namespaceFieldBase + "auto_topic_creation."
	at := pathOf("policies").AtName("auto_topic_creation")
	switch {
	case a.Type.IsNull():
		resp.Diagnostics.AddAttributeError(at.AtName("type"), "Invalid auto_topic_creation", f+"type: required (NON_PARTITIONED or PARTITIONED) when allow is true")
	case a.Type.ValueString() == "PARTITIONED" && a.DefaultPartitions.IsNull():
		resp.Diagnostics.AddAttributeError(at.AtName("default_partitions"), "Invalid auto_topic_creation", fmt.Sprintf("%sdefault_partitions: must be between 1 and %d for PARTITIONED", f, maxPartitions))
	case a.Type.ValueString() != "PARTITIONED" && !a.DefaultPartitions.IsNull():
		resp.Diagnostics.AddAttributeError(at.AtName("default_partitions"), "Invalid auto_topic_creation", f+"default_partitions: must be 0 for NON_PARTITIONED")
	}
}

// toProto builds the API's policies from the model; nil for none.
func (p *namespacePolicies) toProto(ctx context.Context, diags *diag.Diagnostics) *cpv1.NamespacePolicies {
	out := &cpv1.NamespacePolicies{}
	if p == nil {
		return out
	}
	if r := p.Retention; r != nil {
		out.Retention = &cpv1.NamespacePolicies_Retention{TimeMinutes: int32(r.TimeMinutes.ValueInt64()), SizeMb: r.SizeMB.ValueInt64()}
	}
	if !p.MessageTTLSeconds.IsNull() {
		v := int32(p.MessageTTLSeconds.ValueInt64())
		out.MessageTtlSeconds = &v
	}
	if !p.DeduplicationEnabled.IsNull() {
		v := p.DeduplicationEnabled.ValueBool()
		out.DeduplicationEnabled = &v
	}
	if q := p.BacklogQuota; q != nil {
		out.BacklogQuota = &cpv1.NamespacePolicies_BacklogQuota{LimitBytes: q.LimitBytes.ValueInt64(),
			Policy: cpv1.NamespacePolicies_BacklogQuota_Policy(cpv1.NamespacePolicies_BacklogQuota_Policy_value[q.Policy.ValueString()])}
	}
	if a := p.AutoTopicCreation; a != nil {
		out.AutoTopicCreation = &cpv1.NamespacePolicies_AutoTopicCreation{Allow: a.Allow.ValueBool(),
			Type:              cpv1.NamespacePolicies_AutoTopicCreation_TopicType(cpv1.NamespacePolicies_AutoTopicCreation_TopicType_value[a.Type.ValueString()]),
			DefaultPartitions: int32(a.DefaultPartitions.ValueInt64())}
	}
	out.SchemaCompatibilityStrategy = cpv1.NamespacePolicies_SchemaCompatibilityStrategy(cpv1.NamespacePolicies_SchemaCompatibilityStrategy_value[p.SchemaCompatibilityStrategy.ValueString()])
	out.Bundles = int32(p.Bundles.ValueInt64())
	out.ReplicationClusters = listStrings(ctx, p.ReplicationClusters, diags)
	return out
}

// policiesFromProto is the model of the API's policies; nil when none is
// set, so an unmanaged policies attribute reads back as null, unless
// keepEmpty (the configuration's `policies = {}` reads back as it is).
func policiesFromProto(p *cpv1.NamespacePolicies, keepEmpty bool) *namespacePolicies {
	if p == nil {
		p = &cpv1.NamespacePolicies{}
	}
	out := &namespacePolicies{
		MessageTTLSeconds:           types.Int64Null(),
		DeduplicationEnabled:        types.BoolNull(),
		SchemaCompatibilityStrategy: types.StringNull(),
		Bundles:                     types.Int64Null(),
		ReplicationClusters:         types.ListNull(types.StringType),
	}
	set := false
	if r := p.GetRetention(); r != nil {
		out.Retention = &retentionModel{TimeMinutes: types.Int64Value(int64(r.GetTimeMinutes())), SizeMB: types.Int64Value(r.GetSizeMb())}
		set = true
	}
	if p.MessageTtlSeconds != nil {
		out.MessageTTLSeconds = types.Int64Value(int64(p.GetMessageTtlSeconds()))
		set = true
	}
	if p.DeduplicationEnabled != nil {
		out.DeduplicationEnabled = types.BoolValue(p.GetDeduplicationEnabled())
		set = true
	}
	if q := p.GetBacklogQuota(); q != nil {
		pol := q.GetPolicy()
		if pol == cpv1.NamespacePolicies_BacklogQuota_POLICY_UNSPECIFIED {
			pol = cpv1.NamespacePolicies_BacklogQuota_PRODUCER_REQUEST_HOLD
		}
		out.BacklogQuota = &backlogQuotaModel{LimitBytes: types.Int64Value(q.GetLimitBytes()), Policy: types.StringValue(pol.String())}
		set = true
	}
	if a := p.GetAutoTopicCreation(); a != nil {
		m := &autoTopicModel{Allow: types.BoolValue(a.GetAllow()), Type: types.StringNull(), DefaultPartitions: types.Int64Null()}
		if a.GetType() != cpv1.NamespacePolicies_AutoTopicCreation_TOPIC_TYPE_UNSPECIFIED {
			m.Type = types.StringValue(a.GetType().String())
		}
		if a.GetDefaultPartitions() != 0 {
			m.DefaultPartitions = types.Int64Value(int64(a.GetDefaultPartitions()))
		}
		out.AutoTopicCreation = m
		set = true
	}
	if s := p.GetSchemaCompatibilityStrategy(); s != cpv1.NamespacePolicies_SCHEMA_COMPATIBILITY_STRATEGY_UNSPECIFIED {
		out.SchemaCompatibilityStrategy = types.StringValue(s.String())
		set = true
	}
	if b := p.GetBundles(); b != 0 {
		out.Bundles = types.Int64Value(int64(b))
		set = true
	}
	if rc := p.GetReplicationClusters(); len(rc) > 0 {
		out.ReplicationClusters = stringList(rc)
		set = true
	}
	if !set && !keepEmpty {
		return nil
	}
	return out
}

func (m *namespaceData) fill(n *cpv1.Namespace) {
	m.ID = types.StringValue(n.GetName())
	parent, id := split(n.GetName())
	m.Tenant, m.NamespaceID = types.StringValue(parent), types.StringValue(id)
	m.Policies = policiesFromProto(n.GetPolicies(), m.Policies != nil)
	m.State = types.StringValue(n.GetState().String())
	m.StatusMessage = types.StringValue(n.GetStatusMessage())
	m.UID = types.StringValue(n.GetUid())
	m.Etag = types.StringValue(n.GetEtag())
	m.CreateTime = timeString(n.GetCreateTime())
	m.UpdateTime = timeString(n.GetUpdateTime())
}

func (r *namespaceResource) get(ctx context.Context, name string) (*cpv1.Namespace, error) {
	return r.client.Namespaces.GetNamespace(ctx, &cpv1.GetNamespaceRequest{Name: name})
}

func (r *namespaceResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan namespaceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns := &cpv1.Namespace{Policies: plan.Policies.toProto(ctx, &resp.Diagnostics)}
	out, err := r.client.Namespaces.CreateNamespace(ctx, &cpv1.CreateNamespaceRequest{Parent: plan.Tenant.ValueString(),
		NamespaceId: plan.NamespaceID.ValueString(), Namespace: ns, RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create Pulsar namespace "+plan.NamespaceID.ValueString(), err)
		return
	}
	waitAndStore(ctx, out.GetName(), plan.Timeouts.Create, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *namespaceResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[namespaceModel, *cpv1.Namespace](ctx, req, resp, r.get)
}

func (r *namespaceResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state namespaceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.ID.ValueString()
	ns := &cpv1.Namespace{Name: name, Policies: plan.Policies.toProto(ctx, &resp.Diagnostics)}
	_, err := updateFresh(ctx, state.Etag.ValueString(), etagOf(r.get, name), func(ctx context.Context, etag string) (*cpv1.Namespace, error) {
		ns.Etag = etag
		return r.client.Namespaces.UpdateNamespace(ctx, &cpv1.UpdateNamespaceRequest{Namespace: ns, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"policies"}}})
	})
	if err != nil {
		apiError(&resp.Diagnostics, "Update "+name, err)
		return
	}
	waitAndStore(ctx, name, plan.Timeouts.Update, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *namespaceResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[namespaceModel, *cpv1.Namespace](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.Namespaces.DeleteNamespace(ctx, &cpv1.DeleteNamespaceRequest{Name: name})
		return err
	})
}

func (r *namespaceResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindNamespace, req, resp)
}

// listSize checks the number of elements of a list.
type listSize struct {
	field  string
	lo, hi int
}

func (v listSize) Description(context.Context) string {
	return fmt.Sprintf("%d to %d elements", v.lo, v.hi)
}

func (v listSize) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v listSize) ValidateList(_ context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if n := len(req.ConfigValue.Elements()); n < v.lo || n > v.hi {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.field, fmt.Sprintf("%s: must have %d to %d elements (leave it out for none)", v.field, v.lo, v.hi))
	}
}

func (m *namespaceData) resourceName() string { return m.ID.ValueString() }
