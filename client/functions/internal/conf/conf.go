package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
)

// Conf is the instance configuration as the worker writes it: the JSON of
// Pulsar's GoInstanceConfig, key for key. The same keys are read from YAML.
// Unknown keys are ignored, so a newer worker's additions do not stop an
// older binary.
type Conf struct {
	// Connection and identity.
	PulsarServiceURL       string `json:"pulsarServiceURL" yaml:"pulsarServiceURL"`
	StateStorageServiceURL string `json:"stateStorageServiceUrl" yaml:"stateStorageServiceUrl"`
	PulsarWebServiceURL    string `json:"pulsarWebServiceUrl" yaml:"pulsarWebServiceUrl"`
	InstanceID             int    `json:"instanceID" yaml:"instanceID"`
	FuncID                 string `json:"funcID" yaml:"funcID"`
	FuncVersion            string `json:"funcVersion" yaml:"funcVersion"`
	ClusterName            string `json:"clusterName" yaml:"clusterName"`

	// The instance itself. Ports of 0 mean "do not serve".
	MaxBufTuples    int   `json:"maxBufTuples" yaml:"maxBufTuples"`
	Port            int   `json:"port" yaml:"port"`
	MetricsPort     int   `json:"metricsPort" yaml:"metricsPort"`
	KillAfterIdleMs int64 `json:"killAfterIdleMs" yaml:"killAfterIdleMs"`
	// ExpectedHealthCheckInterval is in seconds; <= 0 disables the check.
	ExpectedHealthCheckInterval int32 `json:"expectedHealthCheckInterval" yaml:"expectedHealthCheckInterval"`

	// The function.
	Tenant               string `json:"tenant" yaml:"tenant"`
	NameSpace            string `json:"nameSpace" yaml:"nameSpace"`
	Name                 string `json:"name" yaml:"name"`
	ClassName            string `json:"className" yaml:"className"`
	LogTopic             string `json:"logTopic" yaml:"logTopic"`
	ProcessingGuarantees int32  `json:"processingGuarantees" yaml:"processingGuarantees"`
	SecretsMap           string `json:"secretsMap" yaml:"secretsMap"`
	UserConfig           string `json:"userConfig" yaml:"userConfig"`
	Runtime              int32  `json:"runtime" yaml:"runtime"`
	AutoAck              bool   `json:"autoAck" yaml:"autoAck"`
	Parallelism          int32  `json:"parallelism" yaml:"parallelism"`

	// Authentication and TLS towards the broker (and the state API).
	ClientAuthenticationPlugin     string `json:"clientAuthenticationPlugin" yaml:"clientAuthenticationPlugin"`
	ClientAuthenticationParameters string `json:"clientAuthenticationParameters" yaml:"clientAuthenticationParameters"`
	TLSTrustCertsFilePath          string `json:"tlsTrustCertsFilePath" yaml:"tlsTrustCertsFilePath"`
	TLSHostnameVerificationEnable  bool   `json:"tlsHostnameVerificationEnable" yaml:"tlsHostnameVerificationEnable"`
	TLSAllowInsecureConnection     bool   `json:"tlsAllowInsecureConnection" yaml:"tlsAllowInsecureConnection"`

	// The input side.
	SubscriptionType     int32  `json:"subscriptionType" yaml:"subscriptionType"`
	TimeoutMs            uint64 `json:"timeoutMs" yaml:"timeoutMs"`
	SubscriptionName     string `json:"subscriptionName" yaml:"subscriptionName"`
	CleanupSubscription  bool   `json:"cleanupSubscription" yaml:"cleanupSubscription"`
	SubscriptionPosition int32  `json:"subscriptionPosition" yaml:"subscriptionPosition"`
	// SourceInputSpecs maps each input topic to its ConsumerSpec as proto3
	// JSON (a string; "" or "{}" for defaults).
	SourceInputSpecs map[string]string `json:"sourceInputSpecs" yaml:"sourceInputSpecs"`
	// SourceSpecsTopic and the three fields after it describe a single input
	// topic, as older workers wrote it.
	SourceSpecsTopic           string `json:"sourceSpecsTopic" yaml:"sourceSpecsTopic"`
	SourceSchemaType           string `json:"sourceSchemaType" yaml:"sourceSchemaType"`
	IsRegexPatternSubscription bool   `json:"isRegexPatternSubscription" yaml:"isRegexPatternSubscription"`
	ReceiverQueueSize          int32  `json:"receiverQueueSize" yaml:"receiverQueueSize"`

	// The output side.
	SinkSpecsTopic string `json:"sinkSpecsTopic" yaml:"sinkSpecsTopic"`
	SinkSchemaType string `json:"sinkSchemaType" yaml:"sinkSchemaType"`

	// Resources and retries.
	CPU               float64 `json:"cpu" yaml:"cpu"`
	RAM               int64   `json:"ram" yaml:"ram"`
	Disk              int64   `json:"disk" yaml:"disk"`
	MaxMessageRetries int32   `json:"maxMessageRetries" yaml:"maxMessageRetries"`
	DeadLetterTopic   string  `json:"deadLetterTopic" yaml:"deadLetterTopic"`

	// FunctionDetails is the whole FunctionDetails as proto3 JSON, a string.
	// It carries what the flat fields above cannot (the producer spec, the
	// negative-ack delay, per-topic consumer settings).
	FunctionDetails string `json:"functionDetails" yaml:"functionDetails"`
}

