package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/policy"
)

// Pulsar functions, sources and sinks live under a namespace, like topics:
// organizations/{org}/clusters/{c}/tenants/{t}/namespaces/{ns}/functions/{f}
// (sources/{s}, sinks/{k}). Their standard methods are synchronous like the
// other Pulsar resources': a write records the desired state as PENDING,
// the region agent applies it to the cluster's function workers (Pulsar's
// admin REST v3) and reports APPLIED or FAILED with the instances' status.
//
// Creates and updates are admitted against the organization's function
// limits: the policy gets the instances (parallelism) and RAM
// (parallelism x resources.ram_bytes) the request asks for as resource
// attributes "instances" and "ram_bytes", and what the organization's other
// functions, sources and sinks use as OrgFacts.FunctionInstances and
// FunctionRAMBytes. Two concurrent creates may both pass (as for
// clusters): the limits bound what one request can add, not a race.

// Limits of the functions' fields.
const (
	maxParallelism     = 1000
	maxFunctionTopics  = 64
	maxClassNameLen    = 1024
	maxPackageURLLen   = 2048
	maxConfigJSONLen   = 64 << 10
	maxSubscriptionLen = 255
)

// Pulsar's defaults for one instance's resources, filled in on create.
const (
	defaultInstanceCPU  = 1.0
	defaultInstanceRAM  = int64(1 << 30)
	defaultInstanceDisk = int64(10 << 30)
)

// topicNamePattern is a full Pulsar topic name of an input or output.
var topicNamePattern = regexp.MustCompile(`^(persistent|non-persistent)://[A-Za-z0-9_=:.-]{1,255}/[A-Za-z0-9_=:.-]{1,255}/[A-Za-z0-9_=:.-]{1,255}$`)

// builtinPrefix marks a connector the data plane has built in.
const builtinPrefix = "builtin://"

// instanceResource is what PulsarFunction, PulsarSource and PulsarSink
// have in common.
type instanceResource interface {
	proto.Message
	GetName() string
	GetParallelism() int32
	GetResources() *cpv1.FunctionResources
}

// instanceKinds are the collections admitted against the function limits.
var instanceKinds = []*kind{kindFunction, kindSource, kindSink}

// isInstanceWrite says whether action creates or updates a function,
// source or sink (the actions that load the function facts).
func isInstanceWrite(action string) bool {
	coll, verb, _ := strings.Cut(action, ".")
	return (verb == "create" || verb == "update") && slices.ContainsFunc(instanceKinds, func(k *kind) bool { return k.collection == coll })
}

// demand is the instances and RAM a resource asks for.
func demand(m instanceResource) (instances, ram int64) {
	p := int64(m.GetParallelism())
	return p, p * m.GetResources().GetRamBytes()
}

// instanceAttrs are the admission attributes of a function, source or sink.
func instanceAttrs(m instanceResource) map[string]any {
	n, ram := demand(m)
	return map[string]any{"instances": n, "ram_bytes": ram}
}

// functionFacts adds to f what the organization's functions, sources and
// sinks other than except use.
func (s *Server) functionFacts(ctx context.Context, f *policy.OrgFacts, except string) error {
	for _, k := range instanceKinds {
		token := ""
		for {
			objs, next, err := s.store.List(ctx, store.ListQuery{Kind: k.collection, Org: f.Name, PageSize: 1000, PageToken: token})
			if err != nil {
				return err
			}
			for _, o := range objs {
				if o.Name == except {
					continue
				}
				m, _, err := decode(k, o)
				if err != nil {
					return err
				}
				n, ram := demand(m.(instanceResource))
				f.FunctionInstances += n
				f.FunctionRAMBytes += ram
			}
			if next == "" {
				break
			}
			token = next
		}
	}
	return nil
}

// fillResources fills unset resources with Pulsar's defaults.
func fillResources(r **cpv1.FunctionResources) {
	if *r == nil {
		*r = &cpv1.FunctionResources{}
	}
	if (*r).Cpu == 0 {
		(*r).Cpu = defaultInstanceCPU
	}
	if (*r).RamBytes == 0 {
		(*r).RamBytes = defaultInstanceRAM
	}
	if (*r).DiskBytes == 0 {
		(*r).DiskBytes = defaultInstanceDisk
	}
}

