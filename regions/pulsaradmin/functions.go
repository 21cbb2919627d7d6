package pulsaradmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	v3 "github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// Functions, sources and sinks go to the data plane's function workers
// through Pulsar's admin REST API v3 (/admin/v3/functions, /sources,
// /sinks), with Apache's pulsaradmin client (API version V3) over this
// client's transport and token. Like the Ensure methods, applying reads
// the component first and creates it when absent, updates it only when a
// field the control plane manages differs, and does nothing otherwise; a
// package URL is sent (and downloaded by the worker) only on create and
// when it changed.

// v3Client is Apache's admin client for this data plane.
func (c *Client) v3Client() v3.Client {
	cl, _ := v3.NewPulsarClientWithAuthProvider(&config.Config{WebServiceURL: c.base, PulsarAPIVersion: config.V3}, &v3Auth{c: c})
	return cl
}

// v3Auth is the auth.Provider of the v3 client: this client's token on
// this client's transport.
type v3Auth struct {
	c  *Client
	tr http.RoundTripper
}

func (a *v3Auth) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if err := a.c.authorize(req.Context(), r); err != nil {
		return nil, err
	}
	return a.Transport().RoundTrip(r)
}

func (a *v3Auth) Transport() http.RoundTripper {
	switch {
	case a.tr != nil:
		return a.tr
	case a.c.hc.Transport != nil:
		return a.c.hc.Transport
	}
	return http.DefaultTransport
}

func (a *v3Auth) WithTransport(t http.RoundTripper) { a.tr = t }

// v3Error maps an answer of the v3 client to an *Error (errors.Is with
// ErrNotFound works on it).
func v3Error(method, path string, err error) error {
	if err == nil {
		return nil
	}
	var re rest.Error
	if errors.As(err, &re) {
		reason := re.Reason
		if reason == "" {
			reason = http.StatusText(re.Code)
		}
		return &Error{Method: method, Path: path, Status: re.Code, Reason: reason}
	}
	return fmt.Errorf("pulsaradmin: %s %s: %w", method, path, err)
}

// componentNames splits a function, source or sink resource name
// "organizations/o/clusters/c/tenants/t/namespaces/n/{collection}/x" into
// its Pulsar tenant, namespace and name.
func componentNames(name, collection string) (tenant, ns, n string, err error) {
	segs := strings.Split(name, "/")
	keys := []string{"organizations", "clusters", "tenants", "namespaces", collection}
	if len(segs) != 10 {
		return "", "", "", fmt.Errorf("pulsaradmin: %q is not a %s name", name, strings.TrimSuffix(collection, "s"))
	}
	for i := 0; i < len(segs); i += 2 {
		if segs[i] != keys[i/2] || segs[i+1] == "" {
			return "", "", "", fmt.Errorf("pulsaradmin: %q is not a %s name", name, strings.TrimSuffix(collection, "s"))
		}
	}
	return segs[5], segs[7], segs[9], nil
}

func jsonMap(field, s string) (map[string]any, error) {
	if s == "" {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("pulsaradmin: %s: %w", field, err)
	}
	return m, nil
}

func guarantees(g cpv1.ProcessingGuarantees) string {
	if g == cpv1.ProcessingGuarantees_PROCESSING_GUARANTEES_UNSPECIFIED {
		return cpv1.ProcessingGuarantees_ATLEAST_ONCE.String()
	}
	return g.String() // Pulsar's names are the same
}

func position(p cpv1.SubscriptionPosition) string {
	if p == cpv1.SubscriptionPosition_EARLIEST {
		return "Earliest"
	}
	return "Latest"
}

func resourcesOf(r *cpv1.FunctionResources) *utils.Resources {
	out := utils.NewDefaultResources()
	if r.GetCpu() > 0 {
		out.CPU = r.GetCpu()
	}
	if r.GetRamBytes() > 0 {
		out.RAM = r.GetRamBytes()
	}
	if r.GetDiskBytes() > 0 {
		out.Disk = r.GetDiskBytes()
	}
	return out
}

func parallelismOf(p int32) int { return max(int(p), 1) }

