package terraform

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/float64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// Pulsar functions, sources and sinks: magnetar_pulsar_function,
// magnetar_pulsar_source and magnetar_pulsar_sink. Create and update wait
// until the region agent has applied the resource and every instance runs
// (status num_running equal to parallelism); drift is whatever Read finds
// different in the API.

const maxParallelism = 1000

var (
	runtimes         = enumNames(cpv1.PulsarFunction_Runtime_name)
	guaranteesNames  = enumNames(cpv1.ProcessingGuarantees_name)
	positionNames    = enumNames(cpv1.SubscriptionPosition_name)
	defaultRAMBytes  = int64(1 << 30)
	defaultDiskBytes = int64(10 << 30)
)

// instanceAttributes are the attributes functions, sources and sinks share:
// parallelism, resources, the instances' status and the agent's fields.
func instanceAttributes(kindField string, attrs map[string]schema.Attribute) map[string]schema.Attribute {
	common := map[string]schema.Attribute{
		"parallelism": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(1),
			Description: fmt.Sprintf("Number of instances, 1 to %d (default 1). The organization's functions, sources and sinks share its limit of instances.", maxParallelism),
			Validators:  []validator.Int64{int64Range{field: kindField + ".parallelism", lo: 1, hi: maxParallelism, msg: fmt.Sprintf("must be between 1 and %d (0: 1)", maxParallelism)}}},
		"processing_guarantees": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("ATLEAST_ONCE"),
			Description:   "One of " + strings.Join(guaranteesNames, ", ") + " (default ATLEAST_ONCE). Changing it replaces the resource.",
			Validators:    []validator.String{oneOfValidator{field: kindField + ".processing_guarantees", values: guaranteesNames}},
			PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
		"cpu": schema.Float64Attribute{Optional: true, Computed: true, Default: float64default.StaticFloat64(1),
			Description: "CPUs per instance (default 1)."},
		"ram_bytes": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(defaultRAMBytes),
			Description: "RAM per instance in bytes (default 1 GiB). The organization's functions, sources and sinks share its limit of RAM (parallelism x ram_bytes).",
			Validators:  []validator.Int64{int64Range{field: kindField + ".resources.ram_bytes", lo: 1, hi: maxInt64, msg: "must be positive"}}},
		"disk_bytes": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(defaultDiskBytes),
			Description: "Disk per instance in bytes (default 10 GiB).",
			Validators:  []validator.Int64{int64Range{field: kindField + ".resources.disk_bytes", lo: 1, hi: maxInt64, msg: "must be positive"}}},
		"num_instances": schema.Int64Attribute{Computed: true, Description: "Instances the data plane's function workers run, as last reported."},
		"num_running":   schema.Int64Attribute{Computed: true, Description: "Instances running, as last reported. Create and update wait until it equals parallelism."},
		"instance_error": schema.StringAttribute{Computed: true,
			Description: "The first failing instance's error (\"instance N: ...\"); empty while every instance runs."},
		"state":          pulsarStateAttribute(),
		"status_message": pulsarStatusAttribute(),
		"uid":            uidAttribute(),
		"etag":           etagAttribute(),
		"create_time":    createTimeAttribute(),
		"update_time":    updateTimeAttribute(),
	}
	for k, v := range attrs {
		common[k] = v
	}
	return common
}

// optionalString is an optional string; unset means empty.
func optionalString(desc string, v ...validator.String) schema.StringAttribute {
	return schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(""), Description: desc, Validators: v}
}

// fixedString is an optional string that replaces the resource when it
// changes; unset means empty.
func fixedString(desc string) schema.StringAttribute {
	return schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(""), Description: desc + " Changing it replaces the resource.",
		PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}}
}

func enumValue[E interface{ ~int32 }](names map[string]int32, s types.String) E {
	return E(names[s.ValueString()])
}