// Flags are the command-line flags of a function binary.
type Flags struct {
	// JSON is -instance-conf: the configuration itself.
	JSON string
	// Path is -instance-conf-path: a YAML file holding it.
	Path string
}

// Register defines -instance-conf and -instance-conf-path on fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.JSON, "instance-conf", "", "the instance configuration as JSON (Pulsar's GoInstanceConfig)")
	fs.StringVar(&f.Path, "instance-conf-path", "", "a YAML file holding the instance configuration")
}

// Load reads the configuration the flags name: exactly one of them must be
// set.
func (f *Flags) Load() (*Conf, error) {
	switch {
	case f.JSON != "" && f.Path != "":
		return nil, errors.New("conf: pass only one of -instance-conf and -instance-conf-path")
	case f.JSON != "":
		return ParseJSON([]byte(f.JSON))
	case f.Path != "":
		b, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, fmt.Errorf("conf: %w", err)
		}
		return ParseYAML(b)
	default:
		return nil, errors.New("conf: no instance configuration: pass -instance-conf '<json>' or -instance-conf-path <file>")
	}
}

// ParseJSON decodes the JSON configuration. One pair of enclosing single
// quotes is stripped, as Pulsar's own instances do for arguments a worker
// quoted without a shell to remove the quotes.
func ParseJSON(b []byte) (*Conf, error) {
	b = bytes.TrimSpace(b)
	if len(b) >= 2 && b[0] == '\'' && b[len(b)-1] == '\'' {
		b = b[1 : len(b)-1]
	}
	var c Conf
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("conf: -instance-conf is not valid JSON: %w", err)
	}
	return &c, nil
}

// ParseYAML decodes the YAML configuration.
func ParseYAML(b []byte) (*Conf, error) {
	var c Conf
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("conf: -instance-conf-path is not valid YAML: %w", err)
	}
	return &c, nil
}

// Instance is a validated configuration, resolved into what an instance
// runs. It is immutable once returned.
type Instance struct {
	Conf
	// Details merges FunctionDetails with the flat fields (see Resolve).
	// Details.Source and Details.Sink are never nil.
	Details *pb.FunctionDetails
	// Inputs are the input topics sorted by name, each with its consumer
	// spec (never nil).
	Inputs []Input
	// UserConfig and Secrets are the decoded userConfig and secretsMap
	// objects; empty, never nil.
	UserConfig map[string]any
	Secrets    map[string]any
}

// Input is one input topic (or topic pattern) and how it is consumed.
type Input struct {
	Topic string
	Spec  *pb.ConsumerSpec
}

// FQFN is the fully qualified function name, tenant/namespace/name.
func (in *Instance) FQFN() string {
	return in.Details.Tenant + "/" + in.Details.Namespace + "/" + in.Details.Name
}

