package fnconfig

import (
	"encoding/json"
	"strings"
)

// Kind says which of the three resources a config is.
type Kind string

const (
	KindFunction Kind = "function"
	KindSource   Kind = "source"
	KindSink     Kind = "sink"
)

// Plural is the kind's collection name in REST paths and messages.
func (k Kind) Plural() string { return string(k) + "s" }

// Title is the kind's name at the start of an error reason ("Function",
// "Source", "Sink"), as Pulsar words them.
func (k Kind) Title() string { return strings.ToUpper(string(k[:1])) + string(k[1:]) }

// Resources is what one instance asks for.
type Resources struct {
	CPU  *float64 `json:"cpu,omitempty"`
	RAM  *int64   `json:"ram,omitempty"`
	Disk *int64   `json:"disk,omitempty"`
}

// Pulsar's defaults for an instance's resources.
const (
	DefaultCPU  = 1.0
	DefaultRAM  = int64(1 << 30)
	DefaultDisk = int64(10 << 30)
)

func (r *Resources) withDefaults() *Resources {
	out := Resources{}
	if r != nil {
		out = *r
	}
	if out.CPU == nil {
		v := DefaultCPU
		out.CPU = &v
	}
	if out.RAM == nil {
		v := DefaultRAM
		out.RAM = &v
	}
	if out.Disk == nil {
		v := DefaultDisk
		out.Disk = &v
	}
	return &out
}

// ConsumerConfig is how one input topic is consumed (inputSpecs values).
type ConsumerConfig struct {
	SchemaType         string            `json:"schemaType,omitempty"`
	SerdeClassName     string            `json:"serdeClassName,omitempty"`
	RegexPattern       bool              `json:"regexPattern,omitempty"`
	ReceiverQueueSize  *int32            `json:"receiverQueueSize,omitempty"`
	SchemaProperties   map[string]string `json:"schemaProperties,omitempty"`
	ConsumerProperties map[string]string `json:"consumerProperties,omitempty"`
	PoolMessages       bool              `json:"poolMessages,omitempty"`
	CryptoConfig       json.RawMessage   `json:"cryptoConfig,omitempty"`
}

// ProducerConfig is how the output topic is produced to.
type ProducerConfig struct {
	MaxPendingMessages                 *int32          `json:"maxPendingMessages,omitempty"`
	MaxPendingMessagesAcrossPartitions *int32          `json:"maxPendingMessagesAcrossPartitions,omitempty"`
	UseThreadLocalProducers            bool            `json:"useThreadLocalProducers,omitempty"`
	BatchBuilder                       string          `json:"batchBuilder,omitempty"`
	CompressionType                    string          `json:"compressionType,omitempty"`
	CryptoConfig                       json.RawMessage `json:"cryptoConfig,omitempty"`
	BatchingConfig                     *BatchingConfig `json:"batchingConfig,omitempty"`
}

// BatchingConfig is the output producer's batching.
type BatchingConfig struct {
	Enabled                                          *bool  `json:"enabled,omitempty"`
	BatchingMaxPublishDelayMs                        *int32 `json:"batchingMaxPublishDelayMs,omitempty"`
	RoundRobinRouterBatchingPartitionSwitchFrequency *int32 `json:"roundRobinRouterBatchingPartitionSwitchFrequency,omitempty"`
	BatchingMaxMessages                              *int32 `json:"batchingMaxMessages,omitempty"`
	BatchingMaxBytes                                 *int32 `json:"batchingMaxBytes,omitempty"`
	BatchBuilder                                     string `json:"batchBuilder,omitempty"`
}

// FunctionConfig is Pulsar's FunctionConfig.
type FunctionConfig struct {
	RuntimeFlags                   string                    `json:"runtimeFlags,omitempty"`
	Tenant                         string                    `json:"tenant,omitempty"`
	Namespace                      string                    `json:"namespace,omitempty"`
	Name                           string                    `json:"name,omitempty"`
	ClassName                      string                    `json:"className,omitempty"`
	FunctionType                   string                    `json:"functionType,omitempty"`
	Inputs                         []string                  `json:"inputs,omitempty"`
	CustomSerdeInputs              map[string]string         `json:"customSerdeInputs,omitempty"`
	TopicsPattern                  string                    `json:"topicsPattern,omitempty"`
	CustomSchemaInputs             map[string]string         `json:"customSchemaInputs,omitempty"`
	CustomSchemaOutputs            map[string]string         `json:"customSchemaOutputs,omitempty"`
	InputSpecs                     map[string]ConsumerConfig `json:"inputSpecs,omitempty"`
	InputTypeClassName             string                    `json:"inputTypeClassName,omitempty"`
	Output                         string                    `json:"output,omitempty"`
	ProducerConfig                 *ProducerConfig           `json:"producerConfig,omitempty"`
	OutputSchemaType               string                    `json:"outputSchemaType,omitempty"`
	OutputSerdeClassName           string                    `json:"outputSerdeClassName,omitempty"`
	OutputTypeClassName            string                    `json:"outputTypeClassName,omitempty"`
	LogTopic                       string                    `json:"logTopic,omitempty"`
	ProcessingGuarantees           string                    `json:"processingGuarantees,omitempty"`
	RetainOrdering                 *bool                     `json:"retainOrdering,omitempty"`
	RetainKeyOrdering              *bool                     `json:"retainKeyOrdering,omitempty"`
	BatchBuilder                   string                    `json:"batchBuilder,omitempty"`
	ForwardSourceMessageProperty   *bool                     `json:"forwardSourceMessageProperty,omitempty"`
	UserConfig                     map[string]any            `json:"userConfig,omitempty"`
	Secrets                        map[string]any            `json:"secrets,omitempty"`
	Runtime                        string                    `json:"runtime,omitempty"`
	AutoAck                        *bool                     `json:"autoAck,omitempty"`
	MaxMessageRetries              *int32                    `json:"maxMessageRetries,omitempty"`
	DeadLetterTopic                string                    `json:"deadLetterTopic,omitempty"`
	SubName                        string                    `json:"subName,omitempty"`
	Parallelism                    *int32                    `json:"parallelism,omitempty"`
	Resources                      *Resources                `json:"resources,omitempty"`
	FQFN                           string                    `json:"fqfn,omitempty"`
	WindowConfig                   map[string]any            `json:"windowConfig,omitempty"`
	TimeoutMs                      *int64                    `json:"timeoutMs,omitempty"`
	Jar                            string                    `json:"jar,omitempty"`
	Py                             string                    `json:"py,omitempty"`
	Go                             string                    `json:"go,omitempty"`
	CleanupSubscription            *bool                     `json:"cleanupSubscription,omitempty"`
	CustomRuntimeOptions           string                    `json:"customRuntimeOptions,omitempty"`
	MaxPendingAsyncRequests        *int32                    `json:"maxPendingAsyncRequests,omitempty"`
	ExposePulsarAdminClientEnabled *bool                     `json:"exposePulsarAdminClientEnabled,omitempty"`
	SubscriptionPosition           string                    `json:"subscriptionPosition,omitempty"`
	SkipToLatest                   *bool                     `json:"skipToLatest,omitempty"`
}

