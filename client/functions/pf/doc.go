// Package pf writes Go Pulsar Functions for Magnetar. It has the public
// shape of Apache Pulsar's Go functions SDK
// (github.com/apache/pulsar/pulsar-function-go/pf), so a Pulsar Go function
// ports by changing its import path only:
//
//	import "github.com/magnetar-dev/magnetar/client/functions/pf"
//
//	func exclamation(ctx context.Context, in []byte) ([]byte, error) {
//		return append(in, '!'), nil
//	}
//
//	func main() { pf.Start(exclamation) }
//
// (and github.com/apache/pulsar/pulsar-function-go/logutil becomes
// github.com/magnetar-dev/magnetar/client/functions/logutil). As with Pulsar,
// the function's binary is the whole instance: the worker runs it with
// -instance-conf '<GoInstanceConfig JSON>' (or -instance-conf-path
// <yaml>), and Start connects to the broker with pulsar-client-go, consumes
// the input topics, calls the function on each message, publishes outputs,
// serves the InstanceControl gRPC service on 127.0.0.1:<port> and Prometheus
// metrics on 127.0.0.1:<metricsPort>, and stops on SIGTERM.
//
// # API shared with Pulsar's pf
//
// Start(funcName interface{}), with Pulsar's rules for the function's shape
// (see Start); NewFuncContext; NewContext; FromContext; GetUserConfMap and
// GetUserConfValue (before Start); and on *FunctionContext: GetInstanceID,
// GetInputTopics, GetOutputTopic, GetTenantAndNamespace,
// GetTenantAndNamespaceAndName, GetFuncTenant, GetFuncName,
// GetFuncNamespace, GetFuncID, GetFuncVersion, GetPort, GetMetricsPort,
// GetClusterName, GetExpectedHealthCheckInterval,
// GetExpectedHealthCheckIntervalAsDuration, GetMaxIdleTime,
// GetUserConfValue, GetUserConfMap, NewOutputMessage (a pulsar.Producer of
// pulsar-client-go), SetCurrentRecord, GetCurrentRecord (a pulsar.Message)
// and RecordMetric.
//
// # Magnetar extensions
//
//   - State: IncrCounter, GetCounter, PutState, GetState and DeleteState on
//     FunctionContext, each taking a context.Context first. Pulsar's Go SDK
//     has no state. They call the worker's state API at the instance's
//     stateStorageServiceUrl (package internal/state documents the paths);
//     GetState of an absent key returns nil, nil. Without an http(s) URL
//     every call fails with ErrStateNotConfigured; a refusal of the worker
//     is a *StateError carrying its reason. A token in
//     clientAuthenticationParameters is sent as a bearer token.
//   - GetSecretValue(key) returns the value of key in the function's
//     secrets map (clear text, as the worker passes it).
//   - Every output message carries the properties __pfn_input_topic__ and
//     __pfn_input_msg_id__ (base64 of the input's serialized message id),
//     which the worker's trigger endpoint matches, and the input's key.
//   - A function that panics is treated as one that returned an error
//     (*PanicError); the instance goes on.
//
// # Differences from Pulsar's pf
//
//   - A function of a shape Start does not accept is refused at start (one
//     line on stderr, exit 1); Pulsar's starts and fails every message.
//   - A function's error counts as a user exception, the message is
//     negatively acknowledged and the instance goes on; the Pulsar SDK
//     versions read for this stop the instance on the first error.
//   - NewOutputMessage returns nil (the error logged) when the producer cannot
//     be created; Pulsar's ends the process.
//   - GetExpectedHealthCheckIntervalAsDuration returns the interval; Pulsar's
//     returns its number of seconds as nanoseconds. GetMaxIdleTime returns
//     the same value as Pulsar's (three intervals, in nanoseconds).
//   - GetInputTopics is sorted.
//   - Acknowledgement follows processingGuarantees alone, as in Pulsar's
//     Java runtime since autoAck was deprecated: ATMOST_ONCE acknowledges on
//     receipt; ATLEAST_ONCE once the output is published (at once when
//     there is none) and negatively acknowledges on error; MANUAL neither
//     acknowledges nor negatively acknowledges; autoAck is ignored.
//   - EFFECTIVELY_ONCE publishes through one producer per input topic
//     partition, named "<tenant>/<namespace>/<name>-<input topic>", without
//     batching, each output with the sequence id ledgerId<<32 | entryId<<12 |
//     batchIndex of its input, so that a broker with deduplication enabled
//     for the output topic's namespace drops what a restarted or moved
//     instance publishes again. The name follows the partition, not the
//     instance, so a failover subscription moving the partition keeps the
//     broker's deduplication state. Inputs whose position does not fit
//     (ledger id >= 2^31, entry id >= 2^20, batch index >= 2^12) fail as
//     system exceptions.
//   - maxMessageRetries and deadLetterTopic configure the consumers' dead
//     letter policy with the meaning of the Java runtime: a message the
//     function keeps failing is tried 1+maxMessageRetries times, then goes to
//     deadLetterTopic (default <topic>-<subscription>-DLQ).
//   - timeoutMs (an acknowledgement timeout) is ignored: pulsar-client-go has
//     none. cleanupSubscription is the worker's to act on when the function
//     is deleted. Input and output schemas are not applied: payloads are
//     bytes both ways.
//   - The metrics port is bound on 127.0.0.1, like the gRPC port; Pulsar's
//     binds every interface.
//   - Pulsar's instance internals that its pf package happens to export
//     (LogAppender, InstanceControlServicer, MetricsServicer,
//     StatWithLabelValues, TopicName, the secrets providers, the metric-name
//     constants) are not provided.
//
// # The instance
//
// Messages are processed one at a time in arrival order, on one goroutine;
// the context.Context of each call carries the FunctionContext and is
// cancelled when the instance stops. Outputs are published asynchronously;
// the input is settled when the broker answers.
//
// Status, metrics and health: GetFunctionStatus counts messages received,
// processed successfully (the output published, or no output), user
// exceptions (errors and panics of the function, the last 10 with their
// text) and system exceptions (publishing and similar failures), with the
// average latency of the function and the time of the last call.
// GetMetrics adds the "1min" window (reset every minute and by
// ResetMetrics and GetAndResetMetrics) and the user metrics as
// <name>_sum and <name>_count. Prometheus gets Pulsar's series:
// pulsar_function_received_total, _processed_successfully_total,
// _user_exceptions_total, _system_exceptions_total, _process_latency_ms (a
// summary), _last_invocation, the _1min variants and the summary
// pulsar_function_user_metric_ labelled metric=<name>, all labelled tenant,
// namespace ("<tenant>/<namespace>"), name, instance_id, cluster and fqfn.
//
// The instance exits 0 on SIGTERM or SIGINT (after flushing outputs in
// flight, at most 5 s) and after killAfterIdleMs without a message; it
// exits 1, with one line on stderr, on a start error (configuration, port,
// broker) and when expectedHealthCheckInterval > 0 and no HealthCheck came
// for three intervals. Its own log lines are text on stderr (level from
// LOGGING_LEVEL); the function's lines written with package logutil also go
// to the log topic, when the function has one.
package pf
