// Package fnconfig holds the JSON bodies of Pulsar's functions, sources and
// sinks admin API (FunctionConfig, SourceConfig, SinkConfig, as the Java
// admin client, pulsar-admin and pulsaradmin send them), their defaults and
// validation, and their conversion to the FunctionDetails an instance runs.
//
// The conversion follows Pulsar's worker: one input spec per input topic,
// the subscription type from the ordering and guarantee settings, sources
// and sinks run the identity function between a connector and a topic, and
// JSON maps (user config, secrets, connector configs) travel as strings.
// Field names are Pulsar's so a config read back with GET is the one a
// client wrote, with the defaults filled in.
//
// Everything here is pure: no I/O, safe for concurrent use.
package fnconfig
