package fnconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
)

// Class names Pulsar's instances know.
const (
	IdentityFunctionClass       = "org.apache.pulsar.functions.api.utils.IdentityFunction"
	WindowFunctionExecutorClass = "org.apache.pulsar.functions.windowing.WindowFunctionExecutor"
	// WindowConfigKey is the user-config key that carries a windowed
	// function's window settings to WindowFunctionExecutor.
	WindowConfigKey = "__WINDOWCONFIGS__"
)

// BuiltinPrefix marks an archive that names a connector or function the
// worker already has ("builtin://data-generator").
const BuiltinPrefix = "builtin://"

// Error is a config the API refuses with 400; its text is the reason.
type Error struct{ Reason string }

func (e *Error) Error() string { return e.Reason }

func errorf(format string, args ...any) error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// IsConfigError reports whether err is a refusal of the config (400).
func IsConfigError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// nameRE is what a tenant, namespace or component name may hold: Pulsar's
// named-entity characters. Anything else could not be a metadata key or a
// path segment safely.
var nameRE = regexp.MustCompile(`^[-=:.\w]+$`)

func checkIdentity(kind Kind, tenant, namespace, name string) error {
	switch {
	case tenant == "":
		return errorf("Tenant is not provided")
	case namespace == "":
		return errorf("Namespace is not provided")
	case name == "":
		return errorf("%s name is not provided", kind.Title())
	}
	for _, s := range []string{tenant, namespace, name} {
		if !nameRE.MatchString(s) || s == "." || s == ".." {
			return errorf("Invalid name %q: use letters, digits and -_=:.", s)
		}
	}
	return nil
}

func guarantee(s string) (pb.ProcessingGuarantees, error) {
	switch strings.ToUpper(s) {
	case "", "ATLEAST_ONCE":
		return pb.ProcessingGuarantees_ATLEAST_ONCE, nil
	case "ATMOST_ONCE":
		return pb.ProcessingGuarantees_ATMOST_ONCE, nil
	case "EFFECTIVELY_ONCE":
		return pb.ProcessingGuarantees_EFFECTIVELY_ONCE, nil
	case "MANUAL":
		return pb.ProcessingGuarantees_MANUAL, nil
	}
	return 0, errorf("Invalid processingGuarantees %q: one of ATLEAST_ONCE, ATMOST_ONCE, EFFECTIVELY_ONCE, MANUAL", s)
}

func position(s string) (pb.SubscriptionPosition, error) {
	switch strings.ToLower(s) {
	case "", "latest":
		return pb.SubscriptionPosition_LATEST, nil
	case "earliest":
		return pb.SubscriptionPosition_EARLIEST, nil
	}
	return 0, errorf("Invalid subscriptionPosition %q: Latest or Earliest", s)
}

func resources(r *Resources) (*pb.Resources, error) {
	r = r.withDefaults()
	if *r.CPU <= 0 || *r.RAM <= 0 || *r.Disk <= 0 {
		return nil, errorf("Resources must be positive (cpu %v, ram %d, disk %d)", *r.CPU, *r.RAM, *r.Disk)
	}
	return &pb.Resources{Cpu: *r.CPU, Ram: *r.RAM, Disk: *r.Disk}, nil
}

func jsonString(m map[string]any) (string, error) {
	if len(m) == 0 {
		return "", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", errorf("Invalid map: %v", err)
	}
	return string(b), nil
}

func parallelism(p *int32) (int32, error) {
	if p == nil {
		return 1, nil
	}
	if *p <= 0 {
		return 0, errorf("Parallelism must be a positive number")
	}
	return *p, nil
}

func subscriptionType(retainOrdering, retainKeyOrdering *bool, g pb.ProcessingGuarantees) pb.SubscriptionType {
	switch {
	case isTrue(retainOrdering) || g == pb.ProcessingGuarantees_EFFECTIVELY_ONCE:
		return pb.SubscriptionType_FAILOVER
	case isTrue(retainKeyOrdering):
		return pb.SubscriptionType_KEY_SHARED
	}
	return pb.SubscriptionType_SHARED
}