// instanceData are the attributes instanceAttributes adds.
type instanceData struct {
	Parallelism          types.Int64   `tfsdk:"parallelism"`
	ProcessingGuarantees types.String  `tfsdk:"processing_guarantees"`
	CPU                  types.Float64 `tfsdk:"cpu"`
	RAMBytes             types.Int64   `tfsdk:"ram_bytes"`
	DiskBytes            types.Int64   `tfsdk:"disk_bytes"`
	NumInstances         types.Int64   `tfsdk:"num_instances"`
	NumRunning           types.Int64   `tfsdk:"num_running"`
	InstanceError        types.String  `tfsdk:"instance_error"`
	State                types.String  `tfsdk:"state"`
	StatusMessage        types.String  `tfsdk:"status_message"`
	UID                  types.String  `tfsdk:"uid"`
	Etag                 types.String  `tfsdk:"etag"`
	CreateTime           types.String  `tfsdk:"create_time"`
	UpdateTime           types.String  `tfsdk:"update_time"`
}

// instanceResource is a PulsarFunction, PulsarSource or PulsarSink.
type instanceResource interface {
	proto.Message
	GetName() string
	GetUid() string
	GetEtag() string
	GetState() cpv1.PulsarResourceState
	GetStatusMessage() string
	GetParallelism() int32
	GetProcessingGuarantees() cpv1.ProcessingGuarantees
	GetResources() *cpv1.FunctionResources
	GetStatus() *cpv1.FunctionInstanceStatus
}

func (m *instanceData) fillInstance(r instanceResource, create, update string) {
	m.Parallelism = types.Int64Value(int64(r.GetParallelism()))
	m.ProcessingGuarantees = types.StringValue(r.GetProcessingGuarantees().String())
	m.CPU = types.Float64Value(r.GetResources().GetCpu())
	m.RAMBytes = types.Int64Value(r.GetResources().GetRamBytes())
	m.DiskBytes = types.Int64Value(r.GetResources().GetDiskBytes())
	st := r.GetStatus()
	m.NumInstances = types.Int64Value(int64(st.GetNumInstances()))
	m.NumRunning = types.Int64Value(int64(st.GetNumRunning()))
	m.InstanceError = types.StringValue("")
	if e := st.GetFirstError(); e != nil {
		m.InstanceError = types.StringValue(fmt.Sprintf("instance %d: %s", e.GetInstanceId(), e.GetMessage()))
	}
	m.State = types.StringValue(r.GetState().String())
	m.StatusMessage = types.StringValue(r.GetStatusMessage())
	m.UID = types.StringValue(r.GetUid())
	m.Etag = types.StringValue(r.GetEtag())
	m.CreateTime, m.UpdateTime = types.StringValue(create), types.StringValue(update)
}

func (m *instanceData) resources() *cpv1.FunctionResources {
	return &cpv1.FunctionResources{Cpu: m.CPU.ValueFloat64(), RamBytes: m.RAMBytes.ValueInt64(), DiskBytes: m.DiskBytes.ValueInt64()}
}

func optionalInt32(v types.Int64) *int32 {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	n := int32(v.ValueInt64())
	return &n
}

func int64OrNull(p *int32) types.Int64 {
	if p == nil {
		return types.Int64Null()
	}
	return types.Int64Value(int64(*p))
}

// errNotRunning is wrapped when the instances did not all run in time.
var errNotRunning = errors.New("instances not running")

// waitRunning reads a function, source or sink with get until the agent
// reports it APPLIED with every instance (parallelism) running, or ctx
// ends; it returns the last read.
func waitRunning[T instanceResource](ctx context.Context, name string, get func(context.Context) (T, error)) (T, error) {
	t := time.NewTicker(appliedPoll)
	defer t.Stop()
	for {
		r, err := get(ctx)
		if err != nil {
			return r, err
		}
		st := r.GetStatus()
		if r.GetState() == cpv1.PulsarResourceState_APPLIED && st.GetNumInstances() == r.GetParallelism() &&
			st.GetNumRunning() == st.GetNumInstances() && st.GetFirstError() == nil {
			return r, nil
		}
		select {
		case <-ctx.Done():
			why := r.GetStatusMessage()
			if e := st.GetFirstError(); why == "" && e != nil {
				why = fmt.Sprintf("instance %d: %s", e.GetInstanceId(), e.GetMessage())
			}
			return r, fmt.Errorf("timed out waiting for %s: %w (state %s, %d of %d instances running) %s",
				name, errNotRunning, r.GetState(), st.GetNumRunning(), r.GetParallelism(), why)
		case <-t.C:
		}
	}
}

