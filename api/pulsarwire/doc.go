// Package pulsarwire holds the Go types of the Apache Pulsar binary
// protocol, generated from pulsarwire.proto: BaseCommand and every command,
// MessageMetadata, SingleMessageMetadata, BrokerEntryMetadata, MessageIdData,
// Schema and the protocol's enums (ServerError, ProtocolVersion, ...).
//
// The field numbers, types and defaults are the protocol's; the proto
// package (magnetar.pulsarwire) and file path are ours, so this package links
// into one binary with pulsar-client-go, whose own copy registers as
// pulsar.proto / PulsarApi.proto.
//
// Only types live here; framing (length prefixes, checksums, batches) is in
// dataplane/protocol. Do not edit pulsarwire.pb.go: change the .proto and run
// `make generate`.
package pulsarwire

//go:generate ../generate.sh