func isTrue(b *bool) bool { return b != nil && *b }

func orTrue(b *bool) bool { return b == nil || *b }

func consumerSpec(c ConsumerConfig) *pb.ConsumerSpec {
	s := &pb.ConsumerSpec{
		SchemaType: c.SchemaType, SerdeClassName: c.SerdeClassName, IsRegexPattern: c.RegexPattern,
		SchemaProperties: c.SchemaProperties, ConsumerProperties: c.ConsumerProperties, PoolMessages: c.PoolMessages,
	}
	if c.ReceiverQueueSize != nil {
		s.ReceiverQueueSize = &pb.ConsumerSpec_ReceiverQueueSize{Value: *c.ReceiverQueueSize}
	}
	return s
}

func producerSpec(p *ProducerConfig) *pb.ProducerSpec {
	if p == nil {
		return nil
	}
	s := &pb.ProducerSpec{UseThreadLocalProducers: p.UseThreadLocalProducers, BatchBuilder: p.BatchBuilder}
	if p.MaxPendingMessages != nil {
		s.MaxPendingMessages = *p.MaxPendingMessages
	}
	if p.MaxPendingMessagesAcrossPartitions != nil {
		s.MaxPendingMessagesAcrossPartitions = *p.MaxPendingMessagesAcrossPartitions
	}
	if v, ok := pb.CompressionType_value[strings.ToUpper(p.CompressionType)]; ok {
		s.CompressionType = pb.CompressionType(v)
	}
	if b := p.BatchingConfig; b != nil {
		s.BatchingSpec = &pb.BatchingSpec{Enabled: orTrue(b.Enabled), BatchBuilder: b.BatchBuilder}
		if b.BatchingMaxPublishDelayMs != nil {
			s.BatchingSpec.BatchingMaxPublishDelayMs = *b.BatchingMaxPublishDelayMs
		}
		if b.BatchingMaxMessages != nil {
			s.BatchingSpec.BatchingMaxMessages = *b.BatchingMaxMessages
		}
		if b.BatchingMaxBytes != nil {
			s.BatchingSpec.BatchingMaxBytes = *b.BatchingMaxBytes
		}
		if b.RoundRobinRouterBatchingPartitionSwitchFrequency != nil {
			s.BatchingSpec.RoundRobinRouterBatchingPartitionSwitchFrequency = *b.RoundRobinRouterBatchingPartitionSwitchFrequency
		}
	}
	return s
}

func retry(max *int32, dlq string) *pb.RetryDetails {
	if max == nil && dlq == "" {
		return nil
	}
	r := &pb.RetryDetails{DeadLetterTopic: dlq}
	if max != nil {
		r.MaxMessageRetries = *max
	}
	return r
}

// RuntimeOf returns a function's runtime: the one named, else inferred from
// which package field is set (Java when none is).
func (c *FunctionConfig) RuntimeOf() (pb.FunctionDetails_Runtime, error) {
	switch strings.ToUpper(c.Runtime) {
	case "JAVA":
		return pb.FunctionDetails_JAVA, nil
	case "PYTHON":
		return pb.FunctionDetails_PYTHON, nil
	case "GO":
		return pb.FunctionDetails_GO, nil
	case "":
	default:
		return 0, errorf("Invalid runtime %q: JAVA, PYTHON or GO", c.Runtime)
	}
	switch {
	case c.Py != "":
		return pb.FunctionDetails_PYTHON, nil
	case c.Go != "":
		return pb.FunctionDetails_GO, nil
	}
	return pb.FunctionDetails_JAVA, nil
}