// SubscriptionName is the subscription of the input consumers: the
// configured one, or tenant/namespace/name.
func (in *Instance) SubscriptionName() string {
	if n := in.Details.Source.SubscriptionName; n != "" {
		return n
	}
	return in.FQFN()
}

// HealthCheckInterval is how often the worker promises to call HealthCheck;
// 0 when it does not.
func (in *Instance) HealthCheckInterval() time.Duration {
	if in.ExpectedHealthCheckInterval <= 0 {
		return 0
	}
	return time.Duration(in.ExpectedHealthCheckInterval) * time.Second
}

// KillAfterIdle is how long the instance may go without a message before it
// stops; 0 for never.
func (in *Instance) KillAfterIdle() time.Duration {
	if in.KillAfterIdleMs <= 0 {
		return 0
	}
	return time.Duration(in.KillAfterIdleMs) * time.Millisecond
}

var unmarshalDetails = protojson.UnmarshalOptions{DiscardUnknown: true}

// Resolve validates c and merges its two descriptions of the function.
// FunctionDetails (when present) is the base; a flat field that is set
// (non-zero) replaces the value it names. The worker derives both from the
// same record, so they agree; the flat fields alone are enough, as they are
// for Pulsar's Go instance.
func (c *Conf) Resolve() (*Instance, error) {
	d := &pb.FunctionDetails{}
	if strings.TrimSpace(c.FunctionDetails) != "" {
		if err := unmarshalDetails.Unmarshal([]byte(c.FunctionDetails), d); err != nil {
			return nil, fmt.Errorf("conf: functionDetails is not FunctionDetails JSON: %w", err)
		}
	}
	if d.Source == nil {
		d.Source = &pb.SourceSpec{}
	}
	if d.Sink == nil {
		d.Sink = &pb.SinkSpec{}
	}
	setString(&d.Tenant, c.Tenant)
	setString(&d.Namespace, c.NameSpace)
	setString(&d.Name, c.Name)
	setString(&d.ClassName, c.ClassName)
	setString(&d.LogTopic, c.LogTopic)
	if c.ProcessingGuarantees != 0 {
		d.ProcessingGuarantees = pb.ProcessingGuarantees(c.ProcessingGuarantees)
	}
	setString(&d.UserConfig, c.UserConfig)
	setString(&d.SecretsMap, c.SecretsMap)
	if c.Runtime != 0 {
		d.Runtime = pb.FunctionDetails_Runtime(c.Runtime)
	}
	d.AutoAck = d.AutoAck || c.AutoAck
	if c.Parallelism != 0 {
		d.Parallelism = c.Parallelism
	}

	src := d.Source
	if c.SubscriptionType != 0 {
		src.SubscriptionType = pb.SubscriptionType(c.SubscriptionType)
	}
	if c.TimeoutMs != 0 {
		src.TimeoutMs = c.TimeoutMs
	}
	setString(&src.SubscriptionName, c.SubscriptionName)
	src.CleanupSubscription = src.CleanupSubscription || c.CleanupSubscription
	if c.SubscriptionPosition != 0 {
		src.SubscriptionPosition = pb.SubscriptionPosition(c.SubscriptionPosition)
	}
	if src.InputSpecs == nil {
		src.InputSpecs = map[string]*pb.ConsumerSpec{}
	}
	for topic, js := range c.SourceInputSpecs {
		spec := &pb.ConsumerSpec{}
		if strings.TrimSpace(js) != "" {
			if err := unmarshalDetails.Unmarshal([]byte(js), spec); err != nil {
				return nil, fmt.Errorf("conf: sourceInputSpecs[%q] is not ConsumerSpec JSON: %w", topic, err)
			}
		}
		src.InputSpecs[topic] = spec
	}
	if t := c.SourceSpecsTopic; t != "" {
		if _, ok := src.InputSpecs[t]; !ok {
			spec := &pb.ConsumerSpec{SchemaType: c.SourceSchemaType, IsRegexPattern: c.IsRegexPatternSubscription}
			if c.ReceiverQueueSize > 0 {
				spec.ReceiverQueueSize = &pb.ConsumerSpec_ReceiverQueueSize{Value: c.ReceiverQueueSize}
			}
			src.InputSpecs[t] = spec
		}
	}
	setString(&d.Sink.Topic, c.SinkSpecsTopic)
	setString(&d.Sink.SchemaType, c.SinkSchemaType)

	if c.CPU != 0 || c.RAM != 0 || c.Disk != 0 {
		if d.Resources == nil {
			d.Resources = &pb.Resources{}
		}
		if c.CPU != 0 {
			d.Resources.Cpu = c.CPU
		}
		if c.RAM != 0 {
			d.Resources.Ram = c.RAM
		}
		if c.Disk != 0 {
			d.Resources.Disk = c.Disk
		}
	}
	if c.MaxMessageRetries != 0 || c.DeadLetterTopic != "" {
		if d.RetryDetails == nil {
			d.RetryDetails = &pb.RetryDetails{}
		}
		if c.MaxMessageRetries != 0 {
			d.RetryDetails.MaxMessageRetries = c.MaxMessageRetries
		}
		setString(&d.RetryDetails.DeadLetterTopic, c.DeadLetterTopic)
	}

	in := &Instance{Conf: *c, Details: d}
	var err error
	if in.UserConfig, err = jsonObject("userConfig", d.UserConfig); err != nil {
		return nil, err
	}
	if in.Secrets, err = jsonObject("secretsMap", d.SecretsMap); err != nil {
		return nil, err
	}
	for topic, spec := range src.InputSpecs {
		if spec == nil {
			spec = &pb.ConsumerSpec{}
		}
		in.Inputs = append(in.Inputs, Input{Topic: topic, Spec: spec})
	}
	sort.Slice(in.Inputs, func(i, j int) bool { return in.Inputs[i].Topic < in.Inputs[j].Topic })
	if err := in.validate(); err != nil {
		return nil, err
	}
	return in, nil
}