// FunctionConfigOf maps an API function to Pulsar's FunctionConfig. The
// package URL is the config's jar, py or go (by runtime), so the config
// read back names it.
func FunctionConfigOf(f *cpv1.PulsarFunction) (*utils.FunctionConfig, error) {
	t, ns, n, err := componentNames(f.GetName(), "functions")
	if err != nil {
		return nil, err
	}
	uc, err := jsonMap("user_config", f.GetUserConfig())
	if err != nil {
		return nil, err
	}
	cfg := &utils.FunctionConfig{
		Tenant: t, Namespace: ns, Name: n, ClassName: f.GetClassName(), Inputs: slices.Clone(f.GetInputs()),
		Output: f.GetOutput(), LogTopic: f.GetLogTopic(), Parallelism: parallelismOf(f.GetParallelism()),
		ProcessingGuarantees: guarantees(f.GetProcessingGuarantees()), SubName: f.GetSubscriptionName(),
		SubscriptionPosition: position(f.GetSubscriptionPosition()), UserConfig: uc, Resources: resourcesOf(f.GetResources()),
		DeadLetterTopic: f.GetDeadLetterTopic(), AutoAck: true, CleanupSubscription: true, ForwardSourceMessageProperty: true,
	}
	if f.MaxMessageRetries != nil {
		v := int(f.GetMaxMessageRetries())
		cfg.MaxMessageRetries = &v
	}
	pkg := f.GetPackageUrl()
	switch f.GetRuntime() {
	case cpv1.PulsarFunction_PYTHON:
		cfg.Runtime, cfg.Py = utils.PythonRuntime, &pkg
	case cpv1.PulsarFunction_GO:
		cfg.Runtime, cfg.Go = utils.GoRuntime, &pkg
	default:
		cfg.Runtime, cfg.Jar = utils.JavaRuntime, &pkg
	}
	return cfg, nil
}

// SourceConfigOf maps an API source to Pulsar's SourceConfig; the archive
// is the builtin connector or the package URL.
func SourceConfigOf(s *cpv1.PulsarSource) (*utils.SourceConfig, string, error) {
	t, ns, n, err := componentNames(s.GetName(), "sources")
	if err != nil {
		return nil, "", err
	}
	cfgs, err := jsonMap("configs", s.GetConfigs())
	if err != nil {
		return nil, "", err
	}
	archive := s.GetArchive()
	if archive == "" {
		archive = s.GetPackageUrl()
	}
	return &utils.SourceConfig{
		Tenant: t, Namespace: ns, Name: n, ClassName: s.GetClassName(), TopicName: s.GetTopic(), Configs: cfgs,
		Parallelism: parallelismOf(s.GetParallelism()), ProcessingGuarantees: guarantees(s.GetProcessingGuarantees()),
		Resources: resourcesOf(s.GetResources()), Archive: archive,
	}, archive, nil
}

// SinkConfigOf maps an API sink to Pulsar's SinkConfig.
func SinkConfigOf(s *cpv1.PulsarSink) (*utils.SinkConfig, string, error) {
	t, ns, n, err := componentNames(s.GetName(), "sinks")
	if err != nil {
		return nil, "", err
	}
	cfgs, err := jsonMap("configs", s.GetConfigs())
	if err != nil {
		return nil, "", err
	}
	archive := s.GetArchive()
	if archive == "" {
		archive = s.GetPackageUrl()
	}
	return &utils.SinkConfig{
		Tenant: t, Namespace: ns, Name: n, ClassName: s.GetClassName(), Inputs: slices.Clone(s.GetInputs()), Configs: cfgs,
		Parallelism: parallelismOf(s.GetParallelism()), ProcessingGuarantees: guarantees(s.GetProcessingGuarantees()),
		SourceSubscriptionName: s.GetSubscriptionName(), SourceSubscriptionPosition: position(s.GetSubscriptionPosition()),
		Resources: resourcesOf(s.GetResources()), MaxMessageRetries: int(s.GetMaxMessageRetries()),
		DeadLetterTopic: s.GetDeadLetterTopic(), Archive: archive, AutoAck: true, CleanupSubscription: true,
	}, archive, nil
}

// managedView is the part of a config (as JSON) that the control plane
// manages: the keys given, with lists sorted and numbers as JSON has them.
func managedView(cfg any, keys []string) (map[string]any, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var all map[string]any
	if err := json.Unmarshal(raw, &all); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, k := range keys {
		v, ok := all[k]
		if !ok || v == nil {
			continue
		}
		if l, ok := v.([]any); ok {
			slices.SortFunc(l, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		}
		if s, ok := v.(string); ok && (k == "subscriptionPosition" || k == "sourceSubscriptionPosition" || k == "runtime") {
			v = strings.ToLower(s)
		}
		out[k] = v
	}
	return out, nil
}

// differs says whether got differs from want in keys; className is
// compared only when want names one (connectors declare their own).
func differs(want, got any, keys []string, wantClass string) (bool, error) {
	if wantClass == "" {
		keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "className" })
	}
	w, err := managedView(want, keys)
	if err != nil {
		return false, err
	}
	g, err := managedView(got, keys)
	if err != nil {
		return false, err
	}
	return !reflect.DeepEqual(w, g), nil
}