func validateResources(field string, r *cpv1.FunctionResources) error {
	switch {
	case r.GetCpu() < 0 || r.GetCpu() > 64:
		return invalid(field+".cpu", "must be between 0 (the default, 1) and 64")
	case r.GetRamBytes() < 0:
		return invalid(field+".ram_bytes", "must not be negative (0: the default, 1 GiB)")
	case r.GetDiskBytes() < 0:
		return invalid(field+".disk_bytes", "must not be negative (0: the default, 10 GiB)")
	}
	return nil
}

func validateParallelism(field string, p int32) error {
	if p < 1 || p > maxParallelism {
		return invalid(field, "must be between 1 and %d (0: 1)", maxParallelism)
	}
	return nil
}

// validateTopic checks a full topic name; empty is allowed unless required.
func validateTopic(field, t string, required bool) error {
	if t == "" {
		if required {
			return invalid(field, "required")
		}
		return nil
	}
	if !topicNamePattern.MatchString(t) {
		return invalid(field, "%q is not a full topic name (persistent://tenant/namespace/topic)", t)
	}
	return nil
}

// validateInputs checks a list of input topics and that none is also an
// output (the others).
func validateInputs(field string, inputs []string, outputs map[string]string) error {
	if len(inputs) == 0 {
		return invalid(field, "at least one input topic is required")
	}
	if len(inputs) > maxFunctionTopics {
		return invalid(field, "at most %d topics", maxFunctionTopics)
	}
	seen := map[string]bool{}
	for i, t := range inputs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := validateTopic(f, t, true); err != nil {
			return err
		}
		if seen[t] {
			return invalid(f, "%s is listed twice", t)
		}
		seen[t] = true
		if of, ok := outputs[t]; ok {
			return invalid(of, "%s is also an input topic (topics must be one or the other)", t)
		}
	}
	return nil
}