func (in *Instance) validate() error {
	d := in.Details
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"pulsarServiceURL", in.PulsarServiceURL},
		{"tenant", d.Tenant}, {"nameSpace", d.Namespace}, {"name", d.Name},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("conf: missing %s", strings.Join(missing, ", "))
	}
	if len(in.Inputs) == 0 {
		return errors.New("conf: no input topic (sourceInputSpecs and sourceSpecsTopic are empty)")
	}
	for _, i := range in.Inputs {
		if i.Topic == "" {
			return errors.New("conf: an input topic name is empty")
		}
	}
	if _, ok := pb.ProcessingGuarantees_name[int32(d.ProcessingGuarantees)]; !ok {
		return fmt.Errorf("conf: processingGuarantees %d is not 0-3", d.ProcessingGuarantees)
	}
	if _, ok := pb.SubscriptionType_name[int32(d.Source.SubscriptionType)]; !ok {
		return fmt.Errorf("conf: subscriptionType %d is not 0-2", d.Source.SubscriptionType)
	}
	if _, ok := pb.SubscriptionPosition_name[int32(d.Source.SubscriptionPosition)]; !ok {
		return fmt.Errorf("conf: subscriptionPosition %d is not 0-1", d.Source.SubscriptionPosition)
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"port", in.Port}, {"metricsPort", in.MetricsPort}} {
		if p.v < 0 || p.v > 65535 {
			return fmt.Errorf("conf: %s %d is out of range", p.name, p.v)
		}
	}
	if in.Port != 0 && in.Port == in.MetricsPort {
		return fmt.Errorf("conf: port and metricsPort are both %d", in.Port)
	}
	if r := d.RetryDetails; r != nil && r.MaxMessageRetries < 0 {
		return fmt.Errorf("conf: maxMessageRetries %d is negative", r.MaxMessageRetries)
	}
	return nil
}

func setString(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// jsonObject decodes s, a JSON object carried as a string; "" is empty.
func jsonObject(field, s string) (map[string]any, error) {
	m := map[string]any{}
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("conf: %s is not a JSON object: %w", field, err)
	}
	if m == nil { // the JSON was null
		m = map[string]any{}
	}
	return m, nil
}