// waitRunningAndStore is waitAndStore for functions, sources and sinks.
func waitRunningAndStore[M any, P instanceResource, PM apiModel[M, P]](ctx context.Context, name string,
	limit func(context.Context, time.Duration) (time.Duration, diag.Diagnostics), m *M,
	get func(context.Context, string) (P, error), st stateSetter, diags *diag.Diagnostics) {
	d, ds := limit(ctx, defaultApplied)
	if diags.Append(ds...); ds.HasError() {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	out, err := waitRunning(wctx, name, func(ctx context.Context) (P, error) { return get(ctx, name) })
	if err == nil || errors.Is(err, errNotRunning) {
		PM(m).fill(out)
		diags.Append(st.Set(ctx, m)...)
	}
	if err != nil {
		diags.AddError("Apply "+name, err.Error())
	}
}

const runningTimeoutHelp = " Create and update wait until the region agent has applied it and every instance runs, within the timeouts block (create, update; default 5m)."

// ---- magnetar_pulsar_function ----

type functionResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*functionResource)(nil)
	_ resource.ResourceWithImportState = (*functionResource)(nil)
)

func newFunctionResource() resource.Resource { return &functionResource{} }

type functionModel struct {
	ID                   types.String   `tfsdk:"id"`
	Namespace            types.String   `tfsdk:"namespace"`
	FunctionID           types.String   `tfsdk:"function_id"`
	Runtime              types.String   `tfsdk:"runtime"`
	ClassName            types.String   `tfsdk:"class_name"`
	PackageURL           types.String   `tfsdk:"package_url"`
	Inputs               types.List     `tfsdk:"inputs"`
	Output               types.String   `tfsdk:"output"`
	LogTopic             types.String   `tfsdk:"log_topic"`
	SubscriptionName     types.String   `tfsdk:"subscription_name"`
	SubscriptionPosition types.String   `tfsdk:"subscription_position"`
	UserConfig           types.String   `tfsdk:"user_config"`
	MaxMessageRetries    types.Int64    `tfsdk:"max_message_retries"`
	DeadLetterTopic      types.String   `tfsdk:"dead_letter_topic"`
	Timeouts             timeouts.Value `tfsdk:"timeouts"`
	instanceData
}

func (r *functionResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pulsar_function"
}