// Normalize fills a function config's defaults in place (what GET returns
// for it) and validates it.
func (c *FunctionConfig) Normalize() error {
	if err := checkIdentity(KindFunction, c.Tenant, c.Namespace, c.Name); err != nil {
		return err
	}
	rt, err := c.RuntimeOf()
	if err != nil {
		return err
	}
	c.Runtime = rt.String()
	if c.ClassName == "" && rt != pb.FunctionDetails_GO {
		return errorf("Function classname cannot be null")
	}
	if c.Parallelism == nil {
		p := int32(1)
		c.Parallelism = &p
	}
	if c.ProcessingGuarantees == "" {
		c.ProcessingGuarantees = "ATLEAST_ONCE"
	}
	if c.AutoAck == nil {
		t := true
		c.AutoAck = &t
	}
	if c.CleanupSubscription == nil {
		t := true
		c.CleanupSubscription = &t
	}
	if c.ForwardSourceMessageProperty == nil {
		t := true
		c.ForwardSourceMessageProperty = &t
	}
	c.Resources = c.Resources.withDefaults()
	c.FQFN = c.Tenant + "/" + c.Namespace + "/" + c.Name
	if _, err = c.Details(); err != nil {
		return err
	}
	// What GET answers carries every input in inputSpecs, as Pulsar's
	// (clients read either field), and the settings Pulsar always shows.
	c.fillInputSpecs()
	if c.RetainOrdering == nil {
		f := false
		c.RetainOrdering = &f
	}
	if c.RetainKeyOrdering == nil {
		f := false
		c.RetainKeyOrdering = &f
	}
	if c.UserConfig == nil {
		c.UserConfig = map[string]any{}
	}
	if c.SubscriptionPosition == "" {
		c.SubscriptionPosition = "Latest"
	}
	return nil
}

// fillInputSpecs adds an inputSpecs entry for every input named elsewhere
// (inputs, customSerdeInputs, customSchemaInputs, topicsPattern).
func (c *FunctionConfig) fillInputSpecs() {
	if c.InputSpecs == nil {
		c.InputSpecs = map[string]ConsumerConfig{}
	}
	add := func(topic string, cc ConsumerConfig) {
		if _, ok := c.InputSpecs[topic]; !ok {
			c.InputSpecs[topic] = cc
		}
	}
	for _, t := range c.Inputs {
		add(t, ConsumerConfig{})
	}
	for t, serde := range c.CustomSerdeInputs {
		add(t, ConsumerConfig{SerdeClassName: serde})
	}
	for t, schema := range c.CustomSchemaInputs {
		add(t, ConsumerConfig{SchemaType: schema})
	}
	if c.TopicsPattern != "" {
		add(c.TopicsPattern, ConsumerConfig{RegexPattern: true})
	}
}