var (
	functionKeys = []string{"className", "inputs", "output", "logTopic", "parallelism", "processingGuarantees", "subName",
		"subscriptionPosition", "userConfig", "resources", "maxMessageRetries", "deadLetterTopic", "runtime", "py", "jar", "go"}
	sourceKeys = []string{"className", "topicName", "configs", "parallelism", "processingGuarantees", "resources", "archive"}
	sinkKeys   = []string{"className", "inputs", "configs", "parallelism", "processingGuarantees", "sourceSubscriptionName",
		"sourceSubscriptionPosition", "resources", "maxMessageRetries", "deadLetterTopic", "archive"}
)

// packageOf is the package a function config names.
func packageOf(c *utils.FunctionConfig) string {
	for _, p := range []*string{c.Py, c.Jar, c.Go} {
		if p != nil && *p != "" {
			return *p
		}
	}
	return ""
}

// EnsureFunction makes the data plane's function match f. It returns what
// it did: "createFunction", "updateFunction" or nothing.
func (c *Client) EnsureFunction(ctx context.Context, f *cpv1.PulsarFunction) ([]string, error) {
	want, err := FunctionConfigOf(f)
	if err != nil {
		return nil, err
	}
	fns := c.v3Client().Functions()
	p := "/admin/v3/functions/" + want.Tenant + "/" + want.Namespace + "/" + want.Name
	got, err := fns.GetFunctionWithContext(ctx, want.Tenant, want.Namespace, want.Name)
	if err = v3Error(http.MethodGet, p, err); errors.Is(err, ErrNotFound) {
		if err := v3Error(http.MethodPost, p, fns.CreateFuncWithURLWithContext(ctx, want, f.GetPackageUrl())); err != nil {
			return nil, err
		}
		return []string{"createFunction"}, nil
	}
	if err != nil {
		return nil, err
	}
	if d, err := differs(want, &got, functionKeys, want.ClassName); err != nil || !d {
		return nil, err
	}
	if packageOf(&got) != f.GetPackageUrl() {
		err = fns.UpdateFunctionWithURLWithContext(ctx, want, f.GetPackageUrl(), nil)
	} else {
		err = fns.UpdateFunctionWithContext(ctx, want, "", nil)
	}
	if err := v3Error(http.MethodPut, p, err); err != nil {
		return nil, err
	}
	return []string{"updateFunction"}, nil
}

// EnsureSource makes the data plane's source match s.
func (c *Client) EnsureSource(ctx context.Context, s *cpv1.PulsarSource) ([]string, error) {
	want, archive, err := SourceConfigOf(s)
	if err != nil {
		return nil, err
	}
	srcs := c.v3Client().Sources()
	p := "/admin/v3/sources/" + want.Tenant + "/" + want.Namespace + "/" + want.Name
	got, err := srcs.GetSourceWithContext(ctx, want.Tenant, want.Namespace, want.Name)
	if err = v3Error(http.MethodGet, p, err); errors.Is(err, ErrNotFound) {
		if err := v3Error(http.MethodPost, p, srcs.CreateSourceWithURLWithContext(ctx, want, archive)); err != nil {
			return nil, err
		}
		return []string{"createSource"}, nil
	}
	if err != nil {
		return nil, err
	}
	if d, err := differs(want, &got, sourceKeys, want.ClassName); err != nil || !d {
		return nil, err
	}
	if got.Archive != archive {
		err = srcs.UpdateSourceWithURLWithContext(ctx, want, archive, nil)
	} else {
		err = srcs.UpdateSourceWithContext(ctx, want, "", nil)
	}
	if err := v3Error(http.MethodPut, p, err); err != nil {
		return nil, err
	}
	return []string{"updateSource"}, nil
}