func (r *functionResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A Pulsar Function in a namespace: code (a Java jar, a Python file or a Go binary at an https:// or http:// URL the data plane downloads) that consumes input topics and may publish to an output topic." + runningTimeoutHelp,
		Attributes: instanceAttributes("function", map[string]schema.Attribute{
			"id":          idAttribute(kindFunction),
			"namespace":   parentArgument("parent", kindNamespace, "Namespace the function belongs to"),
			"function_id": idArgument("function_id", pulsarID, "Pulsar function name: 1 to 255 letters, digits, '_', '-', '=', ':' and '.'."),
			"runtime": schema.StringAttribute{Required: true, Description: "One of " + strings.Join(runtimes, ", ") + ". Changing it replaces the function.",
				Validators:    []validator.String{oneOfValidator{field: "function.runtime", values: runtimes}},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
			"class_name":  optionalString("The function's class (Java) or module.Class (Python); required except for GO."),
			"package_url": schema.StringAttribute{Required: true, Description: "https:// or http:// URL of the function's package, which the data plane downloads (on create, and when the URL changes)."},
			"inputs": schema.ListAttribute{ElementType: types.StringType, Required: true,
				Description: "Input topics, full Pulsar names (persistent://tenant/namespace/topic)."},
			"output":                optionalString("Output topic; empty for none."),
			"log_topic":             optionalString("Topic the function's logs are published to; empty for none."),
			"subscription_name":     fixedString("Subscription on the inputs; empty means Pulsar's default ({tenant}/{namespace}/{function})."),
			"subscription_position": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("LATEST"), Description: "Where a new subscription starts: LATEST (default) or EARLIEST.", Validators: []validator.String{oneOfValidator{field: "function.subscription_position", values: positionNames}}},
			"user_config":           optionalString("User config the function reads from its context: a JSON object, e.g. jsonencode({...})."),
			"max_message_retries":   schema.Int64Attribute{Optional: true, Description: "Deliveries of a message before it goes to the dead letter topic; unset means no limit."},
			"dead_letter_topic":     optionalString("Where messages go after max_message_retries deliveries (needs max_message_retries)."),
		}),
		Blocks: map[string]schema.Block{"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true})},
	}
}

func (m *functionModel) resourceName() string { return m.ID.ValueString() }

func (m *functionModel) fill(f *cpv1.PulsarFunction) {
	m.ID = types.StringValue(f.GetName())
	parent, id := split(f.GetName())
	m.Namespace, m.FunctionID = types.StringValue(parent), types.StringValue(id)
	m.Runtime = types.StringValue(f.GetRuntime().String())
	m.ClassName = types.StringValue(f.GetClassName())
	m.PackageURL = types.StringValue(f.GetPackageUrl())
	m.Inputs = stringList(f.GetInputs())
	m.Output, m.LogTopic = types.StringValue(f.GetOutput()), types.StringValue(f.GetLogTopic())
	m.SubscriptionName = types.StringValue(f.GetSubscriptionName())
	m.SubscriptionPosition = types.StringValue(f.GetSubscriptionPosition().String())
	m.UserConfig = types.StringValue(f.GetUserConfig())
	m.MaxMessageRetries = int64OrNull(f.MaxMessageRetries)
	m.DeadLetterTopic = types.StringValue(f.GetDeadLetterTopic())
	m.fillInstance(f, timeString(f.GetCreateTime()).ValueString(), timeString(f.GetUpdateTime()).ValueString())
}

func (m *functionModel) toProto(ctx context.Context, diags *diag.Diagnostics) *cpv1.PulsarFunction {
	return &cpv1.PulsarFunction{
		Runtime:              enumValue[cpv1.PulsarFunction_Runtime](cpv1.PulsarFunction_Runtime_value, m.Runtime),
		ClassName:            m.ClassName.ValueString(),
		PackageUrl:           m.PackageURL.ValueString(),
		Inputs:               listStrings(ctx, m.Inputs, diags),
		Output:               m.Output.ValueString(),
		LogTopic:             m.LogTopic.ValueString(),
		Parallelism:          int32(m.Parallelism.ValueInt64()),
		ProcessingGuarantees: enumValue[cpv1.ProcessingGuarantees](cpv1.ProcessingGuarantees_value, m.ProcessingGuarantees),
		SubscriptionName:     m.SubscriptionName.ValueString(),
		SubscriptionPosition: enumValue[cpv1.SubscriptionPosition](cpv1.SubscriptionPosition_value, m.SubscriptionPosition),
		UserConfig:           m.UserConfig.ValueString(),
		Resources:            m.resources(),
		MaxMessageRetries:    optionalInt32(m.MaxMessageRetries),
		DeadLetterTopic:      m.DeadLetterTopic.ValueString(),
	}
}

// functionMask are the fields an update sends (the immutable ones replace
// the resource instead).
var functionMask = []string{"class_name", "package_url", "inputs", "output", "log_topic", "parallelism", "subscription_position",
	"user_config", "resources", "max_message_retries", "dead_letter_topic"}

func (r *functionResource) get(ctx context.Context, name string) (*cpv1.PulsarFunction, error) {
	return r.client.Functions.GetFunction(ctx, &cpv1.GetFunctionRequest{Name: name})
}

func (r *functionResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	f := plan.toProto(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := r.client.Functions.CreateFunction(ctx, &cpv1.CreateFunctionRequest{Parent: plan.Namespace.ValueString(),
		FunctionId: plan.FunctionID.ValueString(), Function: f, RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create Pulsar function "+plan.FunctionID.ValueString(), err)
		return
	}
	waitRunningAndStore(ctx, out.GetName(), plan.Timeouts.Create, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *functionResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[functionModel, *cpv1.PulsarFunction](ctx, req, resp, r.get)
}

func (r *functionResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	f := plan.toProto(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.ID.ValueString()
	f.Name = name
	_, err := updateFresh(ctx, state.Etag.ValueString(), etagOf(r.get, name), func(ctx context.Context, etag string) (*cpv1.PulsarFunction, error) {
		f.Etag = etag
		return r.client.Functions.UpdateFunction(ctx, &cpv1.UpdateFunctionRequest{Function: f, UpdateMask: &fieldmaskpb.FieldMask{Paths: functionMask}})
	})
	if err != nil {
		apiError(&resp.Diagnostics, "Update "+name, err)
		return
	}
	waitRunningAndStore(ctx, name, plan.Timeouts.Update, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *functionResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[functionModel, *cpv1.PulsarFunction](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.Functions.DeleteFunction(ctx, &cpv1.DeleteFunctionRequest{Name: name})
		return err
	})
}

func (r *functionResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindFunction, req, resp)
}

// ---- magnetar_pulsar_source ----

type sourceResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*sourceResource)(nil)
	_ resource.ResourceWithImportState = (*sourceResource)(nil)
)

func newSourceResource() resource.Resource { return &sourceResource{} }

type sourceModel struct {
	ID         types.String   `tfsdk:"id"`
	Namespace  types.String   `tfsdk:"namespace"`
	SourceID   types.String   `tfsdk:"source_id"`
	Archive    types.String   `tfsdk:"archive"`
	PackageURL types.String   `tfsdk:"package_url"`
	ClassName  types.String   `tfsdk:"class_name"`
	Topic      types.String   `tfsdk:"topic"`
	Configs    types.String   `tfsdk:"configs"`
	Timeouts   timeouts.Value `tfsdk:"timeouts"`
	instanceData
}

func connectorAttributes(kindField string) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"archive":     optionalString("A connector the data plane has built in, builtin://{connector}; or give package_url."),
		"package_url": optionalString("https:// or http:// URL of the connector's NAR or jar, which the data plane downloads; or give archive."),
		"class_name":  optionalString("The " + kindField + " class; empty means the connector's own (required with package_url)."),
		"configs":     optionalString("The connector's configuration: a JSON object, e.g. jsonencode({...})."),
	}
}

