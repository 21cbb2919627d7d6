package terraform

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

type topicResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*topicResource)(nil)
	_ resource.ResourceWithImportState = (*topicResource)(nil)
)

func newTopicResource() resource.Resource { return &topicResource{} }

// topicData are the attributes the resource and the data source share.
type topicData struct {
	ID            types.String `tfsdk:"id"`
	Namespace     types.String `tfsdk:"namespace"`
	TopicID       types.String `tfsdk:"topic_id"`
	Partitions    types.Int64  `tfsdk:"partitions"`
	Persistent    types.Bool   `tfsdk:"persistent"`
	PulsarName    types.String `tfsdk:"pulsar_name"`
	State         types.String `tfsdk:"state"`
	StatusMessage types.String `tfsdk:"status_message"`
	UID           types.String `tfsdk:"uid"`
	Etag          types.String `tfsdk:"etag"`
	CreateTime    types.String `tfsdk:"create_time"`
	UpdateTime    types.String `tfsdk:"update_time"`
}

type topicModel struct {
	topicData
	Timeouts timeouts.Value `tfsdk:"timeouts"`
}

func (r *topicResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pulsar_topic"
}

func (r *topicResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A Pulsar topic in a namespace. Partitions can only be added, and a non-partitioned topic stays non-partitioned: a plan that lowers partitions, or partitions a non-partitioned topic, fails. The region agent applies the topic to the data plane; create and update wait until it is applied.",
		Attributes: map[string]schema.Attribute{
			"id":        idAttribute(kindTopic),
			"namespace": parentArgument("parent", kindNamespace, "Namespace the topic belongs to"),
			"topic_id":  idArgument("topic_id", pulsarID, "Pulsar topic name (local part): 1 to 255 letters, digits, '_', '-', '=', ':' and '.'."),
			"partitions": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				Description:   fmt.Sprintf("Number of partitions, up to %d; 0 (the default) means a non-partitioned topic. Can only be increased.", maxPartitions),
				Validators:    []validator.Int64{int64Range{field: "topic.partitions", lo: 0, hi: maxPartitions, msg: fmt.Sprintf("must be between 0 (non-partitioned) and %d", maxPartitions)}},
				PlanModifiers: []planmodifier.Int64{partitionsOnlyGrow{}}},
			"persistent": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				Description:   "Persistent (stored in bookies) or non-persistent. Default true. Changing it replaces the topic.",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.RequiresReplace()}},
			"pulsar_name": schema.StringAttribute{Computed: true,
				Description: "The topic's name for Pulsar clients: persistent://tenant/namespace/topic (or non-persistent://...)."},
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

// pulsarTopicName is the client-side name of a topic resource name
// organizations/o/clusters/c/tenants/t/namespaces/n/topics/x.
func pulsarTopicName(name string, persistent bool) string {
	if !kindTopic.matches(name) {
		return ""
	}
	segs := strings.Split(name, "/")
	scheme := "persistent"
	if !persistent {
		scheme = "non-persistent"
	}
	return scheme + "://" + segs[5] + "/" + segs[7] + "/" + segs[9]
}

func (m *topicData) fill(t *cpv1.Topic) {
	m.ID = types.StringValue(t.GetName())
	parent, id := split(t.GetName())
	m.Namespace, m.TopicID = types.StringValue(parent), types.StringValue(id)
	m.Partitions = types.Int64Value(int64(t.GetPartitions()))
	persistent := t.Persistent == nil || t.GetPersistent()
	m.Persistent = types.BoolValue(persistent)
	m.PulsarName = types.StringValue(pulsarTopicName(t.GetName(), persistent))
	m.State = types.StringValue(t.GetState().String())
	m.StatusMessage = types.StringValue(t.GetStatusMessage())
	m.UID = types.StringValue(t.GetUid())
	m.Etag = types.StringValue(t.GetEtag())
	m.CreateTime = timeString(t.GetCreateTime())
	m.UpdateTime = timeString(t.GetUpdateTime())
}

func (r *topicResource) get(ctx context.Context, name string) (*cpv1.Topic, error) {
	return r.client.Topics.GetTopic(ctx, &cpv1.GetTopicRequest{Name: name})
}

func (r *topicResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan topicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	persistent := plan.Persistent.ValueBool()
	t := &cpv1.Topic{Partitions: int32(plan.Partitions.ValueInt64()), Persistent: &persistent}
	out, err := r.client.Topics.CreateTopic(ctx, &cpv1.CreateTopicRequest{Parent: plan.Namespace.ValueString(),
		TopicId: plan.TopicID.ValueString(), Topic: t, RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create Pulsar topic "+plan.TopicID.ValueString(), err)
		return
	}
	waitAndStore(ctx, out.GetName(), plan.Timeouts.Create, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *topicResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[topicModel, *cpv1.Topic](ctx, req, resp, r.get)
}

func (r *topicResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state topicModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.ID.ValueString()
	t := &cpv1.Topic{Name: name, Partitions: int32(plan.Partitions.ValueInt64())}
	_, err := updateFresh(ctx, state.Etag.ValueString(), etagOf(r.get, name), func(ctx context.Context, etag string) (*cpv1.Topic, error) {
		t.Etag = etag
		return r.client.Topics.UpdateTopic(ctx, &cpv1.UpdateTopicRequest{Topic: t, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"partitions"}}})
	})
	if err != nil {
		apiError(&resp.Diagnostics, "Update "+name, err)
		return
	}
	waitAndStore(ctx, name, plan.Timeouts.Update, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *topicResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[topicModel, *cpv1.Topic](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.Topics.DeleteTopic(ctx, &cpv1.DeleteTopicRequest{Name: name})
		return err
	})
}

func (r *topicResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindTopic, req, resp)
}

// partitionsOnlyGrow fails a plan that lowers a topic's partitions or
// partitions a non-partitioned topic, with the API's messages.
type partitionsOnlyGrow struct{}

func (partitionsOnlyGrow) Description(context.Context) string {
	return "partitions can only be increased; a non-partitioned topic stays non-partitioned"
}

func (p partitionsOnlyGrow) MarkdownDescription(ctx context.Context) string {
	return p.Description(ctx)
}

func (partitionsOnlyGrow) PlanModifyInt64(_ context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if req.StateValue.IsNull() || req.PlanValue.IsUnknown() || req.PlanValue.IsNull() {
		return
	}
	was, now := req.StateValue.ValueInt64(), req.PlanValue.ValueInt64()
	switch {
	case was == 0 && now > 0:
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid partitions", "topic.partitions: a non-partitioned topic cannot be partitioned")
	case now < was:
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid partitions", fmt.Sprintf("topic.partitions: can only be increased (now %d)", was))
	}
}

func (m *topicData) resourceName() string { return m.ID.ValueString() }