// Inputs returns every input topic of a function, sorted.
func (c *FunctionConfig) InputTopics() []string {
	set := map[string]bool{}
	for _, t := range c.Inputs {
		set[t] = true
	}
	for t := range c.CustomSerdeInputs {
		set[t] = true
	}
	for t := range c.CustomSchemaInputs {
		set[t] = true
	}
	for t, s := range c.InputSpecs {
		if !s.RegexPattern {
			set[t] = true
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Details converts a normalized function config to the FunctionDetails its
// instances run.
func (c *FunctionConfig) Details() (*pb.FunctionDetails, error) {
	rt, err := c.RuntimeOf()
	if err != nil {
		return nil, err
	}
	g, err := guarantee(c.ProcessingGuarantees)
	if err != nil {
		return nil, err
	}
	pos, err := position(c.SubscriptionPosition)
	if err != nil {
		return nil, err
	}
	par, err := parallelism(c.Parallelism)
	if err != nil {
		return nil, err
	}
	res, err := resources(c.Resources)
	if err != nil {
		return nil, err
	}
	specs := map[string]*pb.ConsumerSpec{}
	for _, t := range c.Inputs {
		specs[t] = &pb.ConsumerSpec{}
	}
	for t, serde := range c.CustomSerdeInputs {
		specs[t] = &pb.ConsumerSpec{SerdeClassName: serde}
	}
	for t, schema := range c.CustomSchemaInputs {
		s := &pb.ConsumerSpec{SchemaType: schema}
		// A value may itself be a ConsumerConfig in JSON (newer clients).
		var cc ConsumerConfig
		if strings.HasPrefix(strings.TrimSpace(schema), "{") && json.Unmarshal([]byte(schema), &cc) == nil {
			s = consumerSpec(cc)
		}
		specs[t] = s
	}
	for t, cc := range c.InputSpecs {
		specs[t] = consumerSpec(cc)
	}
	if c.TopicsPattern != "" {
		specs[c.TopicsPattern] = &pb.ConsumerSpec{IsRegexPattern: true}
	}
	if len(specs) == 0 {
		return nil, errorf("No input topic(s) specified for the function")
	}
	if c.Output != "" {
		if _, ok := specs[c.Output]; ok {
			return nil, errorf("Output topic %s is also being used as an input topic (topics must be one or the other)", c.Output)
		}
	}
	if c.LogTopic != "" {
		if _, ok := specs[c.LogTopic]; ok {
			return nil, errorf("Log topic %s is also being used as an input topic (topics must be one or the other)", c.LogTopic)
		}
	}
	if rt == pb.FunctionDetails_PYTHON && g == pb.ProcessingGuarantees_EFFECTIVELY_ONCE {
		return nil, errorf("Effectively-once processing guarantees not yet supported in Python")
	}
	className := c.ClassName
	userConfig := c.UserConfig
	if len(c.WindowConfig) > 0 {
		if rt != pb.FunctionDetails_JAVA {
			return nil, errorf("Windowed functions are supported for Java only")
		}
		wc := map[string]any{}
		for k, v := range c.WindowConfig {
			wc[k] = v
		}
		wc["actualWindowFunctionClassName"] = c.ClassName
		userConfig = map[string]any{}
		for k, v := range c.UserConfig {
			userConfig[k] = v
		}
		userConfig[WindowConfigKey] = wc
		className = WindowFunctionExecutorClass
	}
	uc, err := jsonString(userConfig)
	if err != nil {
		return nil, err
	}
	sec, err := jsonString(c.Secrets)
	if err != nil {
		return nil, err
	}
	d := &pb.FunctionDetails{
		Tenant: c.Tenant, Namespace: c.Namespace, Name: c.Name, ClassName: className,
		LogTopic: c.LogTopic, ProcessingGuarantees: g, UserConfig: uc, SecretsMap: sec,
		Runtime: rt, AutoAck: orTrue(c.AutoAck), Parallelism: par, Resources: res,
		RetryDetails: retry(c.MaxMessageRetries, c.DeadLetterTopic),
		RuntimeFlags: c.RuntimeFlags, ComponentType: pb.FunctionDetails_FUNCTION,
		CustomRuntimeOptions: c.CustomRuntimeOptions,
		RetainOrdering:       isTrue(c.RetainOrdering), RetainKeyOrdering: isTrue(c.RetainKeyOrdering),
		SubscriptionPosition: pos,
		Source: &pb.SourceSpec{
			TypeClassName: c.InputTypeClassName, SubscriptionType: subscriptionType(c.RetainOrdering, c.RetainKeyOrdering, g),
			SubscriptionName: c.SubName, InputSpecs: specs, CleanupSubscription: orTrue(c.CleanupSubscription),
			SubscriptionPosition: pos, SkipToLatest: isTrue(c.SkipToLatest),
		},
		Sink: &pb.SinkSpec{
			Topic: c.Output, SchemaType: c.OutputSchemaType, SerDeClassName: c.OutputSerdeClassName,
			TypeClassName: c.OutputTypeClassName, ProducerSpec: producerSpec(c.ProducerConfig),
			ForwardSourceMessageProperty: orTrue(c.ForwardSourceMessageProperty),
		},
	}
	if c.TimeoutMs != nil {
		d.Source.TimeoutMs = uint64(max(*c.TimeoutMs, 0))
	}
	if c.BatchBuilder != "" {
		if d.Sink.ProducerSpec == nil {
			d.Sink.ProducerSpec = &pb.ProducerSpec{}
		}
		d.Sink.ProducerSpec.BatchBuilder = c.BatchBuilder
	}
	return d, nil
}

// Normalize fills a source config's defaults in place and validates it.
// connectorClass is the class a builtin archive declares ("" otherwise).
func (c *SourceConfig) Normalize(connectorClass string) error {
	if err := checkIdentity(KindSource, c.Tenant, c.Namespace, c.Name); err != nil {
		return err
	}
	if c.ClassName == "" {
		c.ClassName = connectorClass
	}
	if c.ClassName == "" {
		return errorf("Source class name cannot be null")
	}
	if c.TopicName == "" {
		return errorf("Topic name cannot be null")
	}
	if c.Parallelism == nil {
		p := int32(1)
		c.Parallelism = &p
	}
	if c.ProcessingGuarantees == "" {
		c.ProcessingGuarantees = "ATLEAST_ONCE"
	}
	if len(c.BatchSourceConfig) > 0 {
		return errorf("Batch sources are not supported yet")
	}
	c.Resources = c.Resources.withDefaults()
	_, err := c.Details()
	return err
}

// Details converts a normalized source config to FunctionDetails: the
// connector feeds the identity function, whose output is the topic.
func (c *SourceConfig) Details() (*pb.FunctionDetails, error) {
	g, err := guarantee(c.ProcessingGuarantees)
	if err != nil {
		return nil, err
	}
	par, err := parallelism(c.Parallelism)
	if err != nil {
		return nil, err
	}
	res, err := resources(c.Resources)
	if err != nil {
		return nil, err
	}
	cfgs, err := jsonString(c.Configs)
	if err != nil {
		return nil, err
	}
	sec, err := jsonString(c.Secrets)
	if err != nil {
		return nil, err
	}
	builtin := strings.TrimPrefix(c.Archive, BuiltinPrefix)
	if builtin == c.Archive {
		builtin = ""
	}
	d := &pb.FunctionDetails{
		Tenant: c.Tenant, Namespace: c.Namespace, Name: c.Name, ClassName: IdentityFunctionClass,
		LogTopic: c.LogTopic, ProcessingGuarantees: g, SecretsMap: sec, Runtime: pb.FunctionDetails_JAVA,
		AutoAck: true, Parallelism: par, Resources: res, RuntimeFlags: c.RuntimeFlags,
		ComponentType: pb.FunctionDetails_SOURCE, CustomRuntimeOptions: c.CustomRuntimeOptions, Builtin: builtin,
		Source: &pb.SourceSpec{ClassName: c.ClassName, Configs: cfgs, Builtin: builtin},
		Sink: &pb.SinkSpec{
			Topic: c.TopicName, SerDeClassName: c.SerdeClassName, SchemaType: c.SchemaType,
			ProducerSpec: producerSpec(c.ProducerConfig), ForwardSourceMessageProperty: true,
		},
	}
	if c.BatchBuilder != "" {
		if d.Sink.ProducerSpec == nil {
			d.Sink.ProducerSpec = &pb.ProducerSpec{}
		}
		d.Sink.ProducerSpec.BatchBuilder = c.BatchBuilder
	}
	return d, nil
}

// Normalize fills a sink config's defaults in place and validates it.
func (c *SinkConfig) Normalize(connectorClass string) error {
	if err := checkIdentity(KindSink, c.Tenant, c.Namespace, c.Name); err != nil {
		return err
	}
	if c.ClassName == "" {
		c.ClassName = connectorClass
	}
	if c.ClassName == "" {
		return errorf("Sink class name cannot be null")
	}
	if c.Parallelism == nil {
		p := int32(1)
		c.Parallelism = &p
	}
	if c.ProcessingGuarantees == "" {
		c.ProcessingGuarantees = "ATLEAST_ONCE"
	}
	if c.AutoAck == nil {
		t := true
		c.AutoAck = &t
	}
	if c.CleanupSubscription == nil {
		t := true
		c.CleanupSubscription = &t
	}
	c.Resources = c.Resources.withDefaults()
	_, err := c.Details()
	return err
}

// Details converts a normalized sink config to FunctionDetails: the input
// topics feed the identity function (or the transform function), whose
// output is the connector.
func (c *SinkConfig) Details() (*pb.FunctionDetails, error) {
	g, err := guarantee(c.ProcessingGuarantees)
	if err != nil {
		return nil, err
	}
	pos, err := position(c.SourceSubscriptionPosition)
	if err != nil {
		return nil, err
	}
	par, err := parallelism(c.Parallelism)
	if err != nil {
		return nil, err
	}
	res, err := resources(c.Resources)
	if err != nil {
		return nil, err
	}
	cfgs, err := jsonString(c.Configs)
	if err != nil {
		return nil, err
	}
	sec, err := jsonString(c.Secrets)
	if err != nil {
		return nil, err
	}
	specs := map[string]*pb.ConsumerSpec{}
	for _, t := range c.Inputs {
		specs[t] = &pb.ConsumerSpec{}
	}
	for t, serde := range c.TopicToSerdeClassName {
		specs[t] = &pb.ConsumerSpec{SerdeClassName: serde}
	}
	for t, schema := range c.TopicToSchemaType {
		specs[t] = &pb.ConsumerSpec{SchemaType: schema, SchemaProperties: c.TopicToSchemaProperties[t]}
	}
	for t, cc := range c.InputSpecs {
		specs[t] = consumerSpec(cc)
	}
	if c.TopicsPattern != "" {
		specs[c.TopicsPattern] = &pb.ConsumerSpec{IsRegexPattern: true}
	}
	if len(specs) == 0 {
		return nil, errorf("Must specify at least one topic of input via topicToSerdeClassName, topicsPattern, topicToSchemaType or inputSpecs")
	}
	builtin := strings.TrimPrefix(c.Archive, BuiltinPrefix)
	if builtin == c.Archive {
		builtin = ""
	}
	className := IdentityFunctionClass
	if c.TransformFunctionClassName != "" {
		className = c.TransformFunctionClassName
	}
	d := &pb.FunctionDetails{
		Tenant: c.Tenant, Namespace: c.Namespace, Name: c.Name, ClassName: className,
		LogTopic: c.LogTopic, ProcessingGuarantees: g, SecretsMap: sec, Runtime: pb.FunctionDetails_JAVA,
		AutoAck: orTrue(c.AutoAck), Parallelism: par, Resources: res, RuntimeFlags: c.RuntimeFlags,
		RetryDetails:  retry(c.MaxMessageRetries, c.DeadLetterTopic),
		ComponentType: pb.FunctionDetails_SINK, CustomRuntimeOptions: c.CustomRuntimeOptions, Builtin: builtin,
		RetainOrdering: isTrue(c.RetainOrdering), RetainKeyOrdering: isTrue(c.RetainKeyOrdering),
		SubscriptionPosition: pos,
		Source: &pb.SourceSpec{
			SubscriptionType: subscriptionType(c.RetainOrdering, c.RetainKeyOrdering, g),
			SubscriptionName: c.SourceSubscriptionName, InputSpecs: specs,
			CleanupSubscription: orTrue(c.CleanupSubscription), SubscriptionPosition: pos,
		},
		Sink: &pb.SinkSpec{ClassName: c.ClassName, Configs: cfgs, Builtin: builtin},
	}
	if c.TransformFunctionConfig != "" {
		d.UserConfig = c.TransformFunctionConfig
	}
	if c.TimeoutMs != nil {
		d.Source.TimeoutMs = uint64(max(*c.TimeoutMs, 0))
	}
	if c.NegativeAckRedeliveryDelayMs != nil {
		d.Source.NegativeAckRedeliveryDelayMs = uint64(max(*c.NegativeAckRedeliveryDelayMs, 0))
	}
	return d, nil
}