func (r *sourceResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pulsar_source"
}

func (r *sourceResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := connectorAttributes("source")
	attrs["id"] = idAttribute(kindSource)
	attrs["namespace"] = parentArgument("parent", kindNamespace, "Namespace the source belongs to")
	attrs["source_id"] = idArgument("source_id", pulsarID, "Pulsar source name: 1 to 255 letters, digits, '_', '-', '=', ':' and '.'.")
	attrs["topic"] = schema.StringAttribute{Required: true, Description: "The topic the source publishes to, a full Pulsar name."}
	resp.Schema = schema.Schema{
		Description: "A Pulsar IO source in a namespace: a connector that publishes what it reads from an external system to a topic." + runningTimeoutHelp,
		Attributes:  instanceAttributes("source", attrs),
		Blocks:      map[string]schema.Block{"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true})},
	}
}

func (m *sourceModel) resourceName() string { return m.ID.ValueString() }

func (m *sourceModel) fill(s *cpv1.PulsarSource) {
	m.ID = types.StringValue(s.GetName())
	parent, id := split(s.GetName())
	m.Namespace, m.SourceID = types.StringValue(parent), types.StringValue(id)
	m.Archive, m.PackageURL = types.StringValue(s.GetArchive()), types.StringValue(s.GetPackageUrl())
	m.ClassName, m.Topic, m.Configs = types.StringValue(s.GetClassName()), types.StringValue(s.GetTopic()), types.StringValue(s.GetConfigs())
	m.fillInstance(s, timeString(s.GetCreateTime()).ValueString(), timeString(s.GetUpdateTime()).ValueString())
}

func (m *sourceModel) toProto() *cpv1.PulsarSource {
	return &cpv1.PulsarSource{
		Archive: m.Archive.ValueString(), PackageUrl: m.PackageURL.ValueString(), ClassName: m.ClassName.ValueString(),
		Topic: m.Topic.ValueString(), Configs: m.Configs.ValueString(), Parallelism: int32(m.Parallelism.ValueInt64()),
		ProcessingGuarantees: enumValue[cpv1.ProcessingGuarantees](cpv1.ProcessingGuarantees_value, m.ProcessingGuarantees),
		Resources:            m.resources(),
	}
}

var sourceMask = []string{"archive", "package_url", "class_name", "topic", "configs", "parallelism", "resources"}

func (r *sourceResource) get(ctx context.Context, name string) (*cpv1.PulsarSource, error) {
	return r.client.Sources.GetSource(ctx, &cpv1.GetSourceRequest{Name: name})
}

func (r *sourceResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan sourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := r.client.Sources.CreateSource(ctx, &cpv1.CreateSourceRequest{Parent: plan.Namespace.ValueString(),
		SourceId: plan.SourceID.ValueString(), Source: plan.toProto(), RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create Pulsar source "+plan.SourceID.ValueString(), err)
		return
	}
	waitRunningAndStore(ctx, out.GetName(), plan.Timeouts.Create, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *sourceResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[sourceModel, *cpv1.PulsarSource](ctx, req, resp, r.get)
}

func (r *sourceResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state sourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.ID.ValueString()
	s := plan.toProto()
	s.Name = name
	_, err := updateFresh(ctx, state.Etag.ValueString(), etagOf(r.get, name), func(ctx context.Context, etag string) (*cpv1.PulsarSource, error) {
		s.Etag = etag
		return r.client.Sources.UpdateSource(ctx, &cpv1.UpdateSourceRequest{Source: s, UpdateMask: &fieldmaskpb.FieldMask{Paths: sourceMask}})
	})
	if err != nil {
		apiError(&resp.Diagnostics, "Update "+name, err)
		return
	}
	waitRunningAndStore(ctx, name, plan.Timeouts.Update, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *sourceResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[sourceModel, *cpv1.PulsarSource](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.Sources.DeleteSource(ctx, &cpv1.DeleteSourceRequest{Name: name})
		return err
	})
}

func (r *sourceResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindSource, req, resp)
}

// ---- magnetar_pulsar_sink ----

type sinkResource struct{ configured }

var (
	_ resource.ResourceWithConfigure   = (*sinkResource)(nil)
	_ resource.ResourceWithImportState = (*sinkResource)(nil)
)

func newSinkResource() resource.Resource { return &sinkResource{} }

type sinkModel struct {
	ID                   types.String   `tfsdk:"id"`
	Namespace            types.String   `tfsdk:"namespace"`
	SinkID               types.String   `tfsdk:"sink_id"`
	Archive              types.String   `tfsdk:"archive"`
	PackageURL           types.String   `tfsdk:"package_url"`
	ClassName            types.String   `tfsdk:"class_name"`
	Inputs               types.List     `tfsdk:"inputs"`
	Configs              types.String   `tfsdk:"configs"`
	SubscriptionName     types.String   `tfsdk:"subscription_name"`
	SubscriptionPosition types.String   `tfsdk:"subscription_position"`
	MaxMessageRetries    types.Int64    `tfsdk:"max_message_retries"`
	DeadLetterTopic      types.String   `tfsdk:"dead_letter_topic"`
	Timeouts             timeouts.Value `tfsdk:"timeouts"`
	instanceData
}

func (r *sinkResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pulsar_sink"
}

func (r *sinkResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := connectorAttributes("sink")
	attrs["id"] = idAttribute(kindSink)
	attrs["namespace"] = parentArgument("parent", kindNamespace, "Namespace the sink belongs to")
	attrs["sink_id"] = idArgument("sink_id", pulsarID, "Pulsar sink name: 1 to 255 letters, digits, '_', '-', '=', ':' and '.'.")
	attrs["inputs"] = schema.ListAttribute{ElementType: types.StringType, Required: true, Description: "Input topics, full Pulsar names."}
	attrs["subscription_name"] = fixedString("Subscription on the inputs; empty means Pulsar's default.")
	attrs["subscription_position"] = schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("LATEST"),
		Description: "Where a new subscription starts: LATEST (default) or EARLIEST.", Validators: []validator.String{oneOfValidator{field: "sink.subscription_position", values: positionNames}}}
	attrs["max_message_retries"] = schema.Int64Attribute{Optional: true, Description: "Deliveries of a message before it goes to the dead letter topic; unset means no limit."}
	attrs["dead_letter_topic"] = optionalString("Where messages go after max_message_retries deliveries (needs max_message_retries).")
	resp.Schema = schema.Schema{
		Description: "A Pulsar IO sink in a namespace: a connector that writes what it consumes from topics to an external system." + runningTimeoutHelp,
		Attributes:  instanceAttributes("sink", attrs),
		Blocks:      map[string]schema.Block{"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Update: true})},
	}
}

func (m *sinkModel) resourceName() string { return m.ID.ValueString() }

func (m *sinkModel) fill(s *cpv1.PulsarSink) {
	m.ID = types.StringValue(s.GetName())
	parent, id := split(s.GetName())
	m.Namespace, m.SinkID = types.StringValue(parent), types.StringValue(id)
	m.Archive, m.PackageURL = types.StringValue(s.GetArchive()), types.StringValue(s.GetPackageUrl())
	m.ClassName, m.Configs = types.StringValue(s.GetClassName()), types.StringValue(s.GetConfigs())
	m.Inputs = stringList(s.GetInputs())
	m.SubscriptionName = types.StringValue(s.GetSubscriptionName())
	m.SubscriptionPosition = types.StringValue(s.GetSubscriptionPosition().String())
	m.MaxMessageRetries = int64OrNull(s.MaxMessageRetries)
	m.DeadLetterTopic = types.StringValue(s.GetDeadLetterTopic())
	m.fillInstance(s, timeString(s.GetCreateTime()).ValueString(), timeString(s.GetUpdateTime()).ValueString())
}

func (m *sinkModel) toProto(ctx context.Context, diags *diag.Diagnostics) *cpv1.PulsarSink {
	return &cpv1.PulsarSink{
		Archive: m.Archive.ValueString(), PackageUrl: m.PackageURL.ValueString(), ClassName: m.ClassName.ValueString(),
		Inputs: listStrings(ctx, m.Inputs, diags), Configs: m.Configs.ValueString(), Parallelism: int32(m.Parallelism.ValueInt64()),
		ProcessingGuarantees: enumValue[cpv1.ProcessingGuarantees](cpv1.ProcessingGuarantees_value, m.ProcessingGuarantees),
		SubscriptionName:     m.SubscriptionName.ValueString(),
		SubscriptionPosition: enumValue[cpv1.SubscriptionPosition](cpv1.SubscriptionPosition_value, m.SubscriptionPosition),
		Resources:            m.resources(), MaxMessageRetries: optionalInt32(m.MaxMessageRetries), DeadLetterTopic: m.DeadLetterTopic.ValueString(),
	}
}

var sinkMask = []string{"archive", "package_url", "class_name", "inputs", "configs", "parallelism", "subscription_position", "resources",
	"max_message_retries", "dead_letter_topic"}

func (r *sinkResource) get(ctx context.Context, name string) (*cpv1.PulsarSink, error) {
	return r.client.Sinks.GetSink(ctx, &cpv1.GetSinkRequest{Name: name})
}

func (r *sinkResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan sinkModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	s := plan.toProto(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := r.client.Sinks.CreateSink(ctx, &cpv1.CreateSinkRequest{Parent: plan.Namespace.ValueString(),
		SinkId: plan.SinkID.ValueString(), Sink: s, RequestId: newRequestID()})
	if err != nil {
		apiError(&resp.Diagnostics, "Create Pulsar sink "+plan.SinkID.ValueString(), err)
		return
	}
	waitRunningAndStore(ctx, out.GetName(), plan.Timeouts.Create, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *sinkResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource[sinkModel, *cpv1.PulsarSink](ctx, req, resp, r.get)
}

func (r *sinkResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state sinkModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	s := plan.toProto(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.ID.ValueString()
	s.Name = name
	_, err := updateFresh(ctx, state.Etag.ValueString(), etagOf(r.get, name), func(ctx context.Context, etag string) (*cpv1.PulsarSink, error) {
		s.Etag = etag
		return r.client.Sinks.UpdateSink(ctx, &cpv1.UpdateSinkRequest{Sink: s, UpdateMask: &fieldmaskpb.FieldMask{Paths: sinkMask}})
	})
	if err != nil {
		apiError(&resp.Diagnostics, "Update "+name, err)
		return
	}
	waitRunningAndStore(ctx, name, plan.Timeouts.Update, &plan, r.get, &resp.State, &resp.Diagnostics)
}

func (r *sinkResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[sinkModel, *cpv1.PulsarSink](ctx, req, resp, func(ctx context.Context, name string) error {
		_, err := r.client.Sinks.DeleteSink(ctx, &cpv1.DeleteSinkRequest{Name: name})
		return err
	})
}

func (r *sinkResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, kindSink, req, resp)
}