// SourceConfig is Pulsar's SourceConfig.
type SourceConfig struct {
	Tenant               string          `json:"tenant,omitempty"`
	Namespace            string          `json:"namespace,omitempty"`
	Name                 string          `json:"name,omitempty"`
	ClassName            string          `json:"className,omitempty"`
	TopicName            string          `json:"topicName,omitempty"`
	ProducerConfig       *ProducerConfig `json:"producerConfig,omitempty"`
	SerdeClassName       string          `json:"serdeClassName,omitempty"`
	SchemaType           string          `json:"schemaType,omitempty"`
	Configs              map[string]any  `json:"configs,omitempty"`
	Secrets              map[string]any  `json:"secrets,omitempty"`
	Parallelism          *int32          `json:"parallelism,omitempty"`
	ProcessingGuarantees string          `json:"processingGuarantees,omitempty"`
	Resources            *Resources      `json:"resources,omitempty"`
	Archive              string          `json:"archive,omitempty"`
	RuntimeFlags         string          `json:"runtimeFlags,omitempty"`
	CustomRuntimeOptions string          `json:"customRuntimeOptions,omitempty"`
	BatchSourceConfig    map[string]any  `json:"batchSourceConfig,omitempty"`
	BatchBuilder         string          `json:"batchBuilder,omitempty"`
	LogTopic             string          `json:"logTopic,omitempty"`
}

// SinkConfig is Pulsar's SinkConfig.
type SinkConfig struct {
	Tenant                       string                       `json:"tenant,omitempty"`
	Namespace                    string                       `json:"namespace,omitempty"`
	Name                         string                       `json:"name,omitempty"`
	ClassName                    string                       `json:"className,omitempty"`
	SourceSubscriptionName       string                       `json:"sourceSubscriptionName,omitempty"`
	SourceSubscriptionPosition   string                       `json:"sourceSubscriptionPosition,omitempty"`
	Inputs                       []string                     `json:"inputs,omitempty"`
	TopicToSerdeClassName        map[string]string            `json:"topicToSerdeClassName,omitempty"`
	TopicsPattern                string                       `json:"topicsPattern,omitempty"`
	TopicToSchemaType            map[string]string            `json:"topicToSchemaType,omitempty"`
	TopicToSchemaProperties      map[string]map[string]string `json:"topicToSchemaProperties,omitempty"`
	InputSpecs                   map[string]ConsumerConfig    `json:"inputSpecs,omitempty"`
	MaxMessageRetries            *int32                       `json:"maxMessageRetries,omitempty"`
	DeadLetterTopic              string                       `json:"deadLetterTopic,omitempty"`
	Configs                      map[string]any               `json:"configs,omitempty"`
	Secrets                      map[string]any               `json:"secrets,omitempty"`
	Parallelism                  *int32                       `json:"parallelism,omitempty"`
	ProcessingGuarantees         string                       `json:"processingGuarantees,omitempty"`
	RetainOrdering               *bool                        `json:"retainOrdering,omitempty"`
	RetainKeyOrdering            *bool                        `json:"retainKeyOrdering,omitempty"`
	Resources                    *Resources                   `json:"resources,omitempty"`
	AutoAck                      *bool                        `json:"autoAck,omitempty"`
	TimeoutMs                    *int64                       `json:"timeoutMs,omitempty"`
	NegativeAckRedeliveryDelayMs *int64                       `json:"negativeAckRedeliveryDelayMs,omitempty"`
	Archive                      string                       `json:"archive,omitempty"`
	CleanupSubscription          *bool                        `json:"cleanupSubscription,omitempty"`
	RuntimeFlags                 string                       `json:"runtimeFlags,omitempty"`
	CustomRuntimeOptions         string                       `json:"customRuntimeOptions,omitempty"`
	TransformFunction            string                       `json:"transformFunction,omitempty"`
	TransformFunctionClassName   string                       `json:"transformFunctionClassName,omitempty"`
	TransformFunctionConfig      string                       `json:"transformFunctionConfig,omitempty"`
	LogTopic                     string                       `json:"logTopic,omitempty"`
}