// EnsureSink makes the data plane's sink match s.
func (c *Client) EnsureSink(ctx context.Context, s *cpv1.PulsarSink) ([]string, error) {
	want, archive, err := SinkConfigOf(s)
	if err != nil {
		return nil, err
	}
	sinks := c.v3Client().Sinks()
	p := "/admin/v3/sinks/" + want.Tenant + "/" + want.Namespace + "/" + want.Name
	got, err := sinks.GetSinkWithContext(ctx, want.Tenant, want.Namespace, want.Name)
	if err = v3Error(http.MethodGet, p, err); errors.Is(err, ErrNotFound) {
		if err := v3Error(http.MethodPost, p, sinks.CreateSinkWithURLWithContext(ctx, want, archive)); err != nil {
			return nil, err
		}
		return []string{"createSink"}, nil
	}
	if err != nil {
		return nil, err
	}
	if d, err := differs(want, &got, sinkKeys, want.ClassName); err != nil || !d {
		return nil, err
	}
	if got.Archive != archive {
		err = sinks.UpdateSinkWithURLWithContext(ctx, want, archive, nil)
	} else {
		err = sinks.UpdateSinkWithContext(ctx, want, "", nil)
	}
	if err := v3Error(http.MethodPut, p, err); err != nil {
		return nil, err
	}
	return []string{"updateSink"}, nil
}

// removeComponent deletes a function, source or sink; one already gone is
// not an error.
func (c *Client) removeComponent(ctx context.Context, name, collection string) error {
	t, ns, n, err := componentNames(name, collection)
	if err != nil {
		return err
	}
	cl := c.v3Client()
	switch collection {
	case "functions":
		err = cl.Functions().DeleteFunctionWithContext(ctx, t, ns, n)
	case "sources":
		err = cl.Sources().DeleteSourceWithContext(ctx, t, ns, n)
	default:
		err = cl.Sinks().DeleteSinkWithContext(ctx, t, ns, n)
	}
	return ignoreNotFound(v3Error(http.MethodDelete, "/admin/v3/"+collection+"/"+t+"/"+ns+"/"+n, err))
}

// instance is one instance's state in a status answer.
type instance struct {
	id      int
	running bool
	err     string
}

func summarize(numInstances, numRunning int, insts []instance) *cpv1.FunctionInstanceStatus {
	out := &cpv1.FunctionInstanceStatus{NumInstances: int32(numInstances), NumRunning: int32(numRunning)}
	slices.SortFunc(insts, func(a, b instance) int { return a.id - b.id })
	for _, i := range insts {
		if !i.running || i.err != "" {
			msg := i.err
			if msg == "" {
				msg = "not running"
			}
			out.FirstError = &cpv1.FunctionInstanceStatus_InstanceError{InstanceId: int32(i.id), Message: msg}
			break
		}
	}
	return out
}

// InstanceStatus reads the status of a *PulsarFunction, *PulsarSource or
// *PulsarSink's instances from the data plane.
func InstanceStatus(ctx context.Context, c *Client, resource any) (*cpv1.FunctionInstanceStatus, error) {
	var (
		name, coll string
	)
	switch r := resource.(type) {
	case *cpv1.PulsarFunction:
		name, coll = r.GetName(), "functions"
	case *cpv1.PulsarSource:
		name, coll = r.GetName(), "sources"
	case *cpv1.PulsarSink:
		name, coll = r.GetName(), "sinks"
	default:
		return nil, fmt.Errorf("pulsaradmin: no instances in a %T", resource)
	}
	t, ns, n, err := componentNames(name, coll)
	if err != nil {
		return nil, err
	}
	p := "/admin/v3/" + coll + "/" + t + "/" + ns + "/" + n + "/status"
	cl := c.v3Client()
	var insts []instance
	switch coll {
	case "functions":
		st, err := cl.Functions().GetFunctionStatusWithContext(ctx, t, ns, n)
		if err != nil {
			return nil, v3Error(http.MethodGet, p, err)
		}
		for _, i := range st.Instances {
			insts = append(insts, instance{i.InstanceID, i.Status.Running, i.Status.Err})
		}
		return summarize(st.NumInstances, st.NumRunning, insts), nil
	case "sources":
		st, err := cl.Sources().GetSourceStatusWithContext(ctx, t, ns, n)
		if err != nil {
			return nil, v3Error(http.MethodGet, p, err)
		}
		for _, i := range st.Instances {
			if i != nil {
				insts = append(insts, instance{i.InstanceID, i.Status.Running, i.Status.Err})
			}
		}
		return summarize(st.NumInstances, st.NumRunning, insts), nil
	default:
		st, err := cl.Sinks().GetSinkStatusWithContext(ctx, t, ns, n)
		if err != nil {
			return nil, v3Error(http.MethodGet, p, err)
		}
		for _, i := range st.Instances {
			if i != nil {
				insts = append(insts, instance{i.InstanceID, i.Status.Running, i.Status.Err})
			}
		}
		return summarize(st.NumInstances, st.NumRunning, insts), nil
	}
}