// validatePackageURL checks the package a data plane downloads: https://
// or http://, with a host and no credentials.
func validatePackageURL(field, raw string) error {
	if raw == "" {
		return invalid(field, "required: an https:// or http:// URL the data plane downloads")
	}
	if len(raw) > maxPackageURLLen {
		return invalid(field, "at most %d characters", maxPackageURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return invalid(field, "not a URL: %v", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "https", "http":
	case "file":
		return invalid(field, "file: URLs are not accepted by the managed service; serve the package over https:// or http://")
	default:
		return invalid(field, "must be an https:// or http:// URL")
	}
	if u.Host == "" {
		return invalid(field, "must name a host")
	}
	if u.User != nil {
		return invalid(field, "must not carry credentials")
	}
	return nil
}

// validateArchive checks a source's or sink's package: exactly one of a
// builtin connector and a package URL; a package needs its class.
func validateArchive(prefix, archive, packageURL, className string) error {
	switch {
	case archive != "" && packageURL != "":
		return invalid(prefix+"archive", "give either archive (a builtin connector) or package_url, not both")
	case archive == "" && packageURL == "":
		return invalid(prefix+"archive", "required: a builtin connector (builtin://{connector}) or a package_url")
	case archive != "":
		name, ok := strings.CutPrefix(archive, builtinPrefix)
		if !ok || !pulsarIDPattern.MatchString(name) {
			return invalid(prefix+"archive", "must be builtin://{connector} (a connector the data plane has built in); give other packages as package_url")
		}
	default:
		if err := validatePackageURL(prefix+"package_url", packageURL); err != nil {
			return err
		}
		if className == "" {
			return invalid(prefix+"class_name", "required with a package_url")
		}
	}
	return validateClassName(prefix+"class_name", className)
}

func validateClassName(field, c string) error {
	if len(c) > maxClassNameLen || strings.ContainsFunc(c, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return invalid(field, "must be at most %d characters without spaces", maxClassNameLen)
	}
	return nil
}

// validateJSONObject checks a configuration given as JSON text.
func validateJSONObject(field, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > maxConfigJSONLen {
		return invalid(field, "at most %d bytes", maxConfigJSONLen)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
		return invalid(field, "must be a JSON object")
	}
	return nil
}

func validateGuarantees(field string, g cpv1.ProcessingGuarantees) error {
	if _, ok := cpv1.ProcessingGuarantees_name[int32(g)]; !ok || g == cpv1.ProcessingGuarantees_PROCESSING_GUARANTEES_UNSPECIFIED {
		return invalid(field, "unknown value %d", g)
	}
	return nil
}

func validateSubscription(prefix, name string, pos cpv1.SubscriptionPosition) error {
	if len(name) > maxSubscriptionLen || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return invalid(prefix+"subscription_name", "must be at most %d characters without spaces", maxSubscriptionLen)
	}
	if _, ok := cpv1.SubscriptionPosition_name[int32(pos)]; !ok || pos == cpv1.SubscriptionPosition_SUBSCRIPTION_POSITION_UNSPECIFIED {
		return invalid(prefix+"subscription_position", "unknown value %d", pos)
	}
	return nil
}

func validateRetries(prefix string, max *int32, dlq string) error {
	if max != nil && *max < 0 {
		return invalid(prefix+"max_message_retries", "must not be negative")
	}
	if err := validateTopic(prefix+"dead_letter_topic", dlq, false); err != nil {
		return err
	}
	if dlq != "" && max == nil {
		return invalid(prefix+"dead_letter_topic", "needs max_message_retries")
	}
	return nil
}

// ---- Functions ----

func functionDefaults(f *cpv1.PulsarFunction) {
	if f.Parallelism == 0 {
		f.Parallelism = 1
	}
	if f.ProcessingGuarantees == cpv1.ProcessingGuarantees_PROCESSING_GUARANTEES_UNSPECIFIED {
		f.ProcessingGuarantees = cpv1.ProcessingGuarantees_ATLEAST_ONCE
	}
	if f.SubscriptionPosition == cpv1.SubscriptionPosition_SUBSCRIPTION_POSITION_UNSPECIFIED {
		f.SubscriptionPosition = cpv1.SubscriptionPosition_LATEST
	}
	fillResources(&f.Resources)
}

// validateFunction checks a function with its defaults filled in.
func validateFunction(f *cpv1.PulsarFunction) error {
	const p = "function."
	switch f.GetRuntime() {
	case cpv1.PulsarFunction_JAVA, cpv1.PulsarFunction_PYTHON, cpv1.PulsarFunction_GO:
	case cpv1.PulsarFunction_RUNTIME_UNSPECIFIED:
		return invalid(p+"runtime", "required (JAVA, PYTHON or GO)")
	default:
		return invalid(p+"runtime", "unknown value %d", f.GetRuntime())
	}
	if f.GetClassName() == "" && f.GetRuntime() != cpv1.PulsarFunction_GO {
		return invalid(p+"class_name", "required for %s functions", f.GetRuntime())
	}
	if err := validateClassName(p+"class_name", f.GetClassName()); err != nil {
		return err
	}
	if err := validatePackageURL(p+"package_url", f.GetPackageUrl()); err != nil {
		return err
	}
	for _, t := range []struct{ field, topic string }{{p + "output", f.GetOutput()}, {p + "log_topic", f.GetLogTopic()}} {
		if err := validateTopic(t.field, t.topic, false); err != nil {
			return err
		}
	}
	outputs := map[string]string{}
	if f.GetOutput() != "" {
		outputs[f.GetOutput()] = p + "output"
	}
	if f.GetLogTopic() != "" {
		outputs[f.GetLogTopic()] = p + "log_topic"
	}
	if err := validateInputs(p+"inputs", f.GetInputs(), outputs); err != nil {
		return err
	}
	if err := validateParallelism(p+"parallelism", f.GetParallelism()); err != nil {
		return err
	}
	if err := validateGuarantees(p+"processing_guarantees", f.GetProcessingGuarantees()); err != nil {
		return err
	}
	if f.GetRuntime() == cpv1.PulsarFunction_PYTHON && f.GetProcessingGuarantees() == cpv1.ProcessingGuarantees_EFFECTIVELY_ONCE {
		return invalid(p+"processing_guarantees", "EFFECTIVELY_ONCE is not supported by Python functions")
	}
	if err := validateSubscription(p, f.GetSubscriptionName(), f.GetSubscriptionPosition()); err != nil {
		return err
	}
	if err := validateJSONObject(p+"user_config", f.GetUserConfig()); err != nil {
		return err
	}
	if err := validateResources(p+"resources", f.GetResources()); err != nil {
		return err
	}
	return validateRetries(p, f.MaxMessageRetries, f.GetDeadLetterTopic())
}

type functionsSvc struct {
	cpv1.UnimplementedFunctionsServer
	s *Server
}

func (f functionsSvc) GetFunction(ctx context.Context, req *cpv1.GetFunctionRequest) (*cpv1.PulsarFunction, error) {
	m, err := f.s.get(ctx, kindFunction, req.GetName())
	return as[*cpv1.PulsarFunction](m), err
}

func (f functionsSvc) ListFunctions(ctx context.Context, req *cpv1.ListFunctionsRequest) (*cpv1.ListFunctionsResponse, error) {
	ms, next, err := f.s.list(ctx, kindFunction, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListFunctionsResponse{Functions: asAll[*cpv1.PulsarFunction](ms), NextPageToken: next}, err
}

func (f functionsSvc) CreateFunction(ctx context.Context, req *cpv1.CreateFunctionRequest) (*cpv1.PulsarFunction, error) {
	fn := req.GetFunction()
	if fn == nil {
		fn = &cpv1.PulsarFunction{}
	}
	functionDefaults(fn)
	obj, err := f.s.createInstances(ctx, kindFunction, req.GetParent(), req.GetFunctionId(), req.GetRequestId(), fn,
		func() error { return validateFunction(fn) })
	return decodeAs[*cpv1.PulsarFunction](f.s, kindFunction, obj, err)
}

func (f functionsSvc) UpdateFunction(ctx context.Context, req *cpv1.UpdateFunctionRequest) (*cpv1.PulsarFunction, error) {
	m, err := f.s.updateInstances(ctx, kindFunction, nilIfNil(req.GetFunction()), req.GetUpdateMask(),
		func(m proto.Message) { functionDefaults(m.(*cpv1.PulsarFunction)) },
		func(old, merged proto.Message) error {
			o, n := old.(*cpv1.PulsarFunction), merged.(*cpv1.PulsarFunction)
			switch {
			case o.GetRuntime() != n.GetRuntime():
				return invalid("function.runtime", "cannot be changed after creation")
			case o.GetProcessingGuarantees() != n.GetProcessingGuarantees():
				return invalid("function.processing_guarantees", "cannot be changed after creation")
			case o.GetSubscriptionName() != n.GetSubscriptionName():
				return invalid("function.subscription_name", "cannot be changed after creation")
			}
			return validateFunction(n)
		})
	return as[*cpv1.PulsarFunction](m), err
}

func (f functionsSvc) DeleteFunction(ctx context.Context, req *cpv1.DeleteFunctionRequest) (*emptypb.Empty, error) {
	return empty(f.s.removeEmpty(ctx, kindFunction, nil, req.GetName(), req.GetEtag()))
}

// ---- Sources ----

func sourceDefaults(s *cpv1.PulsarSource) {
	if s.Parallelism == 0 {
		s.Parallelism = 1
	}
	if s.ProcessingGuarantees == cpv1.ProcessingGuarantees_PROCESSING_GUARANTEES_UNSPECIFIED {
		s.ProcessingGuarantees = cpv1.ProcessingGuarantees_ATLEAST_ONCE
	}
	fillResources(&s.Resources)
}

func validateSource(s *cpv1.PulsarSource) error {
	const p = "source."
	if err := validateArchive(p, s.GetArchive(), s.GetPackageUrl(), s.GetClassName()); err != nil {
		return err
	}
	if err := validateTopic(p+"topic", s.GetTopic(), true); err != nil {
		return err
	}
	if err := validateJSONObject(p+"configs", s.GetConfigs()); err != nil {
		return err
	}
	if err := validateParallelism(p+"parallelism", s.GetParallelism()); err != nil {
		return err
	}
	if err := validateGuarantees(p+"processing_guarantees", s.GetProcessingGuarantees()); err != nil {
		return err
	}
	return validateResources(p+"resources", s.GetResources())
}

type sourcesSvc struct {
	cpv1.UnimplementedSourcesServer
	s *Server
}

func (x sourcesSvc) GetSource(ctx context.Context, req *cpv1.GetSourceRequest) (*cpv1.PulsarSource, error) {
	m, err := x.s.get(ctx, kindSource, req.GetName())
	return as[*cpv1.PulsarSource](m), err
}

func (x sourcesSvc) ListSources(ctx context.Context, req *cpv1.ListSourcesRequest) (*cpv1.ListSourcesResponse, error) {
	ms, next, err := x.s.list(ctx, kindSource, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListSourcesResponse{Sources: asAll[*cpv1.PulsarSource](ms), NextPageToken: next}, err
}

func (x sourcesSvc) CreateSource(ctx context.Context, req *cpv1.CreateSourceRequest) (*cpv1.PulsarSource, error) {
	src := req.GetSource()
	if src == nil {
		src = &cpv1.PulsarSource{}
	}
	sourceDefaults(src)
	obj, err := x.s.createInstances(ctx, kindSource, req.GetParent(), req.GetSourceId(), req.GetRequestId(), src,
		func() error { return validateSource(src) })
	return decodeAs[*cpv1.PulsarSource](x.s, kindSource, obj, err)
}

func (x sourcesSvc) UpdateSource(ctx context.Context, req *cpv1.UpdateSourceRequest) (*cpv1.PulsarSource, error) {
	m, err := x.s.updateInstances(ctx, kindSource, nilIfNil(req.GetSource()), req.GetUpdateMask(),
		func(m proto.Message) { sourceDefaults(m.(*cpv1.PulsarSource)) },
		func(old, merged proto.Message) error {
			o, n := old.(*cpv1.PulsarSource), merged.(*cpv1.PulsarSource)
			if o.GetProcessingGuarantees() != n.GetProcessingGuarantees() {
				return invalid("source.processing_guarantees", "cannot be changed after creation")
			}
			return validateSource(n)
		})
	return as[*cpv1.PulsarSource](m), err
}

func (x sourcesSvc) DeleteSource(ctx context.Context, req *cpv1.DeleteSourceRequest) (*emptypb.Empty, error) {
	return empty(x.s.removeEmpty(ctx, kindSource, nil, req.GetName(), req.GetEtag()))
}

// ---- Sinks ----

func sinkDefaults(s *cpv1.PulsarSink) {
	if s.Parallelism == 0 {
		s.Parallelism = 1
	}
	if s.ProcessingGuarantees == cpv1.ProcessingGuarantees_PROCESSING_GUARANTEES_UNSPECIFIED {
		s.ProcessingGuarantees = cpv1.ProcessingGuarantees_ATLEAST_ONCE
	}
	if s.SubscriptionPosition == cpv1.SubscriptionPosition_SUBSCRIPTION_POSITION_UNSPECIFIED {
		s.SubscriptionPosition = cpv1.SubscriptionPosition_LATEST
	}
	fillResources(&s.Resources)
}

func validateSink(s *cpv1.PulsarSink) error {
	const p = "sink."
	if err := validateArchive(p, s.GetArchive(), s.GetPackageUrl(), s.GetClassName()); err != nil {
		return err
	}
	outputs := map[string]string{}
	if s.GetDeadLetterTopic() != "" {
		outputs[s.GetDeadLetterTopic()] = p + "dead_letter_topic"
	}
	if err := validateInputs(p+"inputs", s.GetInputs(), outputs); err != nil {
		return err
	}
	if err := validateJSONObject(p+"configs", s.GetConfigs()); err != nil {
		return err
	}
	if err := validateParallelism(p+"parallelism", s.GetParallelism()); err != nil {
		return err
	}
	if err := validateGuarantees(p+"processing_guarantees", s.GetProcessingGuarantees()); err != nil {
		return err
	}
	if err := validateSubscription(p, s.GetSubscriptionName(), s.GetSubscriptionPosition()); err != nil {
		return err
	}
	if err := validateResources(p+"resources", s.GetResources()); err != nil {
		return err
	}
	return validateRetries(p, s.MaxMessageRetries, s.GetDeadLetterTopic())
}

type sinksSvc struct {
	cpv1.UnimplementedSinksServer
	s *Server
}

func (x sinksSvc) GetSink(ctx context.Context, req *cpv1.GetSinkRequest) (*cpv1.PulsarSink, error) {
	m, err := x.s.get(ctx, kindSink, req.GetName())
	return as[*cpv1.PulsarSink](m), err
}

func (x sinksSvc) ListSinks(ctx context.Context, req *cpv1.ListSinksRequest) (*cpv1.ListSinksResponse, error) {
	ms, next, err := x.s.list(ctx, kindSink, req.GetParent(), req.GetPageSize(), req.GetPageToken())
	return &cpv1.ListSinksResponse{Sinks: asAll[*cpv1.PulsarSink](ms), NextPageToken: next}, err
}

func (x sinksSvc) CreateSink(ctx context.Context, req *cpv1.CreateSinkRequest) (*cpv1.PulsarSink, error) {
	sk := req.GetSink()
	if sk == nil {
		sk = &cpv1.PulsarSink{}
	}
	sinkDefaults(sk)
	obj, err := x.s.createInstances(ctx, kindSink, req.GetParent(), req.GetSinkId(), req.GetRequestId(), sk,
		func() error { return validateSink(sk) })
	return decodeAs[*cpv1.PulsarSink](x.s, kindSink, obj, err)
}

func (x sinksSvc) UpdateSink(ctx context.Context, req *cpv1.UpdateSinkRequest) (*cpv1.PulsarSink, error) {
	m, err := x.s.updateInstances(ctx, kindSink, nilIfNil(req.GetSink()), req.GetUpdateMask(),
		func(m proto.Message) { sinkDefaults(m.(*cpv1.PulsarSink)) },
		func(old, merged proto.Message) error {
			o, n := old.(*cpv1.PulsarSink), merged.(*cpv1.PulsarSink)
			switch {
			case o.GetProcessingGuarantees() != n.GetProcessingGuarantees():
				return invalid("sink.processing_guarantees", "cannot be changed after creation")
			case o.GetSubscriptionName() != n.GetSubscriptionName():
				return invalid("sink.subscription_name", "cannot be changed after creation")
			}
			return validateSink(n)
		})
	return as[*cpv1.PulsarSink](m), err
}

func (x sinksSvc) DeleteSink(ctx context.Context, req *cpv1.DeleteSinkRequest) (*emptypb.Empty, error) {
	return empty(x.s.removeEmpty(ctx, kindSink, nil, req.GetName(), req.GetEtag()))
}

// ---- Shared ----

// clearInstanceStatus drops the output-only status a client sent.
func clearInstanceStatus(m proto.Message) {
	r := m.ProtoReflect()
	r.Clear(r.Descriptor().Fields().ByName("status"))
}

// setInstanceStatus sets the status of a function, source or sink and says
// whether it changed.
func setInstanceStatus(m proto.Message, is *cpv1.FunctionInstanceStatus) bool {
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("status")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != is.ProtoReflect().Descriptor().FullName() {
		return false
	}
	if r.Has(fd) && proto.Equal(r.Get(fd).Message().Interface(), is) {
		return false
	}
	r.Set(fd, protoreflect.ValueOfMessage(proto.Clone(is).ProtoReflect()))
	return true
}

// createInstances creates a function, source or sink (defaults already
// filled in) as PENDING, admitted with its demand.
func (s *Server) createInstances(ctx context.Context, k *kind, parent, id, requestID string, msg instanceResource, validate func() error) (store.Object, error) {
	clearInstanceStatus(msg)
	markPending(msg)
	return s.create(ctx, createReq{
		k: k, parent: parent, id: id, msg: msg, requestID: requestID, attrs: instanceAttrs(msg),
		validate: func(r resName) error {
			if err := validate(); err != nil {
				return err
			}
			return s.checkPulsarCluster(ctx, r.name)
		},
	})
}

// updateInstances updates a function, source or sink: defaults fills the
// merged resource's defaults, check validates it against the stored one.
// The admission attributes are the demand of the merged resource as it
// would be now (read before the transaction, like every admission fact).
func (s *Server) updateInstances(ctx context.Context, k *kind, msg proto.Message, mask *fieldmaskpb.FieldMask,
	defaults func(proto.Message), check func(old, merged proto.Message) error) (proto.Message, error) {
	var attrs map[string]any
	if msg != nil && msg.ProtoReflect().IsValid() {
		if merged := s.mergedForAdmission(ctx, k, msg, mask); merged != nil {
			defaults(merged)
			attrs = instanceAttrs(merged.(instanceResource))
		}
	}
	return s.update(ctx, k, msg, mask, attrs, func(_ store.Writer, old, merged proto.Message) error {
		defaults(merged)
		if err := check(old, merged); err != nil {
			return err
		}
		markPending(merged)
		return nil
	})
}

// mergedForAdmission is the stored resource msg names with msg's masked
// fields applied; nil when it cannot be had (update then answers why).
func (s *Server) mergedForAdmission(ctx context.Context, k *kind, msg proto.Message, mask *fieldmaskpb.FieldMask) proto.Message {
	r, err := k.parseName(k.field+".name", stringField(msg, "name"))
	if err != nil {
		return nil
	}
	paths, err := k.checkMask(mask, msg)
	if err != nil {
		return nil
	}
	obj, err := s.store.Get(ctx, k.collection, r.name)
	if err != nil {
		return nil
	}
	old, _, err := decode(k, obj)
	if err != nil {
		return nil
	}
	applyMask(old, msg, paths)
	return old
}
