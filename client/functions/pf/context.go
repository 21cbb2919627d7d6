package pf

import (
	"context"
	"sort"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"

	"github.com/magnetar-dev/magnetar/client/functions/internal/conf"
	"github.com/magnetar-dev/magnetar/client/functions/internal/state"
)

// FunctionContext gives a running function its identity, configuration,
// the message being processed, output producers, user metrics and (Magnetar
// extension) state. The instance hands it to the function through the
// context.Context of each call; get it with FromContext.
//
// Its getters are safe for concurrent use. The current record changes with
// every message; read it from the goroutine the function was called on.
type FunctionContext struct {
	cfg         *conf.Instance
	inputTopics []string
	state       *state.Client
	record      atomic.Pointer[recordBox]
	// producer returns the producer for a topic; nil outside a running
	// instance (NewFuncContext).
	producer func(topic string) pulsar.Producer
	// metric records a user metric; nil outside a running instance.
	metric func(name string, value float64)
}

type recordBox struct{ m pulsar.Message }

// noInstance is the configuration of a FunctionContext made as a literal
// (in a function's unit test, say): empty, so its getters return zero
// values.
var noInstance = &conf.Instance{
	Details:    &pb.FunctionDetails{Source: &pb.SourceSpec{}, Sink: &pb.SinkSpec{}},
	UserConfig: map[string]any{},
	Secrets:    map[string]any{},
}

func (c *FunctionContext) config() *conf.Instance {
	if c.cfg == nil {
		return noInstance
	}
	return c.cfg
}

func newFunctionContext(cfg *conf.Instance, st *state.Client) *FunctionContext {
	fc := &FunctionContext{cfg: cfg, state: st}
	for _, in := range cfg.Inputs {
		fc.inputTopics = append(fc.inputTopics, in.Topic)
	}
	sort.Strings(fc.inputTopics)
	return fc
}

// GetInstanceID returns the id of this instance, 0 to parallelism-1.
func (c *FunctionContext) GetInstanceID() int { return c.config().InstanceID }

// GetInputTopics returns the input topics (or topic patterns), sorted.
func (c *FunctionContext) GetInputTopics() []string {
	return append([]string(nil), c.inputTopics...)
}

// GetOutputTopic returns the output topic, "" when the function has none.
func (c *FunctionContext) GetOutputTopic() string { return c.config().Details.Sink.Topic }

// GetTenantAndNamespace returns "<tenant>/<namespace>".
func (c *FunctionContext) GetTenantAndNamespace() string {
	return c.GetFuncTenant() + "/" + c.GetFuncNamespace()
}

// GetTenantAndNamespaceAndName returns the fully qualified function name,
// "<tenant>/<namespace>/<name>".
func (c *FunctionContext) GetTenantAndNamespaceAndName() string { return c.config().FQFN() }

// GetFuncTenant returns the function's tenant.
func (c *FunctionContext) GetFuncTenant() string { return c.config().Details.Tenant }

// GetFuncName returns the function's name.
func (c *FunctionContext) GetFuncName() string { return c.config().Details.Name }

// GetFuncNamespace returns the function's namespace.
func (c *FunctionContext) GetFuncNamespace() string { return c.config().Details.Namespace }

// GetFuncID returns the id the worker gave this run of the function.
func (c *FunctionContext) GetFuncID() string { return c.config().FuncID }

// GetFuncVersion returns the version the worker gave this run of the
// function.
func (c *FunctionContext) GetFuncVersion() string { return c.config().FuncVersion }

// GetPort returns the port the instance serves InstanceControl on.
func (c *FunctionContext) GetPort() int { return c.config().Port }

// GetMetricsPort returns the port the instance serves Prometheus metrics on.
func (c *FunctionContext) GetMetricsPort() int { return c.config().MetricsPort }

// GetClusterName returns the name of the cluster the function runs in.
func (c *FunctionContext) GetClusterName() string { return c.config().ClusterName }

// GetExpectedHealthCheckInterval returns how often, in seconds, the worker
// checks the instance's health; 0 or less for never.
func (c *FunctionContext) GetExpectedHealthCheckInterval() int32 {
	return c.config().ExpectedHealthCheckInterval
}

// GetExpectedHealthCheckIntervalAsDuration returns the health-check interval
// as a duration. (Pulsar's returns the number of seconds as a count of
// nanoseconds; this one returns the interval.)
func (c *FunctionContext) GetExpectedHealthCheckIntervalAsDuration() time.Duration {
	return time.Duration(c.config().ExpectedHealthCheckInterval) * time.Second
}

// GetMaxIdleTime returns, in nanoseconds, how long the instance runs without
// a health check before it stops itself: three intervals.
func (c *FunctionContext) GetMaxIdleTime() int64 {
	return int64(3 * c.GetExpectedHealthCheckIntervalAsDuration())
}

// GetUserConfValue returns the value of key in the function's user
// configuration, nil when absent.
func (c *FunctionContext) GetUserConfValue(key string) interface{} { return c.config().UserConfig[key] }

// GetUserConfMap returns the function's user configuration. The map is
// shared: do not modify it.
func (c *FunctionContext) GetUserConfMap() map[string]interface{} { return c.config().UserConfig }

// GetSecretValue returns the value of the secret key from the function's
// secrets map, nil when absent (Magnetar extension).
func (c *FunctionContext) GetSecretValue(key string) interface{} { return c.config().Secrets[key] }

// NewOutputMessage returns a producer on topicName, created on first use
// and closed when the instance stops. It returns nil, with the error
// logged, when the producer cannot be created, and outside a running
// instance.
func (c *FunctionContext) NewOutputMessage(topicName string) pulsar.Producer {
	if c.producer == nil {
		return nil
	}
	return c.producer(topicName)
}

// SetCurrentRecord sets the message being processed. The instance calls it
// before each call of the function.
func (c *FunctionContext) SetCurrentRecord(record pulsar.Message) {
	c.record.Store(&recordBox{record})
}

// GetCurrentRecord returns the message being processed.
func (c *FunctionContext) GetCurrentRecord() pulsar.Message {
	if b := c.record.Load(); b != nil {
		return b.m
	}
	return nil
}

// RecordMetric records an observation of the user metric metricName. The
// instance exports it as the summary pulsar_function_user_metric_ labelled
// metric=<metricName>, and in InstanceControl's metrics as
// <metricName>_sum and <metricName>_count.
func (c *FunctionContext) RecordMetric(metricName string, metricValue float64) {
	if c.metric != nil {
		c.metric(metricName, metricValue)
	}
}

// An unexported key type, so no other package's context key collides.
type contextKey struct{}

// NewContext returns a copy of parent carrying fc.
func NewContext(parent context.Context, fc *FunctionContext) context.Context {
	return context.WithValue(parent, contextKey{}, fc)
}

// FromContext returns the FunctionContext in ctx, if any. The context a
// function receives always carries one.
func FromContext(ctx context.Context) (*FunctionContext, bool) {
	fc, ok := ctx.Value(contextKey{}).(*FunctionContext)
	return fc, ok
}
